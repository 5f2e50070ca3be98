"""Evaluation metrics of a policy on held-out tasks, with the oracle and random reference rows.

Every row is computed from per-episode summaries, so the policy (rolled out by the slot engine)
and the host-only reference policies (oracle, uniformly random legal actions) report the same
metrics the same way:

  success_rate          fraction of episodes solved
  pass@1, pass@k        unbiased estimate over the k samples of each task (Chen et al., 2021):
                        1 - C(n - c, k) / C(n, k) with c successes among n samples
  mean_turns            actions per episode
  response_tokens       generated tokens per action (the policy row only)
  invalid_rate          actions that did not parse to a legal move / all actions
  environment metrics   the mean of every numeric metric the environment reports at the end of an
                        episode (e.g. completion_rate for Sudoku and Minesweeper), and for
                        Tic-Tac-Toe the return as first and as second mover
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Callable, Sequence

import jax
import numpy as np

from environments.base import TextEnv
from jaxtree.config import Section, non_negative, option, positive
from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.strategies.independent import sample_independent
from jaxtree.rollout.trajectory import TrajectoryBatch
from jaxtree.tasks import eval_seeds

@dataclasses.dataclass(frozen=True)
class EvalConfig(Section):
    """Config section `eval`: held-out evaluation, the same for `launch.evaluate` and for the
    evaluations during training."""

    num_tasks: int = option(200, "held-out tasks (fixed seeds, disjoint from training seeds)",
                            check=positive())
    samples_per_task: int = option(4, "episodes per task (k of pass@k)", check=positive())
    temperature: float = option(1.0, "sampling temperature of the evaluated policy",
                                check=non_negative())
    seed: int = option(0, "sampling seed (the same every evaluation: common random numbers)")
    every: int = option(10, "training steps between evaluations (also at step 0 and the end)",
                        check=positive())


# Protocol bookkeeping in `info`, not environment metrics.
_PROTOCOL_KEYS = {"valid", "success", "truncated", "action", "num_steps", "num_invalid",
                  "context_full", "error"}


@dataclasses.dataclass
class EpisodeSummary:
    task_id: int
    success: bool
    num_turns: int
    num_invalid: int
    info: dict
    response_tokens: int | None = None  # None for policies that do not generate tokens


def summaries_from_batch(batch: TrajectoryBatch) -> list[EpisodeSummary]:
    return [EpisodeSummary(int(batch.task_ids[i]), bool(batch.success[i]),
                           int(batch.num_turns[i]), int(batch.num_invalid[i]), batch.infos[i],
                           int(batch.response_lengths[i])) for i in range(len(batch))]


def play_reference(make_env: Callable[[], TextEnv], task_ids: Sequence[int], policy: str,
                   samples_per_task: int, seed: int = 0) -> list[EpisodeSummary]:
    """Episodes of the environment's oracle or of uniformly random legal actions."""
    if policy not in ("oracle", "random"):
        raise ValueError(f"policy={policy!r}: expected 'oracle' or 'random'")
    rng = np.random.default_rng(seed)
    env = make_env()
    out = []
    for task in task_ids:
        for _ in range(samples_per_task):
            env.reset(task)
            info = {"success": False}
            while not env.done:
                action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
                _, _, _, info = env.step(env.answer_text(action))
            out.append(EpisodeSummary(int(task), bool(info["success"]), env.num_steps,
                                      env.num_invalid, info))
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def metrics(episodes: Sequence[EpisodeSummary], k: int) -> dict[str, float]:
    """The metrics of the module docstring over `episodes` (k samples per task)."""
    if not episodes:
        raise ValueError("no episodes to evaluate")
    by_task: dict[int, list[bool]] = defaultdict(list)
    for e in episodes:
        by_task[e.task_id].append(e.success)
    turns = sum(e.num_turns for e in episodes)
    out = {
        "episodes": float(len(episodes)),
        "success_rate": float(np.mean([e.success for e in episodes])),
        "pass@1": float(np.mean([pass_at_k(len(s), sum(s), 1) for s in by_task.values()])),
        f"pass@{k}": float(np.mean([pass_at_k(len(s), sum(s), min(k, len(s)))
                                    for s in by_task.values()])),
        "mean_turns": turns / len(episodes),
        "invalid_rate": sum(e.num_invalid for e in episodes) / max(turns, 1),
    }
    if all(e.response_tokens is not None for e in episodes):
        out["response_tokens"] = sum(e.response_tokens for e in episodes) / max(turns, 1)
    numeric = defaultdict(list)
    for e in episodes:
        for key, value in e.info.items():
            if key not in _PROTOCOL_KEYS and isinstance(value, (bool, int, float)):
                numeric[key].append(float(value))
    for key, values in sorted(numeric.items()):
        if key != "first_mover" and len(values) == len(episodes):
            out[key] = float(np.mean(values))
    if "first_mover" in numeric and "return" in numeric:
        for mover, label in ((1.0, "return_first_mover"), (0.0, "return_second_mover")):
            returns = [r for r, m in zip(numeric["return"], numeric["first_mover"]) if m == mover]
            if returns:
                out[label] = float(np.mean(returns))
    return out


def evaluate(engine: SlotEngine, params, config: EvalConfig) -> dict[str, float]:
    """The metrics of the policy `params` on the held-out tasks of `config` (`num_tasks` fixed
    seeds x `samples_per_task` episodes, sampled with key(`config.seed`)), rolled out by `engine`
    (whose sampling config should carry `config.temperature`)."""
    batch = sample_independent(engine, params, jax.random.key(config.seed),
                               eval_seeds(config.num_tasks), config.samples_per_task)
    return metrics(summaries_from_batch(batch), config.samples_per_task)
