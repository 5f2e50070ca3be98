"""Prime numbers."""


def is_prime(n):
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True


def primes_below(limit):
    """All primes p < limit, by the sieve of Eratosthenes."""
    if limit < 3:
        return []
    marks = [True] * limit
    marks[0] = marks[1] = False
    for p in range(2, int(limit ** 0.5) + 1):
        if marks[p]:
            for multiple in range(p * p, limit, p):
                marks[multiple] = False
    return [n for n, prime in enumerate(marks) if prime]
