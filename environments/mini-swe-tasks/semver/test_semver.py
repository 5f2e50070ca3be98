"""Tests for semver."""
from semver import bump, compare_versions, parse_version


def test_parse_version():
    assert parse_version("10.0.3") == (10, 0, 3)


def test_compare_versions():
    assert compare_versions("1.2.10", "1.2.9") == 1
    assert compare_versions("1.0", "1.0.0") == 0
    assert compare_versions("0.9", "1.0") == -1
    assert compare_versions("2.0.1", "2.0.1") == 0


def test_bump():
    assert bump("1.2.3") == "1.2.4"
    assert bump("1.2.3", "minor") == "1.3.0"
    assert bump("1.2.3", "major") == "2.0.0"
