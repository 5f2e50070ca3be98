"""Converting between snake_case, camelCase and title case."""


def snake_to_camel(name):
    parts = name.split("_")
    return parts[0] + "".join(part.capitalize() for part in parts[1:])


def camel_to_snake(name):
    out = []
    for i, char in enumerate(name):
        if char.isupper() and i > 0:
            out.append("_")
        out.append(char.lower())
    return "".join(out)


def title_case(text):
    """Each word capitalised; 'a', 'of' and 'the' stay lowercase unless first."""
    small = ("a", "of", "the")
    words = text.lower().split()
    return " ".join(w if i > 0 and w in small else w.capitalize() for i, w in enumerate(words))
