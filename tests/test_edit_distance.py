"""On-device Levenshtein distance against the `editdistance` package and a plain-Python DP."""

import editdistance
import jax
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
