"""Tests for luhn."""
from luhn import check_digit, is_valid, luhn_sum


def test_luhn_sum():
    assert luhn_sum("18") == 10


def test_is_valid():
    assert is_valid("4539 3195 0343 6467")
    assert not is_valid("8273 1232 7352 0569")
    assert not is_valid("0")
    assert is_valid("059")
    assert not is_valid("05a9")


def test_check_digit():
    assert check_digit("7992739871") == 3
