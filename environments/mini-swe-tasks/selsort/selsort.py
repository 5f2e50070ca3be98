"""Selection sort and order statistics."""

from listutil import argmin, swap


def selection_sort(values):
    """A sorted copy of values."""
    out = list(values)
    for i in range(len(out)):
        swap(out, i, argmin(out, i))
    return out


def kth_smallest(values, k):
    """The k-th smallest value, k counted from 1."""
    return selection_sort(values)[k - 1]
