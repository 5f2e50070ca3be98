"""On-device Levenshtein distance against the `editdistance` package and a plain-Python DP."""

import editdistance
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtree.sampling.edit_distance import edit_distance, edit_distance_normalized


def _python_levenshtein(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        for j in range(len(b) + 1):
            if i == 0 or j == 0:
                table[i][j] = i + j
            else:
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1,
                                  table[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return table[-1][-1]


@pytest.mark.parametrize("seed,width,vocab", [(0, 20, 3), (1, 50, 5), (2, 7, 2), (3, 30, 50)])
def test_random_pairs_match_reference_levenshtein(seed, width, vocab):
    rng = np.random.default_rng(seed)
    batch = 64
    a = rng.integers(0, vocab, (batch, width)).astype(np.int32)
    b = rng.integers(0, vocab, (batch, width)).astype(np.int32)
    # near-copies too: the interesting regime for LATR's pruning
    b[: batch // 2] = a[: batch // 2]
    flips = rng.random((batch // 2, width)) < 0.15
    b[: batch // 2][flips] = rng.integers(0, vocab, flips.sum())
    la = rng.integers(0, width + 1, batch).astype(np.int32)
    lb = rng.integers(0, width + 1, batch).astype(np.int32)
    got = np.asarray(jax.jit(edit_distance)(a, b, la, lb))
    for i in range(batch):
        x, y = a[i, :la[i]].tolist(), b[i, :lb[i]].tolist()
        assert got[i] == editdistance.eval(x, y) == _python_levenshtein(x, y)
    normalized = np.asarray(edit_distance_normalized(a, b, la, lb))
    for i in range(batch):
        longer = max(la[i], lb[i])
        expected = got[i] / longer if longer else 1.0
        assert normalized[i] == pytest.approx(expected)


def test_hand_checked_cases():
    # kitten -> sitting: 3 (two substitutions, one insertion); identical: 0; one empty: its length
    pairs = [("kitten", "sitting", 3), ("flaw", "lawn", 2), ("abc", "abc", 0), ("", "abcd", 4),
             ("abcd", "", 4), ("ab", "ba", 2)]
    width = 8
    a = np.zeros((len(pairs), width), np.int32)
    b = np.zeros((len(pairs), width), np.int32)
    for i, (x, y, _) in enumerate(pairs):
        a[i, :len(x)] = [ord(c) for c in x]
        b[i, :len(y)] = [ord(c) for c in y]
    la = np.array([len(x) for x, _, _ in pairs], np.int32)
    lb = np.array([len(y) for _, y, _ in pairs], np.int32)
    assert np.asarray(edit_distance(a, b, la, lb)).tolist() == [d for _, _, d in pairs]
    # normalized by the longer length: 3/7, 2/4, 0, 1, 1, 1; two empty windows count as distinct
    norm = np.asarray(edit_distance_normalized(a, b, la, lb))
    np.testing.assert_allclose(norm, [3 / 7, 0.5, 0.0, 1.0, 1.0, 1.0])
    empty = np.zeros((1, 4), np.int32)
    assert float(edit_distance_normalized(empty, empty, np.array([0]), np.array([0]))[0]) == 1.0


def test_incremental_frontier_matches_reference_as_sequences_grow():
    """Tokens arrive one at a time on either side, in random interleavings (both, only a, only
    b, neither), with pairs emptied at random; after every arrival the frontier's corner equals
    editdistance of the prefixes."""
    from jaxtree.sampling.edit_distance import (levenshtein_add_column, levenshtein_add_row,
                                                levenshtein_frontier, levenshtein_read_normalized,
                                                levenshtein_reset)
    rng = np.random.default_rng(7)
    batch, width = 32, 12
    a_full = rng.integers(0, 3, (batch, width)).astype(np.int32)
    b_full = a_full.copy()
    noise = rng.random((batch, width)) < 0.3
    b_full[noise] = rng.integers(0, 3, noise.sum())
    frontier = levenshtein_frontier(batch, width)
    la = np.zeros(batch, np.int32)
    lb = np.zeros(batch, np.int32)
    add_row, add_col = jax.jit(levenshtein_add_row), jax.jit(levenshtein_add_column)
    resets = 0
    for step in range(4 * width):
        if step == 2 * width:
            reset = rng.random(batch) < 0.5
            resets = int(reset.sum())
            frontier = levenshtein_reset(frontier, jnp.asarray(reset))
            la, lb = np.where(reset, 0, la), np.where(reset, 0, lb)
        grow_a = (rng.random(batch) < 0.6) & (la < width)
        grow_b = (rng.random(batch) < 0.6) & (lb < width)
        token_a = a_full[np.arange(batch), np.minimum(la, width - 1)]
        token_b = b_full[np.arange(batch), np.minimum(lb, width - 1)]
        # the row sees b as it is before b's new token; the column then sees the new row
        frontier = add_row(frontier, la, lb, token_a, b_full, grow_a)
        la = la + grow_a
        frontier = add_col(frontier, la, lb, token_b, a_full, grow_b)
        lb = lb + grow_b
        got = np.asarray(levenshtein_read_normalized(frontier, la, lb))
        for i in range(batch):
            x, y = a_full[i, :la[i]].tolist(), b_full[i, :lb[i]].tolist()
            longer = max(len(x), len(y))
            expected = editdistance.eval(x, y) / longer if longer else 1.0
            assert got[i] == pytest.approx(expected), (i, x, y)
    assert resets > 0
