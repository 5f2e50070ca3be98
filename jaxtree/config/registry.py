"""Registries of interchangeable parts: a `Registry` per pipeline stage (an explicit dict, name
-> `Part`), each part registered with its typed settings (the subsection named after it) and
what it declares about the rest of the pipeline (the labels it reads and produces, its check on
the section that selects it)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from jaxtree.config.checks import ConfigError
from jaxtree.config.sections import Section, config_fields, plain_values


@dataclasses.dataclass(frozen=True)
class Part:
    """A registered part of a stage: how to build it, the typed config of its subsection, and
    what it declares about the rest of the pipeline.

    Attributes:
      reads: the per-turn labels it reads (`jaxtree.rollout.labels`), a tuple or a function of
        its settings returning one (an estimator that reads state signatures only in one mode).
      produces: labels it makes (a rollout strategy that fills one in, e.g. MC-PR's values).
      check: `check(settings, section)` raising ConfigError for constraints its settings put on
        the section that selects it (a tree's branches need slots), run at launch.
    """

    name: str
    build: Callable[..., Any]
    config: type | None
    doc: str
    reads: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = ()
    produces: tuple[str, ...] = ()
    check: Callable[[Any, Any], None] | None = None

    def labels_read(self, settings: Any) -> tuple[str, ...]:
        """The labels this part reads with `settings`."""
        return tuple(self.reads(settings) if callable(self.reads) else self.reads)


class Registry:
    """The interchangeable parts of one pipeline stage, by config name (an explicit dict).

        ADVANTAGES = Registry("advantage")

        @ADVANTAGES.register("grpo", GrpoConfig)
        def grpo(config: GrpoConfig, **context): ...

    A part's typed config comes from the subsection named after it (`config.<stage>.<name>`);
    a part without one takes no settings.
    """

    def __init__(self, stage: str):
        self.stage = stage
        self._parts: dict[str, Part] = {}

    def register(self, name: str, config: type | None = None, *,
                 reads: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = (),
                 produces: tuple[str, ...] = (), check: Callable[[Any, Any], None] | None = None,
                 replace: bool = False):
        """Decorator registering `build(config, **context)` under `name`, with what the part
        declares (`Part`: the labels it reads and produces, its check on the section)."""
        if config is not None and not (isinstance(config, type) and issubclass(config, Section)):
            raise TypeError(f"{self.stage} part {name!r}: config must be a Section class")

        def decorator(build):
            if name in self._parts and not replace:
                raise ValueError(f"{self.stage} part {name!r} is already registered")
            doc = (build.__doc__ or "").strip().splitlines()
            self._parts[name] = Part(name, build, config, doc[0] if doc else "",
                                     reads=reads if callable(reads) else tuple(reads),
                                     produces=tuple(produces), check=check)
            return build
        return decorator

    def unregister(self, name: str) -> None:
        self._parts.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._parts)

    def __contains__(self, name: str) -> bool:
        return name in self._parts

    def part(self, name: str) -> Part:
        if name not in self._parts:
            raise KeyError(f"no {self.stage} part {name!r}; registered: {self.names()}")
        return self._parts[name]

    def parse(self, section: Any, path: str, name: str):
        """The typed config of part `name` from `section[name]` (None for parts without one)."""
        part = self.part(name)
        values = plain_values(section or {}).get(name)
        where = f"{path}.{name}" if path else name
        if part.config is None:
            if values:
                raise ConfigError(where, f"{self.stage} part {name!r} takes no settings (given "
                                  f"{values!r})")
            return None
        return part.config.from_config(values, where)

    def parse_subsections(self, section: Any, path: str) -> dict[str, Any]:
        """Typed configs of every part whose subsection appears in `section` (so a typo in the
        settings of a part not selected now still fails at launch)."""
        values = plain_values(section or {})
        return {name: self.parse(values, path, name) for name in self._parts if name in values}

    def build(self, name: str, config: Any, **context):
        return self.part(name).build(config, **context)

    def default_subsections(self) -> dict[str, dict]:
        """{part name: default settings} for the parts that have settings."""
        return {name: part.config.defaults() for name, part in self._parts.items()
                if part.config is not None and config_fields(part.config)}
