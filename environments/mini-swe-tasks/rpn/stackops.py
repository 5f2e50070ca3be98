"""Binary operators of a stack calculator."""


def apply(operator, left, right):
    if operator == "+":
        return left + right
    if operator == "-":
        return left - right
    if operator == "*":
        return left * right
    if operator == "/":
        return left // right
    raise ValueError("unknown operator " + operator)


def is_operator(token):
    return token in ("+", "-", "*", "/")
