"""The experiment config: its sections, the typed experiment every job reads, recipes, old names.

A config file in `configs/` builds an `ml_collections.ConfigDict` with `base_config(...)` (every
section, at its defaults) and overrides what its experiment changes; RL experiments apply a recipe
with `rl_config(config, "grpo" | "dapo" | "drgrpo")`. Every launch job turns the whole config into
a typed, validated `Experiment` with `Experiment.from_config(config)`: each section is read by the
module that owns it (one frozen dataclass per section, `jaxtree.config.Section`), so an unknown
field or a bad value fails at launch with one line naming `section.field`.

Sections (owner):
  env         the environment (this module)
  model       the starting policy (jaxtree.policy.ModelSpec)
  sft         the supervised warm start (jaxtree.train.warm_start.WarmStartConfig)
  rollout     slot engine, sampling, strategy and batch shape (jaxtree.rollout.strategies);
              rollout.<strategy> holds the strategy's settings, e.g. rollout.latr
  reward      summed reward terms (jaxtree.rewards); reward.<term> holds a term's settings
  advantage   the advantage estimator (jaxtree.advantages); advantage.<name> its settings
  filter      the group filter (jaxtree.advantages.group_filters); filter.<name> its settings
  loss        clipped surrogate, aggregation, KL, entropy (jaxtree.losses.LossConfig)
  optim       the optimizer and its schedule (jaxtree.train.optim.OptimConfig)
  train       the RL loop (jaxtree.train.config.TrainConfig)
  eval        held-out evaluation, for launch.evaluate and during training (jaxtree.evaluation)
  checkpoint  training checkpoints (jaxtree.checkpoints.CheckpointConfig)
  mesh        the device mesh (jaxtree.parallel.mesh.MeshConfig)

`configs/README.md` holds the generated reference of every field (`reference_markdown`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Any, Callable, Mapping

import ml_collections
from absl import logging

import environments
from environments.base import TextEnv
from jaxtree.advantages import AdvantageStage, FilterStage
from jaxtree.checkpoints import CheckpointConfig
from jaxtree.config import ConfigError, Section, one_of, option, reference_rows
from jaxtree.evaluation import EvalConfig
from jaxtree.losses import LossConfig
from jaxtree.parallel.mesh import MeshConfig
from jaxtree.policy import ModelSpec
from jaxtree.rewards import RewardStage
from jaxtree.rollout.strategies import RolloutStage
from jaxtree.train.config import TrainConfig
from jaxtree.train.optim import OptimConfig
from jaxtree.train.warm_start import WarmStartConfig


@dataclasses.dataclass(frozen=True)
class EnvSpec(Section):
    """Config section `env`: which environment, built with which options."""

    name: str = option("frozen_lake", "a registered environment",
                       check=one_of(environments.names))
    options: dict = option({}, "keyword arguments of environments.make(name, ...)")
    eval_options: dict = option({}, "options that evaluations use instead of those in `options` "
                                "(e.g. VPR's fixed strong MCTS opponent: {'opponent': 'mcts'})")

    def check(self):
        for field, options in (("options", self.options),
                               ("eval_options", {**self.options, **self.eval_options})):
            try:
                environments.make(self.name, **options)
            except (TypeError, ValueError) as e:
                raise ConfigError(field, f"{options!r} does not build {self.name}: {e}") \
                    from None

    def factory(self) -> Callable[[], TextEnv]:
        """A zero-argument constructor of the configured environment (training)."""
        name, options = self.name, dict(self.options)
        return lambda: environments.make(name, **options)

    def eval_factory(self) -> Callable[[], TextEnv]:
        """The environment of evaluations: `options` updated with `eval_options`."""
        name, options = self.name, {**self.options, **self.eval_options}
        return lambda: environments.make(name, **options)


SECTIONS: dict[str, type[Section]] = {
    "env": EnvSpec, "model": ModelSpec, "sft": WarmStartConfig, "rollout": RolloutStage,
    "reward": RewardStage, "advantage": AdvantageStage, "filter": FilterStage,
    "loss": LossConfig, "optim": OptimConfig, "train": TrainConfig, "eval": EvalConfig,
    "checkpoint": CheckpointConfig, "mesh": MeshConfig,
}

# Fields of the flat layout before the sections existed -> where they live now.
MOVED = {
    "train.strategy": "rollout.strategy", "train.groups_per_step": "rollout.groups_per_step",
    "train.group_size": "rollout.group_size", "train.advantage": "advantage.name",
    "train.adv_epsilon": "advantage.grpo.epsilon", "train.gamma": "advantage.grpo_step.gamma",
    "train.step_reward_valid": "reward.step_validity.valid",
    "train.step_reward_invalid": "reward.step_validity.invalid",
    "train.filter": "filter.name", "train.keep_fraction": "filter.top_std.keep_fraction",
    "train.max_sampling_rounds": "filter.dynamic_sampling.max_rounds",
    "train.loss_aggregation": "loss.aggregation", "train.norm_constant": "loss.norm_constant",
    "train.eps_low": "loss.eps_low", "train.eps_high": "loss.eps_high",
    "train.kl_coef": "loss.kl_coef", "train.entropy_coef": "loss.entropy_coef",
    "train.learning_rate": "optim.learning_rate", "train.lr_schedule": "optim.schedule",
    "train.warmup_steps": "optim.warmup_steps", "train.weight_decay": "optim.weight_decay",
    "train.max_grad_norm": "optim.max_grad_norm", "train.adam_b1": "optim.b1",
    "train.adam_b2": "optim.b2", "train.mesh": "mesh", "train.eval_every": "eval.every",
    "train.eval_num_tasks": "eval.num_tasks",
    "train.eval_samples_per_task": "eval.samples_per_task", "train.save_every": "checkpoint.every",
    "train.keep_checkpoints": "checkpoint.keep",
    "train.algorithm": "a recipe: jaxtree.experiment.rl_config(config, 'grpo' | 'dapo' | "
                       "'drgrpo')",
    "rollout.temperature": "rollout.sampling.temperature", "rollout.top_k": "rollout.sampling.top_k",
    "rollout.top_p": "rollout.sampling.top_p", "latr": "rollout.latr",
    "latr.gamma": "rollout.latr.eta_decay",
    **{f"latr.{f}": f"rollout.latr.{f}" for f in ("tau_abs", "tau_rel", "tau_ed", "windows",
                                                   "completion", "eta0", "eta_schedule")},
}


def moved_message(path: str) -> str | None:
    """Where a field of the old flat layout went ('moved to config.loss.kl_coef'); None if
    `path` is not one."""
    if path not in MOVED:
        return None
    new = MOVED[path]
    return f"gone: use {new}" if new.startswith("a recipe") else f"moved to config.{new}"


@dataclasses.dataclass(frozen=True)
class Experiment:
    """Every section of an experiment config, typed and validated."""

    env: EnvSpec
    model: ModelSpec
    sft: WarmStartConfig
    rollout: RolloutStage
    reward: RewardStage
    advantage: AdvantageStage
    filter: FilterStage
    loss: LossConfig
    optim: OptimConfig
    train: TrainConfig
    eval: EvalConfig
    checkpoint: CheckpointConfig
    mesh: MeshConfig

    @classmethod
    def from_config(cls, config: Any) -> "Experiment":
        """Reads every section of `config` (a ConfigDict or dict; absent sections take their
        defaults). Raises ConfigError naming the first invalid or unknown field; a field of the
        old flat layout is named with its new place."""
        values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        for name in values:
            if name not in SECTIONS:
                raise ConfigError(name, moved_message(name) or
                                  f"unknown section; sections are {', '.join(SECTIONS)}")
        typed = {}
        for name, section in SECTIONS.items():
            try:
                typed[name] = section.from_config(values.get(name), name)
            except ConfigError as e:
                moved = moved_message(e.path)
                if moved and e.message.startswith("unknown field"):
                    raise ConfigError(e.path, moved) from None
                raise
        return cls(**typed)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name).to_dict() for name in SECTIONS}

    @staticmethod
    def defaults() -> dict[str, Any]:
        """Every section's default values, nested like `to_dict`."""
        return {name: section.defaults() for name, section in SECTIONS.items()}


# ----------------------------------------------------------------------------- config files

def set_path(config: ml_collections.ConfigDict | dict, path: str, value: Any) -> None:
    """config.<path> = value for a dotted path ('loss.kl_coef') of a ConfigDict or a nested dict;
    missing subsections are created, of their parent's type."""
    *sections, field = path.split(".")
    node = config
    for name in sections:
        if name not in node:
            node[name] = type(node)()
        node = node[name]
    node[field] = value


def default_config() -> ml_collections.ConfigDict:
    """Every section at its defaults."""
    return ml_collections.ConfigDict({name: section.defaults()
                                      for name, section in SECTIONS.items()})


def base_config(env: str, env_options: dict, *, context_length: int, max_action_tokens: int,
                epsilon: float) -> ml_collections.ConfigDict:
    """Defaults for the tiny byte-level model on one environment (compact prompts): every
    section, with the environment, the context and action budgets and the warm start's noise."""
    config = default_config()
    config.env.name = env
    config.env.options = dict(env_options)
    config.rollout.context_length = context_length
    config.rollout.max_action_tokens = max_action_tokens
    config.sft.epsilon = epsilon
    return config


# RL recipes: the settings that define an algorithm (dotted config paths).
RECIPES: dict[str, dict[str, Any]] = {
    # GRPO (PATR Eq. 1-2, LATR Eq. 2): group mean/std advantages, sequence-mean-token-mean loss,
    # symmetric clip, a small KL penalty to the reference policy.
    "grpo": {"advantage.name": "grpo", "loss.aggregation": "seq-mean-token-mean",
             "loss.eps_low": 0.2, "loss.eps_high": 0.2, "loss.kl_coef": 0.001,
             "filter.name": "none"},
    # DAPO (LATR Eq. 4): token-mean loss, clip-higher, no KL term, dynamic sampling.
    "dapo": {"advantage.name": "grpo", "loss.aggregation": "token-mean", "loss.eps_low": 0.2,
             "loss.eps_high": 0.28, "loss.kl_coef": 0.0, "filter.name": "dynamic_sampling"},
    # Dr.GRPO (Liu et al., 2025): GRPO without the std division of the advantage and without
    # the per-response length normalisation (a constant instead); clip and KL as GRPO's.
    "drgrpo": {"advantage.name": "drgrpo", "loss.aggregation": "seq-sum", "loss.eps_low": 0.2,
               "loss.eps_high": 0.2, "loss.kl_coef": 0.001, "filter.name": "none"},
}

# The `:lora` variant of the pretrained-model configs (configs/*_smollm2.py): rank-16 adapters on
# every projection over the frozen model (also the KL reference: no second copy), at 10x the
# full fine-tuning learning rate (the adapters start at zero); the warm start trains adapters too.
# An option, not the default: on a 2-core CPU rank 16 took 1.04x the full model's update time for
# 0.59x its memory (docs/benchmarks.md, "LoRA and action-only logits"), and whether it learns as
# well is configs/grids/lora_frozen_lake_smollm2.py's question.
LORA_VARIANT = {"model.lora.rank": 16, "optim.learning_rate": 1e-5}

# The model settings of those configs: SmolLM2-135M-Instruct, each block recomputed in the
# backward pass and the 49,152-token vocabulary projected 256 positions at a time (the update's
# temporaries 3.5x smaller for 1.2x the time: docs/benchmarks.md, "Training memory"), and the
# prefix forest for batches below a unique-token fraction of 0.55 (it breaks even at ~0.8 on this
# model and is ~1.5x faster at 0.55: trees take it, GRPO groups do not; docs/benchmarks.md,
# "Prefix-shared update").
SMOLLM2 = {"model.name": "smollm2-135m-instruct", "model.remat": True, "model.logits_chunk": 256,
           "train.prefix_break_even": 0.55}


def variant_overrides(variant: str) -> dict[str, Any]:
    """The overrides of a config file's variant (`--config=FILE:VARIANT`): '' or 'lora'."""
    variants = {"": {}, "lora": LORA_VARIANT}
    if variant not in variants:
        raise ValueError(f"variant {variant!r}: expected one of {sorted(variants)}")
    return dict(variants[variant])


# RL experiments evaluate on 100 held-out tasks x 2 samples every 10 steps.
RL_EVAL = {"eval.num_tasks": 100, "eval.samples_per_task": 2}


def rl_config(config: ml_collections.ConfigDict, recipe: str,
              overrides: Mapping[str, Any] | None = None,
              **old_train_fields) -> ml_collections.ConfigDict:
    """Applies an RL recipe (RECIPES) and then `overrides` ({dotted path: value}) to a config.

    Keyword arguments name fields of the old flat `train` section (`strategy='latr'`); they
    keep working, moved to their new place with a warning.

    The papers train multi-billion-parameter models with learning rates ~1e-6 and 256-trajectory
    batches; the tiny model learns with a larger rate and smaller batches, which is what the
    defaults are tuned for.
    """
    if recipe not in RECIPES:
        raise ValueError(f"recipe={recipe!r}: expected one of {sorted(RECIPES)}")
    settings = {**RL_EVAL, **RECIPES[recipe]}
    for name, value in old_train_fields.items():
        path = f"train.{name}"
        if path in MOVED and not MOVED[path].startswith("a recipe"):
            logging.warning("rl_config(%s=...): config.%s %s", name, path, moved_message(path))
            path = MOVED[path]
        elif name not in SECTIONS["train"].defaults():
            raise ValueError(f"rl_config: unknown field {name!r}; pass new fields as "
                             "overrides={'section.field': value}")
        settings[path] = value
    settings.update(overrides or {})
    for path, value in settings.items():
        set_path(config, path, value)
    return config


# The shipped configs (a source checkout's configs/): where `sibling_config` also looks, so a
# shipped config copied elsewhere to be edited still finds the config it extends.
SHIPPED_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "configs")


def sibling_config(config_file: str, name: str) -> ml_collections.ConfigDict:
    """`get_config()` of configs/<name>.py next to `config_file`, so an experiment can extend
    another one (e.g. RL on top of its warm-start config) wherever the configs directory lives;
    when there is none beside it, the shipped one of that name (a shipped config copied to
    another folder). FileNotFoundError naming both places when neither exists."""
    here = os.path.join(os.path.dirname(os.path.abspath(config_file)), f"{name}.py")
    shipped = os.path.join(SHIPPED_CONFIGS, f"{name}.py")
    path = here if os.path.exists(here) else shipped
    spec = importlib.util.spec_from_file_location(f"_jaxtree_config_{name}", path)
    if spec is None or not os.path.exists(path):
        raise FileNotFoundError(f"{config_file} extends the config {name!r}, which is neither "
                                f"beside it ({here}) nor among the shipped configs ({shipped})")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


# ----------------------------------------------------------------------------- reference

REFERENCE_BEGIN = "<!-- config reference: generated by `python -m launch.config_reference`; " \
                  "do not edit by hand -->"
REFERENCE_END = "<!-- end of the config reference -->"


def reference_markdown() -> str:
    """The config reference: one table per section (field, type, default, meaning), the
    settings of every registered part included."""
    out = [REFERENCE_BEGIN, ""]
    for name, section in SECTIONS.items():
        doc = (section.__doc__ or "").strip().splitlines()[0]
        out += [f"### `{name}`", "", doc, "", "| field | type | default | allowed | meaning |",
                "|---|---|---|---|---|"]
        for path, type_name, default, allowed, meaning in reference_rows(section, name):
            cell = lambda text: str(text).replace("|", "\\|")
            out.append(f"| `{path}` | `{cell(type_name)}` | `{cell(default)}` | {cell(allowed)} "
                       f"| {cell(meaning)} |")
        out.append("")
    out.append(REFERENCE_END)
    return "\n".join(out) + "\n"
