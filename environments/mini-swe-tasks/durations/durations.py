"""Formatting and parsing durations such as '1h02m03s'."""


def format_duration(seconds):
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return "%dh%02dm%02ds" % (hours, minutes, secs)
    if minutes:
        return "%dm%02ds" % (minutes, secs)
    return "%ds" % secs


def parse_duration(text):
    """The number of seconds in a text like '1h2m3s', '5m' or '42s'."""
    total = 0
    number = ""
    units = {"h": 3600, "m": 60, "s": 1}
    for char in text:
        if char.isdigit():
            number += char
        else:
            total += int(number) * units[char]
            number = ""
    return total
