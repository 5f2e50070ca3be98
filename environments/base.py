"""The protocol every jaxtree text environment implements, and the machinery they share.

An environment is a host-side Python object (numpy at most; never JAX). The agent loop drives it with
text; the rollout methods query it:

    obs = env.reset(seed)                      # observation text of the initial state
    text = env.prompt()                        # first user turn: instructions + observation
    obs, reward, done, info = env.step(text)   # the model's raw output text
    child = env.clone()                        # exact, independent copy (RNG included)

Actions exist in three forms:
  * model text      what the policy writes, e.g. "<answer>Up</answer>" (chat) or "Up" (compact);
  * action          the environment's parsed value (an int, a tuple, ...), from `parse_action(text)`;
  * canonical text  `format_action(action)`: the text a perfect policy would write, used for oracle
                    demonstrations (warm start) and as the action signature.

`step(text)` never raises. Text that does not parse, or an action the rules forbid, returns
`info["valid"] = False`, the reward `format_penalty` (default -0.1, as in RAGEN/TSR) and leaves the
state unchanged, unless the game's own rules say otherwise (documented per environment).

`info` always carries:
  valid      the text parsed to a legal action;
  success    the task is solved (only ever true on the final step);
  truncated  the episode ended on the step limit (`max_steps`) rather than by the game;
  action     the canonical text of the parsed action, or None;
plus environment-specific metrics (e.g. `completion_rate`).

Method-facing queries (all on the current state, none changes it):
  oracle_action()          an optimal or expert action (None once the episode is over);
  random_action(rng)       a uniformly random legal action (the random-policy baseline);
  verify(action) -> bool   VPR's oracle verifier V(s, a);
  process_score() -> float PATR's heuristic process score in [0, 1];
  turn_score(action)       TSR's per-turn score of a candidate action (default: the reward a clone
                           receives for it; FrozenLake overrides with the paper's formula);
  state_signature()        RTMC state signature: the step index plus the canonical state, so a
                           signature can appear at most once per episode (first-visit by
                           construction) while equal states at equal depth match across rollouts;
  action_signature(action) RTMC action signature (the canonical action text).

Prompt styles: "chat" renders the papers' natural-language instructions and asks for the action in
<answer>...</answer> tags; "compact" renders a terse observation for the byte-level tiny model,
which answers with the bare canonical action text. `parse_action` accepts both forms in either
style: it reads the last <answer>...</answer> block when there is one, else the whole text.
"""

from __future__ import annotations

import abc
import re
from typing import Any

import numpy as np

STYLES = ("chat", "compact")

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def extract_answer(text: str) -> str:
    """The content of the last <answer>...</answer> block, else the whole text; stripped."""
    matches = _ANSWER.findall(text)
    return (matches[-1] if matches else text).strip()


# Seeds the throwaway initial state of copied bit generators: a fixed SeedSequence skips the OS
# entropy that a seedless constructor gathers (12.5 -> 7 us per copy), and the state is overwritten.
_PLACEHOLDER_SEED = np.random.SeedSequence(0)


def copy_generator(rng: np.random.Generator) -> np.random.Generator:
    """An independent numpy Generator in exactly the same state (4x cheaper than copy.deepcopy)."""
    bit_generator = type(rng.bit_generator)(_PLACEHOLDER_SEED)
    bit_generator.state = rng.bit_generator.state
    return np.random.Generator(bit_generator)


class TextEnv(abc.ABC):
    """Base class: step bookkeeping, invalid-action handling and defaults shared by all environments.

    Subclasses implement the game through the abstract hooks below and keep all mutable state in
    plain attributes that `_copy_state` copies explicitly (no deepcopy).
    """

    name: str = ""
    #: The system message of chat style (None: no system message).
    system_prompt: str | None = None

    def __init__(self, *, style: str = "chat", max_steps: int = 10, format_penalty: float = -0.1):
        if style not in STYLES:
            raise ValueError(f"style={style!r}: expected one of {STYLES}")
        if max_steps <= 0:
            raise ValueError(f"max_steps={max_steps} must be positive")
        self.style = style
        self.max_steps = int(max_steps)
        self.format_penalty = float(format_penalty)
        self.rng = np.random.default_rng(0)
        self.seed: int | None = None
        self.num_steps = 0
        self.num_invalid = 0
        self.total_reward = 0.0
        self.done = True
        self.success = False

    # ------------------------------------------------------------------ the game (subclass hooks)

    @abc.abstractmethod
    def _reset_game(self, seed: int) -> None:
        """Builds the initial state for `seed` (may draw from self.rng, already seeded)."""

    @abc.abstractmethod
    def _parse(self, content: str) -> Any | None:
        """Parses answer content (already stripped) into an action, or None if malformed."""

    @abc.abstractmethod
    def _is_legal(self, action: Any) -> bool:
        """Whether the rules allow `action` in the current state."""

    @abc.abstractmethod
    def _apply(self, action: Any) -> tuple[float, bool, bool]:
        """Applies a legal action: returns (reward, episode over, success)."""

    @abc.abstractmethod
    def format_action(self, action: Any) -> str:
        """Canonical text of an action (what a perfect policy writes, without answer tags)."""

    @abc.abstractmethod
    def render(self, style: str | None = None) -> str:
        """Observation text of the current state."""

    @abc.abstractmethod
    def instructions(self, style: str | None = None) -> str:
        """The task instructions that precede the first observation."""

    @abc.abstractmethod
    def canonical_state(self) -> str:
        """A compact string that identifies the current state."""

    @abc.abstractmethod
    def _copy_state(self, other: "TextEnv") -> None:
        """Copies every mutable game attribute of self into `other` (a shallow copy of self)."""

    @abc.abstractmethod
    def oracle_action(self) -> Any | None:
        """An optimal (or expert) action in the current state; None when the episode is over."""

    @abc.abstractmethod
    def verify(self, action: Any) -> bool:
        """VPR verifier: whether `action` is oracle-valid in the current state."""

    @abc.abstractmethod
    def process_score(self) -> float:
        """PATR heuristic score of the trajectory so far, in [0, 1]."""

    @abc.abstractmethod
    def random_action(self, rng: np.random.Generator) -> Any:
        """A uniformly random legal action in the current state, drawn from `rng` only (the
        random-policy baseline of evaluations; Countdown: a random expression over its numbers)."""

    # ------------------------------------------------------------------ protocol

    def reset(self, seed: int) -> str:
        """Starts the episode of `seed` (the same seed always gives the same task and dynamics)."""
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.num_steps = 0
        self.num_invalid = 0
        self.total_reward = 0.0
        self.done = False
        self.success = False
        self._reset_game(self.seed)
        return self.render()

    def parse_action(self, text: str) -> Any | None:
        """The action in model text, or None if it is malformed (never raises)."""
        try:
            return self._parse(extract_answer(str(text)))
        except (ValueError, TypeError, IndexError, KeyError, OverflowError, ZeroDivisionError):
            return None

    def step(self, text: str) -> tuple[str, float, bool, dict]:
        """Plays the model's text. Returns (observation, reward, done, info)."""
        if self.done:
            return self.render(), 0.0, True, self._info(valid=False, action=None, truncated=False,
                                                        error="episode is over")
        action = self.parse_action(text)
        self.num_steps += 1
        legal = action is not None and self._is_legal_safe(action)
        if legal:
            reward, over, success = self._apply(action)
        else:
            self.num_invalid += 1
            reward, over, success = self._invalid_outcome(action)
        self.success = bool(success)
        truncated = not over and self.num_steps >= self.max_steps
        self.done = bool(over or truncated)
        self.total_reward += reward
        info = self._info(valid=legal,
                          action=self.format_action(action) if action is not None else None,
                          truncated=truncated)
        return self.render(), float(reward), self.done, info

    def _is_legal_safe(self, action) -> bool:
        try:
            return bool(self._is_legal(action))
        except (ValueError, TypeError, IndexError, KeyError):
            return False

    def _invalid_outcome(self, action) -> tuple[float, bool, bool]:
        """(reward, over, success) of a malformed or illegal action: the format penalty, and the
        episode goes on. Games whose rules end the episode override this."""
        del action
        return self.format_penalty, False, False

    def _info(self, *, valid: bool, action: str | None, truncated: bool, **extra) -> dict:
        info = {"valid": valid, "success": self.success, "truncated": truncated, "action": action,
                "num_steps": self.num_steps, "num_invalid": self.num_invalid}
        info.update(self.metrics())
        info.update(extra)
        return info

    def metrics(self) -> dict:
        """Environment-specific episode metrics reported in every info dict."""
        return {}

    def prompt(self, style: str | None = None) -> str:
        """First user turn: the instructions followed by the current observation."""
        return f"{self.instructions(style)}\n\n{self.render(style)}"

    def clone(self) -> "TextEnv":
        """An exact, independent copy (RNG state included), without copy.deepcopy."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.rng = copy_generator(self.rng)
        self._copy_state(other)
        return other

    def turn_score(self, action: Any) -> float:
        """TSR per-turn score of a candidate action: the reward a clone receives for it."""
        if action is None:
            return self.format_penalty
        probe = self.clone()
        _, reward, _, _ = probe.step(self.format_action(action))
        return float(reward)

    def state_signature(self) -> str:
        return f"{self.num_steps}|{self.canonical_state()}"

    def action_signature(self, action: Any) -> str:
        return "<invalid>" if action is None else self.format_action(action)

    def answer_text(self, action: Any, style: str | None = None) -> str:
        """The model output that plays `action`: wrapped in answer tags in chat style."""
        text = self.format_action(action)
        return f"<answer>{text}</answer>" if (style or self.style) == "chat" else text

    def _style(self, style: str | None) -> str:
        style = style or self.style
        if style not in STYLES:
            raise ValueError(f"style={style!r}: expected one of {STYLES}")
        return style
