"""Tests for tally."""
from tally import counts, frequency, most_common


def test_counts():
    assert counts("abca") == {"a": 2, "b": 1, "c": 1}


def test_most_common():
    assert most_common([3, 1, 3, 2, 1, 3]) == [3]
    assert most_common("aabbc", 2) == ["a", "b"]
    assert most_common("xyz", 2) == ["x", "y"]


def test_frequency():
    assert frequency([1, 2, 2, 3], 2) == 0.5
    assert frequency([], 1) == 0.0
