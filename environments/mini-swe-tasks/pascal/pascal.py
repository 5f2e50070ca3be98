"""Pascal's triangle and binomial coefficients."""


def pascal_row(n):
    """Row n (counted from 0) of Pascal's triangle."""
    row = [1]
    for _ in range(n):
        row = [1] + [row[i] + row[i + 1] for i in range(len(row) - 1)] + [1]
    return row


def binomial(n, k):
    if k < 0 or k > n:
        return 0
    return pascal_row(n)[k]


def triangle(rows):
    return [pascal_row(n) for n in range(rows)]
