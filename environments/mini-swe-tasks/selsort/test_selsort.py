"""Tests for selsort."""
from selsort import kth_smallest, selection_sort


def test_selection_sort():
    assert selection_sort([3, 1, 2]) == [1, 2, 3]
    assert selection_sort([]) == []
    assert selection_sort([5, -1, 5, 0]) == [-1, 0, 5, 5]


def test_kth_smallest():
    assert kth_smallest([7, 3, 9, 1], 2) == 3
    assert kth_smallest([4], 1) == 4
