"""Tests for uniques."""
from uniques import dedupe, duplicates, unique_in_order


def test_unique_in_order():
    assert unique_in_order("aaabcca") == ["a", "b", "c", "a"]
    assert unique_in_order([]) == []


def test_dedupe():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_duplicates():
    assert duplicates([1, 2, 1, 3, 2, 1]) == [1, 2]
    assert duplicates([1, 2, 3]) == []
