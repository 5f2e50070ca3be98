"""Tests for triangles."""
from triangles import classify, perimeter


def test_valid_triangles():
    assert classify(2, 2, 2) == "equilateral"
    assert classify(3, 4, 4) == "isosceles"
    assert classify(4, 3, 4) == "isosceles"
    assert classify(4, 4, 3) == "isosceles"
    assert classify(3, 4, 5) == "scalene"


def test_invalid_triangles():
    assert classify(1, 1, 3) == "invalid"
    assert classify(0, 0, 0) == "invalid"
    assert classify(1, 2, 3) == "invalid"


def test_perimeter():
    assert perimeter(3, 4, 5) == 12
    assert perimeter(1, 1, 5) == 0
