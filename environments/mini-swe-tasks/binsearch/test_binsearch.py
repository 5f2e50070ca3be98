"""Tests for binsearch."""
from binsearch import bisect_left, contains, count_in_range


def test_bisect_left():
    assert bisect_left([1, 3, 5, 7], 5) == 2
    assert bisect_left([1, 3, 5, 7], 0) == 0
    assert bisect_left([1, 3, 5, 7], 8) == 4
    assert bisect_left([1, 2, 2, 2, 3], 2) == 1


def test_contains():
    assert contains([1, 3, 5], 3)
    assert not contains([1, 3, 5], 4)
    assert not contains([], 1)


def test_count_in_range():
    assert count_in_range([1, 2, 3, 4, 5, 6], 2, 5) == 3
