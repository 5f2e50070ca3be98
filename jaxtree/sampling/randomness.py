"""Per-row randomness for every sampler: one key per row, one pre-drawn uniform per row and step.

Every sampling path (`sampler.generate` / `decode`, the slot engine's turns, the LATR kernel)
gives each row its own key derived from ids that name the row globally (a batch index, an
episode and turn, a prompt group and slot), and row r's draw at step t is
uniform(fold_in(row_key[r], t)). A row's samples therefore depend only on its ids and its own
context: not on the batch around it, its position in the batch, how the batch is sharded, or how
many steps the loop is allowed. The draws are made before the decode loop (one [R, N] array), so
the loop body holds no PRNG work.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def row_keys(rng: jax.Array, *ids: jax.Array) -> jax.Array:
    """[R] keys, row r's = fold_in(... fold_in(fold_in(rng, ids[0][r]), ids[1][r]) ...).

    ids: one or more int[R] arrays of non-negative ids (folded in as uint32, so int32 and uint32
    ids give the same keys), e.g. (batch index,), (episode, turn) or (group, slot).
    """
    def fold(*row_ids):
        key = rng
        for i in row_ids:
            key = jax.random.fold_in(key, i)
        return key
    return jax.vmap(fold)(*ids)


def step_uniforms(keys: jax.Array, num_steps: int) -> jax.Array:
    """float32[R, num_steps]: entry [r, t] = uniform(fold_in(keys[r], t)), row r's draw at step t.

    A prefix of the steps draws the same values whatever num_steps is.
    """
    steps = jnp.arange(num_steps, dtype=jnp.uint32)
    return jax.vmap(lambda key: jax.vmap(
        lambda t: jax.random.uniform(jax.random.fold_in(key, t)))(steps))(keys)
