"""Completion of groups whose tree ends short of k_tree branches (`LatrConfig.completion`).

  fresh      slots freed by a prune continue a copy of a running sample from the prompt (or of
             a running branch), so no sample starts late and nothing runs after step n.
  restart    slots freed by a prune restart a sample from the prompt: independent samples, at
             the price of steps after n.
  duplicate  after generation, missing slots copy surviving tree rows round-robin.

The first two act inside the tree loop (on the step's removals), the third on the final rows.
Shapes: P groups of k slots, R = P·k rows, n = max_new_tokens.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtree.sampling.latr.rows import copy_pending_rows
from jaxtree.sampling.latr.state import RowLayout, TreeState


def continue_freed_slots(layout: RowLayout, s: TreeState, removed: jax.Array,
                         running: jax.Array, token: jax.Array, copy_chunk: int):
    """'fresh': each slot freed this step continues a copy of one of its group's running samples.

    The sources, in order of preference: the group's running samples from the prompt (speculative
    fresh samples or plain rows), marginally still policy samples, so the copy is one too (it
    shares that sample's tokens so far and samples its own from here on); else its running tree
    branches (continued stochastically, like a branch after the tree phase). The j-th freed slot
    of a group copies the (j mod m)-th of its m sources. With nothing else running, the pruned
    sequence itself stays and runs on stochastically if it can. Either way the slot becomes a
    fresh sample (shadow): free for later branches.

    removed: bool[R], the slots pruned this step (descendants included); running: bool[R], rows
    that wrote this step's token, did not end and were not removed; token: int32[R], the token
    each row feeds this step (a fork feeds its source's).
    Returns (state, the tokens to feed).
    """
    groups, k, rows = layout.groups, layout.k, layout.rows
    from_prompt = layout.by_group((s.shadow | layout.plain) & running)
    from_tree = layout.by_group(s.alive & ~layout.plain & running)
    source = jnp.where(from_prompt.any(axis=1, keepdims=True), from_prompt, from_tree)
    freed = layout.by_group(removed)
    count = source.sum(axis=1, keepdims=True)
    source_order = jnp.argsort(~source, axis=1, stable=True)
    rank = jnp.cumsum(freed, axis=1) - 1
    pick = jnp.take_along_axis(source_order, rank % jnp.maximum(count, 1), axis=1)
    forked = (freed & (count > 0)).reshape(-1)
    group_base = (jnp.arange(groups, dtype=jnp.int32) * k)[:, None]
    fork_src = jnp.where(forked, (group_base + pick).reshape(-1), rows)
    cache, tokens, logprobs, lengths, token = copy_pending_rows(
        (s.cache, s.tokens, s.logprobs, s.lengths, token),
        fork_src, jnp.where(forked, jnp.arange(rows), rows), copy_chunk)
    kept = removed & ~forked
    s = s._replace(
        cache=cache, tokens=tokens, logprobs=logprobs, lengths=lengths,
        finished=jnp.where(forked, False, s.finished),
        # a kept pruned sequence is its own sample from its birth on, after its parent's prefix
        fork_position=jnp.where(forked, lengths, jnp.where(kept, s.birth, s.fork_position)),
        fork_source=jnp.where(forked, fork_src - layout.base,
                              jnp.where(kept, s.parent, s.fork_source)),
        shadow=s.shadow | removed)
    return s, token


def restart_freed_slots(s: TreeState, removed: jax.Array, pad_id: int,
                        prompt_lengths: jax.Array) -> TreeState:
    """'restart': each slot freed this step restarts a sample from the prompt. Its cache row
    still holds the prompt (all slots of a group share it), so cutting the row's cache length
    back to prompt_lengths (int32[R]) is enough; the kernel resets its logits to the prompt's and
    does not feed it this step."""
    return s._replace(
        tokens=jnp.where(removed[:, None], pad_id, s.tokens),
        logprobs=jnp.where(removed[:, None], 0.0, s.logprobs),
        lengths=jnp.where(removed, 0, s.lengths),
        finished=jnp.where(removed, False, s.finished),
        cache=s.cache._replace(lengths=jnp.where(removed, prompt_lengths, s.cache.lengths)),
        shadow=s.shadow | removed)


def duplicate_missing(layout: RowLayout, alive: jax.Array, missing: jax.Array,
                      tokens: jax.Array, logprobs: jax.Array, lengths: jax.Array):
    """'duplicate': the j-th missing slot of a group copies the group's (j mod m)-th of its m
    alive tree slots.

    alive, missing: bool[R] (alive tree slots; tree slots without a branch at the end).
    Returns (tokens, logprobs, lengths with the copies, source slot int32[R]; meaningful where
    missing).
    """
    groups, k, rows = layout.groups, layout.k, layout.rows
    alive_g = layout.by_group(alive & ~layout.plain)
    alive_order = jnp.argsort(~alive_g, axis=1, stable=True)
    count = jnp.maximum(alive_g.sum(axis=1, keepdims=True), 1)
    missing_rank = jnp.cumsum(layout.by_group(missing), axis=1) - 1
    source_slot = jnp.take_along_axis(alive_order, missing_rank % count, axis=1)
    source = (jnp.arange(groups)[:, None] * k + source_slot).reshape(-1)
    pick = lambda x: jnp.where(missing.reshape((rows,) + (1,) * (x.ndim - 1)), x[source], x)
    return pick(tokens), pick(logprobs), pick(lengths), source_slot.reshape(-1)
