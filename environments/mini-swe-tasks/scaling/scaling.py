"""Clamping and rescaling numbers."""


def clamp(value, low, high):
    if value < low:
        return low
    if value > high:
        return high
    return value


def rescale(value, old_low, old_high, new_low, new_high):
    """Maps value linearly from [old_low, old_high] to [new_low, new_high]."""
    fraction = (value - old_low) / (old_high - old_low)
    return new_low + fraction * (new_high - new_low)


def percent(part, whole, digits=1):
    if whole == 0:
        return 0.0
    return round(100 * part / whole, digits)
