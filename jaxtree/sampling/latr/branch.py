"""Extend and branch (LATR Alg. 1, Eq. 5): each tree slot's next token, its branch candidates,
and the children born into the group's free slots.

Shapes: P groups of k slots, R = P·k rows, V vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxtree.sampling.latr.config import NO_FORK, LatrConfig
from jaxtree.sampling.latr.rows import copy_pending_rows
from jaxtree.sampling.latr.state import RowLayout, TreeState


def top3(probs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The three largest probabilities per row and their tokens, lowest index first on ties (as
    `lax.top_k`): float32[R, 3], int32[R, 3] from probs float32[R, V].

    Each pass is a max and a min over the indices that reach it: two plain reductions, which XLA
    vectorizes on CPU, where `argmax` (a variadic reduction) measured 4x slower and `lax.top_k`
    (a sort) slower still.
    """
    vocab = probs.shape[1]
    token_ids = jnp.arange(vocab, dtype=jnp.int32)[None, :]
    values, indices = [], []
    remaining = probs
    for _ in range(3):
        value = jnp.max(remaining, axis=-1)
        index = jnp.min(jnp.where(remaining == value[:, None], token_ids, vocab), axis=-1)
        values.append(value)
        indices.append(index)
        remaining = jnp.where(token_ids == index[:, None], -1.0, remaining)
    return jnp.stack(values, axis=1), jnp.stack(indices, axis=1)


class Candidates(NamedTuple):
    """Each row's branch candidates: the 2nd and 3rd most likely tokens.

    With τ_abs >= 1/3 no more than two tokens besides the argmax c* can pass p(c) > τ_abs; for
    smaller τ_abs the two most likely are the ones considered.

    prob: float32[R, 2]; token: int32[R, 2]; valid: bool[R, 2], passes Eq. 5 in a tree-mode row.
    """

    prob: jax.Array
    token: jax.Array
    valid: jax.Array


def branch_candidates(latr: LatrConfig, top_p: jax.Array, top_tok: jax.Array,
                      tree_mode: jax.Array) -> Candidates:
    """Eq. 5 on the top 3 (top_p, top_tok: [R, 3]): p(c) > τ_abs and p(c*) - p(c) < τ_rel."""
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
    dst, src, col, ok = jax.vmap(assign_slots, in_axes=(0, 0, 0, None))(
        layout.by_group(candidates.prob), layout.by_group(candidates.valid),
        layout.by_group(free), k)
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
