"""Clipped policy-gradient losses with GRPO, DAPO and Dr.GRPO aggregation over action tokens.

For rollout i with action tokens s_i (|s_i| of them) in a minibatch of G rollouts, the ratio
ρ_{i,t} = π_θ(a_{i,t} | h) / π_θold(a_{i,t} | h) and the advantage A_{i,t}, the per-token
clipped surrogate with decoupled clip range (clip-higher, DAPO) is

    ℓ_{i,t} = min(ρ_{i,t} A_{i,t}, clip(ρ_{i,t}, 1 - ε_low, 1 + ε_high) A_{i,t}),

and the objectives differ only in how ℓ is averaged over tokens:

  seq-mean-token-mean  GRPO, PATR Eq. 2 and LATR Eq. 2:  J = (1/G) Σ_i (1/|s_i|) Σ_t ℓ_{i,t}
  token-mean           DAPO, LATR Eq. 4:                 J = (1/Σ_i |s_i|) Σ_i Σ_t ℓ_{i,t}
  seq-sum              Dr.GRPO (Liu et al., 2025):       J = (1/(G·C)) Σ_i Σ_t ℓ_{i,t}

with C a constant (e.g. the generation budget in tokens), so that the weight of a token depends
neither on the length of its own rollout nor on the lengths of the others.

Each is Σ_{i,t} w_{i,t} ℓ_{i,t} with per-token weights w computed once over the whole minibatch
(`aggregation_weights`). The loss of any subset of rows is then a plain weighted sum, so losses
and gradients of micro-batches add up exactly to those of the minibatch, which is what gradient
accumulation needs. Rows without action tokens (padding added to fill a micro-batch) get weight
zero and are not counted in G.

The minimised loss is

    L = Σ_{i,t} w_{i,t} (-ℓ_{i,t} + β k3_{i,t} - c H_{i,t}),

with the KL penalty of LATR Eq. 2 (GRPO) estimated per token by the k3 estimator of
KL(π_θ || π_ref) on samples of π_θ (Schulman, 2020; DeepSeekMath, Shao et al., 2024, Eq. 4):

    k3 = π_ref/π_θ - log(π_ref/π_θ) - 1,

which is non-negative and unbiased, and an optional entropy bonus H (entropy of π_θ at the token).

The loss stage in one place: a minibatch (`Minibatch`, built with its aggregation weights by
`minibatch`) and its loss under the policy's parameters (`minibatch_loss`: the token scores of
the model, then `policy_loss`), which `jaxtree.train.update` accumulates over micro-batches; the
same loss over a micro-batch of whole groups as token trees (`forest_minibatch_loss`), which
computes every shared prefix token once.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.config import Section, between, non_negative, one_of, option
from jaxtree.models.config import ModelConfig
from jaxtree.models.token_scores import (TrainingMemory, token_entropy,  # noqa: F401 (re-exported)
                                         token_logprobs, token_scores, tree_token_scores)
from jaxtree.utils import power_of_two_at_least

AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "seq-sum")


@dataclasses.dataclass(frozen=True)
class LossConfig(Section):
    """Config section `loss`: the clipped surrogate and its regularisers. Hashable (a static
    argument of the jitted update step)."""

    aggregation: str = option("seq-mean-token-mean", "how token losses are averaged: GRPO "
                              "(seq-mean-token-mean), DAPO (token-mean), Dr.GRPO (seq-sum)",
                              check=one_of(AGGREGATIONS))
    norm_constant: float = option(0.0, "seq-sum's constant C (0: max turns x max action tokens)",
                                  check=non_negative())
    eps_low: float = option(0.2, "lower clip range ε_low", check=between(0, 1, high_open=True))
    eps_high: float = option(0.2, "upper clip range ε_high (clip-higher when > eps_low)",
                             check=non_negative())
    kl_coef: float = option(0.0, "β of the k3 KL penalty to the frozen initial policy",
                            check=non_negative())
    entropy_coef: float = option(0.0, "coefficient of the entropy bonus", check=non_negative())


def aggregation_weights(mask, mode: str, norm_constant: float | None = None) -> jax.Array:
    """Per-token weights w (float32[N, T]) of the aggregation `mode` over the whole minibatch.

    mask: bool[N, T], True on action tokens. `mode` is one of AGGREGATIONS; "seq-sum" needs
    `norm_constant` > 0 (C above). An all-empty mask gives all-zero weights.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {mode!r}; expected one of {', '.join(AGGREGATIONS)}")
    if mode == "seq-sum":
        if norm_constant is None:
            raise ValueError("aggregation 'seq-sum' needs norm_constant > 0 "
                             "(e.g. the generation budget in tokens)")
        # A traced constant cannot be checked here; a Python or NumPy number can.
        if isinstance(norm_constant, numbers.Real) and not norm_constant > 0:
            raise ValueError(f"aggregation 'seq-sum' needs norm_constant > 0, got {norm_constant}")
    mask = jnp.asarray(mask, dtype=bool)
    if mask.ndim != 2:
        raise ValueError(f"mask must be [N, T], got shape {mask.shape}")
    tokens = mask.astype(jnp.float32)
    lengths = tokens.sum(axis=1)  # |s_i|
    num_seqs = (lengths > 0).sum().astype(jnp.float32)  # G, padding rows excluded
    # Counts are whole numbers, so max(count, 1) only changes a zero count, whose weights the
    # token mask zeroes anyway: this keeps empty rows and an empty minibatch free of 0/0.
    if mode == "seq-mean-token-mean":
        per_row = 1.0 / (jnp.maximum(num_seqs, 1.0) * jnp.maximum(lengths, 1.0))
        return tokens * per_row[:, None]
    if mode == "token-mean":
        return tokens / jnp.maximum(lengths.sum(), 1.0)
    return tokens / (jnp.maximum(num_seqs, 1.0) * jnp.asarray(norm_constant, jnp.float32))


def clipped_surrogate(logprobs, old_logprobs, advantages, eps_low, eps_high):
    """Per-token clipped surrogate loss -ℓ and where the clip is active.

    logprobs, old_logprobs, advantages: float32[N, T]. Returns (loss float32[N, T],
    clipped bool[N, T]); `clipped` is True where clip(ρ) A < ρ A, i.e. the clipped branch is the
    minimum and the gradient through ρ is zero.
    """
    logprobs = jnp.asarray(logprobs, jnp.float32)
    advantages = jnp.asarray(advantages, jnp.float32)
    ratio = jnp.exp(logprobs - jnp.asarray(old_logprobs, jnp.float32))
    unclipped = ratio * advantages
    clipped_value = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    clipped = clipped_value < unclipped
    # Selecting the branch, rather than jnp.minimum, makes "clipped" and "zero gradient" the same
    # set of tokens: on a tie (ρ exactly at a clip edge) jnp.minimum would average the slopes.
    return -jnp.where(clipped, clipped_value, unclipped), clipped


def _k3(log_ratio):
    """exp(x) - x - 1 for x = log(p/q): the k3 estimate of KL(q || p) on samples of q."""
    # expm1 keeps precision for small x, where exp(x) - 1 would cancel; the clamp removes the
    # last-ulp negatives of a value that is >= 0 exactly.
    return jnp.maximum(jnp.expm1(log_ratio) - log_ratio, 0.0)


def kl_k3(logprobs, ref_logprobs) -> jax.Array:
    """k3 estimate (float32[N, T]) of KL(π_θ || π_ref) at tokens sampled from π_θ.

    logprobs: log π_θ, ref_logprobs: log π_ref, float32[N, T]. Non-negative.
    """
    return _k3(jnp.asarray(ref_logprobs, jnp.float32) - jnp.asarray(logprobs, jnp.float32))


def policy_loss(logprobs, old_logprobs, advantages, weights, *, eps_low, eps_high,
                ref_logprobs=None, kl_coef=0.0, entropy=None, entropy_coef=0.0):
    """Weighted clipped policy loss of a minibatch or any of its micro-batches.

    logprobs (π_θ), old_logprobs (behaviour policy), advantages, weights (from
    `aggregation_weights` over the whole minibatch), ref_logprobs (π_ref, optional) and entropy
    (of π_θ, optional): float32[N, T]. Tokens with weight 0 are not action tokens.

    Returns (loss float32[], metrics) where loss = Σ w (-ℓ + kl_coef k3 - entropy_coef H), and
    every metric is a float32[] sum, so metrics of micro-batches add up to those of the
    minibatch (`summarize_loss_metrics` turns the sums into means):
      tokens         number of action tokens
      pg_loss        Σ w (-ℓ)
      kl_loss        Σ w k3(π_θ, π_ref)  (0 without ref_logprobs)
      entropy_loss   Σ w H               (0 without entropy)
      clipped_sum    action tokens where the clip is active
      ratio_sum      Σ ρ
      approx_kl_sum  Σ (ρ - 1) - log ρ, the k3 estimate of KL(π_old || π_θ)
      kl_sum         Σ k3(π_θ, π_ref)    (0 without ref_logprobs)
      entropy_sum    Σ H                 (0 without entropy)
    """
    weights = jnp.asarray(weights, jnp.float32)
    mask = weights > 0

    def action(x):
        # Padding may hold anything (e.g. -inf or huge log-ratios): zero it before exp so that
        # neither the loss nor its gradient sees inf * 0 = NaN from a token of weight 0.
        return jnp.where(mask, jnp.asarray(x, jnp.float32), 0.0)

    def weighted(x):
        return (weights * x).sum()

    logprobs = action(logprobs)
    old_logprobs = action(old_logprobs)
    surrogate, clipped = clipped_surrogate(logprobs, old_logprobs, action(advantages),
                                           eps_low, eps_high)
    log_ratio = logprobs - old_logprobs
    zero = jnp.zeros((), jnp.float32)

    pg_loss = weighted(surrogate)
    loss = pg_loss
    kl_loss = kl_sum = zero
    if ref_logprobs is not None:
        kl = jnp.where(mask, kl_k3(logprobs, action(ref_logprobs)), 0.0)
        kl_loss, kl_sum = weighted(kl), kl.sum()
        loss = loss + kl_coef * kl_loss
    entropy_loss = entropy_sum = zero
    if entropy is not None:
        entropy = action(entropy)
        entropy_loss, entropy_sum = weighted(entropy), entropy.sum()
        loss = loss - entropy_coef * entropy_loss

    metrics = dict(
        tokens=mask.sum().astype(jnp.float32),
        pg_loss=pg_loss,
        kl_loss=kl_loss,
        entropy_loss=entropy_loss,
        clipped_sum=(clipped & mask).sum().astype(jnp.float32),
        ratio_sum=jnp.where(mask, jnp.exp(log_ratio), 0.0).sum(),
        approx_kl_sum=jnp.where(mask, _k3(log_ratio), 0.0).sum(),
        kl_sum=kl_sum,
        entropy_sum=entropy_sum,
    )
    return loss, jax.tree.map(jax.lax.stop_gradient, metrics)


def summarize_loss_metrics(sums: dict) -> dict:
    """Means from the (summed over micro-batches) metrics of `policy_loss`.

    Returns tokens, clip_fraction, ratio_mean, approx_kl, kl and entropy (means per action token,
    0 when there is none) and pg_loss, kl_loss, entropy_loss as they are (already aggregated).
    """
    tokens = jnp.asarray(sums["tokens"], jnp.float32)
    count = jnp.maximum(tokens, 1.0)  # a whole number: only an empty batch is changed
    return dict(
        tokens=tokens,
        clip_fraction=sums["clipped_sum"] / count,
        ratio_mean=sums["ratio_sum"] / count,
        approx_kl=sums["approx_kl_sum"] / count,
        kl=sums["kl_sum"] / count,
        entropy=sums["entropy_sum"] / count,
        pg_loss=sums["pg_loss"],
        kl_loss=sums["kl_loss"],
        entropy_loss=sums["entropy_loss"],
    )


# ----------------------------------------------------------------------------- minibatches

class Minibatch(NamedTuple):
    """One minibatch of the update, every field [B, T] (host or device arrays; a pytree, so
    micro-batches are its rows and a stack of them is one `lax.scan` input):

      tokens        int32    whole episodes (prompt, observations and actions)
      action_mask   bool     the tokens the policy generated (the only ones with a loss)
      old_logprobs  float32  behaviour log-probs recorded by the rollout (ratio denominator)
      advantages    float32  per-token advantages (0 off the action tokens)
      weights       float32  aggregation weights over the whole minibatch
                             (`aggregation_weights`), so micro-batch losses simply add up
      ref_logprobs  float32  log-probs of the frozen reference policy (KL penalty)
    """

    tokens: Any
    action_mask: Any
    old_logprobs: Any
    advantages: Any
    weights: Any
    ref_logprobs: Any


MINIBATCH_DTYPES = Minibatch(np.int32, np.bool_, np.float32, np.float32, np.float32, np.float32)


def minibatch(tokens, action_mask, old_logprobs, advantages, ref_logprobs,
              config: LossConfig, norm_constant: float) -> Minibatch:
    """A Minibatch of host arrays [B, T], its weights computed over all B rows by the loss's
    aggregation (`norm_constant`: seq-sum's C)."""
    weights = np.asarray(aggregation_weights(jnp.asarray(action_mask), config.aggregation,
                                             norm_constant))
    return Minibatch(tokens, action_mask, old_logprobs, advantages, weights, ref_logprobs)


def scored_columns(action_mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """bool[..., T]: the columns a loss scores, action tokens and nonzero weights (host)."""
    used = np.asarray(action_mask, bool)
    return used if weights is None else used | (np.asarray(weights) != 0)


def needed_widths(action_mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """int[B]: the columns each row's loss needs, one past its last action token (or nonzero
    weight); 0 for a row with none. Later columns cannot change the scores of earlier tokens."""
    used = scored_columns(action_mask, weights)
    last = used.shape[1] - np.argmax(used[:, ::-1], axis=1)
    return np.where(used.any(axis=1), last, 0)


def take_rows(x: np.ndarray, index: np.ndarray, width: int, zero_fillers: bool) -> np.ndarray:
    """The rows `index` of a host array [B, T] cut to `width` columns (padded if narrower);
    rows with index -1 repeat row 0, zeroed when `zero_fillers`."""
    filler = index < 0
    x = np.asarray(x)[np.where(filler, 0, index), :width]
    if x.shape[1] < width:
        x = np.pad(x, ((0, 0), (0, width - x.shape[1])))
    return np.where(filler[:, None], np.zeros((), x.dtype), x) if zero_fillers else x


def take_micro_batch(batch: Minibatch, index: np.ndarray, width: int) -> Minibatch:
    """The rows `index` of `batch` (host arrays) cut to `width` columns; rows with index -1
    become fillers without action tokens or weight."""
    return Minibatch(*(take_rows(x, index, width, zero_fillers=name != "tokens")
                       for name, x in zip(Minibatch._fields, batch)))


def minibatch_loss(model_config: ModelConfig, config: LossConfig, memory: TrainingMemory,
                   params, mb: Minibatch):
    """(loss, sums of `policy_loss`) of a (micro-)batch under `params` (a parameter tree, or
    `LoraParams`). The entropy is reported even when it is not in the loss; the KL to the
    reference only when it is (kl_coef > 0: otherwise there is no reference forward). An
    ActionMinibatch (`take_action_slots`) is scored at its action tokens only
    (`action_minibatch_loss`)."""
    if isinstance(mb, ActionMinibatch):
        return action_minibatch_loss(model_config, config, memory, params, mb)
    logprobs, entropy, _ = token_scores(model_config, params, mb.tokens, memory)
    return loss_of_scores(config, logprobs, entropy, mb)


class ActionMinibatch(NamedTuple):
    """A micro-batch whose loss needs the model's scores at its action tokens only: the whole
    sequences, each row's action columns in K slots, and the Minibatch fields at those columns.

      tokens     int32[B, T]  whole episodes (the forward runs over all of them)
      positions  int32[B, K]  per slot, the column of an action token (-1: an empty slot)
      slots      Minibatch [B, K], each field at those columns (zero in an empty slot)
    """

    tokens: Any
    positions: Any
    slots: Minibatch


def slot_count(count: int, width: int, smallest: int = 8) -> int:
    """Slots K for `count` scored tokens per row of rows `width` wide: a power of two (at least
    `smallest`), so that a run compiles few shapes, capped at `width`."""
    return min(power_of_two_at_least(count, smallest), width)


def action_slot_count(mb: Minibatch) -> int:
    """K of `take_action_slots` for the micro-batch(es) `mb` ([..., T] host arrays)."""
    scored = scored_columns(mb.action_mask, mb.weights)
    return slot_count(int(scored.sum(axis=-1).max(initial=1)), scored.shape[-1])


def take_action_slots(mb: Minibatch, slots: int) -> ActionMinibatch:
    """The ActionMinibatch of `mb` (host arrays [B, T]) with `slots` slots per row (at least
    its rows' count of action tokens, or nonzero weights): each row's scored columns in order,
    then empty slots."""
    scored = scored_columns(mb.action_mask, mb.weights)
    rows, width = scored.shape
    if slots < scored.sum(axis=1).max(initial=0):
        raise ValueError(f"{slots} slots hold fewer than a row's {scored.sum(axis=1).max()} "
                         "action tokens")
    order = np.argsort(~scored, axis=1, kind="stable")[:, :slots]  # scored columns first
    if order.shape[1] < slots:
        order = np.pad(order, ((0, 0), (0, slots - order.shape[1])))
    valid = np.take_along_axis(scored, order, axis=1)
    positions = np.where(valid, order, -1).astype(np.int32)
    at = lambda x: np.where(valid, np.take_along_axis(np.asarray(x), order, axis=1),  # noqa: E731
                            np.zeros((), np.asarray(x).dtype))
    return ActionMinibatch(np.asarray(mb.tokens), positions, Minibatch(*(at(x) for x in mb)))


def action_minibatch_loss(model_config: ModelConfig, config: LossConfig,
                          memory: TrainingMemory, params, mb: ActionMinibatch):
    """`minibatch_loss` of the micro-batch `mb` came from (`take_action_slots`), its
    vocabulary projection computed at the action tokens only."""
    logprobs, entropy, _ = token_scores(model_config, params, mb.tokens, memory, mb.positions)
    return loss_of_scores(config, logprobs, entropy, mb.slots)


class ForestMinibatch(NamedTuple):
    """A micro-batch of the prefix-shared update (`jaxtree.train.prefix_forest`): whole rollout
    groups as token trees in R rows of NB blocks of T tokens, and their trajectories in S slots
    per row.

      trajectories  Minibatch [R x S, W], each slot's arrays (an empty slot has zero weights)
      tokens        int32[R, NB, T] the trees' tokens; tree: their TreeBlocks
      predictor     int32[R, NB, T] per token, the flat index of the token before it (-1: none)
      token_index   int32[R, S x W] per slot column, the flat index of its token in the row
      score_index   int32[R, K] or None: score only these tree tokens (flat indices, -1 empty),
                    the action tokens of the row's trajectories; token_index then indexes K
    """

    trajectories: Minibatch
    tokens: Any
    tree: Any
    predictor: Any
    token_index: Any
    score_index: Any = None


def forest_minibatch_loss(model_config: ModelConfig, config: LossConfig,
                          memory: TrainingMemory, params, mb: ForestMinibatch):
    """`minibatch_loss` of the trajectories of a forest micro-batch: every tree token's log-prob
    and entropy computed once, then gathered onto each trajectory through it, so a token shared
    by several trajectories enters the loss once per trajectory, with that trajectory's
    advantage, ratio clip and weight (and its gradient is the sum over them)."""
    lp_nodes, entropy_nodes, _ = tree_token_scores(model_config, params, mb.tokens, mb.tree,
                                                   mb.predictor, memory, mb.score_index)
    shape = mb.trajectories.tokens.shape
    gather = lambda x: jnp.take_along_axis(x, mb.token_index, axis=1).reshape(shape)
    return loss_of_scores(config, gather(lp_nodes), gather(entropy_nodes), mb.trajectories)


def loss_of_scores(config: LossConfig, logprobs, entropy, mb: Minibatch):
    """(loss, sums) of `policy_loss` from the policy's per-token log-probs and entropies of the
    micro-batch's sequences ([B, W], each token's given the ones before it)."""
    use_kl = config.kl_coef > 0
    use_entropy = config.entropy_coef > 0
    loss, sums = policy_loss(
        logprobs, mb.old_logprobs, mb.advantages, mb.weights, eps_low=config.eps_low,
        eps_high=config.eps_high, ref_logprobs=mb.ref_logprobs if use_kl else None,
        kl_coef=config.kl_coef, entropy=entropy if use_entropy else None,
        entropy_coef=config.entropy_coef)
    if not use_entropy:  # still report the policy's entropy
        sums["entropy_sum"] = (jax.lax.stop_gradient(entropy) * mb.action_mask).sum()
    # Without the KL term no reference forward runs (the trainer passes zeros as its log-probs),
    # so the KL is not measured: kl_sum stays 0, and train/kl reads 0.
    return loss, sums
