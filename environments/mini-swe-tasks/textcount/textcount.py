"""Counting characters and words."""

VOWELS = "aeiou"


def count_vowels(text):
    return sum(1 for char in text.lower() if char in VOWELS)


def count_words(text):
    return len(text.split())


def char_histogram(text):
    """(letter, count) pairs, most frequent first, then alphabetical."""
    counts = {}
    for char in text.lower():
        if char.isalpha():
            counts[char] = counts.get(char, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
