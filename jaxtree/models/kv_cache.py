"""Preallocated key/value cache with per-row lengths.

Rows of a batch hold sequences of different lengths (ragged prompts, multi-turn episodes, tree
branches). Row `b` holds `lengths[b]` valid positions; position `p` of a row is both its cache index
and its RoPE position, so there is never any left padding to correct for. New tokens of a row are
written at that row's own offset, and the whole cache is meant to be threaded through jitted functions
with buffer donation so XLA updates it in place.

Layout (K = key/value heads, S = capacity), one array per layer: keys `[B, K, Dh, S]`, values
`[B, K, S, Dh]`. Per-layer arrays rather than one stacked `[L, ...]` buffer, because a stacked buffer
updated with `.at[].set` was measured several times slower on CPU. Keys are stored transposed so both
attention contractions of a decode step are plain (non-transposed) batched matmuls, q @ K and p @ V:
with keys as `[B, K, S, Dh]` the q @ K^T contraction took ~4x longer at batch 256 on CPU and
dominated the whole decode step.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxtree.models.config import ModelConfig


class KVCache(NamedTuple):
    """Per-layer key/value buffers and the number of valid positions per row.

    Attributes:
      keys: L arrays of shape [B, K, Dh, S] (transposed; see the module docstring).
      values: L arrays of shape [B, K, S, Dh].
      lengths: int32[B], valid positions per row (0 <= lengths <= S).
    """

    keys: tuple[jax.Array, ...]
    values: tuple[jax.Array, ...]
    lengths: jax.Array

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    @property
    def capacity(self) -> int:
        return self.values[0].shape[2]


def init_cache(config: ModelConfig, batch_size: int, capacity: int, dtype=None) -> KVCache:
    """An empty cache: zeros and lengths 0. dtype defaults to the model's compute dtype."""
    dtype = dtype or config.compute_dtype
    kshape = (batch_size, config.num_kv_heads, config.head_dim, capacity)
    vshape = (batch_size, config.num_kv_heads, capacity, config.head_dim)
    keys = tuple(jnp.zeros(kshape, dtype) for _ in range(config.num_layers))
    values = tuple(jnp.zeros(vshape, dtype) for _ in range(config.num_layers))
    return KVCache(keys, values, jnp.zeros((batch_size,), jnp.int32))


def write_keys(buffer: jax.Array, new: jax.Array, offsets: jax.Array) -> jax.Array:
    """`write_chunk` for the transposed key buffer [B, K, Dh, S]; new: [B, T, K, Dh]."""
    batch, chunk = new.shape[:2]
    positions = offsets[:, None] + jnp.arange(chunk, dtype=jnp.int32)[None, :]  # [B, T]
    rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
    return buffer.at[rows, :, :, positions].set(new.astype(buffer.dtype), mode="drop")


def write_chunk(buffer: jax.Array, new: jax.Array, offsets: jax.Array) -> jax.Array:
    """Writes a chunk of T positions per row into a cache buffer at each row's own offset.

    Args:
      buffer: [B, K, S, Dh] value buffer.
      new: [B, T, K, Dh] keys or values of the new positions.
      offsets: int32[B], first position to write in each row.

    Returns:
      The updated buffer. Positions past the capacity S are dropped, never wrapped or clamped onto
      valid entries (a clamped dynamic_update_slice would silently shift the write).
    """
    batch, chunk = new.shape[:2]
    positions = offsets[:, None] + jnp.arange(chunk, dtype=jnp.int32)[None, :]  # [B, T]
    rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
    # Advanced indices (rows, positions) separated by a slice put their [B, T] dims first, so the
    # update is addressed as [B, T, K, Dh]: exactly the layout of `new`.
    return buffer.at[rows, :, positions].set(new.astype(buffer.dtype), mode="drop")


def copy_tree_rows(tree, src: jax.Array, dst: jax.Array):
    """Row src[i] -> row dst[i] in every array of a pytree of row-major arrays (leading axis: the
    rows), on device: the one row-copy primitive (cache rows, slot-engine slots, LATR branches).

    src, dst: int[N]. All reads happen before any write, so a row may be a source and a
    destination in the same call (a swap exchanges the rows). A destination >= the number of rows
    is a no-op (the scatter drops it), which lets fixed-size callers pad with `rows`; the source of
    such a pair may be any valid row.
    """
    return jax.tree_util.tree_map(lambda x: x.at[dst].set(x[src], mode="drop"), tree)


def copy_rows(cache: KVCache, src_rows: jax.Array, dst_rows: jax.Array) -> KVCache:
    """Copies whole rows (keys, values, length) from src_rows to dst_rows, on device.

    This is the branching primitive: a child row continues from its parent's exact state without
    re-prefilling the shared prefix. src_rows and dst_rows are int32[N]; a row may be a source and
    a destination in the same call (all reads happen before any write). `copy_tree_rows` on the
    cache.
    """
    return copy_tree_rows(cache, src_rows, dst_rows)
