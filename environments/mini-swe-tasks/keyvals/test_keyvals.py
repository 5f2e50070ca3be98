"""Tests for keyvals."""
from keyvals import format_settings, get_int, parse_settings


def test_parse_settings():
    assert parse_settings("a=1; b = two") == {"a": "1", "b": "two"}
    assert parse_settings(";;x=;") == {"x": ""}


def test_format_settings():
    assert format_settings({"b": "2", "a": "1"}) == "a=1; b=2"


def test_get_int():
    assert get_int({"n": "-3"}, "n") == -3
    assert get_int({"n": "x"}, "n", 7) == 7
    assert get_int({}, "m") == 0
