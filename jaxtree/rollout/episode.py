"""One episode on the host: its environment, its turns, and how it becomes a trajectory record.

Shared by every rollout strategy (the slot engine's multi-turn episodes, LATR's single-turn
trees), so an action is played, labelled and recorded the same way everywhere:

    episode = Episode(episode_id, task_id, group_id)
    prompt = episode.start(make_env, tokenizer)            # env reset, first-turn tokens
    done, following = episode.play(tokenizer, action_tokens, ended, max_turns, next_node)
    record = episode.record(tokens, action_mask, logprobs, turn_index)

Each played turn records the environment's reward and validity, VPR's verifier label of the
action, the process score after it (PATR's heuristic), RTMC's state and action signatures,
GiGPO's anchor state, whether the environment reported a validation (RTMC's shaping) and the
turn's tree node. All of these are cheap host queries (microseconds; docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from environments.base import TextEnv
from jaxtree.rollout import conversation
from jaxtree.rollout.signatures import SignatureFn
from jaxtree.rollout.trajectory import (DONE, NO_PARENT, TRUNCATED, EpisodeRecord, TurnRecord)
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

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def finished(self) -> bool:
        return self.end_reason is not None

    def start(self, make_env: Callable[[], TextEnv], tokenizer: Tokenizer) -> list[int]:
        """Creates and resets the environment of `task_id`; returns the first prompt's tokens."""
        self.env = make_env()
        self.env.reset(self.task_id)
        return conversation.first_turn_tokens(tokenizer, self.env)

    def play(self, tokenizer: Tokenizer, action: list[int], ended: bool, max_turns: int | None,
             node_id: int, signature_fn: SignatureFn | None = None,
             score_turn: bool = False) -> tuple[bool, list[int]]:
        """Plays generated action tokens (`ended`: the last one is a stop token) as turn
        `num_turns`, recording its labels under tree node `node_id` and its state signature by
        `signature_fn` (default: the environment's `state_signature()`); with `score_turn`, also
        the environment's `turn_score` of the action in the state it was taken in (TSR's S).

        Returns (episode over, tokens of the next observation to append; [] when over). The
        episode is over when the game says so or the turn limit (`max_turns`, else the
        environment's own) is reached; `end_reason` is set then.
        """
        env = self.env
        text = conversation.action_text(tokenizer, action, ended)
        parsed = env.parse_action(text)
        state_signature = (env.state_signature() if signature_fn is None
                           else signature_fn(env, self.turns))
        anchor_state = env.canonical_state()
        verified = float(env.verify(parsed))
        turn_score = float(env.turn_score(parsed)) if score_turn else float("nan")
        observation, reward, done, info = env.step(text)
        self.turns.append(TurnRecord(
            reward=float(reward), valid=bool(info["valid"]), verified=verified,
            process_score=float(env.process_score()), state_signature=state_signature,
            action_signature=env.action_signature(parsed), node_id=node_id,
            anchor_state=anchor_state, validation=bool(info.get("validation", False)),
            turn_score=turn_score))
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
            depth=self.depth + 1)

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
