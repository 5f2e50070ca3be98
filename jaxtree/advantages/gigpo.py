"""GiGPO (Feng et al., 2025, "Group-in-Group Policy Optimization", verl-agent): episode-level
GRPO plus step-level advantages from anchor states shared across a group's rollouts.

Per task group g and played turn t of rollout i:

    A^E_i   = (R_i - mean_g R) / F        R_i = outcome_i + sum_t r_{i,t} (the episode return)
    G_{i,t} = sum_{k=t}^{T_i-1} gamma^(k-t) r_{i,k} + gamma^(T_i-1-t) outcome_i
    A^S_{i,t} = (G_{i,t} - mean_{(j,u) in S} G_{j,u}) / F,
              S = the turns of group g taken in the same anchor state as (i, t)
    A_{i,t} = A^E_i + w A^S_{i,t}

F is the unbiased std of the group plus epsilon (verl-agent's "mean_std_norm") or 1
("mean_norm"); a group (or step group) with one member gets 0. The anchor state is the canonical
state before the action (the `anchor_state` label): identical observations at any depth
match, and a state a rollout returns to adds one member per visit (verl-agent groups every step
by its observation; it has no first-visit rule). Defaults are verl-agent's: gamma = 0.95, w = 1.

How it differs from RTMC (`jaxtree.advantages.rtmc`), the closest method here:
  * GiGPO's step baseline is the mean return of the state's visits, and each visit keeps its own
    return; RTMC first averages returns per (state, action) into Q(s, a), so every visit of a
    pair gets the same advantage Q(s, a) - V'(s).
  * GiGPO adds the episode-level GRPO term to every turn; RTMC's advantage is the table's alone.
  * GiGPO normalises by the step group's std; RTMC optionally by the whole group's std of its
    step advantages, and shrinks V towards the group success rate (n_prior) where few rollouts
    visit a state. A GiGPO step group of one visit contributes 0; an RTMC singleton state gets
    Q - V' = (1 - 1/(1 + n_prior))(G - V_prior) instead.
  * RTMC keys states with the step index (first visit by construction); GiGPO's anchors ignore
    depth.

`gigpo_advantages` is pure and jit-able with fixed shapes; `anchor_ids` (host) maps the anchor
strings to dense integer keys once per batch.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.advantages.base import ADVANTAGES, AdvantageEstimator, dense_groups
from jaxtree.advantages.broadcast import turns_to_tokens
from jaxtree.advantages.group import grpo_advantages
from jaxtree.advantages.rtmc import turn_returns
from jaxtree.config import Section, between, non_negative, option, positive
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import TrajectoryBatch

GAMMA = 0.95          # verl-agent's algorithm.gamma for GiGPO
STEP_WEIGHT = 1.0     # verl-agent's step_advantage_w
EPSILON = 1e-6        # verl-agent's epsilon
NO_ANCHOR = -1


def anchor_ids(batch: TrajectoryBatch) -> np.ndarray:
    """int32[N, K] dense keys of (task group, anchor state) on played turns, NO_ANCHOR elsewhere.

    Raises:
      ValueError: a played turn has no anchor state.
    """
    anchors = batch.label("anchor_state")
    n, k = anchors.shape
    ids = np.full((n, k), NO_ANCHOR, np.int32)
    keys: dict[tuple[int, str], int] = {}
    for i in range(n):
        group = int(batch.group_ids[i])
        for t in range(int(batch.num_turns[i])):
            anchor = anchors[i, t]
            if anchor is None:
                raise ValueError(f"row {i} turn {t} is played but has no anchor state")
            ids[i, t] = keys.setdefault((group, anchor), len(keys))
    return ids


def gigpo_advantages(anchor, turn_rewards, outcome, num_turns, groups, valid, gamma=GAMMA,
                     step_weight=STEP_WEIGHT, normalize_std=True, epsilon=EPSILON) -> jax.Array:
    """GiGPO's per-turn advantages A^E_i + w A^S_{i,t} (pure; arrays may be traced).

    Args:
      anchor: int32[N, K] anchor-state keys in [0, N*K) from `anchor_ids` (NO_ANCHOR off the
        played turns).
      turn_rewards: float32[N, K] step rewards (ignored past num_turns).
      outcome: float32[N] terminal rewards.
      num_turns: int32[N].
      groups: int32[N] dense task-group ids in [0, N).
      valid: bool[N]; invalid rollouts stay out of every statistic and get 0.
      gamma: discount of the step returns; step_weight: w.
      normalize_std: divide by std + epsilon at both levels (static: False is "mean_norm").
      epsilon: added to the std.

    Returns:
      float32[N, K], 0 past num_turns and on invalid rows.
    """
    anchor = jnp.asarray(anchor, jnp.int32)
    n, k = anchor.shape
    num_turns = jnp.asarray(num_turns, jnp.int32)
    valid = jnp.asarray(valid, bool)
    turn_rewards = jnp.asarray(turn_rewards, jnp.float32)
    outcome = jnp.asarray(outcome, jnp.float32)
    played = jnp.arange(k)[None, :] < num_turns[:, None]
    active = played & (anchor >= 0) & valid[:, None]

    episode_return = outcome + jnp.sum(jnp.where(played, turn_rewards, 0.0), axis=1)
    episode = grpo_advantages(episode_return, jnp.asarray(groups, jnp.int32), n,
                              normalize_std=normalize_std, epsilon=epsilon, valid=valid)
    returns = turn_returns(turn_rewards, outcome, num_turns, gamma)
    step = grpo_advantages(returns.reshape(-1), jnp.where(active, anchor, 0).reshape(-1), n * k,
                           normalize_std=normalize_std, epsilon=epsilon,
                           valid=active.reshape(-1)).reshape(n, k)
    return jnp.where(active, episode[:, None] + step_weight * step, 0.0)


def step_group_metrics(anchor: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    """{"gigpo/step_groups": distinct anchor groups, "gigpo/shared_step_fraction": share of the
    valid played turns whose step group has another member, "gigpo/step_group_size_p50",
    "_p90": percentiles of the group sizes}."""
    keys = np.asarray(anchor)[(np.asarray(anchor) >= 0) & np.asarray(valid, bool)[:, None]]
    _, sizes = np.unique(keys, return_counts=True)
    if not len(sizes):
        return {"gigpo/step_groups": 0.0, "gigpo/shared_step_fraction": 0.0,
                "gigpo/step_group_size_p50": 0.0, "gigpo/step_group_size_p90": 0.0}
    return {"gigpo/step_groups": float(len(sizes)),
            "gigpo/shared_step_fraction": float(sizes[sizes > 1].sum() / sizes.sum()),
            "gigpo/step_group_size_p50": float(np.percentile(sizes, 50)),
            "gigpo/step_group_size_p90": float(np.percentile(sizes, 90))}


_gigpo_jit = jax.jit(gigpo_advantages, static_argnames=("normalize_std",))


@dataclasses.dataclass(frozen=True)
class GigpoConfig(Section):
    gamma: float = option(GAMMA, "discount of the step returns (verl-agent: 0.95)",
                          check=between(0, 1))
    step_weight: float = option(STEP_WEIGHT, "w, weight of the step-level advantage "
                                "(verl-agent's step_advantage_w: 1)", check=non_negative())
    normalize_std: bool = option(True, "divide both levels by their group std ('mean_std_norm'); "
                                 "False subtracts the mean only ('mean_norm')")
    epsilon: float = option(EPSILON, "added to the std", check=positive())


def gigpo_turn_advantages(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray,
                          settings: GigpoConfig = GigpoConfig()) -> np.ndarray:
    """float32[N, K], GiGPO's advantage of every turn of the batch."""
    groups, _ = dense_groups(batch.group_ids)
    return _gigpo_jit(anchor_ids(batch), np.asarray(rewards.turn, np.float32),
                      np.asarray(rewards.outcome, np.float32), batch.num_turns, groups,
                      np.asarray(valid, bool), settings.gamma, settings.step_weight,
                      settings.normalize_std, settings.epsilon)


@ADVANTAGES.register("gigpo", GigpoConfig, reads=("anchor_state",))
def gigpo(settings: GigpoConfig):
    """Episode GRPO plus w x step advantages grouped by anchor state (GiGPO, verl-agent), on
    each turn's action tokens."""
    def fn(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        per_turn = gigpo_turn_advantages(batch, rewards, valid, settings)
        return turns_to_tokens(per_turn, jnp.asarray(batch.turn_index),
                               jnp.asarray(batch.action_mask))

    def metrics(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        del rewards
        return step_group_metrics(anchor_ids(batch), valid)
    return AdvantageEstimator(fn, metrics)
