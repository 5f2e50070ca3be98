"""Greedy word wrapping of plain text."""


def wrap(text, width):
    """Splits text into lines of at most width characters, breaking at spaces."""
    words = text.split()
    lines = []
    current = ""
    for word in words:
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width):
    """The wrapped lines joined by newlines."""
    return "\n".join(wrap(text, width))
