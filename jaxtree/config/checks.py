"""Config errors and field constraints: `ConfigError` (one line naming the field), the `Check`s
a field declares (`between`, `positive`, `one_of`, ...), `option` (a field with its default, its
one-line meaning and its constraint) and `require` for constraints across fields."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable

class ConfigError(ValueError):
    """An invalid config value or an unknown field; `path` names it (e.g. 'loss.eps_low').

    Raised from a config section it reads `config.loss.eps_low: ...`; raised by a typed config
    built directly in Python (`owner` = its class name), `LossConfig.eps_low: ...`.
    """

    def __init__(self, path: str, message: str, owner: str | None = None):
        self.path = path
        self.message = message
        self.owner = owner
        super().__init__(f"{owner or 'config'}.{path}: {message}")

    def under(self, prefix: str) -> "ConfigError":
        """The same error with its path inside the config section `prefix`."""
        return ConfigError(f"{prefix}.{self.path}" if prefix else self.path, self.message)


# ----------------------------------------------------------------------------- constraints

class Check:
    """A constraint on one field value: `ok(value)` and a phrase for messages ('in [0, 1)').

    `description` may be a callable, for phrases known only when a message is built (the names
    of a registry, which parts may join after the config class is defined)."""

    def __init__(self, ok: Callable[[Any], bool], description: str | Callable[[], str]):
        self.ok = ok
        self._description = description

    @property
    def description(self) -> str:
        return self._description() if callable(self._description) else self._description

    def message(self, value: Any) -> str:
        return f"{value!r} is not {self.description}"


def between(low: float | None = None, high: float | None = None, *, low_open: bool = False,
            high_open: bool = False) -> Check:
    """low <= value <= high (either end open or absent)."""
    def ok(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            return False
        if low is not None and (v <= low if low_open else v < low):
            return False
        return not (high is not None and (v >= high if high_open else v > high))
    left = "-inf" if low is None else f"{low:g}"
    right = "inf" if high is None else f"{high:g}"
    return Check(ok, f"in {'(' if low_open or low is None else '['}{left}, {right}"
                     f"{')' if high_open or high is None else ']'}")


def positive() -> Check:
    return Check(lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0,
                 "positive")


def non_negative() -> Check:
    return Check(lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and v >= 0,
                 "non-negative")


def one_of(choices: Iterable[Any] | Callable[[], Iterable[Any]]) -> Check:
    """Membership in a fixed collection, or in what a callable returns at check time."""
    current = (lambda: tuple(choices())) if callable(choices) else (lambda: tuple(choices))
    return Check(lambda v: v in current(), lambda: f"one of {current()}")


def each(check: Check) -> Check:
    """Every element of a tuple passes `check`."""
    return Check(lambda v: all(check.ok(x) for x in v), lambda: f"all {check.description}")


def option(default: Any, doc: str, *, check: Check | None = None) -> Any:
    """A config field: its default, a one-line meaning (for the reference) and its constraint.
    A dict default (free-form options) is copied for every instance."""
    metadata = {"doc": doc, "check": check}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def require(condition: bool, path: str, message: str) -> None:
    """Raises ConfigError(path, message) unless `condition`."""
    if not condition:
        raise ConfigError(path, message)
