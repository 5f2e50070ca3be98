"""Typed config sections: one frozen dataclass per config section, validated in one place.

Experiment configs are `ml_collections.ConfigDict`s (one Python file per experiment, overridable
from the command line). The module that owns a section declares it as a frozen dataclass whose
fields carry their documentation and constraint:

    @dataclasses.dataclass(frozen=True)
    class LossConfig(Section):
        eps_low: float = option(0.2, "lower clip range", check=between(0, 1, high_open=True))

`LossConfig.from_config(config.loss, "loss")` turns the section into the typed config. Every
violation, an unknown field included, raises `ConfigError`, whose message is one line naming the
field by its config path, what is allowed and what was given:

    config.loss.eps_low: 1.5 is not in [0, 1)

Constructing a section directly (`LossConfig(eps_low=1.5)`) runs the same checks. The same
declarations generate the config reference (`reference_rows`), so documentation and validation
cannot drift apart.

Stages with interchangeable parts keep them in a `Registry` (an explicit dict, name -> part): a
part registers with its own typed config, whose fields live in a subsection named after the part
(`config.advantage.grpo_step.gamma`).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Callable, ClassVar, Iterable, Mapping


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


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


# ----------------------------------------------------------------------------- types

def _coerce(value: Any, annotation: Any, path: str) -> Any:
    """`value` as the field type `annotation` (ints become floats, lists tuples, a comma list a
    tuple of strings); a value of another type raises ConfigError."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        args = typing.get_args(annotation)
        if isinstance(value, str) and args and args[0] is str:
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        if not isinstance(value, (tuple, list)):
            raise ConfigError(path, f"{value!r} is not a tuple ({_type_name(annotation)})")
        flat = []
        for element in value:  # a comma list inside a one-element tuple (command-line form)
            if isinstance(element, str) and "," in element and args and args[0] is str:
                flat += [part.strip() for part in element.split(",") if part.strip()]
            else:
                flat.append(element)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], path) for v in flat)
        if len(flat) != len(args):
            raise ConfigError(path, f"{value!r} does not have the form {_type_name(annotation)}")
        return tuple(_coerce(v, a, path) for v, a in zip(flat, args))
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"{value!r} is not a number")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(path, f"{value!r} is not an integer")
        return int(value)
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"{value!r} is not True or False")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"{value!r} is not a string")
        return value
    if annotation is Any:
        return value
    if annotation is dict or typing.get_origin(annotation) is dict:
        value = _plain(value)
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"{value!r} is not a mapping")
        return dict(value)
    raise TypeError(f"unsupported config field type {annotation!r} at {path}")


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _plain(value: Any) -> Any:
    """ConfigDicts and FrozenConfigDicts as plain dicts (leaves untouched)."""
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


# ----------------------------------------------------------------------------- sections

class Section:
    """Base of typed config sections (subclasses are frozen dataclasses built with `option`).

    A field whose type is itself a Section is a nested subsection. `check()` may be overridden
    for constraints that involve several fields (raise ConfigError with the field's name).
    """

    def __post_init__(self):
        try:
            self._validate()
        except ConfigError as e:
            raise ConfigError(e.path, e.message, owner=type(self).__name__) from None

    def _validate(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            annotation = hints[f.name]
            if isinstance(annotation, type) and issubclass(annotation, Section):
                if not isinstance(value, annotation):
                    value = annotation.from_config(value, f.name)
            else:
                value = _coerce(value, annotation, f.name)
                check = f.metadata.get("check")
                if check is not None and not check.ok(value):
                    raise ConfigError(f.name, check.message(value))
            object.__setattr__(self, f.name, value)
        self.check()

    def check(self) -> None:
        """Cross-field constraints (none by default)."""

    # A stage section whose field selects registered parts: {selector field: registry}. The
    # settings of each part are the subsection named after it.
    PARTS: ClassVar[dict[str, "Registry"]] = {}

    @classmethod
    def from_config(cls, section: Any, path: str):
        """The typed config of `section` (a ConfigDict, a dict or None for all defaults).

        Raises ConfigError naming `path.field` on an unknown field or an invalid value, the
        settings of registered parts included.
        """
        values = dict(_plain(section) or {})
        part_names = {name for registry in cls.PARTS.values() for name in registry.names()}
        parts = {name: values.pop(name) for name in list(values) if name in part_names}
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names))
        if unknown:
            known = names + sorted(part_names)
            raise ConfigError(f"{path}.{unknown[0]}",
                              f"unknown field (given {values[unknown[0]]!r}); known fields: "
                              f"{', '.join(known) or 'none'}")
        try:
            typed = cls(**values)
        except ConfigError as e:
            raise e.under(path) from None
        settings = {}
        for registry in cls.PARTS.values():
            settings.update(registry.parse_subsections(parts, path))
        object.__setattr__(typed, "_part_settings", settings)
        return typed

    def part_settings(self, name: str) -> Any:
        """The typed settings of the registered part `name` (from its subsection, else its
        defaults; None for a part without settings)."""
        settings = getattr(self, "_part_settings", {})
        if name in settings:
            return settings[name]
        for registry in self.PARTS.values():
            if name in registry:
                return registry.parse(None, "", name)
        raise KeyError(f"{type(self).__name__} has no registered part {name!r}")

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The default values as a plain nested dict (to build a ConfigDict), with the default
        settings of every registered part as subsections."""
        hints = typing.get_type_hints(cls)
        out = {}
        for f in dataclasses.fields(cls):
            annotation = hints[f.name]
            if isinstance(annotation, type) and issubclass(annotation, Section):
                out[f.name] = annotation.defaults()
            else:
                out[f.name] = _default(f)
        for registry in cls.PARTS.values():
            out.update(registry.default_subsections())
        return out

    def narrowed(self, base: type) -> Any:
        """This config as its Section base class `base` (the fields `base` declares), e.g. the
        slot engine's part of the rollout section."""
        return base(**{f.name: getattr(self, f.name) for f in dataclasses.fields(base)})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (getattr(self, f.name).to_dict()
                         if isinstance(getattr(self, f.name), Section) else getattr(self, f.name))
                for f in dataclasses.fields(self)}


def reference_rows(cls: type, path: str) -> list[tuple[str, str, str, str, str]]:
    """(config path, type, default, allowed values, meaning) of every field of a Section class,
    nested sections and the settings of registered parts included, for the config reference."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        annotation = hints[f.name]
        if isinstance(annotation, type) and issubclass(annotation, Section):
            rows += reference_rows(annotation, f"{path}.{f.name}")
            continue
        check = f.metadata.get("check")
        rows.append((f"{path}.{f.name}", _type_name(annotation), repr(_default(f)),
                     check.description if check is not None else "", f.metadata.get("doc", "")))
    for registry in cls.PARTS.values():
        for name in registry.names():
            part = registry.part(name)
            if part.config is not None:
                rows += reference_rows(part.config, f"{path}.{name}")
    return rows


# ----------------------------------------------------------------------------- registries

@dataclasses.dataclass(frozen=True)
class Part:
    """A registered part of a stage: how to build it and the typed config of its subsection."""

    name: str
    build: Callable[..., Any]
    config: type | None
    doc: str


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

    def register(self, name: str, config: type | None = None, *, replace: bool = False):
        """Decorator registering `build(config, **context)` under `name`."""
        if config is not None and not (isinstance(config, type) and issubclass(config, Section)):
            raise TypeError(f"{self.stage} part {name!r}: config must be a Section class")

        def decorator(build):
            if name in self._parts and not replace:
                raise ValueError(f"{self.stage} part {name!r} is already registered")
            doc = (build.__doc__ or "").strip().splitlines()
            self._parts[name] = Part(name, build, config, doc[0] if doc else "")
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
        values = _plain(section or {}).get(name)
        if part.config is None:
            if values:
                raise ConfigError(f"{path}.{name}", f"{self.stage} part {name!r} takes no "
                                  f"settings (given {values!r})")
            return None
        return part.config.from_config(values, f"{path}.{name}")

    def parse_subsections(self, section: Any, path: str) -> dict[str, Any]:
        """Typed configs of every part whose subsection appears in `section` (so a typo in the
        settings of a part not selected now still fails at launch)."""
        values = _plain(section or {})
        return {name: self.parse(values, path, name) for name in self._parts if name in values}

    def build(self, name: str, config: Any, **context):
        return self.part(name).build(config, **context)

    def default_subsections(self) -> dict[str, dict]:
        """{part name: default settings} for the parts that have settings."""
        return {name: part.config.defaults() for name, part in self._parts.items()
                if part.config is not None and dataclasses.fields(part.config)}


def require(condition: bool, path: str, message: str) -> None:
    """Raises ConfigError(path, message) unless `condition`."""
    if not condition:
        raise ConfigError(path, message)


def subsection_names(section: Any) -> set[str]:
    """Keys of `section` whose values are sections themselves."""
    return {k for k, v in _plain(section or {}).items() if isinstance(v, Mapping)}
