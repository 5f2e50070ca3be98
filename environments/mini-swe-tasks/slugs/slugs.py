"""URL slugs from titles."""


def slugify(title, max_length=40):
    """Lowercase words of letters and digits joined by '-', at most max_length characters."""
    words = []
    word = ""
    for char in title.lower():
        if char.isalnum():
            word += char
        elif word:
            words.append(word)
            word = ""
    if word:
        words.append(word)
    slug = "-".join(words)
    if len(slug) > max_length:
        slug = slug[:max_length].rstrip("-")
    return slug
