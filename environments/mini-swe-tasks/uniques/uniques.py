"""Removing duplicates while keeping order."""


def unique_in_order(items):
    """Consecutive duplicates collapsed: 'aaabcca' -> ['a', 'b', 'c', 'a']."""
    out = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def dedupe(items):
    """Later duplicates dropped, first occurrences kept in order."""
    seen = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def duplicates(items):
    """Items occurring more than once, in order of their second occurrence."""
    seen, out = set(), []
    for item in items:
        if item in seen and item not in out:
            out.append(item)
        seen.add(item)
    return out
