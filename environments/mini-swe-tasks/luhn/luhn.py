"""The Luhn checksum of identification numbers."""


def luhn_sum(digits):
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = int(char)
        if position % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total


def is_valid(number):
    digits = number.replace(" ", "")
    if len(digits) < 2 or not digits.isdigit():
        return False
    return luhn_sum(digits) % 10 == 0


def check_digit(partial):
    """The digit that makes partial + digit valid."""
    return (10 - luhn_sum(partial + "0") % 10) % 10
