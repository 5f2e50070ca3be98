"""Tests for rpn."""
from rpn import evaluate, evaluate_all


def test_evaluate():
    assert evaluate("3 4 +") == 7
    assert evaluate("3 4 + 2 *") == 14
    assert evaluate("10 3 -") == 7
    assert evaluate("7 2 /") == 3
    assert evaluate("5") == 5
    assert evaluate("2 3 4 * +") == 14


def test_evaluate_all():
    assert evaluate_all(["1 1 +", "6 3 /"]) == [2, 2]
