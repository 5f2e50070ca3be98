"""Vectors as tuples of numbers."""


def add(u, v):
    return tuple(a + b for a, b in zip(u, v))


def sub(u, v):
    return tuple(a - b for a, b in zip(u, v))


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def norm_sq(u):
    return dot(u, u)


def scale(u, k):
    return tuple(k * a for a in u)
