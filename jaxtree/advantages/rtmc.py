"""Rollout-Tree Monte Carlo (RTMC) advantages from a statistics table of the group's rollouts.

RTMC §3 treats the rollouts of one task as a tree whose nodes are state signatures and whose
edges are (state signature, action signature) pairs. A first-visit Monte Carlo table
T(s, a) = {N(s, a), sum of returns} (Eq. 6) gives, per played turn:

    G_t    = sum_{k=t}^{T_i-1} gamma^(k-t) r_k                   (Eq. 5, Algorithm 1 line 8)
    Q(s,a) = sum_{visits} G / N(s, a)                            (Eq. 7)
    V(s)   = sum_a N(s, a) Q(s, a) / N(s),  N(s) = sum_a N(s, a)  (Eq. 8, visit-weighted)
    V'(s)  = (N(s) V(s) + n_prior V_prior) / (N(s) + n_prior)    (Eq. 11, V_prior = group
                                                                  success rate, n_prior = 2)
    A      = Q(s, a) - V'(s)                                      (Eq. 9 with the §3.4 prior)

How this module reads the paper where a choice had to be made:

- Turn reward r_k: the reward stage's turn reward (`Rewards.turn`: step rewards, the §3.4 Eq. 12
  validation shaping when configured), plus the terminal reward R (`Rewards.outcome`) on the last
  played turn. The paper's terminal reward is sparse and discounted back from the end ("Returns
  G0 are discounted from terminal rewards back to s0", Fig. 1; "finishing immediately gets
  Q = 1.0, ... running tests first gets Q ~ 0.98", §3.4), so
  G_t = discounted_returns(turn)_t + gamma^(T_i-1-t) R.
- First visit (§3.1): a state signature seen again later in the same rollout (possible with
  set-based state records) does not enter the table; Algorithm 1 only ever reads off advantages
  of table entries, and a repeated visit's return was never counted, so the estimator holds no
  estimate for it. Such a turn gets advantage 0 (no credit is invented for it; the turns between
  the two visits keep their own advantages).
- V_prior: the fraction of the group's valid rollouts with `success` (the paper's rewards are
  binary success, R in {0, 1}). n_prior = 0 disables the prior.
- Uniform groups (§5.1 "filtering of uniform-outcome groups", §5.3 "all success or all
  failure"): a group whose valid rollouts all succeeded or all failed gets advantage 0. This
  reads `success`, the binary outcome, not a shaped score (a shaped score would make all-fail
  groups look informative). A group with one valid rollout is uniform.
- Std normalisation (§3.3, Algorithm 1 line 21, optional, off by default because the paper's
  training configuration in §5.1 does not list it): divide by the group's standard deviation
  "computed over step-level advantages", i.e. over the advantages of every table entry (first
  visit of a valid rollout) of the group, sample std (ddof=1, as `torch.std` and this package's
  GRPO) plus `STD_EPSILON`; no mean is subtracted, so signs and order are kept. A group with
  fewer than two such steps has no std and is left as it is.

Split: `signature_ids` (host, numpy) turns signature strings into dense integer keys;
`rtmc_table_advantages` (device, pure, jit-able) builds the table with `jax.ops.segment_sum`
over a fixed bound of N*K keys, so one compilation serves every batch of a shape.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.advantages.base import ADVANTAGES, AdvantageEstimator, dense_groups
from jaxtree.advantages.broadcast import turns_to_tokens
from jaxtree.advantages.group import discounted_returns
from jaxtree.config import Section, between, non_negative, option
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import TrajectoryBatch

NO_KEY = -1          # signature id of a turn outside the table (past the last turn, or a repeat)
GAMMA = 0.99         # RTMC §5.1
N_PRIOR = 2.0        # RTMC §3.4, Eq. 11
STD_EPSILON = 1e-6   # added to the group std so that a group of equal advantages divides by > 0
CLUSTER_PERCENTILES = (50, 90)


# ---------------------------------------------------------------------------------------------
# Host side: signature strings -> dense integer keys.

def signature_ids(batch: TrajectoryBatch) -> tuple[np.ndarray, np.ndarray]:
    """Dense integer keys of the statistics table, first visit enforced.

    Keys are global over the batch and include the group: the same signature string in two
    groups gets two ids, so one segment sum over the whole batch builds every group's table.

    Args:
      batch: uses group_ids int32[N], num_turns int32[N], the state_signature and
        action_signature labels object[N, K] (str on played turns).

    Returns:
      (state_ids int32[N, K], action_ids int32[N, K]): state_ids[i, t] names (group, state
      signature), action_ids[i, t] names the table entry (group, state signature, action
      signature). Both lie in [0, N*K) and are NO_KEY past num_turns and on a later visit of a
      state the rollout has already visited (only the first visit enters the table).
    """
    states, actions = batch.label("state_signature"), batch.label("action_signature")
    n, k = states.shape
    state_ids = np.full((n, k), NO_KEY, np.int32)
    action_ids = np.full((n, k), NO_KEY, np.int32)
    state_keys: dict[tuple[int, str], int] = {}
    pair_keys: dict[tuple[int, str, str], int] = {}
    for i in range(n):
        group = int(batch.group_ids[i])
        seen: set[str] = set()
        for t in range(int(batch.num_turns[i])):
            state, action = states[i, t], actions[i, t]
            if state is None or action is None:
                raise ValueError(f"row {i} turn {t} is played but has no RTMC signature "
                                 f"(state {state!r}, action {action!r})")
            if state in seen:
                continue
            seen.add(state)
            state_ids[i, t] = state_keys.setdefault((group, state), len(state_keys))
            action_ids[i, t] = pair_keys.setdefault((group, state, action), len(pair_keys))
    return state_ids, action_ids


# ---------------------------------------------------------------------------------------------
# Device side: the statistics table as segment sums.

def turn_returns(turn_rewards, outcome, num_turns, gamma) -> jax.Array:
    """Discounted return of every turn, the terminal reward on the last played turn.

    Args:
      turn_rewards: float32[N, K], per-turn rewards; entries at t >= num_turns[i] are ignored.
      outcome: float32[N], terminal reward R_i.
      num_turns: int32[N].
      gamma: discount (may be traced).

    Returns:
      float32[N, K]: G_{i,t} = sum_{k=t}^{T_i-1} gamma^(k-t) r_{i,k} + gamma^(T_i-1-t) R_i for
      t < T_i, 0 after.
    """
    turn_rewards = jnp.asarray(turn_rewards, jnp.float32)
    num_turns = jnp.asarray(num_turns, jnp.int32)
    last = jnp.arange(turn_rewards.shape[1])[None, :] == num_turns[:, None] - 1
    rewards = turn_rewards + jnp.where(last, jnp.asarray(outcome, jnp.float32)[:, None], 0.0)
    return discounted_returns(rewards, num_turns, gamma)


def _group_success(success, valid, groups, num_groups: int):
    """(success rate float32[G], uniform bool[G]) over the valid rollouts of each group."""
    members = jax.ops.segment_sum(valid.astype(jnp.float32), groups, num_segments=num_groups)
    wins = jax.ops.segment_sum((valid & success).astype(jnp.float32), groups,
                               num_segments=num_groups)
    rate = wins / jnp.maximum(members, 1.0)
    uniform = (wins == 0.0) | (wins == members)
    return rate, uniform


def _table_estimates(state_ids, action_ids, returns, active, prior_value, n_prior):
    """Q(s, a) - V'(s) of every active turn (0 elsewhere).

    Args:
      state_ids, action_ids: int32[N, K] keys in [0, N*K) where active.
      returns: float32[N, K], G of every turn.
      active: bool[N, K], the turns that enter the table.
      prior_value: float32[N, K], V_prior of each turn's group.
      n_prior: weight of the prior in visits.

    Returns:
      float32[N, K].
    """
    num_keys = state_ids.size  # at most one new key per turn: a static bound
    weight = active.reshape(-1).astype(jnp.float32)
    # Inactive turns point at key 0 with weight 0, so they add nothing to any entry.
    states = jnp.where(active, state_ids, 0).reshape(-1)
    pairs = jnp.where(active, action_ids, 0).reshape(-1)
    weighted = jnp.where(active, returns, 0.0).reshape(-1)

    pair_count = jax.ops.segment_sum(weight, pairs, num_segments=num_keys)
    pair_sum = jax.ops.segment_sum(weighted, pairs, num_segments=num_keys)
    # sum_a N(s, a) Q(s, a) is the sum of all returns from s, so the visit-weighted V (Eq. 8)
    # is a segment mean over the state key.
    state_count = jax.ops.segment_sum(weight, states, num_segments=num_keys)
    state_sum = jax.ops.segment_sum(weighted, states, num_segments=num_keys)

    q = pair_sum[pairs] / jnp.maximum(pair_count[pairs], 1.0)
    # Eq. 11: (n V + n_prior V_prior) / (n + n_prior) with n V = the state's return sum.
    smoothed = ((state_sum[states] + n_prior * prior_value.reshape(-1))
                / jnp.maximum(state_count[states] + n_prior, 1.0))
    return jnp.where(active, (q - smoothed).reshape(active.shape), 0.0)


def _divide_by_group_std(advantages, active, row_groups, num_groups: int):
    """Each group's active advantages divided by their sample std + STD_EPSILON.

    Args:
      advantages: float32[N, K].
      active: bool[N, K], the step-level advantages the std is taken over.
      row_groups: int32[N] in [0, num_groups).
      num_groups: static number of groups.

    Returns:
      float32[N, K]; groups with fewer than two active steps unchanged.
    """
    groups = jnp.broadcast_to(row_groups[:, None], active.shape).reshape(-1)
    mask = active.reshape(-1)
    values = advantages.reshape(-1)
    count = jax.ops.segment_sum(mask.astype(jnp.float32), groups, num_segments=num_groups)
    # Shift by the group's largest value first: a group of identical advantages then has
    # deviations of exactly 0, not float32 rounding noise that the small epsilon would magnify.
    shift = jax.ops.segment_max(jnp.where(mask, values, -jnp.inf), groups,
                                num_segments=num_groups)
    shift = jnp.where(count > 0, shift, 0.0)
    shifted = jnp.where(mask, values - shift[groups], 0.0)
    mean = jax.ops.segment_sum(shifted, groups, num_segments=num_groups) / jnp.maximum(count, 1.0)
    deviation = jnp.where(mask, shifted - mean[groups], 0.0)
    variance = (jax.ops.segment_sum(deviation * deviation, groups, num_segments=num_groups)
                / jnp.maximum(count - 1.0, 1.0))
    scale = jnp.where(count >= 2.0, jnp.sqrt(variance) + STD_EPSILON, 1.0)
    return (values / scale[groups]).reshape(advantages.shape)


def rtmc_table_advantages(state_ids, action_ids, turn_rewards, outcome, num_turns, groups,
                          success, valid, gamma=GAMMA, n_prior=N_PRIOR, normalize_std=False,
                          drop_uniform_groups=True) -> jax.Array:
    """RTMC per-turn advantages of a batch of groups (pure; every argument may be traced).

    Args:
      state_ids, action_ids: int32[N, K] from `signature_ids` (NO_KEY outside the table).
      turn_rewards: float32[N, K], per-turn rewards (ignored past num_turns).
      outcome: float32[N], terminal reward of each rollout.
      num_turns: int32[N].
      groups: int32[N], dense group ids in [0, N).
      success: bool[N], for V_prior and uniform groups.
      valid: bool[N]; invalid rollouts stay out of the table and the group statistics and get 0.
      gamma: discount of the turn returns.
      n_prior: prior weight of Eq. 11 (0 disables the prior).
      normalize_std: divide by the group std of the step-level advantages (§3.3).
      drop_uniform_groups: all-success and all-failure groups get 0 (§5.1).

    Returns:
      float32[N, K]: Q(s, a) - V'(s) on the first visits of valid rollouts, 0 elsewhere.
    """
    state_ids = jnp.asarray(state_ids, jnp.int32)
    action_ids = jnp.asarray(action_ids, jnp.int32)
    if state_ids.ndim != 2 or action_ids.shape != state_ids.shape:
        raise ValueError(f"state_ids and action_ids must both be int32[N, K], got "
                         f"{state_ids.shape} and {action_ids.shape}")
    n, k = state_ids.shape
    num_turns = jnp.asarray(num_turns, jnp.int32)
    groups = jnp.asarray(groups, jnp.int32)
    valid = jnp.asarray(valid, bool)
    success = jnp.asarray(success, bool)
    played = jnp.arange(k)[None, :] < num_turns[:, None]
    active = played & (state_ids >= 0) & (action_ids >= 0) & valid[:, None]

    returns = turn_returns(turn_rewards, outcome, num_turns, gamma)
    # Dense group ids are < N: N segments is a static bound, so the group count never recompiles.
    rate, uniform = _group_success(success, valid, groups, n)
    prior_value = jnp.broadcast_to(rate[groups][:, None], (n, k))
    advantages = _table_estimates(state_ids, action_ids, returns, active, prior_value,
                                  jnp.asarray(n_prior, jnp.float32))
    dropped = jnp.asarray(drop_uniform_groups, bool) & uniform[groups]
    advantages = jnp.where(dropped[:, None], 0.0, advantages)
    normalized = _divide_by_group_std(advantages, active, groups, n)
    return jnp.where(jnp.asarray(normalize_std, bool), normalized, advantages)


_table_advantages_jit = jax.jit(rtmc_table_advantages)


# ---------------------------------------------------------------------------------------------
# Metrics of the table (host side).

def table_metrics(state_ids: np.ndarray, action_ids: np.ndarray, valid: np.ndarray,
                  num_turns: np.ndarray) -> dict[str, float]:
    """Size and sharing of the statistics tables of a batch.

    Args:
      state_ids, action_ids: int32[N, K] from `signature_ids`.
      valid: bool[N], the rollouts that enter the table.
      num_turns: int32[N].

    Returns:
      {"rtmc/pairs": distinct (s, a) entries, "rtmc/states": distinct states,
       "rtmc/shared_state_fraction": share of states visited by more than one rollout,
       "rtmc/cluster_size_p50", "rtmc/cluster_size_p90": percentiles of rollouts per state,
       "rtmc/repeated_visits": played turns of valid rollouts left out as repeated visits}.
    """
    state_ids, action_ids = np.asarray(state_ids), np.asarray(action_ids)
    valid = np.asarray(valid, bool)
    played = np.arange(state_ids.shape[1])[None, :] < np.asarray(num_turns)[:, None]
    active = played & (state_ids >= 0) & valid[:, None]
    # First visit: a rollout holds a state key at most once, so visits per key = rollouts.
    _, rollouts_per_state = np.unique(state_ids[active], return_counts=True)
    metrics = {
        "rtmc/pairs": float(len(np.unique(action_ids[active]))),
        "rtmc/states": float(len(rollouts_per_state)),
        "rtmc/shared_state_fraction": (float(np.mean(rollouts_per_state > 1))
                                       if len(rollouts_per_state) else 0.0),
        "rtmc/repeated_visits": float(np.sum(played & (state_ids < 0) & valid[:, None])),
    }
    for q in CLUSTER_PERCENTILES:
        metrics[f"rtmc/cluster_size_p{q}"] = (float(np.percentile(rollouts_per_state, q))
                                              if len(rollouts_per_state) else 0.0)
    return metrics


def uniform_group_fraction(success: np.ndarray, group_ids: np.ndarray,
                           valid: np.ndarray) -> float:
    """Share of the batch's groups whose valid rollouts all succeeded or all failed (a group
    with one valid rollout counts as uniform, as in `rtmc_table_advantages`): the groups that
    `drop_uniform_groups` (RTMC §5.1) gives advantage 0. Groups without a valid rollout are not
    counted; 0.0 when no group has one.

    Args:
      success: bool[N]; group_ids: int[N]; valid: bool[N].
    """
    success, valid = np.asarray(success, bool), np.asarray(valid, bool)
    groups = np.asarray(group_ids)[valid]
    if groups.size == 0:
        return 0.0
    _, inverse = np.unique(groups, return_inverse=True)
    members = np.bincount(inverse)
    wins = np.bincount(inverse, weights=success[valid].astype(np.float64))
    return float(np.mean((wins == 0) | (wins == members)))


# ---------------------------------------------------------------------------------------------
# The registered advantage function.

@dataclasses.dataclass(frozen=True)
class RtmcConfig(Section):
    gamma: float = option(GAMMA, "discount of the turn returns G_t, terminal reward on the last "
                          "turn (RTMC §3.1 Eq. 5, §5.1: 0.99; §2: gamma in (0, 1])",
                          check=between(0, 1, low_open=True))
    n_prior: float = option(N_PRIOR, "visits' worth of the group success rate blended into V(s) "
                            "(RTMC §3.4 Eq. 11: 2; 0 disables the prior, §5.4)",
                            check=non_negative())
    normalize_std: bool = option(False, "divide each group's advantages by their std over the "
                                 "group's steps (RTMC §3.3 and Algorithm 1 line 21: optional; "
                                 "not in the §5.1 training setup)")
    drop_uniform_groups: bool = option(True, "all-success and all-failure groups get advantage 0 "
                                       "(RTMC §5.1: uniform-outcome groups are filtered)")


def rtmc_turn_advantages(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray,
                         settings: RtmcConfig = RtmcConfig()) -> np.ndarray:
    """float32[N, K], the RTMC advantage of every turn of the batch (0 past num_turns, on
    repeated visits and on invalid rows)."""
    state_ids, action_ids = signature_ids(batch)
    groups, _ = dense_groups(batch.group_ids)
    return _table_advantages_jit(
        state_ids, action_ids, np.asarray(rewards.turn, np.float32),
        np.asarray(rewards.outcome, np.float32), batch.num_turns, groups,
        np.asarray(batch.success, bool), np.asarray(valid, bool), settings.gamma,
        settings.n_prior, settings.normalize_std, settings.drop_uniform_groups)


@ADVANTAGES.register("rtmc", RtmcConfig, reads=("state_signature", "action_signature"))
def rtmc(settings: RtmcConfig):
    """Q(s, a) - V'(s) of each turn from the group's rollout-tree statistics table, on that turn's
    action tokens (RTMC §3, Eqs. 5-11)."""
    def fn(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        per_turn = rtmc_turn_advantages(batch, rewards, valid, settings)
        return turns_to_tokens(per_turn, jnp.asarray(batch.turn_index),
                               jnp.asarray(batch.action_mask))

    def metrics(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        del rewards
        return {**table_metrics(*signature_ids(batch), valid, batch.num_turns),
                "rtmc/uniform_group_fraction": uniform_group_fraction(batch.success,
                                                                      batch.group_ids, valid)}
    return AdvantageEstimator(fn, metrics)
