"""Counting occurrences."""


def counts(items):
    """item -> number of occurrences, in order of first appearance."""
    out = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def most_common(items, n=1):
    """The n most frequent items, ties broken by first appearance."""
    tally = counts(items)
    order = list(tally)
    ranked = sorted(order, key=lambda item: (-tally[item], order.index(item)))
    return ranked[:n]


def frequency(items, item):
    if not items:
        return 0.0
    return counts(items).get(item, 0) / len(items)
