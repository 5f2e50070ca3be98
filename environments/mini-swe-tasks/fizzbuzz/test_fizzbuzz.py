"""Tests for fizzbuzz."""
from fizzbuzz import fizzbuzz, fizzbuzz_word


def test_words():
    assert fizzbuzz_word(30) == "FizzBuzz"
    assert fizzbuzz_word(9) == "Fizz"
    assert fizzbuzz_word(10) == "Buzz"
    assert fizzbuzz_word(7) == "7"


def test_sequence():
    assert fizzbuzz(5) == ["1", "2", "Fizz", "4", "Buzz"]
    assert len(fizzbuzz(15)) == 15
    assert fizzbuzz(0) == []
