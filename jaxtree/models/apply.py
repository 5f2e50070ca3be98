"""Pure functions over (config, params): initialisation, full forward, cache extension.

`params` is the parameter pytree, or `jaxtree.models.lora.LoraParams` (a frozen base plus LoRA
adapters, applied unmerged)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxtree.models.config import ModelConfig
from jaxtree.models.kv_cache import KVCache
from jaxtree.models.lora import model_variables
from jaxtree.models.transformer import Transformer


@functools.partial(jax.jit, static_argnames=("config",))
def init_params(config: ModelConfig, rng: jax.Array) -> dict:
    """Random parameters (normal(0.02) projections, unit norms), in config.param_dtype.

    Jitted once per config (a job initialises the same architecture several times: policy,
    reference, restores), not traced again at every call."""
    return Transformer(config).init(rng, jnp.zeros((1, 1), jnp.int32))["params"]


@functools.partial(jax.jit, static_argnames=("config",))
def forward(config: ModelConfig, params: dict, tokens: jax.Array) -> jax.Array:
    """Full causal forward without a cache.

    Args:
      config: the architecture.
      params: the parameter pytree.
      tokens: int32[B, T], each row a sequence starting at position 0. Right padding is harmless:
        causal attention never lets a real token see the padding after it.

    Returns:
      float32[B, T, V] logits.
    """
    logits, _ = Transformer(config).apply(model_variables(params), tokens)
    return logits


@functools.partial(jax.jit, static_argnames=("config",))
def hidden_states(config: ModelConfig, params: dict, tokens: jax.Array) -> jax.Array:
    """The full causal forward's hidden states after the final norm, for heads other than the
    language-model one (a process reward model's score head).

    Args:
      config: the architecture.
      params: the parameter pytree; the output projection (`lm_head`) may be absent.
      tokens: int32[B, T], each row a sequence starting at position 0 (right padding is harmless).

    Returns:
      [B, T, D] in the compute dtype.
    """
    hidden, _ = Transformer(config).apply(model_variables(params), tokens, return_hidden=True)
    return hidden


@functools.partial(jax.jit, static_argnames=("config", "last_only"), donate_argnames=("cache",))
def extend_cache(config: ModelConfig, params: dict, cache: KVCache, tokens: jax.Array,
                 chunk_lengths: jax.Array, last_only: bool = False):
    """Appends a ragged chunk of tokens to every row of a cache (donated: updated in place).

    Args:
      config: the architecture.
      params: the parameter pytree.
      cache: KVCache with capacity S; row b's new tokens go to positions cache.lengths[b] + [0, T).
      tokens: int32[B, T], right-padded per row.
      chunk_lengths: int32[B], real tokens per row (0 appends nothing to that row).
      last_only: return logits only for each row's last real token.

    Returns:
      (logits float32[B, T, V] or float32[B, V], the new KVCache).
    """
    return Transformer(config).apply(model_variables(params), tokens, cache, chunk_lengths, last_only)


def num_params(params) -> int:
    return sum(int(x.size) for x in jax.tree_util.tree_leaves(params))


__all__ = ["init_params", "forward", "hidden_states", "extend_cache", "num_params", "KVCache"]
