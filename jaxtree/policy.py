"""Resolving a `--model` / `--checkpoint` argument or the `model` config section into a policy
(architecture, params, tokenizer)."""

from __future__ import annotations

import dataclasses
import os

import jax

from jaxtree import models
from jaxtree.config import ConfigError, Section, one_of, option
from jaxtree.models.presets import BYTE_VOCAB_PRESETS, PRESETS
from jaxtree.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, load_tokenizer
from jaxtree.checkpoints import (is_policy_checkpoint, load_policy_checkpoint,
                                 read_policy_metadata)


@dataclasses.dataclass
class Policy:
    config: models.ModelConfig
    params: dict
    tokenizer: Tokenizer
    source: str  # 'random init (preset NAME, seed S)' or the checkpoint directory
    tokenizer_spec: str = "byte"  # 'byte' or the tokenizer directory (recorded in checkpoints)


@dataclasses.dataclass(frozen=True)
class ModelSpec(Section):
    """Config section `model`: the policy training or evaluation starts from."""

    name: str = option("tiny", "a preset (random init), a jaxtree checkpoint or a Hugging Face "
                       "checkpoint directory")
    dtype: str = option("", "computation dtype ('' = float32 on CPU, bfloat16 on accelerators)",
                        check=one_of(("", "float32", "bfloat16")))
    init_seed: int = option(0, "seed of a preset's random initialisation")

    def check(self):
        if not self.name:
            raise ConfigError("name", "'' must name a preset or a checkpoint directory")

    def tokenizer(self) -> Tokenizer:
        """The tokenizer of the policy `name` names, without loading its parameters (for the
        checks a job makes before any work); a ConfigError naming `model.name` if it names
        nothing."""
        try:
            return load_policy_tokenizer(self.name)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError("model.name", f"{self.name!r}: {e}") from e

    def load(self, spec: str | None = None) -> "Policy":
        """The policy `name` names, or `spec` (e.g. a warm-start checkpoint) in its place with
        this section's dtype. A `name` that names nothing is a ConfigError naming `model.name`;
        errors of an explicit `spec` propagate as they are."""
        if spec is not None:
            return load_policy(spec, dtype=self.dtype or None, seed=self.init_seed)
        try:
            return load_policy(self.name, dtype=self.dtype or None, seed=self.init_seed)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError("model.name", f"{self.name!r}: {e}") from e


def load_policy_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer `load_policy(spec)` would come with, without its parameters."""
    if spec in PRESETS:
        if spec not in BYTE_VOCAB_PRESETS:
            raise ValueError(f"preset {spec!r} has no built-in tokenizer; load a checkpoint "
                             "directory with its tokenizer files instead")
        return ByteTokenizer()
    if os.path.isdir(spec) and is_policy_checkpoint(spec):
        return load_tokenizer(read_policy_metadata(spec).get("tokenizer", "byte"))
    if os.path.isdir(spec):
        return HFTokenizer(spec)
    raise ValueError(_not_a_policy(spec))


def load_policy(spec: str, dtype: str | None = None, seed: int = 0) -> Policy:
    """A preset name (random initialisation from `seed`), a jaxtree checkpoint (a workdir, its
    `checkpoints` directory or one step directory) or a local Hugging Face checkpoint directory.

    dtype defaults to float32 on CPU and bfloat16 on accelerators (a jaxtree checkpoint keeps the
    dtype it was trained with unless one is given). Presets with the byte vocabulary come with the
    ByteTokenizer; a Hugging Face directory must hold its tokenizer files next to config.json and
    the weights.
    """
    if spec in PRESETS:
        config = models.get_preset(spec, dtype=dtype)
        if spec not in BYTE_VOCAB_PRESETS:
            raise ValueError(f"preset {spec!r} has no built-in tokenizer; load a checkpoint directory "
                             "with its tokenizer files instead")
        params = models.init_params(config, jax.random.key(seed))
        return Policy(config, params, ByteTokenizer(), f"random init (preset {spec}, seed {seed})")
    if os.path.isdir(spec) and is_policy_checkpoint(spec):
        config, params, tokenizer_spec, _ = load_policy_checkpoint(spec)
        if dtype is not None:
            config = config.replace(dtype=dtype, param_dtype=dtype)
            params = jax.tree_util.tree_map(lambda x: x.astype(config.weight_dtype), params)
        return Policy(config, params, load_tokenizer(tokenizer_spec), spec, tokenizer_spec)
    if os.path.isdir(spec):
        config, params = models.load_pretrained(spec, dtype=dtype)
        return Policy(config, params, HFTokenizer(spec), spec, os.path.abspath(spec))
    raise ValueError(_not_a_policy(spec))


def _not_a_policy(spec: str) -> str:
    return (f"{spec!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor an existing "
            "checkpoint directory (jaxtree or Hugging Face)")
