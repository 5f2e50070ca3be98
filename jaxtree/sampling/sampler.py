"""Batched generation with a KV cache in one jitted `lax.while_loop`.

Device side (pure functions):
  `decode(...)`   continues every row of an existing cache from its last logits until each row
                  stops (EOS, a per-row stop sequence, its token budget, or a full cache). The
                  multi-turn agent loop calls it after appending each observation;
                  `decode_with_uniforms` is the same loop on pre-drawn uniforms (the LATR
                  kernel's plain phase continues its rows with it).
  `generate(...)` prefills ragged prompts into a fresh cache and decodes, in one compiled program.

The loop's carry is a `DecodeState` (the cache, the output buffers, the stop-sequence window).
`params` is a parameter tree or `jaxtree.models.lora.LoraParams` (adapters applied unmerged; the
trainer samples from merged ones, `Updater.sampling_params`).

Invariant: when a row stops, every token it generated, the stop token included, is in the cache,
and the returned `last_logits` are the model's prediction after that token. A later chunk appended
with `extend_cache` therefore continues the sequence exactly.

Host side: `Sampler` pads a list of prompts to bucketed shapes (so the number of compiled programs
stays bounded), compiles each shape once ahead of time, and reports every compilation.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.models.config import ModelConfig
from jaxtree.models.kv_cache import KVCache, init_cache
from jaxtree.models.lora import model_variables
from jaxtree.models.transformer import Transformer
from jaxtree.sampling.logits_processing import SamplingConfig, sample_tokens
from jaxtree.utils import power_of_two_at_least, round_up
from jaxtree.sampling import randomness

# Why a row stopped (DecodeOutput.finish_reason).
RUNNING, EOS, STOP_SEQUENCE, MAX_TOKENS, CACHE_FULL = 0, 1, 2, 3, 4
FINISH_REASONS = {RUNNING: "running", EOS: "eos", STOP_SEQUENCE: "stop_sequence",
                  MAX_TOKENS: "max_tokens", CACHE_FULL: "cache_full"}

_NO_TOKEN = -2  # fills the stop-sequence window before any token is generated; never a token id


class DecodeOutput(NamedTuple):
    """What decode/generate return. N is the static max_new_tokens.

    Attributes:
      tokens: int32[B, N] generated tokens, pad_id after each row's end.
      policy_logprobs: float32[B, N] log p(token) under the policy at temperature 1; 0 after end.
      sampling_logprobs: float32[B, N] log p(token) under the sampling distribution; 0 after end.
      num_generated: int32[B] generated tokens per row (stop token included).
      finish_reason: int32[B], one of EOS, STOP_SEQUENCE, MAX_TOKENS, CACHE_FULL.
      last_logits: float32[B, V] logits after each row's last token (to continue decoding).
      num_steps: int32[], decode steps run (the max of num_generated).
    """

    tokens: jax.Array
    policy_logprobs: jax.Array
    sampling_logprobs: jax.Array
    num_generated: jax.Array
    finish_reason: jax.Array
    last_logits: jax.Array
    num_steps: jax.Array


class DecodeState(NamedTuple):
    """What the decode loop carries from step to step. B rows, N = max_new_tokens, V vocabulary,
    W = the stop-sequence window (the longest stop sequence's length).

    Attributes:
      cache: KVCache, each row's context and every token it has generated so far.
      done: bool[B], the row has stopped (or never ran: no budget, or a full cache).
      logits: float32[B, V], the model's logits after each row's last cached token (a stopped
        row keeps those of its last token).
      num_generated: int32[B], tokens generated per row (the stop token included).
      policy_logp: float32[B, N], log p(token) under the policy at temperature 1; 0 after the end.
      reason: int32[B], why the row stopped (EOS, STOP_SEQUENCE, MAX_TOKENS, CACHE_FULL; RUNNING
        while it runs).
      sample_logp: float32[B, N], log p(token) under the sampling distribution; 0 after the end.
      step: int32[], the decode step about to run; step t writes column t of the output buffers.
      tokens: int32[B, N], the generated tokens, pad_id after the row's end.
      window: int32[B, W], the row's last W generated tokens, right-aligned (_NO_TOKEN before
        the first), matched against its stop sequences.
    """

    cache: KVCache
    done: jax.Array
    logits: jax.Array
    num_generated: jax.Array
    policy_logp: jax.Array
    reason: jax.Array
    sample_logp: jax.Array
    step: jax.Array
    tokens: jax.Array
    window: jax.Array


def _stop_sequence_hit(window: jax.Array, stop_sequences: jax.Array) -> jax.Array:
    """window: int32[B, W] last generated tokens (right-aligned); stop_sequences: int32[B, M, W]
    right-aligned and left-padded with -1 (an all -1 row is unused). Returns bool[B]."""
    matches = (stop_sequences == window[:, None, :]) | (stop_sequences < 0)
    used = jnp.any(stop_sequences >= 0, axis=-1)
    return jnp.any(jnp.all(matches, axis=-1) & used, axis=-1)


def decode(config: ModelConfig, sampling: SamplingConfig, max_new_tokens: int, pad_id: int,
           params, cache: KVCache, last_logits: jax.Array, row_keys: jax.Array,
           budgets: jax.Array, stop_sequences: jax.Array, eos_ids: jax.Array):
    """Samples up to max_new_tokens tokens per row, continuing from a filled cache.

    Args:
      config, sampling, max_new_tokens, pad_id: static.
      params: model parameters.
      cache: KVCache (capacity S) holding each row's context.
      last_logits: float32[B, V], the model's logits after each row's last cached token.
      row_keys: [B] PRNG keys; row b's draw at step t is uniform(fold_in(row_keys[b], t))
        (`randomness.step_uniforms`): it depends on nothing else (not on max_new_tokens, the
        batch, or other rows).
      budgets: int32[B], max tokens for each row (<= max_new_tokens; 0 = the row is idle).
      stop_sequences: int32[B, M, W], per-row stop token sequences, right-aligned, left-padded with
        -1; an all -1 entry is unused.
      eos_ids: int32[E], tokens that end any row (may be empty).

    Returns:
      (new cache, DecodeOutput).
    """
    uniforms = randomness.step_uniforms(row_keys, max_new_tokens)
    return decode_with_uniforms(config, sampling, max_new_tokens, pad_id, params, cache,
                                last_logits, uniforms, budgets, stop_sequences, eos_ids)


def decode_with_uniforms(config: ModelConfig, sampling: SamplingConfig, max_new_tokens: int,
                         pad_id: int, params, cache: KVCache, last_logits: jax.Array,
                         uniforms: jax.Array, budgets: jax.Array, stop_sequences: jax.Array,
                         eos_ids: jax.Array):
    """`decode` with the draws given: step t samples row b's token with uniforms[b, t].

    uniforms: float32[B, >= max_new_tokens], pre-drawn (`randomness.step_uniforms`); a caller
    that continues rows mid-sequence passes the columns of its own later steps (the LATR
    kernel's plain phase). The other arguments and the result are as in `decode`.
    """
    batch = last_logits.shape[0]
    window_len = stop_sequences.shape[-1]
    model = Transformer(config)
    # A row with no budget, or whose cache is already full, generates nothing.
    full0 = cache.lengths >= cache.capacity
    done0 = (budgets <= 0) | full0
    state0 = DecodeState(
        step=jnp.int32(0), cache=cache, logits=last_logits, done=done0,
        reason=jnp.select([budgets <= 0, full0], [MAX_TOKENS, CACHE_FULL], RUNNING
                          ).astype(jnp.int32),
        tokens=jnp.full((batch, max_new_tokens), pad_id, jnp.int32),
        policy_logp=jnp.zeros((batch, max_new_tokens), jnp.float32),
        sample_logp=jnp.zeros((batch, max_new_tokens), jnp.float32),
        num_generated=jnp.zeros((batch,), jnp.int32),
        window=jnp.full((batch, window_len), _NO_TOKEN, jnp.int32),
    )

    def cond(s: DecodeState):
        return (s.step < max_new_tokens) & ~jnp.all(s.done)

    def body(s: DecodeState) -> DecodeState:
        active = ~s.done
        u = jax.lax.dynamic_index_in_dim(uniforms, s.step, axis=1, keepdims=False)
        tok, policy_lp, sample_lp = sample_tokens(u, s.logits, sampling)
        tok = jnp.where(active, tok, pad_id)
        column = lambda buf, val: jax.lax.dynamic_update_slice(buf, val[:, None], (0, s.step))
        logits, new_cache = model.apply(model_variables(params), tok[:, None], s.cache,
                                        active.astype(jnp.int32), last_only=True)
        num_generated = s.num_generated + active
        window = jnp.concatenate([s.window[:, 1:], tok[:, None]], axis=1)
        hit_eos = jnp.any(tok[:, None] == eos_ids[None, :], axis=-1)
        hit_stop = _stop_sequence_hit(window, stop_sequences)
        hit_budget = num_generated >= budgets
        hit_full = new_cache.lengths >= new_cache.capacity
        reason = jnp.select([hit_eos, hit_stop, hit_budget, hit_full],
                            [EOS, STOP_SEQUENCE, MAX_TOKENS, CACHE_FULL], RUNNING)
        newly_done = active & (reason != RUNNING)
        return DecodeState(
            step=s.step + 1, cache=new_cache,
            # Idle rows keep their logits so last_logits stays the prediction after their last token.
            logits=jnp.where(active[:, None], logits, s.logits),
            done=s.done | newly_done,
            reason=jnp.where(newly_done, reason, s.reason).astype(jnp.int32),
            tokens=column(s.tokens, tok),
            policy_logp=column(s.policy_logp, jnp.where(active, policy_lp, 0.0)),
            sample_logp=column(s.sample_logp, jnp.where(active, sample_lp, 0.0)),
            num_generated=num_generated,
            window=jnp.where(active[:, None], window, s.window),
        )

    s = jax.lax.while_loop(cond, body, state0)
    # Rows still running after max_new_tokens steps stopped on the static limit.
    reason = jnp.where(s.reason == RUNNING, MAX_TOKENS, s.reason)
    return s.cache, DecodeOutput(s.tokens, s.policy_logp, s.sample_logp, s.num_generated,
                                 reason, s.logits, s.step)


def generate(config: ModelConfig, sampling: SamplingConfig, max_new_tokens: int, pad_id: int,
             capacity: int, params, prompt_tokens: jax.Array, prompt_lengths: jax.Array,
             rng: jax.Array, budgets: jax.Array, stop_sequences: jax.Array,
             eos_ids: jax.Array) -> DecodeOutput:
    """Prefills ragged prompts into a fresh cache of `capacity` positions, then decodes.

    Args:
      prompt_tokens: int32[B, P], right-padded; prompt_lengths: int32[B] (each >= 1).
      rng: a PRNG key; row b samples with the key fold_in(rng, b) (`randomness.row_keys`), so a
        row's draws do not depend on the batch around it.
      The other arguments are as in `decode`.
    """
    batch = prompt_tokens.shape[0]
    keys = randomness.row_keys(rng, jnp.arange(batch, dtype=jnp.uint32))
    cache = init_cache(config, batch, capacity)
    logits, cache = Transformer(config).apply(model_variables(params), prompt_tokens, cache,
                                              prompt_lengths, last_only=True)
    _, out = decode(config, sampling, max_new_tokens, pad_id, params, cache, logits, keys,
                    budgets, stop_sequences, eos_ids)
    return out


_STATIC = ("config", "sampling", "max_new_tokens", "pad_id")
decode_jit = jax.jit(decode, static_argnames=_STATIC, donate_argnames=("cache",))
generate_jit = jax.jit(generate, static_argnames=_STATIC + ("capacity",))


# ----------------------------------------------------------------------------- host side

def bucket_length(n: int, minimum: int = 8) -> int:
    """Next power of two >= max(n, minimum): bounds distinct prompt shapes to O(log max_len)."""
    return power_of_two_at_least(n, minimum)


def half_step_bucket(n: int, minimum: int = 8) -> int:
    """The smallest of 2^k and 3 * 2^(k-1) >= max(n, minimum) (8, 12, 16, 24, 32, 48, ...): twice
    the shapes of `bucket_length`, at most a third of the width padding instead of half. For
    chunks whose padding is computed on every row (the slot engine's observation of each turn)."""
    n = max(int(n), minimum, 1)
    power = bucket_length(n, 1)
    three_quarters = power * 3 // 4
    return three_quarters if three_quarters >= n else power


def bucket_batch(n: int) -> int:
    """Batch sizes: powers of two up to 64, then multiples of 64."""
    return bucket_length(n, 1) if n <= 64 else round_up(n, 64)


@dataclasses.dataclass
class SampleResult:
    """Host-side result of Sampler.generate for the requested rows (padding rows removed)."""

    tokens: list[list[int]]             # generated tokens per row, stop token included
    policy_logprobs: list[np.ndarray]   # float32[n_b] per row
    sampling_logprobs: list[np.ndarray]
    finish_reasons: list[str]
    num_steps: int


@dataclasses.dataclass
class CompileEvent:
    key: tuple
    seconds: float


class Sampler:
    """Host front-end of the jitted sampler: bucketing, ahead-of-time compilation, reporting.

    Shapes are bucketed (batch: `bucket_batch`; prompt length and stop-sequence count/length: powers
    of two; capacity: prompt bucket + max_new_tokens), so a workload with prompts up to length P
    compiles at most ~log2(P) programs per batch bucket. `compile_events` lists every compilation;
    `num_compiles` counts them.
    """

    def __init__(self, config: ModelConfig, sampling: SamplingConfig, max_new_tokens: int,
                 pad_id: int, eos_ids: Sequence[int] = ()):
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
        self.config = config
        self.sampling = sampling
        self.max_new_tokens = int(max_new_tokens)
        self.pad_id = int(pad_id)
        self.eos_ids = np.asarray(sorted(set(int(e) for e in eos_ids)), np.int32)
        self._executables: dict[tuple, jax.stages.Compiled] = {}
        self.compile_events: list[CompileEvent] = []

    @property
    def num_compiles(self) -> int:
        return len(self.compile_events)

    def _compiled(self, key: tuple, args: tuple):
        if key not in self._executables:
            start = time.perf_counter()
            capacity = key[-1]
            lowered = generate_jit.lower(self.config, self.sampling, self.max_new_tokens,
                                         self.pad_id, capacity, *args)
            self._executables[key] = lowered.compile()
            event = CompileEvent(key, time.perf_counter() - start)
            self.compile_events.append(event)
            logging.info("sampler: compiled batch=%d prompt=%d stops=%dx%d capacity=%d in %.1fs",
                         *key, event.seconds)
        return self._executables[key]

    def generate(self, params, prompts: Sequence[Sequence[int]], rng: jax.Array,
                 max_new_tokens: int | Sequence[int] | None = None,
                 stop_sequences: Sequence[Sequence[Sequence[int]]] | None = None) -> SampleResult:
        """Generates a continuation of every prompt.

        Args:
          params: model parameters.
          prompts: B token-id lists (each non-empty), of any lengths.
          rng: a PRNG key; row b uses fold_in(rng, b), so a row's sample does not depend on the
            other rows or on batch padding.
          max_new_tokens: per-row budgets (an int for all rows), each <= the sampler's limit.
          stop_sequences: per row, a list of token sequences that end it (besides EOS).

        Returns:
          SampleResult with B rows.
        """
        batch = len(prompts)
        if batch == 0:
            raise ValueError("prompts is empty")
        lengths = np.array([len(p) for p in prompts], np.int32)
        if lengths.min() < 1:
            raise ValueError(f"prompt {int(lengths.argmin())} is empty; every prompt needs a token")
        budgets = np.full((batch,), self.max_new_tokens, np.int32)
        if max_new_tokens is not None:
            budgets[:] = max_new_tokens
            if budgets.max() > self.max_new_tokens or budgets.min() < 0:
                raise ValueError(f"max_new_tokens must be in [0, {self.max_new_tokens}]")
        stops = stop_sequences or [[] for _ in range(batch)]
        if len(stops) != batch:
            raise ValueError(f"stop_sequences has {len(stops)} rows for {batch} prompts")
        num_stops = bucket_length(max([len(s) for s in stops] + [1]), 1)
        stop_len = bucket_length(max([len(q) for s in stops for q in s] + [1]), 1)

        padded_batch = bucket_batch(batch)
        prompt_len = bucket_length(int(lengths.max()))
        capacity = prompt_len + self.max_new_tokens
        tokens = np.full((padded_batch, prompt_len), self.pad_id, np.int32)
        for b, prompt in enumerate(prompts):
            tokens[b, :len(prompt)] = prompt
        full_lengths = np.ones((padded_batch,), np.int32)
        full_lengths[:batch] = lengths
        full_budgets = np.zeros((padded_batch,), np.int32)  # padding rows never decode
        full_budgets[:batch] = budgets
        stop_array = np.full((padded_batch, num_stops, stop_len), -1, np.int32)
        for b, row in enumerate(stops):
            for j, seq in enumerate(row):
                if len(seq):
                    stop_array[b, j, stop_len - len(seq):] = seq
        args = (params, jnp.asarray(tokens), jnp.asarray(full_lengths), rng,
                jnp.asarray(full_budgets), jnp.asarray(stop_array), jnp.asarray(self.eos_ids))
        key = (padded_batch, prompt_len, num_stops, stop_len, capacity)
        out = jax.device_get(self._compiled(key, args)(*args))
        n = out.num_generated[:batch]
        return SampleResult(
            tokens=[out.tokens[b, :n[b]].tolist() for b in range(batch)],
            policy_logprobs=[out.policy_logprobs[b, :n[b]] for b in range(batch)],
            sampling_logprobs=[out.sampling_logprobs[b, :n[b]] for b in range(batch)],
            finish_reasons=[FINISH_REASONS[int(r)] for r in out.finish_reason[:batch]],
            num_steps=int(out.num_steps),
        )
