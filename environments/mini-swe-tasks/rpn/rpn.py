"""Evaluating integer expressions in reverse Polish notation."""

from stackops import apply, is_operator


def evaluate(expression):
    """'3 4 + 2 *' -> 14; '/' is floor division."""
    stack = []
    for token in expression.split():
        if is_operator(token):
            right = stack.pop()
            left = stack.pop()
            stack.append(apply(token, left, right))
        else:
            stack.append(int(token))
    return stack[-1]


def evaluate_all(expressions):
    return [evaluate(e) for e in expressions]
