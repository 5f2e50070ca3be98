"""Tests for romans."""
from romans import from_roman, to_roman


def test_to_roman_small():
    assert to_roman(3) == "III"
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"


def test_to_roman_large():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(2024) == "MMXXIV"
    assert to_roman(3888) == "MMMDCCCLXXXVIII"


def test_from_roman():
    assert from_roman("XLII") == 42
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("I") == 1


def test_round_trip():
    assert all(from_roman(to_roman(n)) == n for n in range(1, 400, 7))
