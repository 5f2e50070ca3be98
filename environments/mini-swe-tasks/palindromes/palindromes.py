"""Palindrome checks on text."""


def normalize(text):
    """Lowercase letters and digits of text, in order."""
    return "".join(c.lower() for c in text if c.isalnum())


def is_palindrome(text):
    cleaned = normalize(text)
    return cleaned == cleaned[::-1]


def longest_palindrome(text):
    """The longest palindromic substring (the first one on ties)."""
    best = ""
    for i in range(len(text)):
        for j in range(i + len(best) + 1, len(text) + 1):
            piece = text[i:j]
            if piece == piece[::-1]:
                best = piece
    return best
