"""Pairs of numbers with a given sum."""


def two_sum(numbers, target):
    """Indices (i, j), i < j, of the first pair summing to target (smallest j); None if none."""
    seen = {}
    for j, value in enumerate(numbers):
        if target - value in seen:
            return (seen[target - value], j)
        if value not in seen:
            seen[value] = j
    return None


def count_pairs(numbers, target):
    """Number of index pairs i < j with numbers[i] + numbers[j] == target."""
    count = 0
    for i in range(len(numbers)):
        for j in range(i + 1, len(numbers)):
            if numbers[i] + numbers[j] == target:
                count += 1
    return count
