"""LoRA adapters (Hu et al., 2021) on the transformer's projections, trained over a frozen base.

A target projection y = x W (+ b) becomes y = x W (+ b) + s (x A) B with A [D_in, r] and B [r,
D_out] trainable, W and b frozen, s = alpha / r. B starts at zero, so a fresh adapter is the base
exactly; A starts uniform in +-1/sqrt(D_in) (the bound of PEFT's default Kaiming init, so learning
rates tuned with PEFT carry over). No dropout.

Targets are named by their projection: q, k, v, o (attention) and gate, up, down (MLP), in every
family the transformer supports (Llama, Qwen2 with q/k/v biases, Qwen3 with q/k norms; a GGUF file
loads into the same parameters). The adapters are their own pytree, shaped like the parameters'
blocks:

    {"layers_0": {"attn": {"q": {"a": float32[D, r], "b": float32[r, H x Dh]}, ...},
                  "mlp": {"gate": {"a": float32[D, r], "b": float32[r, I]}, ...}}, ...}

and reach the model as its `lora` variable collection (`model_variables`): the transformer adds
(x A)(s B) after a target's projection when, and only when, that collection is given, so every
apply without adapters computes exactly what it did before LoRA existed. `LoraParams(base,
adapters, scale)` carries both trees through the functions that take `params` (forward, the
token scores of the losses, the cache extension of the samplers); the update differentiates the
adapters alone, so with the base a frozen input XLA computes no weight gradient of the base and
the optimizer state covers the adapters only. Sampling merges W + s A B into a copy of the
target kernels once per step (`merge`, docs/design.md "LoRA" for the measurements).

Why hand-written rather than `qwix` (Google's JAX LoRA / quantisation library, which Tunix uses):
qwix 0.1.8 imports and runs on this model (its `LoraProvider` intercepts `dot_general` inside the
matched Flax modules, remat scan included), but it puts A and B into the `params` collection
beside each kernel (`kernel_lora_a`), in the kernel's dtype: the trainable/frozen split would be a
name filter over one tree at every call, and a bfloat16 base would get bfloat16 adapters, whose
small AdamW steps round away (docs/design.md, "Two dtypes"). Interception by monkeypatching jax
functions during a trace is also harder to reason about than seven explicit additions, and the
package (14k lines: quantisation providers, Pallas kernels, NNX support, plus `opt_einsum`) is a
heavy dependency for ~200 lines of adapter code. Neither helps the PEFT export, which is a
renaming either way. qwix's strength is a quantized frozen base (QLoRA); that is the reason to
revisit it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.config import ConfigError, Section, each, non_negative, one_of, option, positive

# target -> (block submodule, projection module) in `jaxtree.models.transformer`
TARGETS: dict[str, tuple[str, str]] = {
    "q": ("attn", "q_proj"), "k": ("attn", "k_proj"), "v": ("attn", "v_proj"),
    "o": ("attn", "o_proj"), "gate": ("mlp", "gate_proj"), "up": ("mlp", "up_proj"),
    "down": ("mlp", "down_proj"),
}
COLLECTION = "lora"  # the Flax variable collection the adapters are applied from


@dataclasses.dataclass(frozen=True)
class LoraConfig(Section):
    """Config section `model.lora`: low-rank adapters trained instead of the whole model."""

    rank: int = option(0, "rank r of the adapters (0: off, the whole model trains)",
                       check=non_negative())
    alpha: float = option(16.0, "scale numerator: the update is (alpha / rank) x A B",
                          check=positive())
    targets: tuple[str, ...] = option(
        tuple(TARGETS), "projections that get an adapter, any of q, k, v, o, gate, up, down "
        "(all seven by default: QLoRA found every linear layer needed to match full "
        "fine-tuning; q,v alone is the original paper's cheaper choice)",
        check=each(one_of(tuple(TARGETS))))
    base_dtype: str = option(
        "", "storage dtype of the frozen base ('' = model.param_dtype's choice); bfloat16 "
        "halves its memory, and a frozen base loses nothing to bfloat16's rounding of small "
        "updates", check=one_of(("", "float32", "bfloat16")))
    seed: int = option(0, "seed of the adapters' random A matrices")

    def check(self):
        if self.rank and not self.targets:
            raise ConfigError("targets", "() names no projection; give at least one of "
                              f"{', '.join(TARGETS)}")
        if len(set(self.targets)) != len(self.targets):
            raise ConfigError("targets", f"{self.targets!r} names a projection twice")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LoraParams:
    """A policy as frozen base parameters plus adapters: accepted wherever the model functions
    take `params`. `scale` (alpha / rank) is static: part of the tree's structure, not a leaf."""

    base: Any
    adapters: Any
    scale: float = dataclasses.field(metadata=dict(static=True))


def model_variables(params) -> dict:
    """The variables to apply the transformer with: {'params': params}, and for LoraParams the
    base's with the adapters as the `lora` collection, B pre-multiplied by the scale (one
    [r, D_out] product per adapter instead of one per activation)."""
    if not isinstance(params, LoraParams):
        return {"params": params}
    scaled = jax.tree_util.tree_map_with_path(
        lambda path, x: x * jnp.asarray(params.scale, x.dtype) if path[-1].key == "b" else x,
        params.adapters)
    return {"params": params.base, COLLECTION: scaled}


def base_params(params):
    """The plain parameter tree of `params` (the base of LoraParams)."""
    return params.base if isinstance(params, LoraParams) else params


def as_model_params(params, base, scale: float):
    """`params` itself when `base` is None (full fine-tuning), else LoraParams(base, params)."""
    return params if base is None else LoraParams(base, params, scale)


def add_adapter(module, target: str, x: jax.Array, y: jax.Array, dtype) -> jax.Array:
    """y + (x A)(s B) of `target` when `module` (a block's attn or mlp) is applied with adapters
    for it, else y itself. x: [..., D_in], y: [..., D_out]; computed in `dtype`."""
    if not module.has_variable(COLLECTION, target):
        return y
    adapter = module.get_variable(COLLECTION, target)
    low = jnp.dot(x.astype(dtype), adapter["a"].astype(dtype))  # [..., r]
    return y + jnp.dot(low, adapter["b"].astype(dtype))


def _kernel(base, layer: str, target: str):
    block, proj = TARGETS[target]
    return base[layer][block][proj]["kernel"]


def _layers(base) -> list[str]:
    layers = [name for name in base if name.startswith("layers_")]
    return sorted(layers, key=lambda name: int(name.split("_")[1]))


def init_adapters(lora: LoraConfig, base, rng: jax.Array | None = None) -> dict:
    """Fresh float32 adapters for `base` (arrays or ShapeDtypeStructs: only shapes are read):
    A uniform in +-1/sqrt(D_in), B zero. Each adapter's A is drawn from its own key,
    fold_in(fold_in(key(lora.seed), layer), target), so adding a target leaves the others as
    they were."""
    if not lora.enabled:
        raise ValueError("init_adapters needs lora.rank > 0")
    rng = jax.random.key(lora.seed) if rng is None else rng
    out: dict = {}
    for layer in _layers(base):
        layer_key = jax.random.fold_in(rng, int(layer.split("_")[1]))
        for target in lora.targets:
            d_in, d_out = _kernel(base, layer, target).shape
            bound = 1.0 / np.sqrt(d_in)
            key = jax.random.fold_in(layer_key, list(TARGETS).index(target))
            a = jax.random.uniform(key, (d_in, lora.rank), jnp.float32, -bound, bound)
            block = out.setdefault(layer, {}).setdefault(TARGETS[target][0], {})
            block[target] = {"a": a, "b": jnp.zeros((lora.rank, d_out), jnp.float32)}
    return out


def _replace_kernels(base, kernels: dict) -> dict:
    """A copy of the dict nesting of `base` with {(layer, block, proj): kernel} replaced; every
    other leaf is the base's own array (not copied)."""
    out = {name: dict(sub) if isinstance(sub, dict) else sub for name, sub in base.items()}
    for (layer, block, proj), kernel in kernels.items():
        out[layer] = dict(out[layer])
        out[layer][block] = dict(out[layer][block])
        out[layer][block][proj] = {**out[layer][block][proj], "kernel": kernel}
    return out


def merge(params: LoraParams, compute_dtype=None) -> dict:
    """Plain parameters equal to `params` as a function: each adapted kernel W replaced by
    W + s A B (summed in float32), every other leaf shared with the base. A kernel is stored in
    the wider of its own dtype and `compute_dtype`: a bfloat16 base computed in float32 keeps
    the adapters' small changes that rounding into bfloat16 would drop."""
    kernels = {}
    for layer, blocks in params.adapters.items():
        for adapters in blocks.values():
            for target, adapter in adapters.items():
                w = _kernel(params.base, layer, target)
                dtype = w.dtype if compute_dtype is None else jnp.promote_types(w.dtype,
                                                                               compute_dtype)
                delta = jnp.dot(adapter["a"].astype(jnp.float32),
                                adapter["b"].astype(jnp.float32)) * params.scale
                block, proj = TARGETS[target]
                kernels[(layer, block, proj)] = (w.astype(jnp.float32) + delta).astype(dtype)
    return _replace_kernels(params.base, kernels)


def content_hash(params) -> str:
    """sha256 over every leaf's path, dtype, shape and bytes: the identity of a base."""
    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        x = np.asarray(leaf)
        digest.update(f"{jax.tree_util.keystr(path)}:{x.dtype}:{x.shape}".encode())
        digest.update(np.ascontiguousarray(x).tobytes())
    return digest.hexdigest()


def describe(lora: LoraConfig, base: dict) -> dict:
    """What a LoRA checkpoint records: the adapters' settings and its base (`base`: how to load
    it, {'name', 'init_seed', 'param_dtype', 'sha256'})."""
    return {"rank": lora.rank, "alpha": lora.alpha, "targets": list(lora.targets), "base": base}
