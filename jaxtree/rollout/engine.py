"""The slot engine: many multi-turn episodes on device at once, environments on the host.

Each episode lives in one slot (a device row holding its tokens and KV cache) and owns one host
environment. A turn, for every live episode at once:

  host    tokenize the new observation (only the new tokens: history is never re-rendered)
  device  append those tokens to the slot's cache at its own offset, then sample the action until
          the stop sequence or the per-turn token limit (`slots.play_turn`, one compiled call)
  host    detokenize, step the environment, record the turn (`jaxtree.rollout.episode`: reward,
          validity, tree node and the per-turn labels the experiment reads)

Episodes end on `done`, on the turn limit, or when the slot's context is full (`TRUNCATED`), or
when a controller stops them (`stop`: `PRUNED`).
Live episodes are kept packed in the leading slots: when episodes end, the last live slots move
into the holes (an on-device row copy), and queued episodes take the freed slots. A turn covers
only a power-of-two window of slots from the first playing episode, so finished episodes, and
held ones in the leading slots, stop costing decode work.

`fork(episode, n)` copies an episode's slot on device and clones its environment: the children
continue from the parent's exact state without re-prefilling the shared prefix (PATR expansion,
TSR beams, Tree-Random, MC-PR's value continuations). Episodes in `held` keep their slots but sit
turns out (a parent waiting while its continuations play); `discard` drops a finished episode
from the batch being collected.

Shapes: S slots, C context positions, N action tokens per turn.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from environments.base import TextEnv
from jaxtree.config import Section, non_negative, one_of, option, positive, require
from jaxtree.models.config import ModelConfig
from jaxtree.rollout.episode import NO_LABELS, Episode
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.signatures import SIGNATURES
from jaxtree.rollout.slots import (SlotState, TurnInputs, TurnSpec, clear_slots, copy_slots,
                                   init_slots, play_turn, prefill_slots, read_slots)
from jaxtree.rollout.stats import RolloutStats
from jaxtree.rollout.trajectory import PRUNED, TRUNCATED, EpisodeRecord, TrajectoryBatch, assemble
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.sampling.sampler import (CACHE_FULL, EOS, STOP_SEQUENCE, bucket_length,
                                      half_step_bucket)
from jaxtree.tokenizers import Tokenizer


@dataclasses.dataclass(frozen=True)
class RolloutConfig(Section):
    """How episodes are generated (the slot engine's settings; config section `rollout`)."""

    num_slots: int = option(64, "S, episodes on device at once", check=positive())
    context_length: int = option(1024, "C, token positions per slot (prompt, observations and "
                                 "actions together)", check=positive())
    max_action_tokens: int = option(32, "N, the per-turn token limit of an action",
                                    check=positive())
    max_turns: int = option(0, "the turn limit (0: the environment's own max_steps)",
                            check=non_negative())
    signature: str = option("env", "how each turn's state is named in RTMC's table and VPR's "
                            "state groups (a registered signature function, "
                            "jaxtree.rollout.signatures)", check=one_of(SIGNATURES.names))
    sampling: SamplingConfig = SamplingConfig()

    def check(self):
        require(self.max_action_tokens < self.context_length, "max_action_tokens",
                f"{self.max_action_tokens} must be below context_length={self.context_length}")


@dataclasses.dataclass
class SlotEpisode(Episode):
    """An episode of the slot engine: the shared episode record plus where it lives on device."""

    slot: int | None = None          # its row while live
    length: int = 0                  # tokens in the slot so far
    pending: list[int] = dataclasses.field(default_factory=list)  # tokens to append next turn


class SlotEngine:
    """Runs multi-turn episodes of one environment with one policy. See the module docstring.

    Usage:
        engine = SlotEngine(model_config, tokenizer, lambda: environments.make("frozen_lake"), rc)
        engine.begin(params, rng)
        for seed in seeds: engine.add_episode(seed)
        engine.run()
        batch = engine.collect()
    """

    def __init__(self, model_config: ModelConfig, tokenizer: Tokenizer,
                 make_env: Callable[[], TextEnv], rollout: RolloutConfig,
                 labeler: TurnLabeler = NO_LABELS):
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.make_env = make_env
        self.rollout = rollout
        stops = tokenizer.assistant_stop_sequences
        width = max(len(s) for s in stops)
        self._stops = np.full((len(stops), width), -1, np.int32)
        for i, seq in enumerate(stops):
            self._stops[i, width - len(seq):] = seq
        self._eos = jnp.asarray([tokenizer.eos_id], jnp.int32)
        self._stop_rows: dict[int, jax.Array] = {}
        self.labeler = labeler           # the per-turn labels each turn records
        self.state: SlotState | None = None
        self.params = None

    # ------------------------------------------------------------------ session

    def begin(self, params, rng: jax.Array, key_offset: int = 0) -> None:
        """Starts a rollout session: empty slots, no episodes. Episode e samples with the keys
        of id e + `key_offset`: a process playing a share of a step's groups offsets its keys
        by the episodes before its share, so its episodes draw what they would in one process
        playing every group (`jaxtree.parallel.distributed`)."""
        self.params = params
        self.rng = rng
        self.key_offset = int(key_offset)
        self.state = init_slots(self.model_config, self.rollout.num_slots,
                                self.rollout.context_length)
        self.episodes: dict[int, SlotEpisode] = {}
        self.queue: list[int] = []
        self.slots: list[int] = []           # episode id per live slot, slots 0..len-1
        self.finished: list[int] = []
        self.records: dict[int, EpisodeRecord] = {}
        self.held: set[int] = set()          # live episodes that sit turns out
        self.stats = RolloutStats()
        self._next_id = 0
        self._next_node = 0

    def add_episode(self, task_id: int, group_id: int = 0) -> int:
        """Queues an episode of the task `task_id` (the environment seed); returns its id."""
        episode = SlotEpisode(self._new_id(), int(task_id), int(group_id))
        self.episodes[episode.episode_id] = episode
        self.queue.append(episode.episode_id)
        return episode.episode_id

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _new_node(self) -> int:
        self._next_node += 1
        return self._next_node - 1

    @property
    def live(self) -> list[SlotEpisode]:
        """Live episodes in slot order."""
        return [self.episodes[e] for e in self.slots]

    @property
    def has_work(self) -> bool:
        return bool(self.slots or self.queue)

    @property
    def free_slots(self) -> int:
        return self.rollout.num_slots - len(self.slots)

    def start_queued(self) -> None:
        """Starts queued episodes in the free slots now (they start at the next turn anyway);
        a started episode can fork before its first action."""
        self._refill()

    def discard(self, episode_id: int) -> EpisodeRecord:
        """Removes a finished episode from the batch `collect` will return; returns its record."""
        if episode_id not in self.records:
            raise ValueError(f"episode {episode_id} has not finished or was already collected")
        self.finished.remove(episode_id)
        return self.records.pop(episode_id)

    def run(self, progress: Callable[[int], Any] | None = None) -> None:
        """Plays turns until every queued and live episode has finished; `progress(n)` after
        each turn with the n episodes it finished (a progress bar's `update`)."""
        while self.has_work:
            finished = self.play_turn()
            if progress is not None:
                progress(len(finished))

    def collect(self) -> TrajectoryBatch:
        """The episodes finished since the last collect, as a batch ordered by episode id. When
        nothing is left to play, the session ends here: its KV cache and its reference to the
        parameters are let go (a SmolLM2 engine's cache of 16 slots x 2,048 positions is
        1.5 GB, which the update and the other engine would otherwise hold beside their own)."""
        records = [self.records.pop(e) for e in sorted(self.finished)]
        self.finished = []
        if not self.has_work:
            self.state = self.params = None
        return assemble(records, self.tokenizer.pad_id, self.labeler.names)

    # ------------------------------------------------------------------ tree operations

    def fork(self, episode_id: int, num_children: int) -> list[int]:
        """Copies a live episode into `num_children` new episodes (between turns).

        The children get free slots after the live ones, the parent's slot contents (cache,
        tokens, masks, log-probs) copied on device, a clone of its environment and its history;
        their trajectories record the parent and the turn they forked at.
        """
        parent = self.episodes[episode_id]
        if parent.slot is None or parent.finished:
            raise ValueError(f"episode {episode_id} is not live; only live episodes can fork")
        free = self.rollout.num_slots - len(self.slots)
        if num_children > free:
            raise ValueError(f"fork of {num_children} needs free slots; {free} are free")
        children = []
        for _ in range(num_children):
            child = parent.fork(self._new_id())
            child.slot, child.pending = len(self.slots), list(parent.pending)
            self.episodes[child.episode_id] = child
            self.slots.append(child.episode_id)
            children.append(child)
        self._copy_slots([parent.slot] * num_children, [c.slot for c in children])
        return [c.episode_id for c in children]

    def stop(self, episode_id: int) -> None:
        """Ends a live episode now (a pruned branch); it is kept in the batch, ended `PRUNED`."""
        episode = self.episodes[episode_id]
        if episode.slot is None or episode.finished:
            raise ValueError(f"episode {episode_id} is not live")
        episode.end(PRUNED)
        self._retire([episode])

    # ------------------------------------------------------------------ the turn

    def play_turn(self) -> list[int]:
        """One turn for every live episode (after filling free slots from the queue). Returns the
        ids of the episodes that finished during it."""
        start = time.perf_counter()
        self._refill()
        live = self._playing()
        if not live:
            return []
        capacity, limit = self.rollout.context_length, self.rollout.max_action_tokens
        # An episode whose next observation and action would not fit ends here, truncated.
        overflow = [e for e in live if e.length + len(e.pending) + limit > capacity]
        for e in overflow:
            e.end(TRUNCATED, context_full=True)
        if overflow:
            self._retire(overflow)
            live = self._playing()
            if not live:
                return [e.episode_id for e in overflow]
        self.stats.other_host_seconds += time.perf_counter() - start
        start = time.perf_counter()
        self._prefill_long(live)
        self.stats.device_seconds += time.perf_counter() - start
        start = time.perf_counter()
        # The turn covers a window of consecutive slots from the first playing one: a
        # power-of-two count, never below 16 (a few idle rows cost less than compiling a program
        # for every tail size of a rollout). Held episodes sit the turn out; when they fill the
        # leading slots (a lookahead's candidates, MC-PR's waiting episodes) the window starts
        # past them, and the rows inside it get no observation and budget 0.
        first, last = live[0].slot, live[-1].slot
        rows = min(bucket_length(last + 1 - first, 16), self.rollout.num_slots)
        offset = min(first, self.rollout.num_slots - rows)
        # Every row computes the chunk's full width, so its padding is paid rows times over: the
        # finer half-step buckets (FrozenLake's 23-token observation runs 24 wide, not 32).
        width = half_step_bucket(max(len(e.pending) for e in live), 8)
        chunk = np.full((rows, width), self.tokenizer.pad_id, np.int32)
        chunk_lengths = np.zeros(rows, np.int32)
        turns = np.zeros(rows, np.int32)
        episode_ids = np.zeros(rows, np.int32)
        budgets = np.zeros(rows, np.int32)
        for e in live:
            row = e.slot - offset
            self.stats.observation_tokens += len(e.pending)
            chunk[row, :len(e.pending)] = e.pending
            chunk_lengths[row] = len(e.pending)
            turns[row] = e.num_turns
            episode_ids[row] = e.episode_id + self.key_offset
            budgets[row] = limit
        self.stats.other_host_seconds += time.perf_counter() - start

        start = time.perf_counter()
        spec = TurnSpec(self.model_config, self.rollout.sampling, limit, self.tokenizer.pad_id,
                        rows)
        inputs = TurnInputs(jnp.int32(offset), jnp.asarray(chunk), jnp.asarray(chunk_lengths),
                            jnp.asarray(turns), jnp.asarray(episode_ids), jnp.asarray(budgets),
                            self._stop_table(rows), self._eos)
        self.state, out = play_turn(spec, self.params, self.state, inputs, self.rng)
        tokens, num_generated, reasons, logprobs = jax.device_get(out)
        self.stats.device_seconds += time.perf_counter() - start
        self.stats.turns += 1
        self.stats.slot_turns += rows
        self.stats.rows_per_turn.append(rows)

        finished = []
        for e in live:
            row = e.slot - offset
            n = int(num_generated[row])
            e.length += len(e.pending) + n
            self.stats.generated_tokens += n
            if self._after_action(e, tokens[row, :n].tolist(), int(reasons[row]),
                                  np.array(logprobs[row, :n])):
                finished.append(e)
        start = time.perf_counter()
        self._retire(finished)  # the overflowed ones were retired before the turn
        self.stats.other_host_seconds += time.perf_counter() - start
        return [e.episode_id for e in overflow + finished]

    def _playing(self) -> list[SlotEpisode]:
        """Live episodes that take part in the next turn (not held), in slot order."""
        return [e for e in self.live if e.episode_id not in self.held]

    def _after_action(self, e: SlotEpisode, action: list[int], reason: int,
                      logprobs: np.ndarray) -> bool:
        """Plays the action (its tokens' behaviour log-probs `logprobs`) and prepares the next
        observation. True if the episode ended."""
        start = time.perf_counter()
        over, e.pending = e.play(self.tokenizer, action, reason in (EOS, STOP_SEQUENCE),
                                 self.rollout.max_turns, self._new_node(), self.labeler,
                                 logprobs)
        if reason == CACHE_FULL:
            e.end(e.end_reason if over else TRUNCATED, context_full=True)
        self.stats.env_steps += 1
        self.stats.env_seconds += time.perf_counter() - start
        self.stats.subprocess_seconds += float(e.info.get("subprocess_seconds") or 0.0)
        return e.finished

    # ------------------------------------------------------------------ slot management

    def _refill(self) -> None:
        """Starts queued episodes in the free slots."""
        start = time.perf_counter()
        new_slots = []
        while self.queue and len(self.slots) < self.rollout.num_slots:
            e = self.episodes[self.queue.pop(0)]
            e.slot = len(self.slots)
            e.pending = e.start(self.make_env, self.tokenizer)
            self.slots.append(e.episode_id)
            new_slots.append(e.slot)
        if new_slots:
            # Padded with repeats to a power-of-two count: a compiled program per bucket, not per
            # count (clearing a slot twice is harmless).
            padded = new_slots + [new_slots[0]] * (bucket_length(len(new_slots), 1) - len(new_slots))
            self.state = clear_slots(self.state, jnp.asarray(padded, jnp.int32))
        self.stats.start_seconds += time.perf_counter() - start

    def _retire(self, episodes: Sequence[SlotEpisode]) -> None:
        """Copies ended episodes to the host and packs the live ones into the leading slots."""
        if not episodes:
            return
        slots = [e.slot for e in episodes]
        padded = slots + [slots[0]] * (bucket_length(len(slots), 1) - len(slots))
        tokens, mask, logprobs, turn_index, lengths = jax.device_get(
            read_slots(self.state, jnp.asarray(padded, jnp.int32)))
        for i, e in enumerate(episodes):
            n = int(lengths[i])
            self.records[e.episode_id] = e.record(tokens[i, :n], mask[i, :n], logprobs[i, :n],
                                                  turn_index[i, :n])
            e.slot = None
            e.env = None  # the environment's job is done; free it
            self.finished.append(e.episode_id)
        # Pack: live episodes from the end move into the holes below the new live count.
        done_slots = set(slots)
        keep = [eid for eid in self.slots if self.episodes[eid].slot is not None]
        holes = sorted(s for s in done_slots if s < len(keep))
        movers = [eid for eid in keep if self.episodes[eid].slot >= len(keep)]
        if movers:
            self._copy_slots([self.episodes[eid].slot for eid in movers], holes)
            for eid, hole in zip(movers, holes):
                self.episodes[eid].slot = hole
        self.slots = sorted(keep, key=lambda eid: self.episodes[eid].slot)

    def _copy_slots(self, src: list[int], dst: list[int]) -> None:
        """Row copies src[i] -> dst[i], padded to a power-of-two count with self-copies of slots
        that are no destination (so every write of a slot carries one value)."""
        spare = [s for s in range(self.rollout.num_slots) if s not in set(dst)]
        extra = bucket_length(len(dst), 1) - len(dst)
        src, dst = src + spare[:extra], dst + spare[:extra]
        self.state = copy_slots(self.state, jnp.asarray(src, jnp.int32),
                                jnp.asarray(dst, jnp.int32))

    def _prefill_long(self, live: list[SlotEpisode]) -> None:
        """Prefills all but the last `width` pending tokens of episodes whose pending chunk is
        longer than the shortest bucket, on their slots only (see `slots.prefill_slots`)."""
        width = half_step_bucket(min(len(e.pending) for e in live), 8)
        long = [e for e in live if len(e.pending) > width]
        if not long:
            return
        count = min(bucket_length(len(long), 1), self.rollout.num_slots)
        taken = {e.slot for e in long}
        pad_slots = [s for s in range(self.rollout.num_slots) if s not in taken][:count - len(long)]
        head_width = bucket_length(max(len(e.pending) - width for e in long), 8)
        chunk = np.full((count, head_width), self.tokenizer.pad_id, np.int32)
        lengths = np.zeros(count, np.int32)
        turns = np.zeros(count, np.int32)
        for i, e in enumerate(long):
            head, e.pending = e.pending[:-width], e.pending[-width:]
            chunk[i, :len(head)] = head
            lengths[i] = len(head)
            turns[i] = e.num_turns
            e.length += len(head)
            self.stats.observation_tokens += len(head)
        slots = [e.slot for e in long] + pad_slots
        self.state = prefill_slots(self.model_config, self.params, self.state,
                                   jnp.asarray(slots, jnp.int32), jnp.asarray(chunk),
                                   jnp.asarray(lengths), jnp.asarray(turns))

    def _stop_table(self, rows: int) -> jax.Array:
        if rows not in self._stop_rows:
            self._stop_rows[rows] = jnp.asarray(np.broadcast_to(self._stops,
                                                                (rows,) + self._stops.shape))
        return self._stop_rows[rows]
