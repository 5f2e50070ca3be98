"""Does a process scorer rank partial trajectories? A probe before a PATR run spends hours on it.

PATR expands the branches its scorer ranks highest and prunes those below the median - alpha, so
a scorer is only useful if it separates promising partial trajectories from poor ones. The probe
builds, for each task, pairs of branches that played the same number of turns: one by the
environment's oracle, one by uniformly random moves (pairs where either has already ended are
skipped), scores all of them in one batch, and reports

    auc           P(score(oracle branch) > score(random branch)) over all pairs across tasks
                  (ties count one half): 0.5 = no separation
    mean_oracle / mean_random / std
    corr_heuristic   Pearson correlation with the environment's own `process_score`
    seconds_per_branch

The heuristic itself is probed alongside as the reference row, and a judge's own scores
(unblended from Eq. 8) as a row of their own: a blend inherits the heuristic's ranking.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from environments.base import TextEnv
from jaxtree.rollout.episode import Episode
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.tokenizers import Tokenizer

ORACLE, RANDOM = 1, 0
# What the probed branches record: the labels the scorers read (the judge's and the PRM's step
# texts are the action signatures).
SCORED_LABELS = TurnLabeler(("action_signature",))


def play_prefix(episode: Episode, tokenizer: Tokenizer, turns: int, policy: str,
                rng: np.random.Generator) -> None:
    """Plays up to `turns` turns of the oracle's or random moves ('oracle' | 'random'), as the
    engine would record them (tokenized answers)."""
    for turn in range(turns):
        if episode.finished:
            return
        env = episode.env
        action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
        tokens = tokenizer.encode(env.answer_text(action)) + [tokenizer.end_of_turn_id]
        episode.play(tokenizer, tokens, True, None, turn, SCORED_LABELS)


def probe_branches(make_env: Callable[[], TextEnv], tokenizer: Tokenizer, tasks: Sequence[int],
                   turns: int, seed: int = 0) -> tuple[list[Episode], np.ndarray]:
    """Oracle and random branches of `turns` turns per task, both still running; returns the
    episodes (pairs adjacent: oracle first) and their labels (int32: 1 oracle, 0 random)."""
    rng = np.random.default_rng(seed)
    episodes, labels = [], []
    for task in tasks:
        pair = []
        for policy in ("oracle", "random"):
            episode = Episode(len(episodes) + len(pair), int(task), 0)
            episode.start(make_env, tokenizer)
            play_prefix(episode, tokenizer, turns, policy, rng)
            pair.append(episode)
        if not any(e.finished for e in pair):
            episodes += pair
            labels += [ORACLE, RANDOM]
    return episodes, np.asarray(labels, np.int32)


def pairwise_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a label-1 item > score of a label-0 item), ties one half (nan without both)."""
    pos, neg = scores[labels == ORACLE], scores[labels == RANDOM]
    if not len(pos) or not len(neg):
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


def probe_report(scores: np.ndarray, labels: np.ndarray, heuristic: np.ndarray,
                 seconds: float) -> dict[str, float]:
    """The probe's figures for one scorer's scores (see the module docstring)."""
    scores = np.asarray(scores, np.float64)
    corr = (float(np.corrcoef(scores, heuristic)[0, 1])
            if scores.std() > 0 and heuristic.std() > 0 else float("nan"))
    return {"branches": int(len(scores)), "auc": pairwise_auc(scores, labels),
            "mean_oracle": float(scores[labels == ORACLE].mean()),
            "mean_random": float(scores[labels == RANDOM].mean()),
            "std": float(scores.std()), "corr_heuristic": corr,
            "seconds_per_branch": seconds / max(len(scores), 1)}


def heuristic_scores(episodes: Sequence[Episode]) -> np.ndarray:
    """The environment's `process_score` of each branch (float64[n])."""
    return np.asarray([e.env.process_score() for e in episodes], np.float64)


def timed_scores(scorer, episodes: Sequence[Episode]) -> tuple[np.ndarray, float]:
    """(the scorer's scores of the branches, seconds it took)."""
    start = time.perf_counter()
    scores = np.asarray(scorer(episodes), np.float64)
    return scores, time.perf_counter() - start


def unblended_judge(scores: np.ndarray, heuristic: np.ndarray, weight: float) -> np.ndarray:
    """The judge's own scores inside Eq. 8's blend s = w * judge + (1 - w) * heuristic."""
    return (scores - (1.0 - weight) * heuristic) / weight
