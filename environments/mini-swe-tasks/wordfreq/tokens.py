"""Splitting text into lowercase word tokens."""

PUNCTUATION = ".,;:!?\"'()"


def tokenize(text):
    """Words of text, lowercased, surrounding punctuation stripped; empty ones dropped."""
    words = []
    for raw in text.split():
        word = raw.strip(PUNCTUATION).lower()
        if word:
            words.append(word)
    return words


def is_stopword(word):
    return word in ("a", "an", "the", "and", "of", "to")
