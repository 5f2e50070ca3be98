"""The rewards stage: reward terms, their registry and the `reward` config section.

A reward term maps a trajectory batch to per-turn and per-episode rewards; the stage sums the
configured terms (`config.reward.terms`):

    rewards = compute_rewards(stage, batch)        # Rewards(turn [N, K], outcome [N])

- `outcome` [N] is the trajectory-level reward that outcome-based advantages (GRPO, Dr.GRPO,
  RLOO) and group filters read.
- `turn` [N, K] holds per-turn (process) rewards that turn-level advantages read (GRPO + step
  reward, and the turn-level estimators of VPR and RTMC); 0 past each episode's last turn.

A term writes to one or both; each term's docstring says which. New terms register with their
typed settings (`config.reward.<name>.*`):

    @REWARDS.register("my_bonus", MyBonusConfig)
    def my_bonus(settings: MyBonusConfig) -> RewardTerm: ...
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Sequence

import numpy as np

from jaxtree.config import Registry, Section, each, one_of, option, require
from jaxtree.rollout.trajectory import TrajectoryBatch

REWARDS = Registry("reward")


class Rewards(NamedTuple):
    """turn: float32[N, K] per-turn rewards (0 past num_turns); outcome: float32[N]."""

    turn: np.ndarray
    outcome: np.ndarray

    def select(self, indices) -> "Rewards":
        """The rewards of the given rows (as `TrajectoryBatch.select`)."""
        indices = np.asarray(indices, np.int64)
        return Rewards(self.turn[indices], self.outcome[indices])


def concatenate_rewards(parts: Sequence[Rewards]) -> Rewards:
    """Row-wise concatenation (as `trajectory.concatenate`), turns padded with 0."""
    turns = max(p.turn.shape[1] for p in parts)
    return Rewards(
        np.concatenate([np.pad(p.turn, ((0, 0), (0, turns - p.turn.shape[1]))) for p in parts]),
        np.concatenate([p.outcome for p in parts]))


RewardTerm = Callable[[TrajectoryBatch], Rewards]


def zero_rewards(batch: TrajectoryBatch) -> Rewards:
    return Rewards(np.zeros(batch.turn_rewards.shape, np.float32),
                   np.zeros(len(batch), np.float32))


@dataclasses.dataclass(frozen=True)
class RewardStage(Section):
    """Config section `reward`: which reward terms are summed."""

    PARTS = {"terms": REWARDS}

    terms: tuple[str, ...] = option(("outcome",), "reward terms summed into the turn and outcome "
                                    "rewards (registered reward terms)",
                                    check=each(one_of(REWARDS.names)))

    def check(self):
        require(len(self.terms) > 0, "terms", "() needs at least one reward term")
        require(len(set(self.terms)) == len(self.terms), "terms",
                f"{self.terms!r} names a term twice")


def build_rewards(stage: RewardStage) -> RewardTerm:
    """The sum of the configured terms, each built with its settings."""
    terms = [REWARDS.build(name, stage.part_settings(name)) for name in stage.terms]
    if len(terms) == 1:
        return terms[0]

    def total(batch: TrajectoryBatch) -> Rewards:
        parts = [term(batch) for term in terms]
        # float32 sums in the configured order (the first term alone is returned untouched)
        return Rewards(np.sum([p.turn for p in parts], axis=0, dtype=np.float32),
                       np.sum([p.outcome for p in parts], axis=0, dtype=np.float32))
    return total
