"""Small dense matrices as lists of rows."""


def identity(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def transpose(matrix):
    if not matrix:
        return []
    return [[row[j] for row in matrix] for j in range(len(matrix[0]))]


def matmul(a, b):
    """The product a @ b (a is n x k, b is k x m)."""
    columns = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in columns] for row in a]


def trace(matrix):
    return sum(matrix[i][i] for i in range(len(matrix)))
