"""Tests for runlength."""
from runlength import decode, encode


def test_encode():
    assert encode("aaab") == "a3b1"
    assert encode("abc") == "a1b1c1"
    assert encode("zzzzzzzzzzzz") == "z12"
    assert encode("") == ""


def test_decode():
    assert decode("a3b1") == "aaab"
    assert decode("x12") == "x" * 12
    assert decode("") == ""


def test_round_trip():
    for text in ["hello", "aabbbcccc", "q"]:
        assert decode(encode(text)) == text
