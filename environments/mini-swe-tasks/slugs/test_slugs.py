"""Tests for slugs."""
from slugs import slugify


def test_slugify_words():
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("  Many   spaces ") == "many-spaces"
    assert slugify("Python 3.11 release") == "python-3-11-release"


def test_slugify_length():
    assert slugify("abc def", max_length=4) == "abc"
    assert slugify("x" * 45) == "x" * 40
    assert slugify("") == ""
