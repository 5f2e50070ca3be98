"""What the LATR kernel returns (`LatrOutput`), assembled from the final tree state."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxtree.sampling.latr.completion import duplicate_missing
from jaxtree.sampling.latr.config import (DUPLICATE, FRESH, NO_FORK, NOT_BORN, PLAIN, TREE,
                                          LatrConfig)
from jaxtree.sampling.latr.state import RowLayout, TreeState


class LatrOutput(NamedTuple):
    """Per group g and slot s (P groups, k slots, n = max_new_tokens).

    tokens: int32[P, k, n], pad after each sequence's end.
    logprobs: float32[P, k, n], log π(token) at temperature 1 (importance-ratio denominators).
    mask: bool[P, k, n], the generated tokens (EOS included).
    lengths: int32[P, k].
    finished: bool[P, k], ended with EOS (else it reached n tokens).
    origin: int32[P, k], TREE | PLAIN | FRESH | DUPLICATE.
    parent: int32[P, k], the parent slot of a tree branch (NO_PARENT = -1 for the root and plain
      rows); for DUPLICATE rows, the slot duplicated; for FRESH rows, the slot whose sample it
      continued a copy of at the time (see fork_position), else -1.
    birth: int32[P, k], the step of the branch token (NOT_BORN = -1 for the root and non-tree
      rows).
    fork_position: int32[P, k], for a FRESH row that continued a copy of another fresh sample of
      its group ('fresh' completion of a slot freed by a prune), the position of its first own
      token (the tokens before it are the other sample's); NO_FORK = -1 for every other row.
    tree_end_step: int32[P], the step after which the group sampled stochastically (its
      saturation length, LATR Table 10); n when the tree never saturated.
    num_branches: int32[P], children created (including later pruned ones).
    num_prunes: int32[P], children pruned directly (descendants not counted).
    branch_step, branch_parent, branch_slot, branch_token: int32[P, E]: the first E branch
      events of each group in order (-1 past num_branches).
    prune_step, prune_slot, prune_window: int32[P, E]; prune_distance: float32[P, E]; the first E
      prune events of each group (-1 / NaN past num_prunes).
    forwards: int32[P], slot-token forwards: tokens fed to the model for alive, unfinished slots.
    """

    tokens: jax.Array
    logprobs: jax.Array
    mask: jax.Array
    lengths: jax.Array
    finished: jax.Array
    origin: jax.Array
    parent: jax.Array
    birth: jax.Array
    fork_position: jax.Array
    tree_end_step: jax.Array
    num_branches: jax.Array
    num_prunes: jax.Array
    branch_step: jax.Array
    branch_parent: jax.Array
    branch_slot: jax.Array
    branch_token: jax.Array
    prune_step: jax.Array
    prune_slot: jax.Array
    prune_window: jax.Array
    prune_distance: jax.Array
    forwards: jax.Array


def assemble_output(latr: LatrConfig, layout: RowLayout, s: TreeState, n: int, pad_id: int,
                    eos_ids: jax.Array) -> LatrOutput:
    """The rows of the final state as LatrOutput: origins, 'duplicate' completion of the tree
    slots left without a branch (the other completions filled them during generation), masks and
    the finished flags (from the last token: a row that ended on EOS)."""
    plain = layout.plain
    origin = jnp.where(plain, PLAIN, TREE)
    missing = ~s.alive & ~plain                                               # tree deficit
    parent, birth, fork_position = s.parent, s.birth, s.fork_position
    tokens, logprobs, lengths = s.tokens, s.logprobs, s.lengths
    if latr.completion == "duplicate":
        tokens, logprobs, lengths, source_slot = duplicate_missing(
            layout, s.alive, missing, tokens, logprobs, lengths)
        parent = jnp.where(missing, source_slot, parent)
        birth = jnp.where(missing, NOT_BORN, birth)
        origin = jnp.where(missing, DUPLICATE, origin)
    else:
        origin = jnp.where(missing, FRESH, origin)
        parent = jnp.where(missing, s.fork_source, parent)
    mask = jnp.arange(n)[None, :] < lengths[:, None]
    last = jnp.take_along_axis(tokens, jnp.maximum(lengths - 1, 0)[:, None], axis=1)[:, 0]
    finished = (lengths > 0) & jnp.any(last[:, None] == eos_ids[None, :], axis=1)
    shape = layout.by_group
    e = s.events
    return LatrOutput(
        shape(jnp.where(mask, tokens, pad_id)), shape(jnp.where(mask, logprobs, 0.0)),
        shape(mask), shape(lengths), shape(finished), shape(origin), shape(parent), shape(birth),
        shape(jnp.where(origin == FRESH, fork_position, NO_FORK)),
        jnp.minimum(s.tree_end, s.step),
        e.num_branches, e.num_prunes, e.branch_step, e.branch_parent, e.branch_slot,
        e.branch_token, e.prune_step, e.prune_slot, e.prune_window, e.prune_distance,
        s.forwards)
