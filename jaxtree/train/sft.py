"""Supervised warm start: masked next-token cross-entropy on demonstrated actions only.

Shapes: B sequences of T tokens; `mask[b, t]` is True where token t is part of a demonstrated action
(the loss is on predicting those tokens; prompts and observations are context only). With LoRA the
step's params are adapters over a frozen base (`jaxtree.models.lora`).
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxtree.models.config import ModelConfig
from jaxtree.models.lora import LoraParams
from jaxtree.models.token_scores import TrainingMemory, token_scores
from jaxtree.utils import round_up


def masked_nll(config: ModelConfig, params, tokens: jax.Array, mask: jax.Array,
               memory: TrainingMemory = TrainingMemory()):
    """Mean negative log-likelihood of the masked tokens given everything before them.

    Args:
      tokens: int32[B, T]; mask: bool[B, T].
      memory: remat / logits-chunk trade-offs (`jaxtree.models.token_scores`).

    Returns:
      (loss float32[], metrics {'loss', 'token_accuracy', 'target_tokens'}); a token counts as
      accurate when it is the model's greedy choice.
    """
    logprobs, _, greedy = token_scores(config, params, tokens, memory)
    weights = jnp.asarray(mask).at[:, 0].set(False).astype(jnp.float32)  # token 0: no context
    count = jnp.maximum(weights.sum(), 1.0)
    loss = -(logprobs * weights).sum() / count
    accuracy = (greedy * weights).sum() / count
    return loss, {"loss": loss, "token_accuracy": accuracy, "target_tokens": weights.sum()}


def make_optimizer(learning_rate: float, warmup_steps: int, total_steps: int,
                   weight_decay: float = 0.0, max_grad_norm: float = 1.0):
    """AdamW with linear warm-up then cosine decay, after global-norm gradient clipping. Every
    (warmup_steps, total_steps) the configs accept (0 <= warmup_steps <= total_steps) builds:
    optax needs at least one warm-up step and one decay step after it."""
    warmup = max(warmup_steps, 1)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, learning_rate, warmup, max(total_steps, warmup + 1),
        end_value=learning_rate * 0.1)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                       optax.adamw(schedule, weight_decay=weight_decay))


@functools.partial(jax.jit, static_argnames=("config", "optimizer", "memory", "lora_scale"),
                   donate_argnames=("params", "opt_state"))
def sft_step(config: ModelConfig, optimizer: optax.GradientTransformation, params, opt_state,
             tokens: jax.Array, mask: jax.Array, memory: TrainingMemory = TrainingMemory(),
             base=None, lora_scale: float = 1.0):
    """One optimizer step; a non-finite loss or gradient leaves params and state unchanged and
    reports `skipped` = 1. With `base` (not donated), `params` are LoRA adapters over it at
    `lora_scale`: only they get gradients and optimizer state."""
    if base is None:
        (loss, metrics), grads = jax.value_and_grad(masked_nll, argnums=1, has_aux=True)(
            config, params, tokens, mask, memory)
    else:
        (loss, metrics), grads = jax.value_and_grad(
            lambda adapters: masked_nll(config, LoraParams(base, adapters, lora_scale), tokens,
                                        mask, memory), has_aux=True)(params)
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    keep = lambda new, old: jnp.where(finite, new, old)
    params = jax.tree_util.tree_map(keep, new_params, params)
    opt_state = jax.tree_util.tree_map(keep, new_opt_state, opt_state)
    metrics = dict(metrics, grad_norm=grad_norm, skipped=(~finite).astype(jnp.int32))
    return params, opt_state, metrics


def pad_batch(sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[bool]], pad_id: int,
              multiple: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Right-pads to the longest sequence rounded up to `multiple` (few distinct shapes, so few
    compilations, with less padding than powers of two): int32[B, T], bool[B, T]."""
    width = round_up(max(len(s) for s in sequences), multiple)
    tokens = np.full((len(sequences), width), pad_id, np.int32)
    mask = np.zeros((len(sequences), width), bool)
    for i, (seq, m) in enumerate(zip(sequences, masks)):
        tokens[i, :len(seq)] = seq
        mask[i, :len(m)] = m
    return tokens, mask
