"""Classifying triangles by their side lengths."""


def is_triangle(a, b, c):
    sides = sorted([a, b, c])
    return sides[0] > 0 and sides[0] + sides[1] > sides[2]


def classify(a, b, c):
    if not is_triangle(a, b, c):
        return "invalid"
    if a == b == c:
        return "equilateral"
    if a == b or b == c or a == c:
        return "isosceles"
    return "scalene"


def perimeter(a, b, c):
    return a + b + c if is_triangle(a, b, c) else 0
