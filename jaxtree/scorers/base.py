"""Process scorers: how promising a partial trajectory is, in [0, 1] (PATR §4.2, Eq. 3).

A scorer is built once per rollout strategy and called in batches, between turns, on the live
branches a tree controller is about to rank:

    scorer = build_scorer(name, settings)
    scores = scorer(episodes)          # float64[len(episodes)], each in [0, 1]
    scorer.metrics()                   # its counts since the previous call ({} for most)

Each episode carries its task (`task_id`), its history (`turns`) and its live environment
(`env`), so a scorer may read whichever it needs. Scores only steer where the rollout spends its
budget; they never enter the reward.

Registered: `heuristic`, the environment's own `process_score()` (PATR's FrozenLake progress
heuristic: accumulated step rewards and the shortest-path distance to the goal, holes blocked);
`judge`, PATR's LLM judge blended with the heuristic (Eq. 8), run in process by a jaxtree policy
(`jaxtree.scorers.judge`) or asked on an OpenAI-compatible server (`backend='http'`, e.g.
`launch.serve`; failures fall back to a fixed score and are counted,
`jaxtree.scorers.judge_http`); `prm`, PATR-PRM: a process reward model's step scores of the
recent steps, aggregated by Eq. 7 (`jaxtree.scorers.prm`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from jaxtree.config import Check, Registry, Section, between, one_of, option, positive, require
from jaxtree.rollout.episode import Episode

SCORERS = Registry("process scorer")


class Scorer:
    """A registered scorer as strategies use it: `score_fn`'s scores checked to be in [0, 1]
    (one per branch), and `metrics()`, the counts `metrics_fn` reports since its previous call
    (the HTTP judge's requests and fallbacks; {} without one)."""

    def __init__(self, name: str, score_fn: Callable[[Sequence[Episode]], Any],
                 metrics_fn: Callable[[], dict[str, float]] | None = None):
        self.name = name
        self.score_fn = score_fn
        self.metrics_fn = metrics_fn

    def __call__(self, episodes: Sequence[Episode]) -> np.ndarray:
        return checked_scores(self.score_fn(episodes), len(episodes), self.name)

    def metrics(self) -> dict[str, float]:
        return dict(self.metrics_fn()) if self.metrics_fn is not None else {}


def build_scorer(name: str, settings: Any) -> Scorer:
    """The registered scorer `name` with its settings; a part that builds a plain function of
    the episodes is wrapped (checked scores, no metrics)."""
    scorer = SCORERS.build(name, settings)
    return scorer if isinstance(scorer, Scorer) else Scorer(name, scorer)


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
    return Scorer("heuristic", lambda episodes: [e.env.process_score() for e in episodes])


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
                                    "and end (backend 'local')", check=positive())
    backend: str = option("local", "'local': the judge runs in process; 'http': it is asked "
                          "on an OpenAI-compatible server at `url`",
                          check=one_of(("local", "http")))
    url: str = option("", "base URL of the judge's server (backend 'http'), e.g. "
                      "http://127.0.0.1:8000/v1",
                      check=Check(lambda v: v == "" or v.startswith(("http://", "https://")),
                                  "'' or an http:// or https:// URL"))
    served_model: str = option("", "the `model` field of the judge's requests ('' = `model`)")
    timeout_s: float = option(30.0, "seconds each connect and read of a judge request may take",
                              check=positive())
    retries: int = option(1, "extra attempts after a timeout, a connection failure or an HTTP "
                          "5xx", check=between(0, 10))
    fallback_score: float = option(0.5, "judge score of a branch without a valid answer "
                                   "(blended with the heuristic like an answer)",
                                   check=between(0, 1))
    max_tokens: int = option(16, "token budget of the judge's answer (backend 'http')",
                             check=positive())
    concurrency: int = option(8, "judge requests in flight at once (backend 'http')",
                              check=positive())

    def check(self):
        super().check()
        require(self.backend != "http" or bool(self.url), "url",
                "'' with backend='http': give the judge server's base URL, e.g. "
                "http://127.0.0.1:8000/v1")


@SCORERS.register("judge", JudgeConfig, reads=("action_signature",))
def judge(settings: JudgeConfig) -> Scorer:
    """PATR's LLM judge, blended with the environment's heuristic (Eq. 8): in process (a
    jaxtree policy's {"score": x} read from its digit probabilities) or on an OpenAI-compatible
    server (backend 'http'; a failed request gets `fallback_score`, never an error).

    Its `metrics()` are the HTTP backend's counts since the previous call
    (`judge_http.HttpJudge.metrics`); the in-process judge has none."""
    if settings.backend == "http":
        from jaxtree.scorers.judge_http import HttpJudge
        judge_fn = HttpJudge(settings.url, settings.served_model or settings.model,
                             settings.weight, settings.recent_turns, settings.timeout_s,
                             settings.retries, settings.fallback_score, settings.max_tokens,
                             settings.concurrency)
        return Scorer("judge", judge_fn, judge_fn.metrics)
    from jaxtree.policy import load_policy
    from jaxtree.scorers.judge import JudgeScorer
    return Scorer("judge", JudgeScorer(load_policy(settings.model), settings.weight,
                                       settings.recent_turns, settings.max_prompt_tokens))


def _prm_aggregations() -> tuple[str, ...]:
    from jaxtree.scorers.prm import AGGREGATIONS  # read at check time: the config stays light
    return AGGREGATIONS


@dataclasses.dataclass(frozen=True)
class PrmConfig(Section):
    """Settings of the `prm` scorer (`rollout.patr.prm`)."""

    model: str = option("", "the PRM: a directory with config.json, safetensors weights with a "
                        "linear score head and a tokenizer (launch.train_prm's <workdir>/prm, "
                        "or a token-classification / Skywork-PRM checkpoint)")
    aggregation: str = option("last", "f_agg of PATR Eq. 7 over the step scores: 'last' (the "
                              "paper's), 'mean', 'max', 'min' or 'last_mean'",
                              check=one_of(_prm_aggregations))
    last_weight: float = option(0.5, "w of 'last_mean': w x last step + (1 - w) x mean",
                                check=between(0, 1))
    recent_steps: int = option(10, "most recent steps serialized for the PRM (PATR App. A: 10)",
                               check=positive())
    max_tokens: int = option(1024, "longest PRM input; longer ones drop their oldest steps "
                             "first", check=between(16))


@SCORERS.register("prm", PrmConfig, reads=("action_signature",))
def prm(settings: PrmConfig) -> Scorer:
    """PATR-PRM (§4.2, Eq. 7): a process reward model scores each of the recent steps at its
    boundary; the branch score aggregates them (`jaxtree.scorers.prm`)."""
    from jaxtree.config import ConfigError
    from jaxtree.scorers.prm import PrmScorer
    from jaxtree.scorers.prm_io import load_prm
    field = "rollout.patr.prm.model"
    if not settings.model:
        raise ConfigError(field, "'' names no PRM: give a PRM directory (e.g. "
                          "launch.train_prm's <workdir>/prm)")
    try:
        model = load_prm(settings.model)
    except (OSError, ValueError) as e:  # CheckpointError is a ValueError
        raise ConfigError(field, f"{settings.model!r} is not a usable PRM: {e}") from None
    return Scorer("prm", PrmScorer(model, settings.aggregation, settings.last_weight,
                                   settings.recent_steps, settings.max_tokens))
