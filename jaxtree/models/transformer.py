"""Flax Linen decoder-only transformer for the Llama, Qwen2 and Qwen3 families.

Pre-norm blocks: RMSNorm -> grouped-query attention with RoPE -> residual -> RMSNorm -> SwiGLU ->
residual, then a final RMSNorm and a (tied or separate) output projection. Family differences are
flags of `ModelConfig`: q/k/v biases (Qwen2), q/k RMSNorm over head_dim before RoPE (Qwen3), explicit
head_dim, tied embeddings.

Parameters are a plain pytree (`model.apply({'params': params}, ...)`). Shapes use B batch rows,
T new tokens, S cache capacity, D width, H query heads, K key/value heads, Dh head width, V vocab.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

from jaxtree.models.config import ModelConfig
from jaxtree.models.kv_cache import KVCache, write_chunk, write_keys
from jaxtree.models.lora import COLLECTION, add_adapter
from jaxtree.models.tree_blocks import TreeBlocks, tree_contexts

# What a rematerialized block keeps for its backward pass (`Transformer.remat_policy`):
# "everything" is recomputed from the block's input; "attention" keeps the projections' outputs
# (q, k, v, the attention output, the MLP's gate and up: the matmuls, ~0.6 MB a token over
# SmolLM2's 30 blocks) and recomputes only the norms, RoPE, the attention's scores and softmax
# and the activations, whose stored form ([B, H, T, T]) is what does not fit.
PROJECTION = "projection"
REMAT_POLICIES = {"everything": None,
                  "attention": jax.checkpoint_policies.save_only_these_names(PROJECTION)}

_MASKED = -1e30  # finite, so a row with every key masked gives a uniform softmax instead of NaN


def rope_inverse_frequencies(config: ModelConfig) -> np.ndarray:
    """float32[Dh/2] inverse frequencies, computed in float32 exactly as transformers does."""
    dim = config.head_dim
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (np.float32(1.0) / (np.float32(config.rope_theta) ** exponents)).astype(np.float32)
    params = dict(config.rope_scaling)
    if config.rope_type == "linear":
        inv_freq = (inv_freq / np.float32(params["factor"])).astype(np.float32)
    elif config.rope_type == "llama3":
        factor = np.float32(params["factor"])
        low, high = np.float32(params["low_freq_factor"]), np.float32(params["high_freq_factor"])
        old_len = np.float32(params["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = np.float32(2 * math.pi) / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv_freq


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
    """Rotates x: [B, T, N, Dh] by positions int32[B, T] (the rotate-half convention of HF)."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, T, Dh/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]  # [B, T, 1, Dh]
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


class RMSNorm(nn.Module):
    """x / rms(x) * scale, normalised in float32 and scaled in the input dtype (as in HF)."""

    eps: float
    dtype: jnp.dtype
    param_dtype: jnp.dtype

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return scale.astype(self.dtype) * normed.astype(self.dtype)


def _dense(features: int, use_bias: bool, config: ModelConfig, name: str) -> nn.Dense:
    return nn.Dense(features, use_bias=use_bias, dtype=config.compute_dtype,
                    param_dtype=config.weight_dtype,
                    kernel_init=nn.initializers.normal(0.02), name=name)


def _norm(config: ModelConfig, name: str) -> RMSNorm:
    return RMSNorm(config.rms_norm_eps, config.compute_dtype, config.weight_dtype, name=name)


def _group_queries(q: jax.Array, kv_heads: int) -> jax.Array:
    """[B, T, H, Dh] -> [B, K, G*T, Dh]: the queries sharing a key/value head as one matrix, so both
    attention contractions are plain batched matmuls over (B, K) with the cache in its stored
    layout (an einsum whose output interleaves T between B and K was ~9x slower on CPU)."""
    batch, chunk, heads, head_dim = q.shape
    groups = heads // kv_heads
    q = q.reshape(batch, chunk, kv_heads, groups, head_dim).transpose(0, 2, 3, 1, 4)
    return q.reshape(batch, kv_heads, groups * chunk, head_dim)


def _ungroup(out: jax.Array, chunk: int) -> jax.Array:
    """[B, K, G*T, Dh] -> [B, T, K*G, Dh] (inverse of _group_queries)."""
    batch, kv_heads, rows, head_dim = out.shape
    groups = rows // chunk
    out = out.reshape(batch, kv_heads, groups, chunk, head_dim).transpose(0, 3, 1, 2, 4)
    return out.reshape(batch, chunk, kv_heads * groups, head_dim)


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Grouped-query attention over a whole sequence.

    Args:
      q: [B, T, H, Dh] queries; k, v: [B, K, S, Dh] keys/values; mask: bool[B, T, S] (True = attend).

    Returns:
      [B, T, H, Dh].
    """
    batch, chunk, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    qg = _group_queries(q, kv_heads)
    scores = jnp.einsum("bkqd,bksd->bkqs", qg, k.astype(q.dtype),
                        preferred_element_type=jnp.float32) / np.float32(math.sqrt(head_dim))
    scores = scores.reshape(batch, kv_heads, heads // kv_heads, chunk, -1)
    scores = jnp.where(mask[:, None, None, :, :], scores, _MASKED)
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    probs = probs.reshape(batch, kv_heads, qg.shape[2], -1)
    out = jnp.einsum("bkqs,bksd->bkqd", probs, v.astype(q.dtype))
    return _ungroup(out, chunk)


def _attend_tree(q: jax.Array, k: jax.Array, v: jax.Array, tree: TreeBlocks) -> jax.Array:
    """Attention of token-tree blocks (`jaxtree.models.tree_blocks`), one ancestor class at a
    time. q: [B, T, H, Dh]; k, v: [B, T, K, Dh] for B = R x NB blocks. Returns [B, T, H, Dh]."""
    rows = tree.valid.shape[0]
    batch, chunk, heads, head_dim = q.shape
    q = q.reshape(rows, batch // rows, chunk, heads, head_dim)
    outs = [_attend(q[:, c.start:c.start + c.count].reshape(rows * c.count, chunk, heads,
                                                              head_dim), c.keys, c.values, c.mask)
            .reshape(rows, c.count, chunk, heads, head_dim) for c in tree_contexts(k, v, tree)]
    return jnp.concatenate(outs, axis=1).reshape(batch, chunk, heads, head_dim)


def attention_spans(capacity: int, smallest: int = 128) -> tuple[int, ...]:
    """Static key spans the cached attention chooses from: smallest * 2^i up to half the capacity,
    then the capacity itself (e.g. 1000 -> (128, 256, 512, 1000); 144 -> (144,)).

    A span shorter than the capacity costs a copy of that prefix of the cache (XLA:CPU does not fuse
    the slice into the matmul), so a branch only pays when it at least halves the keys read."""
    spans, span = [], smallest
    while 2 * span <= capacity:
        spans.append(span)
        span *= 2
    return tuple(spans) + (capacity,)


def _attend_cached(q: jax.Array, k_cache: jax.Array, v_cache: jax.Array,
                   positions: jax.Array) -> jax.Array:
    """Attention of a chunk of queries to a KV cache (the chunk's own keys already written).

    Only a prefix of the cache is read: the smallest span of `attention_spans(S)` covering every
    query position, picked on device with `lax.switch` (each branch is a static-shape attention).
    Decode steps are bound by reading the cache, so a large preallocated cache (multi-turn
    episodes, tree rollouts) costs memory but little bandwidth while its sequences are short.

    Args:
      q: [B, T, H, Dh] queries (already rotated).
      k_cache: [B, K, Dh, S] keys; v_cache: [B, K, S, Dh] values.
      positions: int32[B, T] position of each query; query (b, t) attends to keys 0..positions[b, t].

    Returns:
      [B, T, H, Dh].
    """
    batch, chunk, heads, head_dim = q.shape
    kv_heads, capacity = v_cache.shape[1], v_cache.shape[2]
    groups = heads // kv_heads
    qg = _group_queries(q, kv_heads) * np.float32(1.0 / math.sqrt(head_dim))  # [B, K, Q, Dh]
    query_pos = jnp.tile(positions, (1, groups))[:, None, :, None]  # [B, 1, Q, 1], Q order (g, t)

    def attend_span(span):
        def attend(qg, query_pos, k_cache, v_cache):
            keys, values = k_cache[..., :span], v_cache[:, :, :span]
            scores = jnp.einsum("bkqd,bkds->bkqs", qg, keys.astype(qg.dtype),
                                preferred_element_type=jnp.float32)
            key_pos = jnp.arange(span, dtype=jnp.int32)
            scores = jnp.where(key_pos <= query_pos, scores, _MASKED)
            probs = jax.nn.softmax(scores, axis=-1)
            return jnp.einsum("bkqs,bksd->bkqd", probs.astype(qg.dtype), values.astype(qg.dtype),
                              preferred_element_type=jnp.float32)
        return attend

    spans = attention_spans(capacity)
    operands = (qg, query_pos, k_cache, v_cache)
    if len(spans) == 1:
        out = attend_span(capacity)(*operands)
    else:
        needed = jnp.max(positions) + 1
        branch = jnp.sum(jnp.asarray(spans[:-1]) < needed)
        out = jax.lax.switch(branch, [attend_span(s) for s in spans], *operands)
    return _ungroup(out.astype(q.dtype), chunk)


class Attention(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask=None, cache_kv=None, offsets=None, tree=None):
        """x: [B, T, D]; positions: int32[B, T].

        Without a cache, the chunk attends to itself under mask (bool[B, T, T]). With
        cache_kv = (keys, values) of shape [B, K, S, Dh], the chunk is written at `offsets` (int32[B])
        and attends causally to the cache. With `tree` (TreeBlocks), the B rows are the blocks of
        token trees and each attends to its ancestor blocks and causally to itself.
        Returns (output [B, T, D], updated (keys, values) or None).
        """
        cfg = self.config
        batch, chunk, _ = x.shape
        dtype = cfg.compute_dtype
        q = _dense(cfg.num_heads * cfg.head_dim, cfg.qkv_bias, cfg, "q_proj")(x)
        k = _dense(cfg.num_kv_heads * cfg.head_dim, cfg.qkv_bias, cfg, "k_proj")(x)
        v = _dense(cfg.num_kv_heads * cfg.head_dim, cfg.qkv_bias, cfg, "v_proj")(x)
        # LoRA updates, only when applied with adapters (jaxtree.models.lora)
        q, k, v = (checkpoint_name(add_adapter(self, name, x, y, dtype), PROJECTION)
                   for name, y in zip("qkv", (q, k, v)))
        q = q.reshape(batch, chunk, cfg.num_heads, cfg.head_dim)
        k = k.reshape(batch, chunk, cfg.num_kv_heads, cfg.head_dim)
        v = v.reshape(batch, chunk, cfg.num_kv_heads, cfg.head_dim)
        if cfg.qk_norm:
            q = _norm(cfg, "q_norm")(q)
            k = _norm(cfg, "k_norm")(k)
        inv_freq = rope_inverse_frequencies(cfg)
        q = apply_rope(q, positions, inv_freq)
        k = apply_rope(k, positions, inv_freq)
        if tree is not None:
            out = _attend_tree(q, k, v, tree)
            new_cache_kv = None
        elif cache_kv is None:
            out = _attend(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), mask)
            new_cache_kv = None
        else:
            keys = write_keys(cache_kv[0], k, offsets)
            values = write_chunk(cache_kv[1], v, offsets)
            out = _attend_cached(q, keys, values, positions)
            new_cache_kv = (keys, values)
        out = checkpoint_name(out.reshape(batch, chunk, cfg.num_heads * cfg.head_dim), PROJECTION)
        o = _dense(cfg.hidden_size, cfg.o_bias, cfg, "o_proj")(out)
        return add_adapter(self, "o", out, o, dtype), new_cache_kv


class MLP(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        dtype = cfg.compute_dtype
        gate = _dense(cfg.intermediate_size, cfg.mlp_bias, cfg, "gate_proj")(x)
        gate = checkpoint_name(add_adapter(self, "gate", x, gate, dtype), PROJECTION)
        up = checkpoint_name(add_adapter(
            self, "up", x, _dense(cfg.intermediate_size, cfg.mlp_bias, cfg, "up_proj")(x),
            dtype), PROJECTION)
        hidden = nn.silu(gate) * up
        down = _dense(cfg.hidden_size, cfg.mlp_bias, cfg, "down_proj")(hidden)
        return add_adapter(self, "down", hidden, down, dtype)


class Block(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, cache_kv=None, offsets=None, tree=None):
        attn_out, new_cache_kv = Attention(self.config, name="attn")(
            _norm(self.config, "input_norm")(x), positions, mask, cache_kv, offsets, tree)
        x = x + attn_out
        x = x + MLP(self.config, name="mlp")(_norm(self.config, "post_attention_norm")(x))
        return x, new_cache_kv


class Transformer(nn.Module):
    """The policy network. See `__call__` for the two calling modes.

    remat: recompute each block's activations in the backward pass instead of storing them
    (training memory, `jaxtree.models.token_scores`); the parameters are the same either way.
    The blocks then run as one `lax.scan` over their stacked parameters with a checkpointed
    body: with the blocks unrolled, XLA's CPU pipeline drops the optimization barriers that
    `jax.checkpoint` places and common-subexpression elimination merges the recomputation back
    into the forward pass (measured: no saving at all), while a loop body cannot be merged.
    Stacking costs one copy of the block parameters (and of their gradients).
    """

    config: ModelConfig
    remat: bool = False
    remat_policy: str = "everything"

    @nn.compact
    def __call__(self, tokens: jax.Array, cache: KVCache | None = None,
                 chunk_lengths: jax.Array | None = None, last_only: bool = False,
                 return_hidden: bool = False, tree: TreeBlocks | None = None):
        """Runs the model on a chunk of tokens.

        Args:
          tokens: int32[B, T].
          cache: optional KVCache with capacity S. Without it the chunk is a full sequence starting at
            position 0 (causal attention within the chunk). With it, row b's tokens occupy positions
            cache.lengths[b] + [0, T) and attend to everything before them in the cache.
          tree: instead, token trees packed in blocks (`jaxtree.models.tree_blocks`): the B = R x NB
            rows are blocks of T tokens at the positions `tree.positions`, each attending to its
            ancestor blocks and causally to itself (no cache).
          chunk_lengths: int32[B], how many of the T tokens of each row are real (the rest is right
            padding); defaults to T. Only used with a cache: the new lengths are
            min(lengths + chunk_lengths, S).
          last_only: return only the logits of each row's last real token, [B, V].
          return_hidden: return the hidden states after the final norm ([B, T, D] or [B, D], in
            the compute dtype) instead of logits, for heads other than the language-model one
            (a process reward model's score head); the output projection is then neither applied
            nor needed in `params`.

        Returns:
          (logits float32[B, T, V] or [B, V] (hidden states with return_hidden), new cache or
          None).
        """
        cfg = self.config
        batch, chunk = tokens.shape
        steps = jnp.arange(chunk, dtype=jnp.int32)
        if chunk_lengths is None:
            chunk_lengths = jnp.full((batch,), chunk, jnp.int32)
        if tree is not None:
            positions, mask, offsets = tree.positions.reshape(batch, chunk), None, None
        elif cache is None:
            positions = jnp.broadcast_to(steps, (batch, chunk))
            mask = jnp.broadcast_to(steps[None, :, None] >= steps[None, None, :],
                                    (batch, chunk, chunk))
            offsets = None
        else:
            offsets = cache.lengths
            positions = offsets[:, None] + steps[None, :]
            mask = None  # causal over cache positions, applied block by block

        embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.compute_dtype,
                         param_dtype=cfg.weight_dtype,
                         embedding_init=nn.initializers.normal(0.02), name="embed")
        x = embed(tokens)
        new_keys, new_values = [], []
        if self.remat and cache is None and not self.is_initializing():
            x = self._rematerialized_blocks(x, positions, mask, tree)
        else:
            for i in range(cfg.num_layers):
                layer_kv = None if cache is None else (cache.keys[i], cache.values[i])
                x, new_kv = Block(cfg, name=f"layers_{i}")(x, positions, mask, layer_kv,
                                                           offsets, tree)
                if new_kv is not None:
                    new_keys.append(new_kv[0])
                    new_values.append(new_kv[1])
        x = _norm(cfg, "final_norm")(x)
        if last_only:
            last = jnp.clip(chunk_lengths - 1, 0, chunk - 1)
            x = jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]  # [B, D]
        new_cache = None
        if cache is not None:
            lengths = jnp.minimum(cache.lengths + chunk_lengths, cache.capacity)
            new_cache = KVCache(tuple(new_keys), tuple(new_values), lengths)
        if return_hidden:
            return x, new_cache
        if cfg.tie_word_embeddings:
            logits = embed.attend(x)
        else:
            logits = _dense(cfg.vocab_size, False, cfg, "lm_head")(x)
        return logits.astype(jnp.float32), new_cache

    def _rematerialized_blocks(self, x, positions, mask, tree=None):
        """All blocks on x: [B, T, D] as a scan over their stacked parameters (and adapters,
        when applied with them), each block recomputed in the backward pass (see the class
        docstring)."""
        cfg = self.config
        collections = ("params", COLLECTION) if self.has_variable(COLLECTION, "layers_0") \
            else ("params",)
        stacked = {name: jax.tree_util.tree_map(
            lambda *leaves: jnp.stack(leaves),
            *[self.variables[name][f"layers_{i}"] for i in range(cfg.num_layers)])
            for name in collections}

        @functools.partial(jax.checkpoint, policy=REMAT_POLICIES[self.remat_policy])
        def block(x, layer_variables):
            return Block(cfg).apply(layer_variables, x, positions, mask, None, None,
                                    tree)[0], None

        x, _ = jax.lax.scan(block, x, stacked)
        return x
