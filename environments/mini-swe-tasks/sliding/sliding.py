"""Sliding-window sums."""


def window_sums(values, k):
    """Sums of every k consecutive values."""
    if k <= 0 or k > len(values):
        return []
    total = sum(values[:k])
    sums = [total]
    for i in range(k, len(values)):
        total += values[i] - values[i - k]
        sums.append(total)
    return sums


def best_window(values, k):
    """The start of the first window of k values with the largest sum (-1 if none)."""
    sums = window_sums(values, k)
    if not sums:
        return -1
    best = 0
    for i in range(1, len(sums)):
        if sums[i] > sums[best]:
            best = i
    return best
