"""Spreading sequence- and turn-level advantages onto the tokens the policy generated.

The policy-gradient losses weight every action token by an advantage. GRPO-style estimators
(PATR Eq. 2, LATR Eq. 2) give one advantage per trajectory, shared by all its action tokens;
per-turn estimators (RTMC, "GRPO + Step Reward") give one per turn, shared by the tokens of that
turn's action. Observation and padding tokens get 0 so that they carry no gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sequence_to_tokens(advantages, action_mask) -> jax.Array:
    """One advantage per trajectory on each of its action tokens.

    Args:
      advantages: float32[N].
      action_mask: bool[N, T], True on the tokens the policy generated.

    Returns:
      float32[N, T]: advantages[i] where action_mask[i, t], 0 elsewhere.
    """
    advantages = jnp.asarray(advantages, jnp.float32)
    action_mask = jnp.asarray(action_mask, bool)
    if action_mask.ndim != 2 or advantages.shape != action_mask.shape[:1]:
        raise ValueError(f"advantages float32[N] and action_mask bool[N, T] disagree: "
                         f"{advantages.shape} vs {action_mask.shape}")
    return jnp.where(action_mask, advantages[:, None], 0.0)


def turns_to_tokens(advantages, turn_index, action_mask) -> jax.Array:
    """One advantage per turn on each action token of that turn.

    Args:
      advantages: float32[N, K], the advantage of each turn.
      turn_index: int32[N, T], the turn of each token; -1 on padding.
      action_mask: bool[N, T], True on the tokens the policy generated.

    Returns:
      float32[N, T]: advantages[i, turn_index[i, t]] where action_mask[i, t] and the turn index
      is in [0, K), 0 elsewhere.
    """
    advantages = jnp.asarray(advantages, jnp.float32)
    turn_index = jnp.asarray(turn_index, jnp.int32)
    action_mask = jnp.asarray(action_mask, bool)
    if advantages.ndim != 2:
        raise ValueError(f"advantages must be 2-D float32[N, K], got shape {advantages.shape}")
    if turn_index.ndim != 2 or turn_index.shape[0] != advantages.shape[0]:
        raise ValueError(f"turn_index must be int32[N, T] with N={advantages.shape[0]}, "
                         f"got shape {turn_index.shape}")
    if action_mask.shape != turn_index.shape:
        raise ValueError(f"action_mask must have the shape of turn_index {turn_index.shape}, "
                         f"got {action_mask.shape}")
    num_turns = advantages.shape[1]
    if num_turns == 0:
        return jnp.zeros(turn_index.shape, jnp.float32)
    in_range = (turn_index >= 0) & (turn_index < num_turns)
    # Padding holds -1; clamp before the gather (JAX would otherwise wrap or clip silently) and
    # mask the result, so a padding index can never pick up another turn's advantage.
    gathered = jnp.take_along_axis(advantages, jnp.clip(turn_index, 0, num_turns - 1), axis=1)
    return jnp.where(action_mask & in_range, gathered, 0.0)
