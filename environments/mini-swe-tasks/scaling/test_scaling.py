"""Tests for scaling."""
from scaling import clamp, percent, rescale


def test_clamp():
    assert clamp(5, 0, 10) == 5
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10


def test_rescale():
    assert rescale(5, 0, 10, 0, 100) == 50.0
    assert rescale(0, 0, 10, -1, 1) == -1.0
    assert rescale(4, 2, 6, 10, 30) == 20.0


def test_percent():
    assert percent(1, 3) == 33.3
    assert percent(2, 0) == 0.0
    assert percent(1, 8, 2) == 12.5
