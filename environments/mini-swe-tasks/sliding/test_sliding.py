"""Tests for sliding."""
from sliding import best_window, window_sums


def test_window_sums():
    assert window_sums([1, 2, 3, 4], 2) == [3, 5, 7]
    assert window_sums([5], 1) == [5]
    assert window_sums([1, 2], 3) == []
    assert window_sums([1, 2], 0) == []


def test_best_window():
    assert best_window([1, 3, 2, 5, 1], 2) == 2
    assert best_window([4, 4, 1], 1) == 0
    assert best_window([], 2) == -1
