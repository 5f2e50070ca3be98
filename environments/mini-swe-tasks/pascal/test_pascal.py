"""Tests for pascal."""
from pascal import binomial, pascal_row, triangle


def test_pascal_row():
    assert pascal_row(0) == [1]
    assert pascal_row(4) == [1, 4, 6, 4, 1]


def test_binomial():
    assert binomial(5, 2) == 10
    assert binomial(5, 6) == 0
    assert binomial(3, -1) == 0


def test_triangle():
    assert triangle(3) == [[1], [1, 1], [1, 2, 1]]
