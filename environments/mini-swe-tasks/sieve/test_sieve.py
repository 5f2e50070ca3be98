"""Tests for sieve."""
from sieve import is_prime, primes_below


def test_is_prime():
    assert is_prime(2)
    assert is_prime(17)
    assert not is_prime(1)
    assert not is_prime(21)
    assert not is_prime(25)


def test_primes_below():
    assert primes_below(20) == [2, 3, 5, 7, 11, 13, 17, 19]
    assert primes_below(2) == []
    assert primes_below(3) == [2]
