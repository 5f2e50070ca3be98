"""Balanced brackets."""

PAIRS = {")": "(", "]": "[", "}": "{"}


def is_balanced(text):
    stack = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in PAIRS:
            if not stack or stack.pop() != PAIRS[char]:
                return False
    return not stack


def max_depth(text):
    """The deepest nesting of brackets in text (assumed balanced)."""
    depth = best = 0
    for char in text:
        if char in "([{":
            depth += 1
            best = max(best, depth)
        elif char in PAIRS:
            depth -= 1
    return best
