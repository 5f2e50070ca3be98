"""Tests for numstats."""
from numstats import mean, median, mode, value_range


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5


def test_mode():
    assert mode([1, 2, 2, 3, 3]) == 2
    assert mode([5]) == 5


def test_value_range():
    assert value_range([3, 9, 4]) == 6
