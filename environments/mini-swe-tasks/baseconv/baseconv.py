"""Integer conversion between bases 2 to 36."""

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def to_base(number, base):
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    number = abs(number)
    out = []
    while number:
        number, remainder = divmod(number, base)
        out.append(DIGITS[remainder])
    return sign + "".join(reversed(out))


def from_base(text, base):
    text = text.strip().lower()
    sign = -1 if text.startswith("-") else 1
    value = 0
    for char in text.lstrip("-"):
        value = value * base + DIGITS.index(char)
    return sign * value
