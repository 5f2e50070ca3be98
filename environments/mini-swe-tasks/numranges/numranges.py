"""Compressing integer lists into range strings like '1-3,5'."""


def compress(numbers):
    numbers = sorted(set(numbers))
    parts = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        if j > i:
            parts.append(str(numbers[i]) + "-" + str(numbers[j]))
        else:
            parts.append(str(numbers[i]))
        i = j + 1
    return ",".join(parts)


def expand(text):
    numbers = []
    for part in text.split(","):
        if not part:
            continue
        if "-" in part[1:]:
            cut = part.index("-", 1)
            numbers.extend(range(int(part[:cut]), int(part[cut + 1:]) + 1))
        else:
            numbers.append(int(part))
    return numbers
