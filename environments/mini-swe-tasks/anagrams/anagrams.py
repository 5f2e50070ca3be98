"""Anagram detection and grouping."""


def letters_key(word):
    return "".join(sorted(word.lower()))


def is_anagram(a, b):
    """Whether a and b use the same letters (case-insensitive, spaces ignored)."""
    return letters_key(a.replace(" ", "")) == letters_key(b.replace(" ", ""))


def group_anagrams(words):
    """Groups of at least two words sharing their letters, in order of first appearance."""
    groups = {}
    for word in words:
        groups.setdefault(letters_key(word), []).append(word)
    return [group for group in groups.values() if len(group) > 1]
