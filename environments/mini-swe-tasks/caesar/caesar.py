"""Caesar cipher over ASCII letters."""


def shift_char(char, k):
    """Shifts a letter by k places, wrapping around; other characters are unchanged."""
    if "a" <= char <= "z":
        return chr((ord(char) - ord("a") + k) % 26 + ord("a"))
    if "A" <= char <= "Z":
        return chr((ord(char) - ord("A") + k) % 26 + ord("A"))
    return char


def encrypt(text, k):
    return "".join(shift_char(c, k) for c in text)


def decrypt(text, k):
    return encrypt(text, -k)
