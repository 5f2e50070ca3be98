"""Binary search in sorted lists."""


def bisect_left(items, target):
    """The first index whose item is >= target (len(items) if none)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def contains(items, target):
    index = bisect_left(items, target)
    return index < len(items) and items[index] == target


def count_in_range(items, low, high):
    """How many items x satisfy low <= x < high."""
    return bisect_left(items, high) - bisect_left(items, low)
