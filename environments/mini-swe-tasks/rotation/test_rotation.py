"""Tests for rotation."""
from rotation import is_rotation, rotate_left, rotate_right


def test_rotate_left():
    assert rotate_left([1, 2, 3, 4], 1) == [2, 3, 4, 1]
    assert rotate_left([1, 2, 3], 4) == [2, 3, 1]


def test_rotate_right():
    assert rotate_right([1, 2, 3, 4], 1) == [4, 1, 2, 3]
    assert rotate_right([], 3) == []


def test_is_rotation():
    assert is_rotation([1, 2, 3], [3, 1, 2])
    assert not is_rotation([1, 2, 3], [1, 3, 2])
    assert is_rotation([], [])
