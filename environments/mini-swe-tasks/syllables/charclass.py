"""Classifying letters (y counts as a vowel)."""

VOWELS = "aeiouy"


def is_vowel(char):
    return char.lower() in VOWELS


def is_consonant(char):
    return char.isalpha() and not is_vowel(char)
