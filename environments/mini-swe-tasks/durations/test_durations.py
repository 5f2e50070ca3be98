"""Tests for durations."""
from durations import format_duration, parse_duration


def test_format_duration():
    assert format_duration(3723) == "1h02m03s"
    assert format_duration(125) == "2m05s"
    assert format_duration(7) == "7s"
    assert format_duration(3600) == "1h00m00s"


def test_parse_duration():
    assert parse_duration("1h2m3s") == 3723
    assert parse_duration("5m") == 300
    assert parse_duration("42s") == 42
