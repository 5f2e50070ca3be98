"""Tests for syllables."""
from syllables import count_syllables, pig_latin


def test_count_syllables():
    assert count_syllables("banana") == 3
    assert count_syllables("make") == 1
    assert count_syllables("queue") == 1
    assert count_syllables("beautiful") == 3


def test_pig_latin():
    assert pig_latin("string") == "ingstray"
    assert pig_latin("apple") == "appleay"
    assert pig_latin("Chair") == "airChay"
    assert pig_latin("rhythm") == "ythmrhay"
