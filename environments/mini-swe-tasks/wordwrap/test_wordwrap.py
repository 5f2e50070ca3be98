"""Tests for wordwrap."""
from wordwrap import fill, wrap


def test_wrap_breaks_at_width():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_exact_fit():
    assert wrap("ab cd", 5) == ["ab cd"]
    assert wrap("ab cd", 4) == ["ab", "cd"]


def test_wrap_long_word_and_empty():
    assert wrap("extraordinary is long", 5) == ["extraordinary", "is", "long"]
    assert wrap("", 3) == []


def test_fill():
    assert fill("a b c d", 3) == "a b\nc d"
