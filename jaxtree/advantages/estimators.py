"""Built-in advantage functions: GRPO, Dr.GRPO, RLOO and RTMC's "GRPO + step reward" baseline.

Each wraps the jit-able group statistics of `jaxtree.advantages.group` and places the result on
the action tokens (`broadcast`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
import numpy as np

from jaxtree.advantages import group
from jaxtree.advantages.base import ADVANTAGES, dense_groups
from jaxtree.advantages.broadcast import sequence_to_tokens, turns_to_tokens
from jaxtree.config import Section, between, option, positive
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import TrajectoryBatch


@dataclasses.dataclass(frozen=True)
class GrpoConfig(Section):
    epsilon: float = option(1e-6, "added to the group std (GRPO's ε)", check=positive())


def _per_trajectory(estimator, batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray,
                    **options) -> np.ndarray:
    """A group estimator of the outcome rewards (`group.grpo_advantages`, ...) on every action
    token of each trajectory."""
    groups, count = dense_groups(batch.group_ids)
    advantages = estimator(jnp.asarray(rewards.outcome), jnp.asarray(groups), count,
                           valid=jnp.asarray(valid), **options)
    return sequence_to_tokens(advantages, jnp.asarray(batch.action_mask))


@ADVANTAGES.register("grpo", GrpoConfig)
def grpo(settings: GrpoConfig):
    """(R_i - mean_g) / (std_g + ε) on every action token (PATR Eq. 1, LATR Eq. 3)."""
    return functools.partial(_per_trajectory, group.grpo_advantages, epsilon=settings.epsilon)


@ADVANTAGES.register("drgrpo")
def drgrpo(settings: None):
    """R_i - mean_g on every action token (Dr.GRPO: no std division)."""
    del settings
    return functools.partial(_per_trajectory, group.grpo_advantages, normalize_std=False)


@ADVANTAGES.register("rloo")
def rloo(settings: None):
    """R_i minus the mean of the other members of its group (REINFORCE leave-one-out)."""
    del settings
    return functools.partial(_per_trajectory, group.rloo_advantages)


@dataclasses.dataclass(frozen=True)
class GrpoStepConfig(Section):
    epsilon: float = option(1e-6, "added to the group std of the outcome term",
                            check=positive())
    gamma: float = option(1.0, "discount of the returns of the turn rewards",
                          check=between(0, 1))


@ADVANTAGES.register("grpo_step", GrpoStepConfig)
def grpo_step(settings: GrpoStepConfig):
    """GRPO advantage of the outcome plus the γ-discounted return of the turn rewards, per turn
    (RTMC §5.1's "GRPO + step reward" baseline; use with reward.terms including step_validity)."""
    def fn(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        groups, count = dense_groups(batch.group_ids)
        per_turn = group.step_reward_advantages(
            jnp.asarray(rewards.outcome), jnp.asarray(rewards.turn, jnp.float32),
            jnp.asarray(batch.num_turns), jnp.asarray(groups), count, gamma=settings.gamma,
            epsilon=settings.epsilon, valid=jnp.asarray(valid))
        return turns_to_tokens(per_turn, jnp.asarray(batch.turn_index),
                               jnp.asarray(batch.action_mask))
    return fn
