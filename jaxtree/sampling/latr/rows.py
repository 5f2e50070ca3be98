"""Row-level moves of the LATR kernel: copying the few rows a step copies, writing tokens at each
row's own position."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtree.models.kv_cache import copy_tree_rows


def copy_pending_rows(arrays, src: jax.Array, dst: jax.Array, chunk: int):
    """Row src[i] -> row dst[i] in every array of the pytree `arrays` (leading axis: R rows), for
    every i with dst[i] < R; the other pairs are no-ops. Sources and destinations are disjoint.

    src, dst: int32[N]. The pending pairs are moved `chunk` at a time under a while loop (each
    chunk by `copy_tree_rows`, the shared row-copy primitive), so a step that copies a few rows
    moves only those rows: one copy over all N pairs would read and rewrite the whole KV cache at
    every step with a branch (on the LATR benchmark that was most of the kernel's overhead over
    plain sampling).
    """
    rows = jax.tree_util.tree_leaves(arrays)[0].shape[0]
    pairs = dst.shape[0]
    pending = dst < rows
    count = pending.sum()
    # the pending pairs first, in order (a scatter to their ranks: cheaper than a sort), then
    # `chunk` no-op pairs so the last dynamic slice never reads past the end
    rank = jnp.where(pending, jnp.cumsum(pending) - 1, pairs + chunk)
    src = jnp.zeros((pairs + chunk,), src.dtype).at[rank].set(src, mode="drop")
    dst = jnp.full((pairs + chunk,), rows, dst.dtype).at[rank].set(dst, mode="drop")

    def move(carry):
        start, arrays = carry
        s = jax.lax.dynamic_slice(src, (start,), (chunk,))
        d = jax.lax.dynamic_slice(dst, (start,), (chunk,))
        return start + chunk, copy_tree_rows(arrays, s, d)

    return jax.lax.while_loop(lambda c: c[0] < count, move, (jnp.int32(0), arrays))[1]


def write_step(tokens, logprobs, lengths, pos, writing, token, token_logp, eos_ids, n):
    """Writes each `writing` row's token at its position `pos`.

    tokens: int32[R, n], logprobs: float32[R, n], lengths, pos: int32[R]; writing: bool[R];
    token: int32[R], token_logp: float32[R]; eos_ids: int32[E].
    Returns the new (tokens, logprobs, lengths) and ends: bool[R], the writing rows that ended
    (EOS, or the last of the n positions).
    """
    row_ids = jnp.arange(tokens.shape[0])
    pos = jnp.minimum(pos, n - 1)
    tokens = tokens.at[row_ids, pos].set(jnp.where(writing, token, tokens[row_ids, pos]))
    logprobs = logprobs.at[row_ids, pos].set(jnp.where(writing, token_logp,
                                                       logprobs[row_ids, pos]))
    lengths = jnp.where(writing, pos + 1, lengths)
    hit_eos = jnp.any(token[:, None] == eos_ids[None, :], axis=1)
    return tokens, logprobs, lengths, writing & (hit_eos | (pos + 1 >= n))


def write_at_offsets(buffer: jax.Array, values: jax.Array, offsets: jax.Array,
                     counts: jax.Array) -> jax.Array:
    """buffer[r, offsets[r] + j] = values[r, j] for j < counts[r]; the rest untouched.

    buffer: [R, n]; values: [R, m]; offsets, counts: int32[R]. Positions past n are dropped.
    """
    steps = jnp.arange(values.shape[1], dtype=jnp.int32)[None, :]
    positions = jnp.where(steps < counts[:, None], offsets[:, None] + steps, buffer.shape[1])
    row_ids = jnp.arange(buffer.shape[0], dtype=jnp.int32)[:, None]
    return buffer.at[row_ids, positions].set(values.astype(buffer.dtype), mode="drop")
