"""Leap years and month lengths in the Gregorian calendar."""

MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if month == 2 and is_leap(year):
        return 29
    return MONTH_DAYS[month - 1]


def days_in_year(year):
    return 366 if is_leap(year) else 365
