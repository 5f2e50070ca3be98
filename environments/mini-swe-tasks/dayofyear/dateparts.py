"""Parsing ISO dates and calendar facts."""


def parse_date(text):
    """'2024-03-01' -> (2024, 3, 1)."""
    year, month, day = text.split("-")
    return int(year), int(month), int(day)


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def month_lengths(year):
    february = 29 if is_leap(year) else 28
    return [31, february, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
