"""Grid files (format: configs/grids/README.md): loading one and validating it, every variant as
the typed experiment `launch.train` would build from it."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
from types import ModuleType
from typing import Any, Mapping

from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment, set_path
from jaxtree.train.pipeline import check_experiment

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_METRICS = ("eval/success_rate", "eval/pass@1")
DEFAULT_SEED_FIELD = "train.seed"

GRID_KEYS = ("config", "variants", "seeds", "seed_field", "overrides", "metrics", "title",
             "lower_is_better", "warm_start", "artifacts", "reach")
REACH_KEYS = ("metric", "reference")
ARTIFACT_KEYS = ("job", "config", "overrides")
# `{artifact:NAME}` in an override's string value: the artifact's directory under <out>.
ARTIFACT_REFERENCE = re.compile(r"\{artifact:([^{}]*)\}")
# `{warm_start}` in an override's string value: the run's warm-start directory.
WARM_START_REFERENCE = "{warm_start}"

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]*$")
# A records directory (launch.compare --records) holds its variants' runs and, under this name,
# the warm starts' shared evaluations: no variant may take it.
RESERVED_VARIANT = "warm_starts"
_FIELD = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class GridError(ValueError):
    """Bad input (a grid file, a flag) or a refusal; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class ArtifactSpec:
    """A grid's `artifacts` entry: `python -m <job> --config=<config> --workdir=DIR
    --config.<override>=...` (a job of launch/, e.g. launch.train_prm), built once per <out>."""
    job: str
    config: str
    overrides: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ReachSpec:
    """A grid's `reach` entry: report, per seed, the first step at which each variant's `metric`
    reaches the best value the `reference` variant's run reached (LATR's acceleration measure)."""
    metric: str
    reference: str


@dataclasses.dataclass
class Grid:
    """A loaded grid file; `config` is an absolute path, `experiment_config` what its
    `get_config()` returns."""
    path: str
    config: str
    variants: dict[str, dict[str, Any]]
    seeds: tuple[int, ...]
    seed_field: str = DEFAULT_SEED_FIELD
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    metrics: tuple[str, ...] = DEFAULT_METRICS
    title: str = ""
    lower_is_better: tuple[str, ...] = ()
    # Overrides of the one warm start every variant shares, when variants change env.* fields
    # that do not change the demonstrations (a verifier's search budget); None: each run's
    # warm start follows its own env/model/sft overrides.
    warm_start: dict[str, Any] | None = None
    artifacts: dict[str, ArtifactSpec] = dataclasses.field(default_factory=dict)
    reach: ReachSpec | None = None
    experiment_config: Any = dataclasses.field(default=None, repr=False, compare=False)
    _experiments: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def config_arg(self) -> str:
        """The config path as commands show it: relative to the repository root when inside."""
        return display_path(self.config)

    def run_overrides(self, variant: str, seed: int) -> dict[str, Any]:
        """A run's overrides: the grid's, then the variant's, then the seed field."""
        return {**self.overrides, **self.variants[variant], self.seed_field: seed}

    def experiment(self, variant: str, overrides: Mapping[str, Any]) -> Experiment:
        """The typed experiment of a run of `variant`: the config file's `get_config()` with
        `overrides` (the grid's, the variant's, the seed) set, validated as `launch.train`
        validates it. GridError (one line, naming the variant and the config field) if invalid."""
        key = json.dumps(list(overrides.items()), default=repr)
        if key not in self._experiments:
            config = copy.deepcopy(self.experiment_config)
            try:
                for field, value in overrides.items():
                    try:
                        set_path(config, field, value)
                    except (TypeError, ValueError, KeyError, AttributeError) as e:
                        raise ConfigError(field, f"cannot set {value!r}: {e}") from None
                exp = Experiment.from_config(config)
                check_experiment(exp)
            except ConfigError as e:
                raise GridError(f"grid {display_path(self.path)}: variant {variant!r}: "
                                f"{e}") from None
            self._experiments[key] = exp
        return self._experiments[key]


def display_path(path: str) -> str:
    rel = os.path.relpath(path, REPO_ROOT)
    return path if rel.startswith(os.pardir) else rel


def import_file(path: str, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sibling_grid(grid_file: str, name: str) -> dict:
    """`get_grid()` of <name>.py next to `grid_file`, so a grid can be another one on a different
    config (the same variants on another environment) wherever the grids directory lives."""
    path = os.path.join(os.path.dirname(os.path.abspath(grid_file)), f"{name}.py")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no grid file {path}")
    return import_file(path, f"_jaxtree_grid_{name}").get_grid()


def flatten_overrides(overrides: Mapping | None, where: str, prefix: str = "") -> dict[str, Any]:
    """{"train": {"steps": 5}, "loss.kl_coef": 0} -> {"train.steps": 5, "loss.kl_coef": 0}."""
    if overrides is None:
        return {}
    if hasattr(overrides, "to_dict"):
        overrides = overrides.to_dict()
    if not isinstance(overrides, Mapping):
        raise GridError(f"{where} must be a dict of dotted config fields -> values, "
                        f"not {type(overrides).__name__}")
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        field = f"{prefix}{key}"
        if not isinstance(key, str) or not _FIELD.match(field):
            raise GridError(f"{where}: {field!r} is not a dotted config field name")
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        if isinstance(value, Mapping) and value:
            flat.update(flatten_overrides(value, where, field + "."))
        else:
            flat[field] = value
    return flat


def _as_tuple(value: Any, where: str, kind: type) -> tuple:
    if isinstance(value, kind):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not value:
        raise GridError(f"{where} must be a non-empty tuple")
    for v in value:
        if not isinstance(v, kind) or isinstance(v, bool):
            raise GridError(f"{where}: {v!r} is not a{'n int' if kind is int else ' string'}")
    if len(set(value)) != len(value):
        raise GridError(f"{where} has duplicates: {list(value)}")
    return tuple(value)


def _get_grid(path: str) -> Mapping:
    """What the grid file's `get_grid()` returns, as a dict with known keys only."""
    name = "_jaxtree_grid_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    try:
        module = import_file(path, name)
    except Exception as e:  # noqa: BLE001 - any error in the user's file is reported in one line
        raise GridError(f"grid file {path} failed to load: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "get_grid", None)):
        raise GridError(f"grid file {path} defines no get_grid() function")
    try:
        raw = module.get_grid()
    except Exception as e:  # noqa: BLE001
        raise GridError(f"get_grid() of {path} failed: {type(e).__name__}: {e}") from e
    if hasattr(raw, "to_dict"):
        raw = raw.to_dict()
    if not isinstance(raw, Mapping):
        raise GridError(f"get_grid() of {path} must return a dict, not {type(raw).__name__}")
    unknown = sorted(set(raw) - set(GRID_KEYS))
    if unknown:
        raise GridError(f"grid {path}: unknown key(s) {unknown}; expected some of "
                        f"{list(GRID_KEYS)}")
    return raw


def _config_path(raw: Mapping, path: str, where: str = "") -> str:
    """The grid's `config` (or an artifact's: `where`), a relative one resolved in the grid
    file's parent's parent (configs/grids/x.py -> configs/)."""
    config = raw.get("config")
    if not isinstance(config, str) or not config:
        raise GridError(f"grid {path}: {where}'config' (the experiment config file) is required")
    base = os.path.dirname(os.path.dirname(path))
    config_path = os.path.normpath(config if os.path.isabs(config) else os.path.join(base, config))
    if not os.path.isfile(config_path):
        raise GridError(f"grid {path}: config file not found: {config_path} (a relative 'config' "
                        f"is resolved in {base})")
    return config_path


def _experiment_config(config_path: str, path: str) -> Any:
    """`get_config()` of the experiment config file (GridError if it fails)."""
    name = "_jaxtree_compare_config_" + hashlib.sha1(config_path.encode()).hexdigest()[:8]
    try:
        config = import_file(config_path, name).get_config()
    except Exception as e:  # noqa: BLE001 - any error in the user's file is reported in one line
        raise GridError(f"grid {path}: config file {config_path} failed to load: "
                        f"{type(e).__name__}: {e}") from e
    if not (isinstance(config, Mapping) or hasattr(config, "to_dict")):
        raise GridError(f"grid {path}: get_config() of {config_path} returned a "
                        f"{type(config).__name__}, not a config")
    return config


def _artifacts(raw: Mapping, path: str) -> dict[str, ArtifactSpec]:
    """The grid's `artifacts`: name -> {"job": "launch.<module>", "config": ..., "overrides"}."""
    artifacts = raw.get("artifacts") or {}
    if not isinstance(artifacts, Mapping):
        raise GridError(f"grid {path}: 'artifacts' must be a dict name -> "
                        f"{{'job', 'config', 'overrides'}}")
    specs = {}
    for name, spec in artifacts.items():
        where = f"artifact {name!r}: "
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9_]+$", name):
            raise GridError(f"grid {path}: artifact name {name!r} must be letters, digits and _")
        if not isinstance(spec, Mapping) or set(spec) - set(ARTIFACT_KEYS):
            raise GridError(f"grid {path}: {where}must be a dict with keys {list(ARTIFACT_KEYS)}")
        job = spec.get("job")
        if not (isinstance(job, str) and re.match(r"^launch\.\w+$", job) and os.path.isfile(
                os.path.join(REPO_ROOT, *job.split(".")) + ".py")):
            raise GridError(f"grid {path}: {where}job {job!r} is not a module of launch/ "
                            f"(e.g. 'launch.train_prm')")
        specs[name] = ArtifactSpec(job, _config_path(spec, path, where),
                                   flatten_overrides(spec.get("overrides"), f"grid {path}: "
                                                     f"{where}overrides"))
    return specs


def _reach(raw: Mapping, path: str, metrics: tuple[str, ...], variants: Mapping
           ) -> ReachSpec | None:
    """The grid's `reach`: {"metric": one of its metrics, "reference": one of its variants}."""
    reach = raw.get("reach")
    if reach is None:
        return None
    if hasattr(reach, "to_dict"):
        reach = reach.to_dict()
    if not isinstance(reach, Mapping) or set(reach) != set(REACH_KEYS):
        raise GridError(f"grid {path}: 'reach' must be a dict with keys {list(REACH_KEYS)}")
    if reach["metric"] not in metrics:
        raise GridError(f"grid {path}: reach: metric {reach['metric']!r} is not one of the "
                        f"grid's metrics {list(metrics)}")
    if reach["reference"] not in variants:
        raise GridError(f"grid {path}: reach: reference {reach['reference']!r} is not one of "
                        f"the grid's variants {list(variants)}")
    return ReachSpec(reach["metric"], reach["reference"])


def _check_artifact_references(variants: Mapping, overrides: Mapping,
                               artifacts: Mapping, path: str) -> None:
    """Every `{artifact:NAME}` names an artifact of the grid."""
    for where, over in [("overrides", overrides)] + [(f"variant {v!r}", o)
                                                      for v, o in variants.items()]:
        for field, value in over.items():
            for name in ARTIFACT_REFERENCE.findall(value) if isinstance(value, str) else ():
                if name not in artifacts:
                    raise GridError(f"grid {path}: {where}: {field} names artifact {name!r}; "
                                    f"the grid's artifacts are {sorted(artifacts) or 'none'}")


def _variants(raw: Mapping, path: str) -> dict[str, dict[str, Any]]:
    variants = raw.get("variants")
    if hasattr(variants, "to_dict"):
        variants = variants.to_dict()
    if isinstance(variants, (list, tuple)):
        try:
            variants = dict(variants)
        except (TypeError, ValueError) as e:
            raise GridError(f"grid {path}: 'variants' must be a dict name -> overrides") from e
    if not isinstance(variants, Mapping) or not variants:
        raise GridError(f"grid {path} has no variants: 'variants' must be a non-empty dict "
                        f"name -> overrides")
    flat = {}
    for name, overrides in variants.items():
        if not isinstance(name, str) or not _NAME.match(name) or name in (".", ".."):
            raise GridError(f"grid {path}: variant name {name!r} must be letters, digits and "
                            f"_ . + = - (it names a directory)")
        if name == RESERVED_VARIANT:
            raise GridError(f"grid {path}: variant name {name!r} is reserved (launch.compare "
                            f"--records keeps the warm starts' evaluations under it)")
        flat[name] = flatten_overrides(overrides, f"grid {path}: variant {name!r}")
    return flat


def load_grid(path: str) -> Grid:
    """Imports a grid file and validates what its `get_grid()` returns, and every variant with
    each of the grid's seeds as a typed experiment (GridError if bad)."""
    if not os.path.isfile(path):
        raise GridError(f"grid file not found: {path}")
    path = os.path.abspath(path)
    raw = _get_grid(path)
    config = _config_path(raw, path)
    variants = _variants(raw, path)
    seed_field = raw.get("seed_field", DEFAULT_SEED_FIELD)
    if not isinstance(seed_field, str) or not _FIELD.match(seed_field):
        raise GridError(f"grid {path}: seed_field {seed_field!r} is not a dotted config field")
    overrides = flatten_overrides(raw.get("overrides"), f"grid {path}: overrides")
    for where, over in [("overrides", overrides)] + [(f"variant {v!r}", o)
                                                      for v, o in variants.items()]:
        if seed_field in over:
            raise GridError(f"grid {path}: {where} sets the seed field {seed_field}; seeds come "
                            f"from 'seeds'")

    def fields(key: str, default: tuple) -> tuple:
        return _as_tuple(raw[key], f"grid {path}: {key}", str) if key in raw else default

    metrics = fields("metrics", DEFAULT_METRICS)
    grid = Grid(
        path=path, config=config, variants=variants,
        seeds=_as_tuple(raw.get("seeds", (0,)), f"grid {path}: seeds", int),
        seed_field=seed_field, overrides=overrides,
        metrics=metrics,
        title=str(raw.get("title") or os.path.splitext(os.path.basename(path))[0]),
        lower_is_better=fields("lower_is_better", ()) if raw.get("lower_is_better") else (),
        warm_start=(flatten_overrides(raw["warm_start"], f"grid {path}: warm_start")
                    if raw.get("warm_start") is not None else None),
        artifacts=_artifacts(raw, path),
        reach=_reach(raw, path, metrics, variants),
        experiment_config=_experiment_config(config, path),
    )
    _check_artifact_references(variants, overrides, grid.artifacts, path)
    for variant in variants:
        for seed in grid.seeds:
            grid.experiment(variant, grid.run_overrides(variant, seed))
    return grid
