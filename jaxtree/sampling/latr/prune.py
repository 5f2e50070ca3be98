"""Prune (LATR Alg. 1 line 23, Eq. 7-8): lookahead windows, the edit-distance frontier, and the
removal of a pruned child's descendants.

A child born at step b is checked at step b + r for each lookahead window r: its r tokens after
the branch token (positions b+1 .. b+r) against its parent's tokens at the same positions, by
normalized Levenshtein distance; under τ_ed it is pruned with all its descendants. Being kept
needs every window to pass (App. B.3).

Instead of computing r sequential table steps at the check, each lookahead child keeps the
frontier of its distance table to its parent (the last row and the last column, two [W + 1]
vectors): every step its new token adds a row and its parent's a column, each in one vector step,
so a check reads one entry, and nothing of size W x W is stored or scattered.

EOS inside a window: a window holds its tokens up to and including EOS and nothing after (a
finished row writes no more tokens), so a branch that ended early is compared on what it has,
normalized by the longer window.

Shapes: R rows, n = max_new_tokens, W = the largest window.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtree.sampling.edit_distance import (levenshtein_add_column, levenshtein_add_row,
                                            levenshtein_read_normalized, levenshtein_reset)
from jaxtree.sampling.latr.config import LatrConfig
from jaxtree.sampling.latr.state import LookaheadFrontier


def with_descendants(remove: jax.Array, parent_row: jax.Array, is_child: jax.Array,
                     k: int) -> jax.Array:
    """`remove` (bool[R]) extended to every descendant: a child goes when its parent goes.

    parent_row: int32[R], each slot's parent row (ignored where `is_child` is False). k passes
    reach every descendant: a group has k slots, so no chain is longer.
    """
    for _ in range(k):
        remove = remove | (is_child & remove[parent_row])
    return remove


def window(tokens: jax.Array, source_rows: jax.Array, start: jax.Array, width: int) -> jax.Array:
    """int32[R, width]: for each row r, the tokens of row source_rows[r] at positions
    start[r] .. start[r] + width - 1 (gathered directly, without copying whole token rows)."""
    n = tokens.shape[1]
    index = jnp.clip(start[:, None] + jnp.arange(width, dtype=jnp.int32)[None, :], 0, n - 1)
    return tokens[source_rows[:, None], index]


def extend_frontier(frontier: LookaheadFrontier, step: jax.Array, tokens: jax.Array,
                    born: jax.Array, looking: jax.Array, writing: jax.Array,
                    parent_row: jax.Array, birth: jax.Array, width: int) -> LookaheadFrontier:
    """Adds this step's tokens (written at position `step`) to each lookahead child's frontier.

    born: bool[R], children born this step (their frontier starts empty); looking: bool[R],
    children inside their largest window (birth < step <= birth + W); writing: bool[R], the rows
    that wrote a token this step (a finished row's window stops growing); parent_row: int32[R].
    The child's window adds a row, its parent's a column (each only while shorter than W).
    """
    table = levenshtein_reset(frontier.table, born)
    child_len = jnp.where(born, 0, frontier.child_len)
    parent_len = jnp.where(born, 0, frontier.parent_len)
    rows = tokens.shape[0]
    child_window = window(tokens, jnp.arange(rows), birth + 1, width)
    parent_window = window(tokens, parent_row, birth + 1, width)
    grow_child = looking & writing & (child_len < width)
    grow_parent = looking & writing[parent_row] & (parent_len < width)
    table = levenshtein_add_row(table, jnp.minimum(child_len, width - 1), parent_len,
                                tokens[:, step], parent_window, grow_child)
    child_len = child_len + grow_child
    table = levenshtein_add_column(table, child_len, jnp.minimum(parent_len, width - 1),
                                   tokens[parent_row, step], child_window, grow_parent)
    parent_len = parent_len + grow_parent
    return LookaheadFrontier(table, child_len, parent_len)


def lookahead_prunes(latr: LatrConfig, frontier: LookaheadFrontier, step: jax.Array,
                     is_child: jax.Array, birth: jax.Array):
    """The children pruned directly at `step`: those whose window r ends now (birth = step - r)
    with a normalized distance under τ_ed. At step birth + r both windows hold at most r tokens,
    so the frontier's corner is the distance over the window.

    Returns (pruned bool[R], window int32[R] (the window that pruned, else -1),
    distance float32[R] (its distance, else NaN)).
    """
    distance = levenshtein_read_normalized(frontier.table, frontier.child_len,
                                           frontier.parent_len)
    rows = birth.shape[0]
    pruned = jnp.zeros((rows,), bool)
    prune_window = jnp.full((rows,), -1, jnp.int32)
    prune_distance = jnp.full((rows,), jnp.nan, jnp.float32)
    for r in latr.windows:
        check = is_child & (birth == step - r) & ~pruned
        pruned_here = check & (distance < latr.tau_ed)
        prune_window = jnp.where(pruned_here, r, prune_window)
        prune_distance = jnp.where(pruned_here, distance, prune_distance)
        pruned = pruned | pruned_here
    return pruned, prune_window, prune_distance
