"""Process scorers: how promising a partial trajectory is, in [0, 1] (PATR §4.2, Eq. 3).

A scorer is built once per rollout strategy and called in batches, between turns, on the live
branches a tree controller is about to rank:

    scorer = SCORERS.build(name, settings)
    scores = scorer(episodes)          # float64[len(episodes)], each in [0, 1]

Each episode carries its task (`task_id`), its history (`turns`) and its live environment
(`env`), so a scorer may read whichever it needs. Scores only steer where the rollout spends its
budget; they never enter the reward.

Registered: `heuristic`, the environment's own `process_score()` (PATR's FrozenLake progress
heuristic: accumulated step rewards and the shortest-path distance to the goal, holes blocked);
`judge`, PATR's LLM judge run in process by a jaxtree policy and blended with the heuristic
(Eq. 8; `jaxtree.rollout.judge`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

from jaxtree.config import Registry, Section, between, option, positive
from jaxtree.rollout.episode import Episode

SCORERS = Registry("process scorer")

Scorer = Callable[[Sequence[Episode]], np.ndarray]


def checked_scores(scores, count: int, name: str) -> np.ndarray:
    """The scores as float64[count], refusing any that is not finite and in [0, 1]."""
    scores = np.asarray(scores, np.float64).reshape(-1)
    if scores.shape != (count,):
        raise ValueError(f"process scorer {name!r} returned {scores.shape[0]} scores for "
                         f"{count} branches")
    bad = ~(np.isfinite(scores) & (scores >= 0.0) & (scores <= 1.0))
    if bad.any():
        raise ValueError(f"process scorer {name!r} returned {scores[bad][0]!r}, not a score in "
                         f"[0, 1]")
    return scores


@SCORERS.register("heuristic")
def heuristic(settings: None) -> Scorer:
    """The environment's `process_score()` of each branch's current state (PATR's heuristic)."""
    del settings

    def score(episodes: Sequence[Episode]) -> np.ndarray:
        return checked_scores([e.env.process_score() for e in episodes], len(episodes),
                              "heuristic")
    return score


@dataclasses.dataclass(frozen=True)
class JudgeConfig(Section):
    """Settings of the `judge` scorer (`rollout.patr.judge`)."""

    model: str = option("tiny", "the judge: a preset, a jaxtree checkpoint or a local Hugging "
                        "Face directory")
    weight: float = option(0.7, "lambda of PATR Eq. 8: lambda x judge + (1 - lambda) x the "
                           "environment's heuristic (the judge gets the larger weight, App. B)",
                           check=between(0, 1))
    recent_turns: int = option(10, "turns of the partial trajectory shown to the judge (PATR: "
                               "recent context)", check=between(0))
    max_prompt_tokens: int = option(1024, "longest judge prompt; longer ones keep their start "
                                    "and end", check=positive())


@SCORERS.register("judge", JudgeConfig)
def judge(settings: JudgeConfig) -> Scorer:
    """PATR's LLM judge in process: a jaxtree policy's {"score": x} read from its digit
    probabilities, blended with the environment's heuristic (Eq. 8)."""
    from jaxtree.policy import load_policy
    from jaxtree.rollout.judge import JudgeScorer
    scorer = JudgeScorer(load_policy(settings.model), settings.weight, settings.recent_turns,
                         settings.max_prompt_tokens)

    def score(episodes: Sequence[Episode]) -> np.ndarray:
        return checked_scores(scorer(episodes), len(episodes), "judge")
    score.judge = scorer
    return score
