"""Ordinal day numbers of ISO dates."""

from dateparts import month_lengths, parse_date


def day_of_year(text):
    year, month, day = parse_date(text)
    return sum(month_lengths(year)[:month - 1]) + day


def days_between(first, second):
    """Days from first to second, two dates of the same year."""
    return day_of_year(second) - day_of_year(first)
