"""Tests for numranges."""
from numranges import compress, expand


def test_compress():
    assert compress([1, 2, 3, 5]) == "1-3,5"
    assert compress([5, 4, 3]) == "3-5"
    assert compress([1, 3, 5]) == "1,3,5"
    assert compress([]) == ""


def test_expand():
    assert expand("1-3,5") == [1, 2, 3, 5]
    assert expand("7") == [7]
    assert expand("") == []
    assert expand("-2-0") == [-2, -1, 0]
