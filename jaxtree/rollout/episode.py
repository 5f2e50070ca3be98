"""One episode on the host: its environment, its turns, and how it becomes a trajectory record.

Shared by every rollout strategy (the slot engine's multi-turn episodes, LATR's single-turn
trees), so an action is played, labelled and recorded the same way everywhere:

    episode = Episode(episode_id, task_id, group_id)
    prompt = episode.start(make_env, tokenizer)            # env reset, first-turn tokens
    done, following = episode.play(tokenizer, action_tokens, ended, max_turns, next_node,
                                   labeler)
    record = episode.record(tokens, action_mask, logprobs, turn_index)

Each played turn records the environment's reward and validity, the turn's tree node, the
action's behaviour log-probs when the rollout has them, and the per-turn labels the experiment
reads, computed by the rollout's `TurnLabeler` (`jaxtree.rollout.labels`: VPR's verdict, RTMC's
signatures, ...). A label that a rollout strategy produces rather than the environment
(MC-PR's state value) is attached to the episode's next turn with `attach_label`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from environments.base import TextEnv
from jaxtree.rollout import conversation
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.trajectory import (DONE, NO_PARENT, TRUNCATED, EpisodeRecord, TurnRecord)

NO_LABELS = TurnLabeler()
from jaxtree.tokenizers import Tokenizer


@dataclasses.dataclass
class Episode:
    """Host record of one episode (queued, live or finished)."""

    episode_id: int
    task_id: int
    group_id: int
    env: TextEnv | None = None
    turns: list[TurnRecord] = dataclasses.field(default_factory=list)
    info: dict = dataclasses.field(default_factory=dict)
    parent_id: int = NO_PARENT
    fork_turn: int = NO_PARENT
    depth: int = 0
    end_reason: int | None = None     # None while the episode runs
    context_full: bool = False
    # labels a rollout strategy attached to the next turn ({name: value}; `attach_label`)
    pending_labels: dict = dataclasses.field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def finished(self) -> bool:
        return self.end_reason is not None

    @property
    def returns(self) -> float:
        """The rewards of the turns played so far, summed."""
        return float(sum(turn.reward for turn in self.turns))

    def attach_label(self, name: str, value) -> None:
        """Records a strategy-produced label (e.g. MC-PR's V(s_t)) on the next turn played."""
        self.pending_labels[name] = value

    def start(self, make_env: Callable[[], TextEnv], tokenizer: Tokenizer) -> list[int]:
        """Creates and resets the environment of `task_id`; returns the first prompt's tokens."""
        self.env = make_env()
        self.env.reset(self.task_id)
        return conversation.first_turn_tokens(tokenizer, self.env)

    def play(self, tokenizer: Tokenizer, action: list[int], ended: bool, max_turns: int | None,
             node_id: int, labeler: TurnLabeler = NO_LABELS,
             logprobs: np.ndarray | None = None) -> tuple[bool, list[int]]:
        """Plays generated action tokens (`ended`: the last one is a stop token) as turn
        `num_turns` under tree node `node_id`, recording the labels `labeler` computes and the
        tokens' behaviour log-probs `logprobs` (float32[len(action)], or None).

        Returns (episode over, tokens of the next observation to append; [] when over). The
        episode is over when the game says so or the turn limit (`max_turns`, else the
        environment's own) is reached; `end_reason` is set then.
        """
        env = self.env
        text = conversation.action_text(tokenizer, action, ended)
        parsed = env.parse_action(text)
        labels = labeler.before_step(env, parsed, self.turns)
        observation, reward, done, info = env.step(text)
        labels.update(labeler.after_step(env, parsed, info, self.turns))
        labels.update(self.pending_labels)
        self.pending_labels = {}
        self.turns.append(TurnRecord(reward=float(reward), valid=bool(info["valid"]),
                                     node_id=node_id, labels=labels,
                                     action_logprobs=logprobs))
        self.info = dict(info)
        if done or self.num_turns >= (max_turns or env.max_steps):
            self.end(TRUNCATED if bool(info.get("truncated")) or not done else DONE)
            return True, []
        return False, conversation.next_turn_tokens(tokenizer, observation, close_turn=not ended)

    def end(self, reason: int, context_full: bool = False) -> None:
        self.end_reason = reason
        if context_full:
            self.context_full = True
            self.info["context_full"] = True

    def fork(self, episode_id: int) -> "Episode":
        """A child continuing from this episode's exact state: a clone of its environment and a
        copy of its history; its own turns will get their own nodes."""
        return dataclasses.replace(
            self, episode_id=episode_id, env=self.env.clone(), turns=list(self.turns),
            info=dict(self.info), parent_id=self.episode_id, fork_turn=self.num_turns,
            depth=self.depth + 1, pending_labels={})

    def record(self, tokens: np.ndarray, action_mask: np.ndarray, logprobs: np.ndarray,
               turn_index: np.ndarray) -> EpisodeRecord:
        """The finished episode with its token rows, for `trajectory.assemble`."""
        if self.end_reason is None:
            raise ValueError(f"episode {self.episode_id} has not ended")
        return EpisodeRecord(
            tokens=tokens, action_mask=action_mask, logprobs=logprobs, turn_index=turn_index,
            turns=self.turns, success=bool(self.info.get("success", False)),
            end_reason=self.end_reason, context_full=self.context_full, task_id=self.task_id,
            group_id=self.group_id, episode_id=self.episode_id, parent_id=self.parent_id,
            fork_turn=self.fork_turn, depth=self.depth, info=self.info)
