"""Tests for csvparse."""
from csvparse import format_line, parse_line


def test_parse_plain():
    assert parse_line("a,b,c") == ["a", "b", "c"]
    assert parse_line("") == [""]
    assert parse_line("1;2", sep=";") == ["1", "2"]


def test_parse_quoted():
    assert parse_line('"x,y",z') == ["x,y", "z"]
    assert parse_line('a,"say ""hi""",b') == ["a", 'say "hi"', "b"]


def test_format_line():
    assert format_line(["a", "b,c"]) == 'a,"b,c"'
    assert format_line(['q"']) == '"q"""'
