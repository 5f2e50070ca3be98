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


# ----------------------------------------------------------------------------- incremental form
#
# LATR compares two sequences that grow by at most one token each per generation step. Instead of
# rebuilding the table at the check (W sequential steps), the table of each pair is extended as the
# tokens arrive: a new token of `a` adds a row, a new token of `b` adds a column, each in one
# vector step (the same running-minimum trick along the other axis). Cells beyond the current
# lengths hold stale values that are never read: a row reads only columns below the current
# length of b and vice versa, and later columns overwrite every row.


def levenshtein_table(batch: int, width: int) -> jax.Array:
    """An empty table per pair: int32[B, W + 1, W + 1] with D[i][j] = i + j (the borders)."""
    i = jnp.arange(width + 1, dtype=jnp.int32)
    return jnp.broadcast_to(i[:, None] + i[None, :], (batch, width + 1, width + 1))


def levenshtein_add_row(table: jax.Array, a_length: jax.Array, token: jax.Array,
                        b: jax.Array, grow: jax.Array) -> jax.Array:
    """Appends `token` to a where `grow`: writes row a_length + 1.

    table: int32[B, W+1, W+1]; a_length: int32[B] (before the append, < W); token: int32[B];
    b: int32[B, W], the b sequences (entries past their current length are ignored).
    """
    batch, size, _ = table.shape
    columns = jnp.arange(size, dtype=jnp.int32)
    i = a_length + 1
    rows = jnp.arange(batch)
    previous = table[rows, a_length]                                       # [B, W+1]
    substitution = previous[:, :-1] + (token[:, None] != b).astype(jnp.int32)
    e = jnp.concatenate([i[:, None], jnp.minimum(previous[:, 1:] + 1, substitution)], axis=1)
    new = jax.lax.cummin(e - columns, axis=1) + columns
    target = jnp.where(grow, i, size)                                      # size: dropped
    return table.at[rows, target].set(new, mode="drop")


def levenshtein_add_column(table: jax.Array, b_length: jax.Array, token: jax.Array,
                           a: jax.Array, grow: jax.Array) -> jax.Array:
    """Appends `token` to b where `grow`: writes column b_length + 1 (the transpose of
    `levenshtein_add_row`); a: int32[B, W], the a sequences."""
    batch, size, _ = table.shape
    positions = jnp.arange(size, dtype=jnp.int32)
    j = b_length + 1
    rows = jnp.arange(batch)
    previous = table[rows, :, b_length]                                    # [B, W+1]
    substitution = previous[:, :-1] + (a != token[:, None]).astype(jnp.int32)
    e = jnp.concatenate([j[:, None], jnp.minimum(previous[:, 1:] + 1, substitution)], axis=1)
    new = jax.lax.cummin(e - positions, axis=1) + positions
    target = jnp.where(grow, j, size)
    return table.at[rows, :, target].set(new, mode="drop")


def levenshtein_read_normalized(table: jax.Array, a_length: jax.Array,
                                b_length: jax.Array) -> jax.Array:
    """`edit_distance_normalized` of the pairs at their current lengths: float32[B]."""
    distance = table[jnp.arange(table.shape[0]), a_length, b_length].astype(jnp.float32)
    longer = jnp.maximum(a_length, b_length)
    return jnp.where(longer > 0, distance / jnp.maximum(longer, 1).astype(jnp.float32), 1.0)
