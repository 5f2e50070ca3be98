"""Tests for palindromes."""
from palindromes import is_palindrome, longest_palindrome, normalize


def test_normalize():
    assert normalize("Hi there!") == "hithere"


def test_is_palindrome():
    assert is_palindrome("A man, a plan, a canal: Panama")
    assert not is_palindrome("abc")


def test_longest_palindrome():
    assert longest_palindrome("babad") == "bab"
    assert longest_palindrome("cbbd") == "bb"
    assert longest_palindrome("") == ""
