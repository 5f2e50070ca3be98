"""Word frequencies of a text."""

from tokens import is_stopword, tokenize


def word_counts(text):
    counts = {}
    for word in tokenize(text):
        if not is_stopword(word):
            counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n):
    """The n most frequent words that are not stopwords, by count then alphabetically."""
    counts = word_counts(text)
    return sorted(counts, key=lambda word: (-counts[word], word))[:n]
