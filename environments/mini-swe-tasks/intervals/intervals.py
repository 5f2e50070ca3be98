"""Merging integer intervals."""


def merge(intervals):
    """Overlapping or touching [start, end] intervals merged, sorted by start."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def total_length(intervals):
    return sum(end - start for start, end in merge(intervals))


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1]
