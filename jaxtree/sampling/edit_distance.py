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

from typing import NamedTuple

import jax
import jax.numpy as jnp


def running_min(x: jax.Array) -> jax.Array:
    """Cumulative minimum along the last axis by log2(W) shifted minimums: a few vector ops, where
    `lax.cummin` lowers to a window reduction of O(W^2) work on CPU (3x slower at W = 51)."""
    width = x.shape[-1]
    fill = jnp.iinfo(x.dtype).max
    shift = 1
    while shift < width:
        shifted = jnp.concatenate([jnp.full(x.shape[:-1] + (shift,), fill, x.dtype),
                                   x[..., :-shift]], axis=-1)
        x = jnp.minimum(x, shifted)
        shift *= 2
    return x


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
    first = jnp.broadcast_to(jnp.arange(width + 1, dtype=jnp.int32), (batch, width + 1))  # D[0]

    def row(prev, inputs):
        i, a_i = inputs                                           # row i = 1..W, token a[i-1]
        current = _next_line(prev, jnp.full((batch,), i, jnp.int32), a_i, b)
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
    return _normalized(edit_distance(a, b, a_lengths, b_lengths), a_lengths, b_lengths)


def _normalized(distance: jax.Array, a_lengths: jax.Array, b_lengths: jax.Array) -> jax.Array:
    """distance / max(a_lengths, b_lengths), and 1.0 where both are empty."""
    longer = jnp.maximum(a_lengths, b_lengths)
    return jnp.where(longer > 0, distance.astype(jnp.float32)
                     / jnp.maximum(longer, 1).astype(jnp.float32), 1.0)


# ----------------------------------------------------------------------------- incremental form
#
# LATR compares two sequences that grow by at most one token each per generation step. Instead of
# rebuilding the table at the check (W sequential steps), each pair keeps the frontier of its
# table: the last row D[m][.] (a's current length m) and the last column D[.][n] (b's current
# length n). A new token of `a` computes the next row from the last one in one vector step (the
# running-minimum trick), and the new row's entry at column n extends the last column; a new token
# of `b` does the transpose. The distance is the corner D[m][n]. Entries of the row past n (of the
# column past m) are stale and never read: a step only reads entries up to the current lengths.


class LevenshteinFrontier(NamedTuple):
    """Per pair: row int32[B, W + 1], D[m][j] (valid for j <= n); column int32[B, W + 1],
    D[i][n] (valid for i <= m), for the current lengths m of a and n of b."""

    row: jax.Array
    column: jax.Array


def levenshtein_frontier(batch: int, width: int) -> LevenshteinFrontier:
    """The frontier of empty sequences: D[0][j] = j and D[i][0] = i."""
    borders = jnp.broadcast_to(jnp.arange(width + 1, dtype=jnp.int32), (batch, width + 1))
    return LevenshteinFrontier(borders, borders)


def levenshtein_reset(frontier: LevenshteinFrontier, reset: jax.Array) -> LevenshteinFrontier:
    """Empties the pairs where `reset` (bool[B]) is set."""
    empty = levenshtein_frontier(*frontier.row.shape[:1], frontier.row.shape[1] - 1)
    pick = lambda new, old: jnp.where(reset[:, None], new, old)
    return LevenshteinFrontier(pick(empty.row, frontier.row), pick(empty.column, frontier.column))


def _next_line(previous: jax.Array, index: jax.Array, token: jax.Array,
               other: jax.Array) -> jax.Array:
    """The next row (or column) `index` of the table from the previous one, for `token` against
    the other sequence `other` (int32[B, W]): [B, W + 1]."""
    positions = jnp.arange(previous.shape[1], dtype=jnp.int32)
    substitution = previous[:, :-1] + (token[:, None] != other).astype(jnp.int32)
    e = jnp.concatenate([index[:, None], jnp.minimum(previous[:, 1:] + 1, substitution)], axis=1)
    return running_min(e - positions) + positions


def levenshtein_add_row(frontier: LevenshteinFrontier, a_length: jax.Array, b_length: jax.Array,
                        token: jax.Array, b: jax.Array, grow: jax.Array) -> LevenshteinFrontier:
    """Appends `token` to a where `grow` (a_length < W there).

    a_length, b_length: int32[B], the lengths before the append; token: int32[B]; b: int32[B, W],
    the b sequences (entries past b_length are ignored).
    """
    rows = jnp.arange(token.shape[0])
    i = a_length + 1
    new = _next_line(frontier.row, i, token, b)
    row = jnp.where(grow[:, None], new, frontier.row)
    size = frontier.column.shape[1]
    column = frontier.column.at[rows, jnp.where(grow, i, size)].set(new[rows, b_length],
                                                                     mode="drop")
    return LevenshteinFrontier(row, column)


def levenshtein_add_column(frontier: LevenshteinFrontier, a_length: jax.Array,
                           b_length: jax.Array, token: jax.Array, a: jax.Array,
                           grow: jax.Array) -> LevenshteinFrontier:
    """Appends `token` to b where `grow` (b_length < W there): the transpose of
    `levenshtein_add_row`; a: int32[B, W], the a sequences."""
    rows = jnp.arange(token.shape[0])
    j = b_length + 1
    new = _next_line(frontier.column, j, token, a)
    column = jnp.where(grow[:, None], new, frontier.column)
    size = frontier.row.shape[1]
    row = frontier.row.at[rows, jnp.where(grow, j, size)].set(new[rows, a_length], mode="drop")
    return LevenshteinFrontier(row, column)


def levenshtein_read_normalized(frontier: LevenshteinFrontier, a_length: jax.Array,
                                b_length: jax.Array) -> jax.Array:
    """`edit_distance_normalized` of the pairs at their current lengths: float32[B]."""
    return _normalized(frontier.row[jnp.arange(a_length.shape[0]), b_length], a_length, b_length)
