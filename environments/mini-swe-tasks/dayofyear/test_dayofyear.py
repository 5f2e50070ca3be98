"""Tests for dayofyear."""
from dayofyear import day_of_year, days_between


def test_day_of_year():
    assert day_of_year("2023-01-01") == 1
    assert day_of_year("2023-03-01") == 60
    assert day_of_year("2024-03-01") == 61
    assert day_of_year("1900-03-01") == 60
    assert day_of_year("2023-12-31") == 365
    assert day_of_year("2000-12-31") == 366


def test_days_between():
    assert days_between("2023-02-01", "2023-03-01") == 28
