"""Building blocks the launch jobs share: configs to environments, rollouts and policies."""

from __future__ import annotations

import os
from typing import Callable

import ml_collections

import environments
from environments.base import TextEnv
from jaxtree.policy import Policy, load_policy
from jaxtree.rollout.engine import RolloutConfig
from jaxtree.sampling.logits_processing import SamplingConfig


class ConfigError(ValueError):
    """An invalid config value; the message names the field."""


def require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"config.{field}: {message}")


def env_factory(config: ml_collections.ConfigDict) -> Callable[[], TextEnv]:
    """A zero-argument constructor of the configured environment (validated once, now)."""
    name = config.env.name
    require(name in environments.names(), "env.name",
            f"unknown environment {name!r}; expected one of {environments.names()}")
    options = dict(config.env.get("options", {}))
    try:
        environments.make(name, **options)
    except ValueError as e:
        raise ConfigError(f"config.env.options: {e}") from e
    return lambda: environments.make(name, **options)


def rollout_config(config: ml_collections.ConfigDict, temperature: float | None = None,
                   record_verifier: bool = False) -> RolloutConfig:
    r = config.rollout
    try:
        sampling = SamplingConfig(r.temperature if temperature is None else temperature,
                                  r.top_k, r.top_p)
        return RolloutConfig(num_slots=r.num_slots, context_length=r.context_length,
                             max_action_tokens=r.max_action_tokens,
                             max_turns=r.get("max_turns") or None, sampling=sampling,
                             record_verifier=record_verifier)
    except ValueError as e:
        raise ConfigError(f"config.rollout: {e}") from e


def policy_from_config(config: ml_collections.ConfigDict, spec: str | None = None) -> Policy:
    """The configured model (config.model.name: a preset, a jaxtree or HF checkpoint), or `spec`."""
    spec = spec or config.model.name
    require(bool(spec), "model.name", "must name a preset or a checkpoint directory")
    try:
        return load_policy(spec, dtype=config.model.get("dtype") or None,
                           seed=config.model.get("init_seed", 0))
    except FileNotFoundError as e:
        raise ConfigError(f"config.model.name={spec!r}: {e}") from e


def workdir_path(workdir: str, *parts: str) -> str:
    os.makedirs(workdir, exist_ok=True)
    return os.path.join(workdir, *parts)


def run_app(main) -> None:
    """`absl.app.run(main)`, but a bad `--config.x.y=...` override (an unknown field, a value of
    the wrong type) exits with a one-line message naming it instead of a traceback."""
    import sys

    from absl import app, flags

    def parse(argv):
        try:
            return flags.FLAGS(argv)
        except Exception as e:  # noqa: BLE001 - any parse failure is the user's flag, report it
            message = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
            sys.exit(f"invalid command-line flag or config override: {message}")

    app.run(main, flags_parser=parse)
