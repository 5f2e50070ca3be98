"""What every checkpoint reader of this package shares, whatever the file format: the error it
raises and the parameter layout a ModelConfig implies.

`hf_io` (safetensors directories) and `gguf_io` (llama.cpp files) both map a file's tensors onto
the paths listed by `param_paths` and rebuild the nested pytree with `unflatten`; `hf_io`
dispatches `.gguf` paths to `gguf_io`, so these live below both.

A parameter path is the tuple of keys from the pytree's root to a leaf, e.g.
('layers_3', 'attn', 'q_proj', 'kernel').
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from jaxtree.models.apply import init_params
from jaxtree.models.config import ModelConfig


class CheckpointError(ValueError):
    """A checkpoint directory is missing, incomplete, corrupt or does not match its config."""


def param_paths(config: ModelConfig) -> dict[tuple[str, ...], jax.ShapeDtypeStruct]:
    """Every parameter path of `config`'s model with its shape and dtype (no weights are
    allocated: the initialisation is only traced)."""
    return dict(_traced_param_paths(config))


@functools.lru_cache(maxsize=16)
def _traced_param_paths(config: ModelConfig) -> tuple:
    """param_paths' items, traced once per config in a process: every checkpoint load asks, and
    the trace of the model's initialisation costs about 0.1 s even for the tiny model."""
    shapes = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
    flat = jax.tree_util.tree_flatten_with_path(shapes)[0]
    return tuple((tuple(k.key for k in path), leaf) for path, leaf in flat)


def unflatten(flat: dict[tuple[str, ...], Any]) -> dict:
    """{parameter path: value} -> the nested dict pytree the model's `apply` takes."""
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree
