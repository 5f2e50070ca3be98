"""Extend and branch (LATR Alg. 1, Eq. 5): each tree slot's next token, its branch candidates,
and the children born into the group's free slots.

Shapes: P groups of k slots, R = P·k rows, V vocabulary.
"""

from __future__ import annotations

import fractions
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.sampling.latr.config import NO_FORK, LatrConfig
from jaxtree.sampling.latr.rows import copy_pending_rows
from jaxtree.sampling.latr.state import RowLayout, TreeState


def max_passing(tau_abs: float) -> int | None:
    """The most tokens of one distribution that can have p > τ_abs; None when any number can
    (τ_abs = 0).

    m such tokens hold more than m·τ_abs of a mass of 1, so m·τ_abs < 1: m <= ceil(1/τ_abs) - 1,
    also when 1/τ_abs is an integer N (N tokens at 1/N are not > 1/N). Tight: m tokens at 1/m
    each pass. Computed exactly on the float32 τ_abs that the kernel compares with (a float64
    1/τ_abs can round onto an integer). Float32 probabilities can sum to a hair over 1, so a tie
    of m + 1 tokens at 1/(m + 1) to within an ulp, with no mass elsewhere, could in principle let
    one more pass; that one is not considered.
    """
    threshold = fractions.Fraction(float(np.float32(tau_abs)))
    return None if threshold == 0 else math.ceil(1 / threshold) - 1


def num_candidates(tau_abs: float, k: int) -> int:
    """Static: how many tokens after the argmax c* each row considers as branch candidates.

    Every token besides c* that can pass p(c) > τ_abs (`max_passing` - 1), but at most k - 1: a
    group has at most k - 1 free slots, so a slot's candidate ranked below its own k - 1 best
    (which pass Eq. 5 whenever it does, having higher p) can never be assigned one. At least 1,
    so the arrays keep a column when none can pass (τ_abs >= 1/2, or k = 1).
    """
    passing = max_passing(tau_abs)
    beside_argmax = k - 1 if passing is None else min(passing - 1, k - 1)
    return max(beside_argmax, 1)


def top_tokens(probs: jax.Array, count: int) -> tuple[jax.Array, jax.Array]:
    """The `count` (static) largest probabilities per row and their tokens, descending, lowest
    index first on ties (as `lax.top_k`): float32[R, count], int32[R, count] from probs
    float32[R, V].

    Each pass is a max and a min over the indices that reach it: two plain reductions, which XLA
    vectorizes on CPU, where `argmax` (a variadic reduction) measured 4x slower and `lax.top_k`
    (a sort) made the whole kernel 5x slower at count 3.
    """
    vocab = probs.shape[1]
    token_ids = jnp.arange(vocab, dtype=jnp.int32)[None, :]
    values, indices = [], []
    remaining = probs
    for _ in range(count):
        value = jnp.max(remaining, axis=-1)
        index = jnp.min(jnp.where(remaining == value[:, None], token_ids, vocab), axis=-1)
        values.append(value)
        indices.append(index)
        remaining = jnp.where(token_ids == index[:, None], -1.0, remaining)
    return jnp.stack(values, axis=1), jnp.stack(indices, axis=1)


class Candidates(NamedTuple):
    """Each row's branch candidates: the C tokens ranked after the argmax c*
    (C = `num_candidates`, every token besides c* that can pass Eq. 5 and that a free slot can
    take).

    prob: float32[R, C]; token: int32[R, C]; valid: bool[R, C], passes Eq. 5 in a tree-mode row.
    """

    prob: jax.Array
    token: jax.Array
    valid: jax.Array


def branch_candidates(latr: LatrConfig, top_p: jax.Array, top_tok: jax.Array,
                      tree_mode: jax.Array) -> Candidates:
    """Eq. 5 on the top C + 1 (top_p, top_tok: [R, C + 1], c* first): p(c) > τ_abs and
    p(c*) - p(c) < τ_rel."""
    prob, token = top_p[:, 1:], top_tok[:, 1:]
    valid = tree_mode[:, None] & (prob > latr.tau_abs) & (top_p[:, :1] - prob < latr.tau_rel)
    return Candidates(prob, token, valid)


def assign_slots(cand_p: jax.Array, cand_valid: jax.Array, free: jax.Array, k: int):
    """For one group: which candidate goes to which free slot.

    cand_p, cand_valid: [k, C] candidate probabilities and validity per slot; free: bool[k].
    Returns (dst slot int32[k], src slot int32[k], candidate column int32[k], ok bool[k]): the
    i-th best candidate (descending p; ties: lower slot, then higher-ranked candidate, by a stable
    sort in slot-major order) goes to the i-th free slot (ascending), for i < min(#valid, #free).
    """
    columns = cand_p.shape[1]
    score = jnp.where(cand_valid, cand_p, -1.0).reshape(-1)            # slot-major order
    order = jnp.argsort(-score, stable=True)[:k]
    num = jnp.minimum(cand_valid.sum(), free.sum())
    free_slots = jnp.argsort(~free, stable=True)                       # free ones first, ascending
    ok = jnp.arange(k) < num
    return free_slots[:k].astype(jnp.int32), (order // columns).astype(jnp.int32), \
        (order % columns).astype(jnp.int32), ok


def allocate_children(layout: RowLayout, candidates: Candidates, free: jax.Array):
    """`assign_slots` for every group: each group's valid candidates take its free slots.

    free: bool[R], the free tree slots. Returns (child slot, parent slot, candidate column
    int32[P, k], ok bool[P, k]): entry i of a group is its i-th birth where ok.
    """
    return jax.vmap(assign_slots, in_axes=(0, 0, 0, None))(
        layout.by_group(candidates.prob), layout.by_group(candidates.valid),
        layout.by_group(free), layout.k)


class Births(NamedTuple):
    """This step's children, in allocation order: entry i of a group is its i-th birth.

    ok: bool[P, k], the entry is a birth (a prefix of each group's k entries).
    slot: int32[P, k], the child's slot; parent: int32[P, k], its parent's slot;
    token: int32[P, k], its branch token; born: bool[R], the rows that received a child.
    """

    ok: jax.Array
    slot: jax.Array
    parent: jax.Array
    token: jax.Array
    born: jax.Array


def spawn_children(layout: RowLayout, s: TreeState, candidates: Candidates, token: jax.Array,
                   token_logp: jax.Array, copy_chunk: int):
    """Births at step s.step: each group's valid candidates take its free tree slots.

    A child starts as a copy of its parent (cache row, token row, log-prob row: the shared prefix
    is never recomputed) and takes its branch token as this step's token. A fresh sample that was
    running in the slot is discarded. token, token_logp: this step's token and log-prob per row
    (int32[R], float32[R]).

    Returns (state with the children alive, Births, token, token_logp with the children's).
    """
    groups, k, rows = layout.groups, layout.k, layout.rows
    free = ~s.alive & ~layout.plain & ~s.saturated[layout.group]
    dst, src, col, ok = allocate_children(layout, candidates, free)
    group_base = (jnp.arange(groups, dtype=jnp.int32) * k)[:, None]
    dst_row = jnp.where(ok, group_base + dst, rows).reshape(-1)           # rows = no copy
    src_row = (group_base + src).reshape(-1)
    child_tok = candidates.token[src_row, col.reshape(-1)]
    child_logp = jnp.log(candidates.prob[src_row, col.reshape(-1)])
    born = jnp.zeros((rows,), bool).at[dst_row].set(True, mode="drop")
    copied = copy_pending_rows((s.cache, s.tokens, s.logprobs), src_row, dst_row, copy_chunk)
    cache, tokens, logprobs = copied
    token = token.at[dst_row].set(child_tok, mode="drop")
    token_logp = token_logp.at[dst_row].set(child_logp, mode="drop")
    s = s._replace(
        cache=cache, tokens=tokens, logprobs=logprobs,
        parent=s.parent.at[dst_row].set(src_row - layout.base[src_row], mode="drop"),
        birth=s.birth.at[dst_row].set(s.step, mode="drop"),
        alive=s.alive | born, shadow=s.shadow & ~born,
        fork_position=jnp.where(born, NO_FORK, s.fork_position),
        fork_source=jnp.where(born, NO_FORK, s.fork_source))
    births = Births(ok, dst, src, child_tok.reshape(groups, k), born)
    return s, births, token, token_logp
