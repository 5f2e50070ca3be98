"""Tests for chunking."""
from chunking import chunk, flatten, interleave


def test_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunk([], 3) == []


def test_flatten():
    assert flatten([[1], [2, 3], []]) == [1, 2, 3]


def test_interleave():
    assert interleave([1, 2, 3], ["a"]) == [1, "a", 2, 3]
    assert interleave([], [4, 5]) == [4, 5]
