"""Tests for leapyears."""
from leapyears import days_in_month, days_in_year, is_leap


def test_is_leap():
    assert is_leap(2024)
    assert not is_leap(2023)
    assert not is_leap(1900)
    assert is_leap(2000)


def test_days_in_month():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 12) == 31
    assert [days_in_month(2023, m) for m in range(1, 13)].count(31) == 7


def test_days_in_year():
    assert days_in_year(1996) == 366
    assert days_in_year(2100) == 365
    assert sum(days_in_month(2023, m) for m in range(1, 13)) == 365
