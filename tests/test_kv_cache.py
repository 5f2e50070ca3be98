"""KV cache primitives: ragged writes at per-row offsets, and row copies (the fork primitive)."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree import models
from jaxtree.models.kv_cache import write_chunk, write_keys


def test_write_chunk_places_each_row_at_its_offset_and_drops_overflow():
    batch, heads, capacity, dim, chunk = 3, 2, 6, 4, 3
    buffer = np.zeros((batch, heads, capacity, dim), np.float32)
    new = np.random.default_rng(0).normal(size=(batch, chunk, heads, dim)).astype(np.float32)
    offsets = np.array([0, 2, 5])  # the last row has room for one position only
    got = np.asarray(write_chunk(jnp.asarray(buffer), jnp.asarray(new), jnp.asarray(offsets)))
    expected = buffer.copy()
    for b in range(batch):
        for t in range(chunk):
            if offsets[b] + t < capacity:  # reference: plain loop, out-of-range positions dropped
                expected[b, :, offsets[b] + t] = new[b, t]
    np.testing.assert_array_equal(got, expected)

    keys = np.asarray(write_keys(jnp.zeros((batch, heads, dim, capacity)), jnp.asarray(new),
                                 jnp.asarray(offsets)))
    np.testing.assert_array_equal(keys, expected.transpose(0, 1, 3, 2))


def test_copy_rows_forks_a_sequence_without_reprefill(tiny):
    """A row copied mid-sequence continues exactly like a from-scratch prefill of its prefix."""
    config, params = tiny
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, 256, size=(1, 9)).astype(np.int32)
    cache = models.init_cache(config, 3, capacity=32)
    tokens = np.zeros((3, 9), np.int32)
    tokens[0] = prefix[0]
    _, cache = models.extend_cache(config, params, cache, jnp.asarray(tokens),
                                   jnp.asarray([9, 0, 0], jnp.int32))
    # Fork row 0 into rows 1 and 2, then let the three rows diverge.
    cache = models.copy_rows(cache, jnp.asarray([0, 0]), jnp.asarray([1, 2]))
    np.testing.assert_array_equal(np.asarray(cache.lengths), [9, 9, 9])
    continuations = rng.integers(0, 256, size=(3, 4)).astype(np.int32)
    logits, cache = models.extend_cache(config, params, cache, jnp.asarray(continuations),
                                        jnp.asarray([4, 4, 4], jnp.int32))
    full = np.concatenate([np.repeat(prefix, 3, axis=0), continuations], axis=1)
    ref = np.asarray(models.forward(config, params, jnp.asarray(full)))[:, 9:]
    np.testing.assert_allclose(np.asarray(logits), ref, atol=1e-4)


def test_copy_rows_reads_before_writing():
    """Swapping two rows in one call exchanges them (no row reads an already-overwritten source)."""
    config = models.ModelConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_layers=1,
                                num_heads=1, num_kv_heads=1, head_dim=8)
    cache = models.init_cache(config, 2, capacity=4)
    cache = cache._replace(
        keys=(cache.keys[0].at[0].set(1.0).at[1].set(2.0),),
        values=(cache.values[0].at[0].set(3.0).at[1].set(4.0),),
        lengths=jnp.asarray([1, 2], jnp.int32))
    swapped = models.copy_rows(cache, jnp.asarray([0, 1]), jnp.asarray([1, 0]))
    assert float(swapped.keys[0][0, 0, 0, 0]) == 2.0 and float(swapped.keys[0][1, 0, 0, 0]) == 1.0
    assert float(swapped.values[0][0, 0, 0, 0]) == 4.0
    np.testing.assert_array_equal(np.asarray(swapped.lengths), [2, 1])


def test_extend_cache_updates_in_place():
    """The cache argument is donated: its buffers are consumed rather than copied."""
    config = models.get_preset("tiny")
    params = models.init_params(config, jax.random.key(0))
    cache = models.init_cache(config, 2, capacity=16)
    old_keys = cache.keys[0]
    _, new_cache = models.extend_cache(config, params, cache, jnp.ones((2, 3), jnp.int32),
                                       jnp.asarray([3, 1], jnp.int32))
    assert old_keys.is_deleted()
    np.testing.assert_array_equal(np.asarray(new_cache.lengths), [3, 1])


def test_copy_tree_rows_moves_rows_of_every_leaf_and_drops_out_of_range_destinations():
    """The one row-copy primitive, on a pytree of row-major arrays of different ranks and dtypes:
    all reads before any write (a swap), and a destination >= the row count is a no-op."""
    from jaxtree.models.kv_cache import copy_tree_rows
    rng = np.random.default_rng(2)
    tree = {"a": rng.normal(size=(5, 3, 2)).astype(np.float32),
            "b": (np.arange(5, dtype=np.int32), rng.integers(0, 9, size=(5, 4)).astype(np.int32))}
    src, dst = np.array([0, 1, 4, 2]), np.array([1, 0, 3, 5])  # swap 0 and 1, 4 -> 3, a no-op
    got = jax.device_get(copy_tree_rows(jax.tree_util.tree_map(jnp.asarray, tree),
                                        jnp.asarray(src), jnp.asarray(dst)))
    order = np.array([1, 0, 2, 4, 4])  # row r of the result is row order[r] of the input
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_array_equal(y, x[order]), tree, got)
