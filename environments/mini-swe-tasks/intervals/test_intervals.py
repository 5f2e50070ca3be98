"""Tests for intervals."""
from intervals import merge, overlaps, total_length


def test_merge():
    assert merge([[1, 3], [2, 6], [8, 10], [15, 18]]) == [[1, 6], [8, 10], [15, 18]]
    assert merge([[1, 4], [4, 5]]) == [[1, 5]]
    assert merge([[5, 6], [1, 2]]) == [[1, 2], [5, 6]]
    assert merge([]) == []


def test_total_length():
    assert total_length([[1, 3], [2, 4]]) == 3


def test_overlaps():
    assert overlaps([1, 3], [2, 4])
    assert not overlaps([1, 2], [2, 3])
