"""The runs of a grid: each variant x seed's overrides, its `launch.train` command and the warm
start it shares with the runs whose warm-start overrides are the same."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import sys
from typing import Any, ClassVar, Mapping, Sequence

from jaxtree.compare.grid import ARTIFACT_REFERENCE, WARM_START_REFERENCE, Grid, GridError, \
    display_path
from jaxtree.train.warm_start import finished_checkpoint

# The overrides that change the warm start: a key ending in "." is a prefix, any other is exact.
WARM_START_FIELDS = ("env.", "model.", "sft.", "rollout.context_length")


def render_value(value: Any) -> str:
    """A value as `--config.<field>=<value>` needs it: strings as they are (ml_collections takes
    a string field's flag literally, so quotes would end up in the value), tuples and lists as a
    Python tuple literal, dicts as a Python literal, numbers and bools plain."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        value = tuple(value)
    return repr(value)


def override_flags(overrides: Mapping[str, Any]) -> list[str]:
    return [f"--config.{key}={render_value(value)}" for key, value in overrides.items()]


def jsonable(value: Any) -> Any:
    """`value` as it reads back from JSON (what run.json and warm_start.json record)."""
    return json.loads(json.dumps(value, default=repr))


def warm_start_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides that define the warm start (env.*, model.*, sft.*, rollout.context_length)."""
    return {key: value for key, value in overrides.items()
            if any(key.startswith(f) if f.endswith(".") else key == f
                   for f in WARM_START_FIELDS)}


def warm_start_key(config: str, overrides: Mapping[str, Any]) -> str:
    """A short hash of the config file and the warm-start overrides (order does not matter);
    runs with the same key share one warm start."""
    payload = json.dumps({"config": display_path(config),
                          "overrides": jsonable(warm_start_overrides(overrides))},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


@dataclasses.dataclass
class WarmStart:
    """The warm start runs share: built once by launch.sft under <out>/warm_starts/<key>."""
    key: str
    workdir: str
    overrides: dict[str, Any]
    argv: list[str]
    config: str

    WHAT: ClassVar[str] = "warm start"
    FILE: ClassVar[str] = "warm_start.json"

    def record(self) -> dict:
        return {"key": self.key, "config": display_path(self.config),
                "overrides": jsonable(self.overrides), "command": self.argv}

    def finished(self) -> bool:
        """Whether the job's output is whole: launch.sft saves where a signal stopped it and
        exits 0, so its exit status alone does not say."""
        return finished_checkpoint(self.workdir) is not None


@dataclasses.dataclass
class Artifact(WarmStart):
    """A job's output that runs read (a trained process reward model): built once by the grid's
    command under <out>/artifacts/<name>, before the first run whose overrides name it."""

    WHAT: ClassVar[str] = "artifact"
    FILE: ClassVar[str] = "artifact.json"

    def finished(self) -> bool:  # its jobs (launch.train_prm) exit 0 only when done
        return True


def plan_artifacts(grid: Grid, out: str) -> dict[str, Artifact]:
    """The grid's artifacts with their directories and commands."""
    artifacts = {}
    for name, spec in grid.artifacts.items():
        workdir = os.path.join(out, "artifacts", name)
        argv = [sys.executable, "-m", spec.job, f"--config={display_path(spec.config)}",
                f"--workdir={workdir}", *override_flags(spec.overrides)]
        artifacts[name] = Artifact(name, workdir, dict(spec.overrides), argv, spec.config)
    return artifacts


def substitute_artifacts(overrides: Mapping[str, Any], artifacts: Mapping[str, Artifact]
                         ) -> tuple[dict[str, Any], list[Artifact]]:
    """The overrides with every `{artifact:NAME}` in a string value replaced by that artifact's
    directory, and the artifacts they name (in order of first use)."""
    used: dict[str, Artifact] = {}

    def directory(match) -> str:
        used.setdefault(match.group(1), artifacts[match.group(1)])
        return artifacts[match.group(1)].workdir

    resolved = {key: ARTIFACT_REFERENCE.sub(directory, value) if isinstance(value, str)
                else value for key, value in overrides.items()}
    return resolved, list(used.values())


@dataclasses.dataclass
class Run:
    variant: str
    seed: int
    workdir: str
    overrides: dict[str, Any]     # grid overrides, then the variant's, then the seed field
    argv: list[str]
    config: str
    steps: int                    # the experiment's train.steps
    warm_start: WarmStart | None
    artifacts: list[Artifact] = dataclasses.field(default_factory=list)

    @property
    def label(self) -> str:
        return f"variant={self.variant} seed={self.seed}"

    def record(self) -> dict:
        return {"variant": self.variant, "seed": self.seed, "config": display_path(self.config),
                "overrides": jsonable(self.overrides), "steps": self.steps,
                "warm_start": self.warm_start.key if self.warm_start else None,
                "command": self.argv, "command_line": shlex.join(self.argv)}


def substitute_warm_start(overrides: Mapping[str, Any], warm: WarmStart | None,
                          variant: str) -> dict[str, Any]:
    """The overrides with `{warm_start}` in a string value replaced by the run's warm-start
    directory (e.g. the warm-start policy as PATR's in-process judge); GridError for a run
    without a warm start."""
    resolved = {}
    for key, value in overrides.items():
        if isinstance(value, str) and WARM_START_REFERENCE in value:
            if warm is None:
                raise GridError(f"variant {variant!r}: {key} names {WARM_START_REFERENCE} but "
                                f"the run has no warm start (train.init is not 'sft')")
            value = value.replace(WARM_START_REFERENCE, warm.workdir)
        resolved[key] = value
    return resolved


def plan_runs(grid: Grid, out: str, variants: Sequence[str] | None = None,
              seeds: Sequence[int] | None = None) -> list[Run]:
    """The runs of `variants` (default: all, in grid order) x `seeds` (default: the grid's), with
    their commands and shared warm starts; each run's steps and initialisation are its typed
    experiment's (GridError if a run's config is invalid). Creates nothing."""
    out = os.path.abspath(out)
    warm_starts: dict[str, WarmStart] = {}
    artifacts = plan_artifacts(grid, out)
    runs = []
    for variant in variants or list(grid.variants):
        for seed in seeds if seeds is not None else grid.seeds:
            overrides, used = substitute_artifacts(grid.run_overrides(variant, seed), artifacts)
            exp = grid.experiment(variant, overrides)
            workdir = os.path.join(out, "runs", variant, f"seed_{seed}")
            warm = None
            if exp.train.init == "sft":
                defining = overrides if grid.warm_start is None else grid.warm_start
                key = warm_start_key(grid.config, defining)
                if key not in warm_starts:
                    ws_dir = os.path.join(out, "warm_starts", key)
                    ws_over = warm_start_overrides(defining)
                    warm_starts[key] = WarmStart(
                        key, ws_dir, ws_over,
                        [sys.executable, "-m", "launch.sft", f"--config={grid.config_arg}",
                         f"--workdir={ws_dir}", *override_flags(ws_over)], grid.config)
                warm = warm_starts[key]
            overrides = substitute_warm_start(overrides, warm, variant)
            argv = [sys.executable, "-m", "launch.train", f"--config={grid.config_arg}",
                    f"--workdir={workdir}", *override_flags(overrides)]
            runs.append(Run(variant, seed, workdir, overrides, argv, grid.config,
                            exp.train.steps, warm, used))
    return runs
