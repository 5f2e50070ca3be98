"""Process scorers: how promising a partial trajectory is, in [0, 1] (PATR §4.2, Eq. 3).

A scorer is built once per rollout strategy and called in batches, between turns, on the live
branches a tree controller is about to rank:

    scorer = SCORERS.build(name, settings)
    scores = scorer(episodes)          # float64[len(episodes)], each in [0, 1]

Each episode carries its task (`task_id`), its history (`turns`) and its live environment
(`env`), so a scorer may read whichever it needs. Scores only steer where the rollout spends its
budget; they never enter the reward.

Registered: `heuristic`, the environment's own `process_score()` (PATR's FrozenLake progress
heuristic: accumulated step rewards and the shortest-path distance to the goal, holes blocked).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from jaxtree.config import Registry
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
