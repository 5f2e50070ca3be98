"""FizzBuzz."""


def fizzbuzz_word(n):
    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz"
    return str(n)


def fizzbuzz(count):
    """The words for 1..count."""
    return [fizzbuzz_word(n) for n in range(1, count + 1)]
