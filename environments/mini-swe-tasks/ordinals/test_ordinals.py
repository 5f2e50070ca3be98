"""Tests for ordinals."""
from ordinals import ordinal, ordinals


def test_first_ordinals():
    assert ordinal(1) == "1st"
    assert ordinal(2) == "2nd"
    assert ordinal(3) == "3rd"
    assert ordinal(4) == "4th"


def test_teens_and_beyond():
    assert ordinal(11) == "11th"
    assert ordinal(12) == "12th"
    assert ordinal(13) == "13th"
    assert ordinal(21) == "21st"
    assert ordinal(102) == "102nd"
    assert ordinal(111) == "111th"


def test_ordinals():
    assert ordinals(1, 4) == ["1st", "2nd", "3rd"]
