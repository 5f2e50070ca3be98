"""VPR's turn-level advantages: each turn's reward whitened against the turns it competes with.

Verifiable Process Rewards (Yuan et al., 2026), §2.3 Eq. 4, with I_t = {i : t <= T_i} the
trajectories still active at turn t:

    A_{i,t} = (r_{i,t} - mu_t) / (sigma_t + delta),
    mu_t = mean_{i in I_t} r_{i,t},   sigma_t = sqrt(mean_{i in I_t} (r_{i,t} - mu_t)^2)

(the population std, as written and as the released code's `np.std` computes it). Appendix F:

- the group is the whole update batch ("we apply group-relative normalization across this
  batch"), not the rollouts of one task, so `group_ids` play no part here;
- "whenever |I_t| < 4 we fall back to the global mean and standard deviation computed over all
  (i, t) pairs in the collected trajectory batch": the active (i, t) of every turn;
- gamma = 0: there is no return to accumulate, each turn's advantage is its own normalized
  reward, so no discounting step appears.

delta: the paper names it without a value; the released code (`compute_vpr_turn_level_advantage`)
uses 1e-8, the default here.

The released code's shipped configs run a `state_group` rollout instead: several candidate
actions are sampled from one state and whitened within that state group,
(r - mean_g) / (std_g + delta) with the population std. A group with fewer than two candidates,
or whose rewards have std <= delta, gets advantage 0 (the released code also drops those rows
from the loss); there is no fallback to wider statistics. `vpr_state_group_advantages` does this
for any integer grouping of the (i, t) entries; the registered estimator groups the played turns
whose state signature is equal within one task group (so independent rollouts that reach the
same state join the group, as GiGPO's anchor states do), counting a tree node shared by several
rows once, as the released code samples each candidate once.

Both functions are pure and jit-able with fixed shapes: `delta` and `min_active` may be traced.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.advantages.base import ADVANTAGES, AdvantageEstimator
from jaxtree.advantages.broadcast import turns_to_tokens
from jaxtree.config import Section, between, one_of, option, positive
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import NO_NODE, TrajectoryBatch

DEFAULT_DELTA = 1e-8        # the released code's eps (the paper gives delta no value)
MIN_ACTIVE = 4              # Appendix F: per-turn statistics need |I_t| >= 4
MIN_STATE_GROUP_SIZE = 2    # released code: a state group of one candidate has no baseline
GROUPINGS = ("turn", "state_group")
NO_STATE_GROUP = -1         # state_group_ids of the entries that are not played turns


def _masked_moments(values, counted, segment_ids, num_segments: int):
    """Statistics of the counted entries of each segment, read back at every entry.

    Args:
      values: float32[M], finite.
      counted: bool[M], the entries that enter the statistics.
      segment_ids: int32[M] in [0, num_segments).
      num_segments: static number of segments.

    Returns:
      (count float32[M], deviation float32[M], std float32[M]): the number of counted entries
      in the entry's segment, value - segment mean (for every entry, counted or not), and the
      population std (ddof=0) of the segment's counted values.
    """
    count = jax.ops.segment_sum(counted.astype(jnp.float32), segment_ids,
                                num_segments=num_segments)
    # Shift each segment by its largest counted value before summing: a float32 mean of equal
    # values need not equal them, and divided by delta = 1e-8 that rounding error would become
    # a spurious advantage. After the shift, equal values have deviations of exactly 0.
    shift = jax.ops.segment_max(jnp.where(counted, values, -jnp.inf), segment_ids,
                                num_segments=num_segments)
    shift = jnp.where(count > 0, shift, 0.0)
    shifted = values - shift[segment_ids]
    total = jax.ops.segment_sum(jnp.where(counted, shifted, 0.0), segment_ids,
                                num_segments=num_segments)
    mean = total / jnp.maximum(count, 1.0)
    deviation = shifted - mean[segment_ids]
    # Two-pass (centred) sum of squares: no cancellation between E[r^2] and E[r]^2.
    squares = jax.ops.segment_sum(jnp.where(counted, deviation * deviation, 0.0), segment_ids,
                                  num_segments=num_segments)
    std = jnp.sqrt(squares / jnp.maximum(count, 1.0))
    return count[segment_ids], deviation, std[segment_ids]


def _checked(turn_rewards, active):
    """(float32[N, K] rewards with 0 off the active entries, bool[N, K] active)."""
    turn_rewards = jnp.asarray(turn_rewards, jnp.float32)
    active = jnp.asarray(active, bool)
    if turn_rewards.ndim != 2:
        raise ValueError(f"turn_rewards must be 2-D float32[N, K], got shape {turn_rewards.shape}")
    if active.shape != turn_rewards.shape:
        raise ValueError(f"active must have the shape of turn_rewards {turn_rewards.shape}, "
                         f"got {active.shape}")
    # where, not a product: the NaN past each episode's last turn must not reach any sum.
    return jnp.where(active, turn_rewards, 0.0), active


def vpr_turn_advantages(turn_rewards, active, delta=DEFAULT_DELTA,
                        min_active=MIN_ACTIVE) -> jax.Array:
    """VPR Eq. 4 with Appendix F's fallback, over the whole batch.

    Args:
      turn_rewards: float32[N, K], r_{i,t}; entries off `active` are ignored (NaN allowed).
      active: bool[N, K], (i, t) with i in I_t: turn t played by a trajectory that counts.
      delta: added to the std (positive; may be traced).
      min_active: turns with fewer active rows use the global statistics (may be traced).

    Returns:
      float32[N, K]: (r_{i,t} - mu_t) / (sigma_t + delta) with the statistics of turn t's
      active rows where |I_t| >= min_active, else with the mean and population std of all
      active (i, t); 0 off `active`.
    """
    rewards, active = _checked(turn_rewards, active)
    n, k = rewards.shape
    if n * k == 0:
        return jnp.zeros((n, k), jnp.float32)
    flat_rewards, flat_active = rewards.reshape(-1), active.reshape(-1)
    turn_of_entry = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (n, k)).reshape(-1)
    count_t, deviation_t, std_t = _masked_moments(flat_rewards, flat_active, turn_of_entry, k)
    _, deviation_all, std_all = _masked_moments(flat_rewards, flat_active,
                                                jnp.zeros_like(turn_of_entry), 1)
    advantages = jnp.where(count_t >= min_active, deviation_t / (std_t + delta),
                           deviation_all / (std_all + delta))
    return jnp.where(flat_active, advantages, 0.0).reshape(n, k)


def vpr_state_group_advantages(turn_rewards, state_group_ids, active, delta=DEFAULT_DELTA,
                               counted=None) -> jax.Array:
    """The released code's `state_group` VPR advantages: rewards whitened within state groups.

    Args:
      turn_rewards: float32[N, K]; entries off `active` are ignored (NaN allowed).
      state_group_ids: int32[N, K], the state group of each active entry, in [0, N * K) (any
        value elsewhere); entries of one group are candidate actions from the same state.
      active: bool[N, K], the entries that get an advantage.
      delta: added to the std (positive; may be traced); groups with std <= delta get 0.
      counted: bool[N, K] | None, the active entries that enter the group statistics (None: all
        active ones); an active entry that is not counted (a tree node repeated in another row)
        still gets its group's advantage.

    Returns:
      float32[N, K]: (r - mean_g) / (std_g + delta) with the mean and population std of the
      counted members of the entry's group, where the group has at least two counted members
      and std_g > delta; 0 elsewhere and off `active`.
    """
    rewards, active = _checked(turn_rewards, active)
    state_group_ids = jnp.asarray(state_group_ids, jnp.int32)
    if state_group_ids.shape != rewards.shape:
        raise ValueError(f"state_group_ids must have the shape of turn_rewards {rewards.shape}, "
                         f"got {state_group_ids.shape}")
    counted = active if counted is None else jnp.asarray(counted, bool) & active
    if counted.shape != rewards.shape:
        raise ValueError(f"counted must have the shape of turn_rewards {rewards.shape}, "
                         f"got {counted.shape}")
    n, k = rewards.shape
    if n * k == 0:
        return jnp.zeros((n, k), jnp.float32)
    # N * K segments bound any grouping of the entries, so the shape never depends on the ids.
    ids = jnp.where(active, state_group_ids, 0).reshape(-1)
    count, deviation, std = _masked_moments(rewards.reshape(-1), counted.reshape(-1), ids, n * k)
    whitened = (count >= MIN_STATE_GROUP_SIZE) & (std > delta)
    advantages = jnp.where(whitened, deviation / (std + delta), 0.0)
    return jnp.where(active.reshape(-1), advantages, 0.0).reshape(n, k)


# ----------------------------------------------------------------------------- state groups

def state_groups(batch: TrajectoryBatch, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """State groups of a batch's active turns (host side).

    Args:
      batch: reads group_ids, the state_signature label and node_ids.
      active: bool[N, K], the turns to group.

    Returns:
      (int32[N, K] ids, bool[N, K] counted): dense ids of the (task group, state signature)
      pairs on the active turns (NO_STATE_GROUP elsewhere); counted marks the first active
      occurrence of each tree node (turns without a node id are each counted), so a history
      shared by several rows is one candidate, not several.

    Raises:
      ValueError: an active turn has no state signature.
    """
    n, k = active.shape
    signatures = batch.label("state_signature")
    ids = np.full((n, k), NO_STATE_GROUP, np.int32)
    keys: dict[tuple[int, str], int] = {}
    for i, t in zip(*np.nonzero(active)):
        signature = signatures[i, t]
        if signature is None:
            raise ValueError(f"the state_signature label of row {i} turn {t} is None on a "
                             f"played turn: the state_group grouping needs the rollout's state "
                             f"signatures")
        ids[i, t] = keys.setdefault((int(batch.group_ids[i]), signature), len(keys))
    counted = np.array(active, bool).reshape(-1)
    nodes = np.where(active, batch.node_ids, NO_NODE).reshape(-1)
    with_node = np.nonzero(nodes != NO_NODE)[0]
    # np.unique's return_index is each node's first position in row-major order.
    _, first = np.unique(nodes[with_node], return_index=True)
    counted[np.setdiff1d(with_node, with_node[first])] = False
    return ids, counted.reshape(n, k)


# ----------------------------------------------------------------------------- registration

@dataclasses.dataclass(frozen=True)
class VprConfig(Section):
    delta: float = option(DEFAULT_DELTA, "added to the std (VPR Eq. 4's delta; the paper gives "
                          "no value, the released code 1e-8)", check=positive())
    min_active: int = option(MIN_ACTIVE, "turns with fewer active trajectories use the batch's "
                             "global statistics (VPR Appendix F: 4)", check=between(1))
    grouping: str = option("turn", "'turn': the paper's Eq. 4 over the trajectories active at "
                           "each turn; 'state_group': the released code's whitening among "
                           "actions taken from the same state", check=one_of(GROUPINGS))


def _vpr_reads(settings: VprConfig) -> tuple[str, ...]:
    """The state groups of the released code's grouping read the state signatures."""
    return ("state_signature",) if settings.grouping == "state_group" else ()


@ADVANTAGES.register("vpr", VprConfig, reads=_vpr_reads)
def vpr(settings: VprConfig):
    """Turn-normalized verifier rewards, (r_{i,t} - mu_t) / (sigma_t + delta), on each turn's
    action tokens (VPR §2.3 Eq. 4, gamma = 0; use with reward.terms = ('verifier',))."""
    def fn(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        # Invalid trajectories are not in any I_t and get advantage 0.
        active = batch.played & np.asarray(valid, bool)[:, None]
        turn_rewards = jnp.asarray(rewards.turn, jnp.float32)
        if settings.grouping == "turn":
            per_turn = vpr_turn_advantages(turn_rewards, jnp.asarray(active), settings.delta,
                                           settings.min_active)
        else:
            ids, counted = state_groups(batch, active)
            per_turn = vpr_state_group_advantages(turn_rewards, jnp.asarray(ids),
                                                  jnp.asarray(active), settings.delta,
                                                  counted=jnp.asarray(counted))
        return turns_to_tokens(per_turn, jnp.asarray(batch.turn_index),
                               jnp.asarray(batch.action_mask))

    def metrics(batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        """The turn rewards' balance: mean and share of positive rewards on active turns."""
        active = batch.played & np.asarray(valid, bool)[:, None]
        values = np.asarray(rewards.turn, np.float32)[active]
        if not values.size:
            return {"vpr/turn_reward_mean": 0.0, "vpr/positive_turn_fraction": 0.0}
        return {"vpr/turn_reward_mean": float(values.mean()),
                "vpr/positive_turn_fraction": float(np.mean(values > 0))}
    return AdvantageEstimator(fn, metrics)
