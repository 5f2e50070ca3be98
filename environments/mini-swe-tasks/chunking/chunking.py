"""Splitting, flattening and interleaving lists."""


def chunk(items, size):
    """Consecutive pieces of `size` items; the last may be shorter."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def flatten(nested):
    """One level of nesting removed."""
    out = []
    for part in nested:
        out.extend(part)
    return out


def interleave(first, second):
    """Alternates items of both lists, then the rest of the longer one."""
    out = []
    for i in range(max(len(first), len(second))):
        if i < len(first):
            out.append(first[i])
        if i < len(second):
            out.append(second[i])
    return out
