"""Tests for baseconv."""
from baseconv import from_base, to_base


def test_to_base():
    assert to_base(255, 16) == "ff"
    assert to_base(5, 2) == "101"
    assert to_base(0, 7) == "0"
    assert to_base(-10, 3) == "-101"
    assert to_base(35, 36) == "z"


def test_from_base():
    assert from_base("ff", 16) == 255
    assert from_base(" -101 ", 2) == -5


def test_round_trip():
    assert from_base(to_base(123456, 36), 36) == 123456
