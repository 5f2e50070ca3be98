"""The typed tree state of the LATR kernel: fixed-size arrays over R = P·k rows (mctx-style).

Row g·k + s is slot s of prompt group g. Shapes: P groups, k slots per group, R = P·k rows,
n = max_new_tokens, V vocabulary, W = the largest lookahead window, E = LatrConfig.max_events.
Nothing here grows per token: a step rewrites these arrays and the loop carries them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxtree.models.kv_cache import KVCache
from jaxtree.sampling.edit_distance import LevenshteinFrontier, levenshtein_frontier
from jaxtree.sampling.latr.config import NO_EVENT, NO_FORK, NO_PARENT, NOT_BORN, LatrConfig


class RowLayout(NamedTuple):
    """Which slot and group each row is; fixed for the whole call (not carried by the loop).

    groups, k: Python ints (static).
    slot: int32[R], the row's slot in its group (row % k).
    group: int32[R], the row's group (row // k).
    base: int32[R], the first row of the row's group (group * k): parent row = base + parent.
    plain: bool[R], a plain slot of the hybrid rollout (slot >= k_tree): samples from step 0.
    """

    groups: int
    k: int
    slot: jax.Array
    group: jax.Array
    base: jax.Array
    plain: jax.Array

    @property
    def rows(self) -> int:
        return self.groups * self.k

    def by_group(self, x: jax.Array) -> jax.Array:
        """[R, ...] -> [P, k, ...]."""
        return x.reshape((self.groups, self.k) + x.shape[1:])


def row_layout(groups: int, k: int, num_tree_slots: jax.Array) -> RowLayout:
    slot = jnp.tile(jnp.arange(k, dtype=jnp.int32), groups)
    group = jnp.repeat(jnp.arange(groups, dtype=jnp.int32), k)
    return RowLayout(groups, k, slot, group, group * k, slot >= num_tree_slots)


class LookaheadFrontier(NamedTuple):
    """Per row, the edit-distance frontier between a lookahead child's window (its tokens after
    its branch token) and its parent's tokens at the same positions (`prune.py`).

    table: LevenshteinFrontier, a row and a column int32[R, W + 1] of the distance table.
    child_len: int32[R], the child window's tokens so far (the table's row index), <= W.
    parent_len: int32[R], the parent window's tokens so far (its column index), <= W.
    """

    table: LevenshteinFrontier
    child_len: jax.Array
    parent_len: jax.Array


def empty_frontier(rows: int, width: int) -> LookaheadFrontier:
    zeros = jnp.zeros((rows,), jnp.int32)
    return LookaheadFrontier(levenshtein_frontier(rows, width), zeros, zeros)


class Events(NamedTuple):
    """Bounded per-group logs of the tree's branch and prune events (`events.py`), in order.

    num_branches: int32[P], children created (pruned ones included); all are counted, the first
      E logged in branch_step (the branch token's step), branch_parent, branch_slot (the child's
      slot), branch_token: int32[P, E], NO_EVENT past the count.
    num_prunes: int32[P], children pruned directly (their removed descendants not counted); the
      first E logged in prune_step, prune_slot, prune_window: int32[P, E] (NO_EVENT past the
      count) and prune_distance: float32[P, E] (NaN past the count).
    """

    num_branches: jax.Array
    branch_step: jax.Array
    branch_parent: jax.Array
    branch_slot: jax.Array
    branch_token: jax.Array
    num_prunes: jax.Array
    prune_step: jax.Array
    prune_slot: jax.Array
    prune_window: jax.Array
    prune_distance: jax.Array


def no_events(groups: int, max_events: int) -> Events:
    count = jnp.zeros((groups,), jnp.int32)
    log = jnp.full((groups, max_events), NO_EVENT, jnp.int32)
    return Events(count, log, log, log, log, count, log, log, log,
                  jnp.full((groups, max_events), jnp.nan, jnp.float32))


class TreeState(NamedTuple):
    """What the tree loop carries from step to step.

    step: int32[], the generation step l about to run (every tree and plain row writes
      position l at step l).
    cache: KVCache with R rows (capacity prompt width + n), each row's prompt and tokens fed.
    logits: float32[R, V], each row's next-token logits (after its last fed token).
    tokens: int32[R, n], logprobs: float32[R, n]: each row's sequence and log π(token) at
      temperature 1 (pad / 0 past its length).
    lengths: int32[R], tokens written per row.
    finished: bool[R], the row ended (EOS or n tokens) and is no longer fed.
    alive: bool[R], the slot holds a tree branch (root or child) or a plain row.
    shadow: bool[R], the slot is free (not alive) and holds a speculative fresh sample from the
      prompt ('fresh' / 'restart' completion), running at its own position.
    parent: int32[R], a child's parent slot in its group (NO_PARENT for roots, plain rows, free
      slots).
    birth: int32[R], the step of a child's branch token (NOT_BORN otherwise).
    fork_position: int32[R], for a freed slot that continued another row's sample, the position of
      its first own token (NO_FORK otherwise).
    fork_source: int32[R], the slot whose sample it continued (NO_FORK otherwise).
    frontier: LookaheadFrontier, each lookahead child's edit distance to its parent so far.
    saturated: bool[P], the group's tree phase is over (it samples stochastically from now on).
    tree_end: int32[P], the step after which the group sampled stochastically (n while running).
    forwards: int32[P], slot-tokens fed to the model so far (alive or shadow, unfinished rows).
    events: Events, the branch and prune logs.
    """

    step: jax.Array
    cache: KVCache
    logits: jax.Array
    tokens: jax.Array
    logprobs: jax.Array
    lengths: jax.Array
    finished: jax.Array
    alive: jax.Array
    shadow: jax.Array
    parent: jax.Array
    birth: jax.Array
    fork_position: jax.Array
    fork_source: jax.Array
    frontier: LookaheadFrontier
    saturated: jax.Array
    tree_end: jax.Array
    forwards: jax.Array
    events: Events


def initial_state(latr: LatrConfig, layout: RowLayout, n: int, pad_id: int, cache: KVCache,
                  root_logits: jax.Array, num_tree_slots: jax.Array) -> TreeState:
    """Step 0: the root (slot 0, when the group has tree slots) and every plain slot are alive;
    the other tree slots are free and, unless completion is 'duplicate', start speculative fresh
    samples from the prompt (the batched forward computes every row anyway; a branch born into a
    slot discards its sample, and samples that survive to the end complete their groups)."""
    rows, groups = layout.rows, layout.groups
    alive = layout.plain | ((layout.slot == 0) & (num_tree_slots > 0))
    no_tree = num_tree_slots <= 0          # without tree slots there is no tree phase
    fill = lambda value: jnp.full((rows,), value, jnp.int32)
    return TreeState(
        step=jnp.int32(0), cache=cache, logits=root_logits,
        tokens=jnp.full((rows, n), pad_id, jnp.int32),
        logprobs=jnp.zeros((rows, n), jnp.float32),
        lengths=jnp.zeros((rows,), jnp.int32),
        finished=jnp.zeros((rows,), bool),
        alive=alive,
        shadow=~alive & ~layout.plain & (latr.completion != "duplicate"),
        parent=fill(NO_PARENT), birth=fill(NOT_BORN),
        fork_position=fill(NO_FORK), fork_source=fill(NO_FORK),
        frontier=empty_frontier(rows, latr.max_window),
        saturated=jnp.full((groups,), no_tree),
        tree_end=jnp.full((groups,), jnp.where(no_tree, 0, n), jnp.int32),
        forwards=jnp.zeros((groups,), jnp.int32),
        events=no_events(groups, latr.max_events))
