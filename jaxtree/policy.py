"""Resolving a `--model` argument into (config, params, tokenizer)."""

from __future__ import annotations

import dataclasses
import os

import jax

from jaxtree import models
from jaxtree.models.presets import BYTE_VOCAB_PRESETS, PRESETS
from jaxtree.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer


@dataclasses.dataclass
class Policy:
    config: models.ModelConfig
    params: dict
    tokenizer: Tokenizer
    source: str  # 'random init (preset NAME, seed S)' or the checkpoint directory


def load_policy(spec: str, dtype: str | None = None, seed: int = 0) -> Policy:
    """A preset name (random initialisation from `seed`) or a local Hugging Face checkpoint directory.

    dtype defaults to float32 on CPU and bfloat16 on accelerators. Presets with the byte vocabulary come with the ByteTokenizer; a checkpoint directory must hold
    its tokenizer files next to config.json and the weights.
    """
    if spec in PRESETS:
        config = models.get_preset(spec, dtype=dtype)
        if spec not in BYTE_VOCAB_PRESETS:
            raise ValueError(f"preset {spec!r} has no built-in tokenizer; load a checkpoint directory "
                             "with its tokenizer files instead")
        params = models.init_params(config, jax.random.key(seed))
        return Policy(config, params, ByteTokenizer(), f"random init (preset {spec}, seed {seed})")
    if os.path.isdir(spec):
        config, params = models.load_pretrained(spec, dtype=dtype)
        return Policy(config, params, HFTokenizer(spec), spec)
    raise ValueError(f"--model={spec!r} is neither a preset ({', '.join(sorted(PRESETS))}) nor an "
                     "existing checkpoint directory")
