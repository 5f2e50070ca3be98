"""The trajectory batch: the interface between rollouts and rewards / advantages / the update.

Host-side numpy arrays (the update step moves them to devices with the sharding it needs). N
trajectories, T token positions (the longest trajectory, rounded up to a multiple of 8), K turns
(the most turns of any trajectory). Everything a reward or advantage function needs is here, per
turn and per episode, so those functions are pure functions of the batch. Per-turn labels beyond
the reward and validity (VPR's verdicts, RTMC's signatures, ...) are in `labels`, holding those
the experiment reads (`jaxtree.rollout.labels`): `batch.label("verified")`.

Tree metadata. Every turn of every episode is a node of the rollout tree: `node_ids[i, t]`
names the (history, action) of turn t. An episode forked from another at turn f shares its
parent's nodes for turns < f (the prefix was computed once) and has its own nodes from f on, so
two rows hold equal node ids exactly where they share history. `parent_ids` / `fork_turns` /
`depth` locate the fork itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from jaxtree.rollout.labels import LABELS, MissingLabel, label_table
from jaxtree.utils import round_up

# Why an episode ended (TrajectoryBatch.end_reason).
DONE = 0         # the game ended it (solved, failed, or its own rules)
TRUNCATED = 1    # the turn limit or a full context cut it short
PRUNED = 2       # a tree controller stopped it (kept in the group, e.g. PATR's "Keep All")
DISCARDED = 3    # a trial branch (lookahead) that is not trained on
END_REASONS = {DONE: "done", TRUNCATED: "truncated", PRUNED: "pruned", DISCARDED: "discarded"}

NO_PARENT = -1   # parent_ids / fork_turns of an episode that was not forked
NO_NODE = -1     # node_ids past an episode's last turn


@dataclasses.dataclass
class TrajectoryBatch:
    """N complete episodes.

    Attributes:
      tokens: int32[N, T], each episode's whole token sequence, right-padded with the pad id.
      lengths: int32[N], real tokens per row.
      action_mask: bool[N, T], True exactly on tokens the policy generated (its actions, each
        ending with its stop token when it stopped by itself).
      behaviour_logprobs: float32[N, T], log-prob of each generated token under the sampling
        policy at temperature 1 (0 elsewhere): the denominator of importance ratios.
      turn_index: int32[N, T], the turn of each token (turn k = the k-th observation and the
        action that answers it); -1 on padding.
      turn_rewards: float32[N, K], the environment's reward for each turn's action; 0 past
        num_turns.
      turn_valid: bool[N, K], the action parsed to a legal move.
      node_ids: int32[N, K], tree node of each turn (shared by rows with a common history);
        NO_NODE past num_turns.
      labels: {name: [N, K]} the per-turn labels the rollout recorded (the experiment's reads;
        `jaxtree.rollout.labels` lists them with their dtype and fill past num_turns).
      outcome_reward: float32[N], the environment's return (sum of its turn rewards, summed in
        float64).
      success: bool[N].
      end_reason: int8[N], DONE | TRUNCATED | PRUNED | DISCARDED.
      context_full: bool[N], ended because the slot's context could not hold another turn.
      num_turns: int32[N].
      num_invalid: int32[N], actions that did not parse to a legal move.
      task_ids: int64[N], the environment seed of each episode (episodes of one task share it).
      group_ids: int32[N], the group an episode belongs to for group-relative advantages.
      episode_ids: int32[N], unique within the rollout.
      parent_ids: int32[N], episode id of the trajectory this one was forked from; NO_PARENT if
        none.
      fork_turns: int32[N], the turn at which it was forked (its first own action; the branch
        turn); NO_PARENT if none.
      depth: int32[N], forks between the root episode and this one (0 for a root).
      infos: the final `info` dict of every episode (environment metrics included).
    """

    tokens: np.ndarray
    lengths: np.ndarray
    action_mask: np.ndarray
    behaviour_logprobs: np.ndarray
    turn_index: np.ndarray
    turn_rewards: np.ndarray
    turn_valid: np.ndarray
    node_ids: np.ndarray
    labels: dict[str, np.ndarray]
    outcome_reward: np.ndarray
    success: np.ndarray
    end_reason: np.ndarray
    context_full: np.ndarray
    num_turns: np.ndarray
    num_invalid: np.ndarray
    task_ids: np.ndarray
    group_ids: np.ndarray
    episode_ids: np.ndarray
    parent_ids: np.ndarray
    fork_turns: np.ndarray
    depth: np.ndarray
    infos: list[dict]

    def __len__(self) -> int:
        return len(self.lengths)

    def label(self, name: str) -> np.ndarray:
        """[N, K] per-turn label `name`. MissingLabel (naming it) when the rollout did not
        record it: a part that reads a label declares it (`reads=`) so that rollouts compute
        it."""
        if name not in self.labels:
            raise MissingLabel(f"the batch has no per-turn label {name!r} (it holds "
                               f"{sorted(self.labels) or 'none'}): the part that reads it must "
                               f"declare it, reads=({name!r},), so that the rollout records it")
        return self.labels[name]

    @property
    def response_lengths(self) -> np.ndarray:
        """int32[N], generated tokens per episode."""
        return self.action_mask.sum(axis=1).astype(np.int32)

    @property
    def truncated(self) -> np.ndarray:
        """bool[N], cut short by the turn limit or a full context rather than ended by the game."""
        return self.end_reason == TRUNCATED

    @property
    def played(self) -> np.ndarray:
        """bool[N, K], the turns each episode played (t < num_turns)."""
        return np.arange(self.turn_rewards.shape[1])[None, :] < self.num_turns[:, None]

    @property
    def parent_nodes(self) -> np.ndarray:
        """int32[N, K], the node each turn's node hangs from (the previous turn's; NO_NODE for the
        first turn and past num_turns)."""
        parents = np.full(self.node_ids.shape, NO_NODE, np.int32)
        parents[:, 1:] = np.where(self.played[:, 1:], self.node_ids[:, :-1], NO_NODE)
        return parents

    def renumbered(self, group_offset: int, episode_offset: int,
                   node_offset: int) -> "TrajectoryBatch":
        """The batch with its group, episode (parent included) and node ids shifted, so that
        batches of separate rollouts (oversampling rounds) can be concatenated."""
        return dataclasses.replace(
            self, group_ids=self.group_ids + group_offset,
            episode_ids=self.episode_ids + episode_offset,
            parent_ids=np.where(self.parent_ids >= 0, self.parent_ids + episode_offset,
                                NO_PARENT).astype(np.int32),
            node_ids=np.where(self.node_ids >= 0, self.node_ids + node_offset,
                              NO_NODE).astype(np.int32))

    def select(self, indices: Sequence[int]) -> "TrajectoryBatch":
        """The sub-batch of the given rows (in that order)."""
        idx = np.asarray(indices, dtype=np.int64)
        fields = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "infos":
                fields[f.name] = [value[i] for i in idx]
            elif f.name == "labels":
                fields[f.name] = {name: table[idx] for name, table in value.items()}
            else:
                fields[f.name] = value[idx]
        return TrajectoryBatch(**fields)


@dataclasses.dataclass(frozen=True)
class TurnRecord:
    """What the host records for one turn (see `jaxtree.rollout.episode`): the environment's
    reward and the action's validity, the turn's tree node, the behaviour log-probs of the
    action's tokens (float32[n], temperature 1; None where the rollout has none) and the
    per-turn labels the experiment reads ({name: value})."""

    reward: float
    valid: bool
    node_id: int
    labels: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    action_logprobs: np.ndarray | None = None

    @property
    def action_signature(self) -> str | None:
        """The action's signature label (None if the rollout did not record it)."""
        return self.labels.get("action_signature")


@dataclasses.dataclass
class EpisodeRecord:
    """What one finished episode contributes to a batch (host side)."""

    tokens: np.ndarray        # int32[length]
    action_mask: np.ndarray   # bool[length]
    logprobs: np.ndarray      # float32[length]
    turn_index: np.ndarray    # int32[length]
    turns: list[TurnRecord]
    success: bool
    end_reason: int
    context_full: bool
    task_id: int
    group_id: int
    episode_id: int
    parent_id: int
    fork_turn: int
    depth: int
    info: dict[str, Any]


# Per-turn fields of TrajectoryBatch: (TurnRecord attribute, dtype, fill past num_turns).
_TURN_FIELDS = {
    "turn_rewards": ("reward", np.float32, 0.0),
    "turn_valid": ("valid", bool, False),
    "node_ids": ("node_id", np.int32, NO_NODE),
}
# Per-token fields: fill past each row's length.
_TOKEN_FILL = {"action_mask": False, "behaviour_logprobs": 0.0, "turn_index": -1}


def assemble(records: Sequence[EpisodeRecord], pad_id: int,
             labels: Sequence[str] = ()) -> TrajectoryBatch:
    """Pads finished episodes into a TrajectoryBatch (in the given order), with the per-turn
    labels the records carry and `labels` (those the rollout records, so that a batch of no
    episode, a tree whose every branch was dropped, still holds them)."""
    n = len(records)
    width = round_up(max((len(r.tokens) for r in records), default=1), 8)
    turns = max(max((len(r.turns) for r in records), default=1), 1)
    token_arrays = {"tokens": np.full((n, width), pad_id, np.int32),
                    "action_mask": np.zeros((n, width), bool),
                    "behaviour_logprobs": np.zeros((n, width), np.float32),
                    "turn_index": np.full((n, width), -1, np.int32)}
    turn_arrays = {name: np.full((n, turns), fill, dtype)
                   for name, (_, dtype, fill) in _TURN_FIELDS.items()}
    for i, r in enumerate(records):
        length = len(r.tokens)
        token_arrays["tokens"][i, :length] = r.tokens
        token_arrays["action_mask"][i, :length] = r.action_mask
        token_arrays["behaviour_logprobs"][i, :length] = r.logprobs
        token_arrays["turn_index"][i, :length] = r.turn_index
        for t, turn in enumerate(r.turns):
            turn_arrays["turn_rewards"][i, t] = turn.reward
            turn_arrays["turn_valid"][i, t] = turn.valid
            turn_arrays["node_ids"][i, t] = turn.node_id
    rows = [[turn.labels for turn in r.turns] for r in records]
    names = sorted({*labels, *(name for row in rows for turn in row for name in turn)},
                   key=list(LABELS).index)
    return TrajectoryBatch(
        **token_arrays, **turn_arrays,
        labels={name: label_table(name, rows, turns) for name in names},
        lengths=np.array([len(r.tokens) for r in records], np.int32),
        outcome_reward=np.array([sum(t.reward for t in r.turns) for r in records], np.float32),
        success=np.array([r.success for r in records], bool),
        end_reason=np.array([r.end_reason for r in records], np.int8),
        context_full=np.array([r.context_full for r in records], bool),
        num_turns=np.array([len(r.turns) for r in records], np.int32),
        num_invalid=np.array([sum(not t.valid for t in r.turns) for r in records], np.int32),
        task_ids=np.array([r.task_id for r in records], np.int64),
        group_ids=np.array([r.group_id for r in records], np.int32),
        episode_ids=np.array([r.episode_id for r in records], np.int32),
        parent_ids=np.array([r.parent_id for r in records], np.int32),
        fork_turns=np.array([r.fork_turn for r in records], np.int32),
        depth=np.array([r.depth for r in records], np.int32),
        infos=[r.info for r in records],
    )


def concatenate(batches: Sequence[TrajectoryBatch], pad_id: int) -> TrajectoryBatch:
    """Stacks batches row-wise (e.g. several oversampling rounds), padding tokens and turns to the
    widest. Group, episode and node ids are kept as they are: callers that merge independent
    rollouts must have made them unique."""
    if not batches:
        raise ValueError("no batches to concatenate")
    width = max(b.tokens.shape[1] for b in batches)
    turns = max(b.turn_rewards.shape[1] for b in batches)
    token_fill = dict(_TOKEN_FILL, tokens=pad_id)
    turn_fill = {name: fill for name, (_, _, fill) in _TURN_FIELDS.items()}
    fields = {}
    for f in dataclasses.fields(TrajectoryBatch):
        values = [getattr(b, f.name) for b in batches]
        if f.name == "infos":
            fields[f.name] = [info for v in values for info in v]
        elif f.name == "labels":
            names = sorted({name for v in values for name in v}, key=list(LABELS).index)
            fields[f.name] = {name: np.concatenate([_padded_label(name, b, turns)
                                                    for b in batches]) for name in names}
        elif f.name in token_fill or f.name in turn_fill:
            target = width if f.name in token_fill else turns
            fill = token_fill.get(f.name, turn_fill.get(f.name))
            fields[f.name] = np.concatenate([
                np.pad(v, ((0, 0), (0, target - v.shape[1])), constant_values=fill)
                for v in values])
        else:
            fields[f.name] = np.concatenate(values)
    return TrajectoryBatch(**fields)


def _padded_label(name: str, batch: TrajectoryBatch, turns: int) -> np.ndarray:
    """Label `name` of a batch padded to `turns` columns with its fill (all fill where the
    batch does not hold it)."""
    spec = LABELS[name]
    if name not in batch.labels:
        return np.full((len(batch), turns), spec.fill, spec.dtype)
    table = batch.labels[name]
    padded = np.full((len(batch), turns), spec.fill, spec.dtype)
    padded[:, :table.shape[1]] = table
    return padded


def join_shares(batches: Sequence[TrajectoryBatch], first_groups: Sequence[int],
                pad_id: int) -> TrajectoryBatch:
    """One step batch from the shares that processes played (share p's group 0 is the step's
    group first_groups[p]; each share numbers its groups, episodes and nodes from 0): group ids
    become step-wide, episode and node ids are shifted past the previous shares', rows stay in
    share order, so the groups of the joined batch are in step order."""
    joined, episodes, nodes = [], 0, 0
    for batch, first_group in zip(batches, first_groups):
        shifted = batch.renumbered(first_group, episodes, nodes)
        if len(shifted):
            episodes = int(shifted.episode_ids.max()) + 1
            nodes = max(nodes, int(shifted.node_ids.max()) + 1)
        joined.append(shifted)
    return concatenate(joined, pad_id)
