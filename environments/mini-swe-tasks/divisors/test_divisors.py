"""Tests for divisors."""
from divisors import divisors, gcd, lcm


def test_gcd():
    assert gcd(12, 18) == 6
    assert gcd(7, 0) == 7
    assert gcd(-4, 6) == 2


def test_lcm():
    assert lcm(4, 6) == 12
    assert lcm(0, 5) == 0


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(16) == [1, 2, 4, 8, 16]
    assert divisors(1) == [1]
