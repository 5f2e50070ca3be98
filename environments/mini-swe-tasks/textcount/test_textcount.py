"""Tests for textcount."""
from textcount import char_histogram, count_vowels, count_words


def test_count_vowels():
    assert count_vowels("Hello World") == 3
    assert count_vowels("rhythm") == 0
    assert count_vowels("queue") == 4


def test_count_words():
    assert count_words("  a  b c ") == 3
    assert count_words("") == 0


def test_char_histogram():
    assert char_histogram("Banana!") == [("a", 3), ("n", 2), ("b", 1)]
