"""Per-token scores of whole sequences under the model, for the losses: log-prob of each token
given the ones before it, the policy's entropy there, and whether the token was the greedy one.

Training a real vocabulary at long contexts is bounded by memory, not FLOPs: the logits of a
(micro-)batch are [B, T, V] float32 (B = 1, T = 2,048, V = 49,152: 400 MB), and log-softmax and
its gradient hold several such arrays; every layer's attention probabilities ([B, H, T, T]) and
MLP activations are kept for the backward pass. Two knobs, both exact (the same numbers, up to
float reassociation, for less memory and more compute):

  remat         recompute each transformer block's activations in the backward pass instead of
                storing them (`Transformer(remat=True)`: a scan over the stacked blocks with a
                checkpointed body): the stored state is one [B, T, D] residual per layer instead
                of its attention and MLP intermediates.
                `remat_policy`: "everything" recomputes the whole block; "attention" keeps
                the projections' outputs (q, k, v, the attention output, the MLP's gate and up)
                and recomputes only the attention's scores and softmax and the elementwise ops:
                ~0.6 MB more a token for SmolLM2, and no second pass through its matmuls.
  logits_chunk  project the final hidden states onto the vocabulary `logits_chunk` positions at a
                time under `jax.checkpoint`, so neither the forward nor the backward pass ever
                holds more than [B, logits_chunk, V] logits (0: all positions at once).

A third, `action_only`, skips work instead of trading it: the losses need log-probs and entropies
at the action tokens only, so the update gathers each row's action positions into K slots
(`token_scores(..., positions=)`, K the most any row of the micro-batch has, rounded up to a
power of two so that compilation stays bounded) and projects only those hidden states onto the
vocabulary. On chat prompts, where the prompt and observations are most of a row, this removes
most of the [B, T, V] logits and their log-softmax, forward and backward.

They travel as `TrainingMemory`, a frozen (hashable, jit-static) value built from the `model`
config section (`model.remat`, `model.logits_chunk`, `model.action_logits`) and handed to the
update and warm-start steps.

Every function takes `params` as a parameter pytree or as `jaxtree.models.lora.LoraParams` (a
frozen base and LoRA adapters, applied unmerged: differentiated with respect to the adapters, the
backward pass computes no weight gradient of the base).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxtree.models.config import ModelConfig
from jaxtree.models.lora import base_params, model_variables
from jaxtree.models.transformer import REMAT_POLICIES, Transformer
from jaxtree.models.tree_blocks import TreeBlocks


@dataclasses.dataclass(frozen=True)
class TrainingMemory:
    """How a training forward pass trades compute for memory (see the module docstring)."""

    remat: bool = False
    remat_policy: str = "everything"
    logits_chunk: int = 0
    # the RL update's vocabulary projection at action tokens only (`model.action_logits`, on by
    # default; the warm start's loss ignores it)
    action_only: bool = True

    def __post_init__(self):
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(f"remat_policy={self.remat_policy!r}: expected one of "
                             f"{tuple(REMAT_POLICIES)}")
        if self.logits_chunk < 0:
            raise ValueError(f"logits_chunk={self.logits_chunk} must be >= 0 (0: no chunking)")


def output_logits(config: ModelConfig, params: dict, hidden: jax.Array) -> jax.Array:
    """The language-model head on hidden states after the final norm: [..., D] -> float32[..., V].

    Computes what `Transformer` computes after its final norm (the tied embedding's `attend` or the
    `lm_head` projection, in the compute dtype), so chunked and whole-sequence logits agree.
    """
    dtype = config.compute_dtype
    if config.tie_word_embeddings:
        weight = params["embed"]["embedding"].astype(dtype)  # [V, D]
        logits = jnp.einsum("...d,vd->...v", hidden.astype(dtype), weight)
    else:
        weight = params["lm_head"]["kernel"].astype(dtype)  # [D, V]
        logits = jnp.einsum("...d,dv->...v", hidden.astype(dtype), weight)
    return logits.astype(jnp.float32)


def token_entropy(logits) -> jax.Array:
    """Entropy of softmax(logits) over the last axis: logits float32[..., V] -> float32[...].

    Stable for large logits (log_softmax subtracts the maximum) and for -inf logits (masked
    vocabulary entries contribute 0 rather than 0 * -inf).
    """
    logp = jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), axis=-1)
    p = jnp.exp(logp)
    return -(p * jnp.where(p > 0, logp, 0.0)).sum(axis=-1)


def token_logprobs(logits, targets) -> jax.Array:
    """log softmax(logits) at `targets`: logits float[..., V], targets int32[...] -> float32[...]."""
    logp = jax.nn.log_softmax(jnp.asarray(logits, jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, jnp.asarray(targets)[..., None], axis=-1)[..., 0]


def _scores_from_logits(logits: jax.Array, targets: jax.Array):
    """logits float32[..., V], targets int32[...] -> (log-prob, entropy, greedy hit), each [...];
    a hit is `target's logit == max logit` (a tie counts as a hit). XLA computes the shared
    log-softmax once."""
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (token_logprobs(logits, targets), token_entropy(logits),
            target_logit >= logits.max(axis=-1))


def _head_params(config: ModelConfig, params) -> dict:
    params = base_params(params)  # no adapter on the output head
    if config.tie_word_embeddings:
        return {"embed": params["embed"]}
    return {"lm_head": params["lm_head"]}


def _chunked_scores(config: ModelConfig, params: dict, hidden: jax.Array, targets: jax.Array,
                    memory: TrainingMemory):
    """(log-prob, entropy, greedy hit) [B, P] of `targets` int32[B, P] under the language-model
    head on `hidden` [B, P, D], `memory.logits_chunk` positions at a time when set."""
    batch, positions = targets.shape
    head = _head_params(config, params)

    def chunk_scores(head, hidden_chunk, target_chunk):
        return _scores_from_logits(output_logits(config, head, hidden_chunk), target_chunk)

    chunk = memory.logits_chunk
    if chunk <= 0 or chunk >= positions:
        return chunk_scores(head, hidden, targets)
    count = -(-positions // chunk)
    pad = count * chunk - positions
    hidden_c = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets_c = jnp.pad(targets, ((0, 0), (0, pad)))
    # [count, B, chunk, ...]: the scan's leading axis walks the sequence
    hidden_c = hidden_c.reshape(batch, count, chunk, -1).swapaxes(0, 1)
    targets_c = targets_c.reshape(batch, count, chunk).swapaxes(0, 1)
    # checkpointed: the backward pass recomputes one chunk's logits at a time
    body = jax.checkpoint(chunk_scores)
    _, scores = jax.lax.scan(lambda carry, xs: (carry, body(head, *xs)), None,
                             (hidden_c, targets_c))
    return tuple(x.swapaxes(0, 1).reshape(batch, count * chunk)[:, :positions] for x in scores)


def tree_token_scores(config: ModelConfig, params: dict, tokens: jax.Array, tree: TreeBlocks,
                      predictor: jax.Array, memory: TrainingMemory = TrainingMemory(),
                      index: jax.Array | None = None):
    """Each token's log-prob given its ancestors, the entropy there and its greedy hit, for
    token trees packed in blocks (`jaxtree.models.tree_blocks`).

    Args:
      tokens: int32[R, NB, T] the blocks' tokens; tree: their structure.
      predictor: int32[R, NB, T], per token the flat index (block x T + offset, in its row) of
        the token before it on its path; -1 where there is none.

      index: int32[R, K] (optional): score only these tokens (flat indices, -1: an empty slot).

    Returns:
      (logprobs, entropy, greedy) [R, NB x T] ([R, K] with `index`); 0 / 0 / False where there
      is no predictor (or no token).
    """
    rows, blocks, width = tokens.shape
    hidden, _ = Transformer(config, remat=memory.remat, remat_policy=memory.remat_policy).apply(
        model_variables(params), tokens.reshape(rows * blocks, width), tree=tree,
        return_hidden=True)
    hidden = hidden.reshape(rows, blocks * width, -1)
    flat_predictor = predictor.reshape(rows, blocks * width)
    flat_tokens = tokens.reshape(rows, blocks * width)
    if index is not None:
        at = jnp.maximum(index, 0)
        flat_predictor = jnp.where(index >= 0,
                                   jnp.take_along_axis(flat_predictor, at, axis=1), -1)
        flat_tokens = jnp.take_along_axis(flat_tokens, at, axis=1)
    before = jnp.take_along_axis(hidden, jnp.maximum(flat_predictor, 0)[..., None], axis=1)
    scores = _chunked_scores(config, params, before, flat_tokens, memory)
    has = flat_predictor >= 0
    return tuple(jnp.where(has, x, jnp.zeros((), x.dtype)) for x in scores)


def token_scores(config: ModelConfig, params: dict, tokens: jax.Array,
                 memory: TrainingMemory = TrainingMemory(), positions: jax.Array | None = None):
    """Each token's log-prob given the tokens before it, the entropy there, and its greedy hit.

    Args:
      config: the architecture.
      params: the parameter pytree.
      tokens: int32[B, T], each row a sequence starting at position 0 (right padding is
        harmless: causal attention never lets a real token see the padding after it).
      memory: the remat / logits-chunk trade-offs (results agree to float reassociation).
      positions: int32[B, K] (optional): score only these columns of each row (-1: an empty
        slot); the vocabulary projection then runs on B x K hidden states instead of B x T.

    Returns:
      (logprobs float32[B, T], entropy float32[B, T], greedy bool[B, T]); column 0 (no context)
      is 0 / 0 / False. With `positions`, the same at those columns, [B, K] (0 / 0 / False in
      empty slots).
    """
    batch, width = tokens.shape
    hidden, _ = Transformer(config, remat=memory.remat, remat_policy=memory.remat_policy).apply(
        model_variables(params), tokens[:, :-1], return_hidden=True)  # [B, T-1, D]
    if positions is not None:
        # token t is predicted from the hidden state at t - 1
        has = positions >= 1
        before = jnp.take_along_axis(hidden, jnp.clip(positions - 1, 0, width - 2)[..., None],
                                     axis=1)  # [B, K, D]
        targets = jnp.take_along_axis(tokens, jnp.clip(positions, 0, width - 1), axis=1)
        scores = _chunked_scores(config, params, before, targets, memory)
        return tuple(jnp.where(has, x, jnp.zeros((), x.dtype)) for x in scores)
    logprobs, entropy, greedy = _chunked_scores(config, params, hidden, tokens[:, 1:], memory)
    first = lambda x: jnp.zeros((batch, 1), x.dtype)
    return (jnp.concatenate([first(logprobs), logprobs], axis=1),
            jnp.concatenate([first(entropy), entropy], axis=1),
            jnp.concatenate([first(greedy), greedy], axis=1))
