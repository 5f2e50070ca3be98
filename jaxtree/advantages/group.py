"""Group-relative advantages: GRPO, Dr.GRPO, RLOO and GRPO with discounted step rewards.

Every trajectory belongs to a group (the rollouts sampled for one task) named by an integer id in
[0, num_groups). Group statistics are accumulated with `jax.ops.segment_sum` over the ids, so the
functions are pure and jit-able, groups may have unequal sizes, and `num_groups` is a static
Python int (it fixes the shape of the per-group arrays).

- `grpo_advantages`: GRPO (Shao et al., 2024) as written in PATR Eq. 1 and LATR Eq. 3,
  A_i = (r_i - mean_g) / (std_g + epsilon), with the unbiased sample std (ddof=1) that verl and
  TRL compute with `torch.std`. Dr.GRPO (Liu et al., 2025) drops the division:
  A_i = r_i - mean_g. Statistics are taken over the valid trajectories only, as PATR does.
- `rloo_advantages`: REINFORCE leave-one-out (Ahmadian et al., 2024), the baseline of each
  trajectory is the mean reward of the other members of its group:
  A_i = r_i - mean_{j != i} r_j = n / (n - 1) * (r_i - mean_g).
- `discounted_returns`: per-turn reward-to-go G_{i,t} = sum_{k=t}^{K_i-1} gamma^(k-t) r_{i,k}.
- `step_reward_advantages`: the "GRPO + Step Reward" baseline of RTMC (§5.1): the GRPO
  trajectory advantage of the terminal (outcome) reward plus the gamma-discounted return of the
  per-step rewards, A_{i,t} = A^GRPO_i + G_{i,t} on the turns the trajectory played.

A group with fewer than two (valid) members has no baseline to compare against, so its members
get advantage 0, as do invalid rows.
"""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
from jax import lax


def _check_rows(name: str, x: jax.Array, n: int) -> None:
    if x.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) like the rewards, got {x.shape}")


def _group_deviations(rewards, group_ids, num_groups: int, valid):
    """Per-row group size, deviation from the group mean and unbiased group variance.

    Args:
      rewards: float32[N].
      group_ids: int32[N] in [0, num_groups).
      num_groups: static number of groups.
      valid: bool[N] | None, rows that take part in the statistics (None: all).

    Returns:
      (count float32[N], deviation float32[N], variance float32[N]): the number of valid members
      of the row's group, r_i - mean_g (0 on invalid rows), and the ddof=1 variance of the group
      (0 for groups with fewer than two valid members).
    """
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D float32[N], got shape {rewards.shape}")
    n = rewards.shape[0]
    group_ids = jnp.asarray(group_ids, jnp.int32)
    _check_rows("group_ids", group_ids, n)
    if valid is None:
        valid = jnp.ones((n,), bool)
    valid = jnp.asarray(valid, bool)
    _check_rows("valid", valid, n)

    count = jax.ops.segment_sum(valid.astype(jnp.float32), group_ids, num_segments=num_groups)
    # Shift every group by its largest valid reward before summing. A float32 mean of equal
    # values is not always equal to them; divided by a std of ~1e-9 + epsilon that rounding
    # error would become a spurious advantage of order 1e-3. After the shift a group of identical
    # rewards has deviations of exactly 0, and the sums are of smaller numbers.
    shift = jax.ops.segment_max(jnp.where(valid, rewards, -jnp.inf), group_ids,
                                num_segments=num_groups)
    shift = jnp.where(count > 0, shift, 0.0)  # empty groups: segment_max gives -inf
    shifted = jnp.where(valid, rewards - shift[group_ids], 0.0)
    total = jax.ops.segment_sum(shifted, group_ids, num_segments=num_groups)
    mean = total / jnp.maximum(count, 1.0)
    deviation = jnp.where(valid, shifted - mean[group_ids], 0.0)
    # Two-pass (centred) sum of squares: no cancellation between E[r^2] and E[r]^2.
    squares = jax.ops.segment_sum(deviation * deviation, group_ids, num_segments=num_groups)
    variance = squares / jnp.maximum(count - 1.0, 1.0)
    return count[group_ids], deviation, variance[group_ids]


def grpo_advantages(rewards, group_ids, num_groups: int, *, normalize_std: bool = True,
                    epsilon: float = 1e-6, valid=None) -> jax.Array:
    """GRPO (or, with normalize_std=False, Dr.GRPO) advantage of every trajectory.

    Args:
      rewards: float32[N], the outcome reward of each trajectory.
      group_ids: int32[N] in [0, num_groups).
      num_groups: static number of groups.
      normalize_std: divide by std_g + epsilon (GRPO); False keeps r_i - mean_g (Dr.GRPO).
      epsilon: added to the std so that groups of equal rewards do not divide by 0.
      valid: bool[N] | None; invalid rows are left out of the group statistics and get 0.

    Returns:
      float32[N]: (r_i - mean_g) / (std_g + epsilon) with std_g the ddof=1 std over the valid
      members of the group; 0 on invalid rows and in groups with a single valid member.
    """
    if normalize_std and isinstance(epsilon, numbers.Real) and not epsilon > 0:
        raise ValueError(f"epsilon={epsilon} must be positive: a group of equal rewards has std 0")
    count, deviation, variance = _group_deviations(rewards, group_ids, num_groups, valid)
    advantages = deviation / (jnp.sqrt(variance) + epsilon) if normalize_std else deviation
    return jnp.where(count >= 2.0, advantages, 0.0)


def rloo_advantages(rewards, group_ids, num_groups: int, *, valid=None) -> jax.Array:
    """REINFORCE leave-one-out advantage of every trajectory.

    Args:
      rewards: float32[N], the outcome reward of each trajectory.
      group_ids: int32[N] in [0, num_groups).
      num_groups: static number of groups.
      valid: bool[N] | None; invalid rows are left out of the baselines and get 0.

    Returns:
      float32[N]: r_i minus the mean reward of the other valid members of the group, computed as
      n / (n - 1) * (r_i - mean_g); 0 on invalid rows and in groups with a single valid member.
    """
    count, deviation, _ = _group_deviations(rewards, group_ids, num_groups, valid)
    advantages = deviation * count / jnp.maximum(count - 1.0, 1.0)
    return jnp.where(count >= 2.0, advantages, 0.0)


def discounted_returns(turn_rewards, num_turns, gamma) -> jax.Array:
    """Discounted reward-to-go of every turn.

    Args:
      turn_rewards: float32[N, K], reward of each turn; entries at t >= num_turns[i] are ignored.
      num_turns: int32[N], turns each trajectory played.
      gamma: discount factor (Python float or float32 scalar; may be traced).

    Returns:
      float32[N, K]: G_{i,t} = sum_{k=t}^{num_turns_i - 1} gamma^(k-t) r_{i,k}, 0 for
      t >= num_turns_i.
    """
    turn_rewards = jnp.asarray(turn_rewards, jnp.float32)
    if turn_rewards.ndim != 2:
        raise ValueError(f"turn_rewards must be 2-D float32[N, K], got shape {turn_rewards.shape}")
    n, k = turn_rewards.shape
    num_turns = jnp.asarray(num_turns, jnp.int32)
    if num_turns.shape != (n,):
        raise ValueError(f"num_turns must have shape ({n},), got {num_turns.shape}")
    gamma = jnp.asarray(gamma, jnp.float32)
    played = jnp.arange(k)[None, :] < num_turns[:, None]
    # Zeroing the unplayed tail makes the recursion start at 0 after the last turn, so both the
    # returns of played turns and the zeros after them come out of the same scan.
    rewards = jnp.where(played, turn_rewards, 0.0)

    def step(future, reward_t):
        ret = reward_t + gamma * future
        return ret, ret

    _, returns = lax.scan(step, jnp.zeros((n,), jnp.float32), rewards.T, reverse=True)
    return returns.T


def step_reward_advantages(outcome_rewards, step_rewards, num_turns, group_ids, num_groups: int,
                           *, gamma, normalize_std: bool = True,
                           epsilon: float = 1e-6, valid=None) -> jax.Array:
    """"GRPO + Step Reward" per-turn advantages (RTMC §5.1 baseline).

    Args:
      outcome_rewards: float32[N], terminal reward of each trajectory (GRPO-normalised per group).
      step_rewards: float32[N, K], per-step rewards; entries at t >= num_turns[i] are ignored.
      num_turns: int32[N].
      group_ids: int32[N] in [0, num_groups).
      num_groups: static number of groups.
      gamma: discount of the step-reward returns.
      normalize_std, epsilon, valid: as in `grpo_advantages`.

    Returns:
      float32[N, K]: grpo_advantages(outcome_rewards)_i + discounted_returns(step_rewards)_{i,t}
      for t < num_turns_i, 0 after and on invalid rows.
    """
    step_rewards = jnp.asarray(step_rewards, jnp.float32)
    outcome_rewards = jnp.asarray(outcome_rewards, jnp.float32)
    if step_rewards.ndim != 2 or outcome_rewards.shape != step_rewards.shape[:1]:
        raise ValueError(f"outcome_rewards float32[N] and step_rewards float32[N, K] disagree: "
                         f"{outcome_rewards.shape} vs {step_rewards.shape}")
    returns = discounted_returns(step_rewards, num_turns, gamma)
    trajectory = grpo_advantages(outcome_rewards, group_ids, num_groups,
                                 normalize_std=normalize_std, epsilon=epsilon, valid=valid)
    played = jnp.arange(step_rewards.shape[1])[None, :] < jnp.asarray(num_turns)[:, None]
    if valid is not None:
        played = played & jnp.asarray(valid, bool)[:, None]
    return jnp.where(played, trajectory[:, None] + returns, 0.0)
