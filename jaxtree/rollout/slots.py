"""Device state of the slot engine and the jitted functions over it.

A slot is one row: an episode's whole token sequence, its KV cache, which tokens the policy
generated, their behaviour log-probabilities and the turn each token belongs to. Live episodes
occupy a prefix of the rows (rows [0, live)); a turn works on a static window of `rows`
consecutive slots (a power-of-two bucket) starting where the playing episodes start, so episodes
that have ended, or that sit the turn out, stop costing decode work. All functions are pure: state
in, new state out, with the state donated so XLA updates it in place.

Shapes: S slots, C context capacity (positions per slot), L chunk length, N action tokens per turn.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxtree.models.config import ModelConfig
from jaxtree.models.kv_cache import KVCache, copy_tree_rows, init_cache
from jaxtree.models.lora import model_variables
from jaxtree.models.transformer import Transformer
from jaxtree.sampling import randomness
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.sampling.sampler import decode


class SlotState(NamedTuple):
    """Everything the device holds per slot.

    Attributes:
      cache: KVCache with capacity C; cache.lengths[s] is slot s's sequence length.
      tokens: int32[S, C], the sequence (positions >= length are stale).
      action_mask: bool[S, C], True where the policy generated the token.
      logprobs: float32[S, C], behaviour log-prob (temperature 1) of generated tokens, else 0.
      turn_index: int32[S, C], the turn a token belongs to (a turn's observation and its action).
    """

    cache: KVCache
    tokens: jax.Array
    action_mask: jax.Array
    logprobs: jax.Array
    turn_index: jax.Array

    @property
    def lengths(self) -> jax.Array:
        return self.cache.lengths

    @property
    def num_slots(self) -> int:
        return self.tokens.shape[0]

    @property
    def capacity(self) -> int:
        return self.tokens.shape[1]


def init_slots(config: ModelConfig, num_slots: int, capacity: int) -> SlotState:
    return SlotState(
        cache=init_cache(config, num_slots, capacity),
        tokens=jnp.zeros((num_slots, capacity), jnp.int32),
        action_mask=jnp.zeros((num_slots, capacity), bool),
        logprobs=jnp.zeros((num_slots, capacity), jnp.float32),
        turn_index=jnp.zeros((num_slots, capacity), jnp.int32),
    )


def _map_rows(fn, state: SlotState) -> SlotState:
    """Applies fn to every per-slot array (keys, values, lengths and the token buffers)."""
    cache = state.cache
    return SlotState(
        cache=KVCache(tuple(fn(k) for k in cache.keys), tuple(fn(v) for v in cache.values),
                      fn(cache.lengths)),
        tokens=fn(state.tokens), action_mask=fn(state.action_mask),
        logprobs=fn(state.logprobs), turn_index=fn(state.turn_index))


def _window(state: SlotState, start: jax.Array, rows: int) -> SlotState:
    """Slots [start, start + rows); start is traced, rows static (start + rows <= S)."""
    return _map_rows(lambda x: jax.lax.dynamic_slice_in_dim(x, start, rows, axis=0), state)


def _put_window(state: SlotState, window: SlotState, start: jax.Array) -> SlotState:
    """Writes `window` back over slots [start, ...) of `state` (in place when state is
    donated)."""
    leaves = jax.tree_util.tree_leaves(state)
    window_leaves = jax.tree_util.tree_leaves(window)
    updated = [jax.lax.dynamic_update_slice_in_dim(x, w, start, axis=0)
               for x, w in zip(leaves, window_leaves)]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(state), updated)


def _write_rows(buffer: jax.Array, values: jax.Array, offsets: jax.Array,
                counts: jax.Array) -> jax.Array:
    """buffer[b, offsets[b] + j] = values[b, j] for j < counts[b]; other positions untouched.

    buffer: [B, C]; values: [B, L]; offsets, counts: int32[B]. Positions past C are dropped.
    """
    batch, width = values.shape
    steps = jnp.arange(width, dtype=jnp.int32)[None, :]
    positions = jnp.where(steps < counts[:, None], offsets[:, None] + steps, buffer.shape[1])
    rows = jnp.arange(batch, dtype=jnp.int32)[:, None]
    return buffer.at[rows, positions].set(values.astype(buffer.dtype), mode="drop")


def _append_observation(config: ModelConfig, params, rows: SlotState, chunk: jax.Array,
                        chunk_lengths: jax.Array, turn: jax.Array):
    """Appends observation tokens to `rows` (not generated, log-prob 0, tagged with `turn`) and
    runs them through the model. Returns (logits after each row's last new token [R, V], rows)."""
    offsets = rows.cache.lengths
    tokens = _write_rows(rows.tokens, chunk, offsets, chunk_lengths)
    turn_index = _write_rows(rows.turn_index, jnp.broadcast_to(turn[:, None], chunk.shape),
                             offsets, chunk_lengths)
    action_mask = _write_rows(rows.action_mask, jnp.zeros(chunk.shape, bool), offsets,
                              chunk_lengths)
    logprobs = _write_rows(rows.logprobs, jnp.zeros(chunk.shape, jnp.float32), offsets,
                           chunk_lengths)
    logits, cache = Transformer(config).apply(model_variables(params), chunk, rows.cache,
                                              chunk_lengths, last_only=True)
    return logits, SlotState(cache, tokens, action_mask, logprobs, turn_index)


@functools.partial(jax.jit, static_argnames=("config",), donate_argnames=("state",))
def prefill_slots(config: ModelConfig, params, state: SlotState, slots: jax.Array,
                  chunk: jax.Array, chunk_lengths: jax.Array, turn: jax.Array) -> SlotState:
    """Appends long observations (a new episode's first prompt) to some slots only.

    A turn's chunk is as wide as its longest observation; prefilling the long ones here, on just
    their slots, keeps the turn's chunk short for everyone else.

    Args:
      slots: int32[K] distinct slot indices (padding entries are other slots with length 0).
      chunk: int32[K, L]; chunk_lengths, turn: int32[K].
    """
    rows = _map_rows(lambda x: x[slots], state)
    _, rows = _append_observation(config, params, rows, chunk, chunk_lengths, turn)
    leaves = jax.tree_util.tree_leaves(state)
    updated = [x.at[slots].set(r) for x, r in zip(leaves, jax.tree_util.tree_leaves(rows))]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(state), updated)


class TurnOutput(NamedTuple):
    """What the host needs after a turn: the action tokens to detokenize, and their log-probs
    for controllers that read the policy's uncertainty (ARPO's branching rule).

    Attributes:
      tokens: int32[R, N] generated tokens (stop token included), pad after each row's end.
      num_generated: int32[R].
      finish_reason: int32[R] (see jaxtree.sampling.FINISH_REASONS).
      logprobs: float32[R, N] log p(token) under the policy at temperature 1; 0 after the end.
    """

    tokens: jax.Array
    num_generated: jax.Array
    finish_reason: jax.Array
    logprobs: jax.Array


@dataclasses.dataclass(frozen=True)
class TurnSpec:
    """The static settings of a turn, hashable and compared by value: `play_turn` compiles once
    per TurnSpec and shape of its inputs.

    Attributes:
      model_config: the policy's architecture.
      sampling: how actions are sampled (temperature, top-k, top-p).
      max_action_tokens: N, the most tokens an action may have (the output width).
      pad_id: the token after each action's end in TurnOutput.tokens.
      rows: R, how many consecutive slots take part (the others are untouched).
    """

    model_config: ModelConfig
    sampling: SamplingConfig
    max_action_tokens: int
    pad_id: int
    rows: int


class TurnInputs(NamedTuple):
    """The per-turn device inputs of `play_turn`. Row r is slot start + r; R = TurnSpec.rows.

    Attributes:
      start: int32[], the first slot of the turn's window (start + R <= S).
      chunk: int32[R, L], new observation tokens per slot, right-padded.
      chunk_lengths: int32[R], tokens of `chunk` to append (0: nothing to append).
      turn: int32[R], the turn number recorded for the chunk and the action.
      episode_ids: int32[R]; slot r samples with fold_in(fold_in(rng, episode_ids[r]), turn[r]),
        so an episode's randomness does not depend on the slot it occupies.
      budgets: int32[R], max action tokens this turn (<= N; 0: the slot sits the turn out).
      stop_sequences: int32[R, M, W], per-slot stop token sequences, right-aligned, left-padded
        with -1 (see jaxtree.sampling.decode).
      eos_ids: int32[E], tokens that end any action.
    """

    start: jax.Array
    chunk: jax.Array
    chunk_lengths: jax.Array
    turn: jax.Array
    episode_ids: jax.Array
    budgets: jax.Array
    stop_sequences: jax.Array
    eos_ids: jax.Array


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def play_turn(spec: TurnSpec, params, state: SlotState, inputs: TurnInputs,
              rng: jax.Array) -> tuple[SlotState, TurnOutput]:
    """One turn for slots [inputs.start, inputs.start + spec.rows): append each slot's new
    observation tokens, then sample its action. Row r of the inputs and outputs is slot
    start + r.

    Args:
      spec: static settings (model, sampling, action width, pad id, window size R).
      params: model parameters.
      state: the slots (donated: updated in place).
      inputs: this turn's observations, keys, budgets and stop tokens (TurnInputs).
      rng: a PRNG key, combined with each row's episode id and turn.

    Returns:
      (new state, TurnOutput for the R slots).
    """
    config = spec.model_config
    window = _window(state, inputs.start, spec.rows)
    logits, window = _append_observation(config, params, window, inputs.chunk,
                                         inputs.chunk_lengths, inputs.turn)
    cache, tokens, action_mask, logprobs, turn_index = window
    # The action: one key per (episode, turn).
    keys = randomness.row_keys(rng, inputs.episode_ids, inputs.turn)
    action_offsets = cache.lengths
    cache, out = decode(config, spec.sampling, spec.max_action_tokens, spec.pad_id, params, cache,
                        logits, keys, inputs.budgets, inputs.stop_sequences, inputs.eos_ids)
    n = out.num_generated
    tokens = _write_rows(tokens, out.tokens, action_offsets, n)
    action_mask = _write_rows(action_mask, jnp.ones(out.tokens.shape, bool), action_offsets, n)
    logprobs = _write_rows(logprobs, out.policy_logprobs, action_offsets, n)
    turn_index = _write_rows(turn_index, jnp.broadcast_to(inputs.turn[:, None], out.tokens.shape),
                             action_offsets, n)
    window = SlotState(cache, tokens, action_mask, logprobs, turn_index)
    return _put_window(state, window, inputs.start), TurnOutput(out.tokens, n, out.finish_reason,
                                                                out.policy_logprobs)


@functools.partial(jax.jit, donate_argnames=("state",))
def copy_slots(state: SlotState, src: jax.Array, dst: jax.Array) -> SlotState:
    """Copies whole slots src[i] -> dst[i] (all reads before any write): the fork primitive, and
    how the engine keeps live episodes packed at the front."""
    return copy_tree_rows(state, src, dst)


@functools.partial(jax.jit, donate_argnames=("state",))
def clear_slots(state: SlotState, rows: jax.Array) -> SlotState:
    """Empties slots for new episodes (length 0; stale buffers are overwritten as they refill)."""
    cache = state.cache
    return state._replace(cache=cache._replace(lengths=cache.lengths.at[rows].set(0)))


@jax.jit
def read_slots(state: SlotState, slots: jax.Array):
    """(tokens, action_mask, logprobs, turn_index, lengths) of the given slots, for the host."""
    return (state.tokens[slots], state.action_mask[slots], state.logprobs[slots],
            state.turn_index[slots], state.cache.lengths[slots])
