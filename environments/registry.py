"""Name -> environment class, imported on first use (importing `environments` stays cheap)."""

from __future__ import annotations

import collections.abc
import importlib
import types
import typing
from typing import Any

import numpy as np

from environments.base import TextEnv

_REGISTRY: dict[str, str] = {
    "frozen_lake": "environments.frozen_lake:FrozenLake",
    "sokoban": "environments.sokoban:Sokoban",
    "countdown": "environments.countdown:Countdown",
    "tictactoe": "environments.tictactoe:TicTacToe",
    "sudoku": "environments.sudoku:Sudoku",
    "minesweeper": "environments.minesweeper:Minesweeper",
    "mini_swe": "environments.mini_swe:MiniSWE",
}


def register(name: str, target: str) -> None:
    """Registers `module:Class` under `name` (for environments defined outside this package)."""
    if name in _REGISTRY and _REGISTRY[name] != target:
        raise ValueError(f"environment {name!r} is already registered as {_REGISTRY[name]}")
    _REGISTRY[name] = target


def names() -> list[str]:
    return sorted(_REGISTRY)


def env_class(name: str) -> type[TextEnv]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; registered: {', '.join(names())}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def _matches(value: Any, annotation: Any) -> bool:
    """Whether `value` fits a constructor annotation, read loosely where JSON and command lines
    blur types (an int where a float goes, a list where a tuple or a sequence goes); an
    annotation this cannot read (a class, `Callable`, ...) accepts anything."""
    if annotation is Any:
        return True
    if annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is bool:
        return isinstance(value, (bool, np.bool_))
    if annotation is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list, collections.abc.Sequence, collections.abc.Iterable):
        return isinstance(value, (tuple, list))
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    return True


def check_options(name: str, cls: type, options: dict[str, Any]) -> None:
    """ValueError naming the option when a value does not have its constructor parameter's
    annotated type (`size='abc'` where an int goes): it would otherwise fail, or worse pass,
    wherever the environment first uses it."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # an annotation that does not resolve: nothing to check
        return
    for key, value in options.items():
        if key in hints and not _matches(value, hints[key]):
            expected = str(hints[key]).replace("typing.", "").replace("<class '", "") \
                .replace("'>", "")
            raise ValueError(f"environment {name!r}: option {key}={value!r} is not of type "
                             f"{expected}")


def make(name: str, **kwargs) -> TextEnv:
    """A new environment; kwargs are the class's constructor options (a wrong one, or one of
    the wrong type, names itself)."""
    cls = env_class(name)
    check_options(name, cls, kwargs)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"environment {name!r}: {e}") from e
