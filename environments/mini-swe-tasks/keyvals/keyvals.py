"""Parsing and formatting 'key=value' settings strings."""


def parse_settings(text):
    """'a=1; b = two' -> {'a': '1', 'b': 'two'}; empty items are skipped."""
    settings = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        key, _, value = item.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def format_settings(settings):
    """Keys sorted, each as 'key=value', joined by '; '."""
    return "; ".join(key + "=" + settings[key] for key in sorted(settings))


def get_int(settings, key, default=0):
    value = settings.get(key)
    if value is None or not value.lstrip("-").isdigit():
        return default
    return int(value)
