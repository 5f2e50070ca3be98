"""A mini-SWE task as the environment holds it: its files, which module the tests import, where
the bug goes and its hidden cases (read from a task directory by `environments.mini_swe_tasks`)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Task:
    """One module to repair: `files` maps file names to sources (helper first for two-file tasks;
    the test file last); the bug goes into `target`; tests exercise `main`."""

    name: str
    files: tuple[tuple[str, str], ...]
    main: str             # module name the tests import
    target: str           # file name mutations are drawn from
    test_file: str
    hidden: tuple         # ((function, args, expected), ...) on the main module
    two_file: bool

    @property
    def sources(self) -> dict[str, str]:
        return dict(self.files)

    @property
    def source_files(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.files if name != self.test_file)
