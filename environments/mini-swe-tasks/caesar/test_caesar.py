"""Tests for caesar."""
from caesar import decrypt, encrypt, shift_char


def test_encrypt():
    assert encrypt("abc", 1) == "bcd"
    assert encrypt("xyz", 3) == "abc"
    assert encrypt("Hello, World!", 13) == "Uryyb, Jbeyq!"


def test_decrypt_round_trip():
    assert decrypt(encrypt("Attack at dawn", 7), 7) == "Attack at dawn"


def test_shift_char():
    assert shift_char("Z", 1) == "A"
    assert shift_char("a", 25) == "z"
    assert shift_char("5", 4) == "5"
