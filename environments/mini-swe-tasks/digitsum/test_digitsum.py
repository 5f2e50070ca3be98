"""Tests for digitsum."""
from digitsum import digit_sum, digital_root, digits, reverse_number


def test_digits():
    assert digits(1203) == [1, 2, 0, 3]
    assert digits(0) == [0]
    assert digits(-45) == [4, 5]


def test_sums():
    assert digit_sum(999) == 27
    assert digital_root(9875) == 2
    assert digital_root(7) == 7


def test_reverse_number():
    assert reverse_number(120) == 21
    assert reverse_number(-34) == -43
