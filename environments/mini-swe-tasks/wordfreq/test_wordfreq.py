"""Tests for wordfreq."""
from wordfreq import top_words, word_counts


def test_word_counts():
    assert word_counts("The cat and the hat.") == {"cat": 1, "hat": 1}
    assert word_counts("(one) two") == {"one": 1, "two": 1}
    assert word_counts("") == {}


def test_top_words():
    assert top_words("b x b c c b", 2) == ["b", "c"]
    assert top_words("Hello, hello! World?", 5) == ["hello", "world"]
    assert top_words("to be or not to be", 1) == ["be"]
