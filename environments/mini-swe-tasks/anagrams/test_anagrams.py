"""Tests for anagrams."""
from anagrams import group_anagrams, is_anagram


def test_is_anagram():
    assert is_anagram("listen", "silent")
    assert is_anagram("Dormitory", "dirty room")
    assert not is_anagram("abc", "abd")


def test_group_anagrams():
    words = ["eat", "tea", "tan", "ate", "nat", "bat"]
    assert group_anagrams(words) == [["eat", "tea", "ate"], ["tan", "nat"]]
    assert group_anagrams(["x"]) == []
