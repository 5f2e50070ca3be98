"""English ordinal suffixes."""


def suffix(n):
    if 10 <= n % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def ordinal(n):
    return str(n) + suffix(n)


def ordinals(start, stop):
    return [ordinal(n) for n in range(start, stop)]
