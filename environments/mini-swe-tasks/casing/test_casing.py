"""Tests for casing."""
from casing import camel_to_snake, snake_to_camel, title_case


def test_snake_to_camel():
    assert snake_to_camel("hello_big_world") == "helloBigWorld"
    assert snake_to_camel("x") == "x"


def test_camel_to_snake():
    assert camel_to_snake("helloBigWorld") == "hello_big_world"
    assert camel_to_snake("Already") == "already"


def test_title_case():
    assert title_case("the lord of the rings") == "The Lord of the Rings"
    assert title_case("a tale") == "A Tale"
