"""Run-length encoding of strings."""


def encode(text):
    """'aaab' -> 'a3b1': each run as its character and length."""
    if not text:
        return ""
    out = []
    run_char = text[0]
    run_length = 1
    for char in text[1:]:
        if char == run_char:
            run_length += 1
        else:
            out.append(run_char + str(run_length))
            run_char = char
            run_length = 1
    out.append(run_char + str(run_length))
    return "".join(out)


def decode(encoded):
    """The inverse of encode (run lengths may have several digits)."""
    out = []
    i = 0
    while i < len(encoded):
        char = encoded[i]
        j = i + 1
        while j < len(encoded) and encoded[j].isdigit():
            j += 1
        out.append(char * int(encoded[i + 1:j]))
        i = j
    return "".join(out)
