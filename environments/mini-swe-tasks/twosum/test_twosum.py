"""Tests for twosum."""
from twosum import count_pairs, two_sum


def test_two_sum():
    assert two_sum([2, 7, 11, 15], 9) == (0, 1)
    assert two_sum([3, 2, 4], 6) == (1, 2)
    assert two_sum([3, 3], 6) == (0, 1)
    assert two_sum([1, 2], 7) is None


def test_count_pairs():
    assert count_pairs([1, 2, 3, 4, 5], 6) == 2
    assert count_pairs([2, 2, 2], 4) == 3
