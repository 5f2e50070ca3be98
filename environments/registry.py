"""Name -> environment class, imported on first use (importing `environments` stays cheap)."""

from __future__ import annotations

import importlib

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


def make(name: str, **kwargs) -> TextEnv:
    """A new environment; kwargs are the class's constructor options (a wrong one names itself)."""
    cls = env_class(name)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"environment {name!r}: {e}") from e
