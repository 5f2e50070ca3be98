"""Rough syllable counts and pig latin."""

from charclass import is_consonant, is_vowel


def count_syllables(word):
    """Groups of consecutive vowels, at least 1; a final silent 'e' does not count."""
    word = word.lower()
    groups = 0
    previous = False
    for char in word:
        current = is_vowel(char)
        if current and not previous:
            groups += 1
        previous = current
    if word.endswith("e") and groups > 1:
        groups -= 1
    return max(groups, 1)


def pig_latin(word):
    """Leading consonants moved to the end, followed by 'ay'."""
    i = 0
    while i < len(word) and is_consonant(word[i]):
        i += 1
    return word[i:] + word[:i] + "ay"
