"""Formatting amounts of money."""


def group_thousands(digits):
    """'1234567' -> '1,234,567'."""
    groups = []
    while len(digits) > 3:
        groups.append(digits[-3:])
        digits = digits[:-3]
    groups.append(digits)
    return ",".join(reversed(groups))


def format_cents(cents, symbol="$"):
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    return sign + symbol + group_thousands(str(whole)) + "." + "%02d" % fraction
