"""Digits of integers."""


def digits(n):
    """The decimal digits of abs(n), most significant first."""
    n = abs(n)
    if n == 0:
        return [0]
    out = []
    while n > 0:
        out.append(n % 10)
        n //= 10
    return out[::-1]


def digit_sum(n):
    return sum(digits(n))


def digital_root(n):
    while n >= 10:
        n = digit_sum(n)
    return n


def reverse_number(n):
    sign = -1 if n < 0 else 1
    return sign * int("".join(str(d) for d in digits(n))[::-1])
