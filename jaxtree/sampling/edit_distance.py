"""Levenshtein distance between batches of token sequences, on device.

The dynamic programme D[i][j] = distance(a[:i], b[:j]) is computed one row i at a time under
`lax.scan`, for every sequence pair at once. Within a row the insertion term D[i][j-1] + 1 is a
sequential dependency along j; it is resolved without a loop over j by a running minimum:

    E[j]   = min(D[i-1][j] + 1, D[i-1][j-1] + [a_i != b_j])     (deletion, substitution)
    D[i][j] = min_{j' <= j} (E[j'] + j - j')  = cummin(E - j)[j] + j   (any run of insertions)

so a window of r tokens costs r vector steps of width r + 1. Sequences are right-padded to a
common width W and carry their own lengths; D[i][j] depends only on the prefixes a[:i] and b[:j],
so the answer for lengths (m, n) is read off the full table at D[m][n].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def edit_distance(a: jax.Array, b: jax.Array, a_lengths: jax.Array,
                  b_lengths: jax.Array) -> jax.Array:
    """Levenshtein distance of each pair (insertions, deletions, substitutions all cost 1).

    Args:
      a, b: int32[B, W] token sequences (entries past each length are ignored).
      a_lengths, b_lengths: int32[B] in [0, W].

    Returns:
      int32[B].
    """
    batch, width = a.shape
    columns = jnp.arange(width + 1, dtype=jnp.int32)
    first = jnp.broadcast_to(columns, (batch, width + 1))        # D[0][j] = j

    def row(prev, inputs):
        i, a_i = inputs                                           # row i = 1..W, token a[i-1]
        substitution = prev[:, :-1] + (a_i[:, None] != b).astype(jnp.int32)
        e = jnp.concatenate([jnp.full((batch, 1), i, jnp.int32),
                             jnp.minimum(prev[:, 1:] + 1, substitution)], axis=1)
        current = jax.lax.cummin(e - columns, axis=1) + columns
        return current, current

    rows = jnp.arange(1, width + 1, dtype=jnp.int32)
    _, table = jax.lax.scan(row, first, (rows, a.T))              # [W, B, W + 1]
    table = jnp.concatenate([first[None], table], axis=0)         # [W + 1, B, W + 1]
    return table[a_lengths, jnp.arange(batch), b_lengths]


def edit_distance_normalized(a: jax.Array, b: jax.Array, a_lengths: jax.Array,
                             b_lengths: jax.Array) -> jax.Array:
    """Levenshtein distance divided by the longer length (LATR's normalized edit distance), in
    [0, 1]: float32[B]. Two empty sequences get 1.0: in LATR they are branches that both ended on
    their (different) branch tokens, which is no evidence of similarity."""
    longer = jnp.maximum(a_lengths, b_lengths)
    distance = edit_distance(a, b, a_lengths, b_lengths).astype(jnp.float32)
    return jnp.where(longer > 0, distance / jnp.maximum(longer, 1).astype(jnp.float32), 1.0)
