"""Tests for geometry."""
from geometry import centroid, closest, distance_sq


def test_distance_sq():
    assert distance_sq((1, 2), (4, 6)) == 25
    assert distance_sq((0, 0), (0, 0)) == 0


def test_closest():
    assert closest([(0, 0), (5, 5), (1, 1)], (2, 2)) == (1, 1)
    assert closest([], (0, 0)) is None


def test_centroid():
    assert centroid([(0, 0), (2, 0), (2, 2), (0, 2)]) == (1.0, 1.0)
    assert centroid([(3, 6)]) == (3.0, 6.0)
