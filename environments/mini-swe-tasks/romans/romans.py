"""Roman numerals."""

_VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(number):
    """The Roman numeral of a positive integer."""
    parts = []
    for value, symbol in _VALUES:
        while number >= value:
            parts.append(symbol)
            number -= value
    return "".join(parts)


def from_roman(numeral):
    """The integer value of a Roman numeral."""
    singles = {symbol: value for value, symbol in _VALUES if len(symbol) == 1}
    total = 0
    for i, char in enumerate(numeral):
        value = singles[char]
        if i + 1 < len(numeral) and singles[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
