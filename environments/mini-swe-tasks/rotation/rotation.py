"""Rotating lists."""


def rotate_left(items, k):
    if not items:
        return []
    k = k % len(items)
    return items[k:] + items[:k]


def rotate_right(items, k):
    if not items:
        return []
    return rotate_left(items, len(items) - k % len(items))


def is_rotation(a, b):
    """Whether list b is a rotation of list a."""
    if len(a) != len(b):
        return False
    return not a or any(rotate_left(a, k) == b for k in range(len(a)))
