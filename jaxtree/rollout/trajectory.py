"""The trajectory batch: the interface between rollouts and advantages / the update step.

Host-side numpy arrays (the update step moves them to devices with the sharding it needs). N
trajectories, T token positions (the longest trajectory, rounded up to a multiple of 8), K turns
(the most turns of any trajectory).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np


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
      turn_rewards: float32[N, K], environment reward of each turn's action; 0 past num_turns.
      turn_valid: bool[N, K], the action parsed to a legal move.
      turn_verified: float32[N, K], VPR verifier V(s, a) of each action (1/0), NaN where it was
        not recorded (the rollout did not ask for it, or past num_turns).
      outcome_reward: float32[N], the episode return (sum of turn rewards).
      success: bool[N].
      truncated: bool[N], ended by the turn limit or a full context rather than by the game.
      num_turns: int32[N].
      num_invalid: int32[N], actions that did not parse to a legal move.
      task_ids: int64[N], the environment seed of each episode (episodes of one task share it).
      group_ids: int32[N], the group an episode belongs to for group-relative advantages.
      episode_ids: int32[N], unique within the rollout.
      parent_ids: int32[N], episode id of the trajectory this one was forked from; -1 if none.
      fork_turns: int32[N], the turn at which it was forked (its first own action); -1 if none.
      infos: the final `info` dict of every episode (environment metrics included).
    """

    tokens: np.ndarray
    lengths: np.ndarray
    action_mask: np.ndarray
    behaviour_logprobs: np.ndarray
    turn_index: np.ndarray
    turn_rewards: np.ndarray
    turn_valid: np.ndarray
    turn_verified: np.ndarray
    outcome_reward: np.ndarray
    success: np.ndarray
    truncated: np.ndarray
    num_turns: np.ndarray
    num_invalid: np.ndarray
    task_ids: np.ndarray
    group_ids: np.ndarray
    episode_ids: np.ndarray
    parent_ids: np.ndarray
    fork_turns: np.ndarray
    infos: list[dict]

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def response_lengths(self) -> np.ndarray:
        """int32[N], generated tokens per episode."""
        return self.action_mask.sum(axis=1).astype(np.int32)

    def select(self, indices: Sequence[int]) -> "TrajectoryBatch":
        """The sub-batch of the given rows (in that order)."""
        idx = np.asarray(indices, dtype=np.int64)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return TrajectoryBatch(**{name: ([value[i] for i in idx] if name == "infos" else value[idx])
                                  for name, value in fields.items()})


@dataclasses.dataclass
class EpisodeRecord:
    """What one finished episode contributes to a batch (host side)."""

    tokens: np.ndarray        # int32[length]
    action_mask: np.ndarray   # bool[length]
    logprobs: np.ndarray      # float32[length]
    turn_index: np.ndarray    # int32[length]
    rewards: list[float]
    valid: list[bool]
    verified: list[float]
    success: bool
    truncated: bool
    num_invalid: int
    task_id: int
    group_id: int
    episode_id: int
    parent_id: int
    fork_turn: int
    info: dict[str, Any]


def assemble(records: Sequence[EpisodeRecord], pad_id: int) -> TrajectoryBatch:
    """Pads finished episodes into a TrajectoryBatch (in the given order)."""
    if not records:
        raise ValueError("no finished episodes to assemble")
    n = len(records)
    width = -(-max(len(r.tokens) for r in records) // 8) * 8
    turns = max(max(len(r.rewards) for r in records), 1)
    batch = TrajectoryBatch(
        tokens=np.full((n, width), pad_id, np.int32),
        lengths=np.array([len(r.tokens) for r in records], np.int32),
        action_mask=np.zeros((n, width), bool),
        behaviour_logprobs=np.zeros((n, width), np.float32),
        turn_index=np.full((n, width), -1, np.int32),
        turn_rewards=np.zeros((n, turns), np.float32),
        turn_valid=np.zeros((n, turns), bool),
        turn_verified=np.full((n, turns), np.nan, np.float32),
        outcome_reward=np.array([sum(r.rewards) for r in records], np.float32),
        success=np.array([r.success for r in records], bool),
        truncated=np.array([r.truncated for r in records], bool),
        num_turns=np.array([len(r.rewards) for r in records], np.int32),
        num_invalid=np.array([r.num_invalid for r in records], np.int32),
        task_ids=np.array([r.task_id for r in records], np.int64),
        group_ids=np.array([r.group_id for r in records], np.int32),
        episode_ids=np.array([r.episode_id for r in records], np.int32),
        parent_ids=np.array([r.parent_id for r in records], np.int32),
        fork_turns=np.array([r.fork_turn for r in records], np.int32),
        infos=[r.info for r in records],
    )
    for i, r in enumerate(records):
        length, k = len(r.tokens), len(r.rewards)
        batch.tokens[i, :length] = r.tokens
        batch.action_mask[i, :length] = r.action_mask
        batch.behaviour_logprobs[i, :length] = r.logprobs
        batch.turn_index[i, :length] = r.turn_index
        batch.turn_rewards[i, :k] = r.rewards
        batch.turn_valid[i, :k] = r.valid
        batch.turn_verified[i, :k] = r.verified
    return batch


def concatenate(batches: Sequence[TrajectoryBatch], pad_id: int) -> TrajectoryBatch:
    """Stacks batches row-wise (e.g. several oversampling rounds), padding tokens and turns to the
    widest. Group and episode ids are kept as they are: callers that merge independent rollouts
    must have made them unique."""
    if not batches:
        raise ValueError("no batches to concatenate")
    width = max(b.tokens.shape[1] for b in batches)
    turns = max(b.turn_rewards.shape[1] for b in batches)
    token_pad = {"tokens": pad_id, "action_mask": False, "behaviour_logprobs": 0.0,
                 "turn_index": -1}
    turn_pad = {"turn_rewards": 0.0, "turn_valid": False, "turn_verified": np.nan}
    fields = {}
    for f in dataclasses.fields(TrajectoryBatch):
        values = [getattr(b, f.name) for b in batches]
        if f.name == "infos":
            fields[f.name] = [info for v in values for info in v]
        elif f.name in token_pad or f.name in turn_pad:
            target = width if f.name in token_pad else turns
            fill = token_pad.get(f.name, turn_pad.get(f.name))
            fields[f.name] = np.concatenate([
                np.pad(v, ((0, 0), (0, target - v.shape[1])), constant_values=fill)
                for v in values])
        else:
            fields[f.name] = np.concatenate(values)
    return TrajectoryBatch(**fields)
