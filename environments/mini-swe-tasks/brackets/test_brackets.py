"""Tests for brackets."""
from brackets import is_balanced, max_depth


def test_balanced():
    assert is_balanced("([]{})")
    assert is_balanced("a(b)c")
    assert is_balanced("")


def test_unbalanced():
    assert not is_balanced("(]")
    assert not is_balanced("((")
    assert not is_balanced("())")


def test_max_depth():
    assert max_depth("(a[b{c}])") == 3
    assert max_depth("()()") == 1
    assert max_depth("x") == 0
