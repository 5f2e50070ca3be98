"""Tests for life."""
from life import live_neighbours, step


def test_live_neighbours():
    assert live_neighbours([[1, 1], [1, 0]], 1, 1) == 3
    assert live_neighbours([[1, 1], [1, 1]], 0, 0) == 3
    assert live_neighbours([[0, 1, 0], [1, 0, 1], [0, 1, 0]], 1, 1) == 4


def test_step():
    assert step([[0, 1, 0], [0, 1, 0], [0, 1, 0]]) == [[0, 0, 0], [1, 1, 1], [0, 0, 0]]
    assert step([[1, 1], [1, 1]]) == [[1, 1], [1, 1]]
    assert step([[1]]) == [[0]]
