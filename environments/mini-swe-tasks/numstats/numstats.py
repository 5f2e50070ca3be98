"""Descriptive statistics of number lists."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def mode(values):
    """The most frequent value; the smallest one on ties."""
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    best = None
    for value in sorted(counts):
        if best is None or counts[value] > counts[best]:
            best = value
    return best


def value_range(values):
    return max(values) - min(values)
