"""Comparing and bumping version strings like '1.10.2'."""


def parse_version(text):
    return tuple(int(part) for part in text.split("."))


def compare_versions(a, b):
    """-1, 0 or 1 as version a is lower, equal or higher than b (missing parts count as 0)."""
    pa, pb = parse_version(a), parse_version(b)
    length = max(len(pa), len(pb))
    pa = pa + (0,) * (length - len(pa))
    pb = pb + (0,) * (length - len(pb))
    if pa < pb:
        return -1
    if pa > pb:
        return 1
    return 0


def bump(version, part="micro"):
    major, minor, micro = parse_version(version)
    if part == "major":
        return "%d.0.0" % (major + 1)
    if part == "minor":
        return "%d.%d.0" % (major, minor + 1)
    return "%d.%d.%d" % (major, minor, micro + 1)
