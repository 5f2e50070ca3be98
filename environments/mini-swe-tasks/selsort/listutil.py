"""Small list helpers."""


def argmin(values, start=0):
    """Index of the smallest value in values[start:] (the first one on ties)."""
    best = start
    for i in range(start + 1, len(values)):
        if values[i] < values[best]:
            best = i
    return best


def swap(values, i, j):
    values[i], values[j] = values[j], values[i]
