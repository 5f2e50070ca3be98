"""Environment costs and reference policies.

Costs: each environment plays `episodes` seeds under its own oracle; at every visited state each
query is timed on its own. Clones are also timed against `copy.deepcopy` of the same object, the
baseline the explicit `_copy_state` implementations replace. Reported numbers are medians over all
visited states (oracle and verifier caches start cold at every reset, as in training).

Oracle play's throughput: environment steps per second over all timed steps (means, not
medians: mini-SWE's test runs are a minority of its steps but most of its time) and the share of
that time spent in the environment's subprocesses (`info["subprocess_seconds"]`: mini-SWE's
sandboxed test runs; 0 for the others), the median sandbox time of the turns that used it
(`sandbox ms / turn`: start to reap, writing the files and reading the results included, as the
environment sees it; a mini-SWE `run_tests` that passes makes two runs, the visible tests and
the host's verdict on the hidden cases, which the later `submit` then finds cached; "-" for
environments without subprocesses) and the sum per episode (`sandbox ms / episode`: a run that an
earlier episode of the same task made with the same files is cached and costs nothing).

Labels: what recording a turn's labels adds to its host time, `labels` microseconds per turn for
the six labels every turn recorded before labels were declared (`rollout.LABEL_SETS["every"]`:
verdict, process score, state and action signatures, anchor, validation) and `labels share` =
labels / (step + labels) summed over the turns: the host time of a turn an experiment that reads
none of them saves.

Reference policies: the success rate of the oracle and of uniformly random legal actions over
`policy_seeds` seeds (seeds 0..n-1).
"""

from __future__ import annotations

import copy
import statistics
import time

import numpy as np

import environments
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.signatures import signature_function
from jaxtree.utils import print_table
from launch.benchmarks.common import write_json
from launch.benchmarks.rollout import LABEL_SETS

CONFIGS = [
    ("frozen_lake", {}),
    ("frozen_lake", {"slippery": True}),
    ("sokoban", {}),
    ("countdown", {}),
    ("tictactoe", {}),
    ("tictactoe", {"oracle": "mcts", "oracle_simulations": 1000}),
    ("sudoku", {}),
    ("sudoku", {"size": 4}),
    ("minesweeper", {}),
    ("mini_swe", {}),
]


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter_ns()
    out = fn()
    return (time.perf_counter_ns() - start) / 1e3, out


def measure(name: str, options: dict, episodes: int) -> dict:
    times: dict[str, list[float]] = {k: [] for k in
                                     ("reset", "step", "clone", "deepcopy", "verify", "oracle",
                                      "process_score", "labels")}
    sandbox_turns: list[float] = []  # seconds in subprocesses of each turn that used them
    labeler = TurnLabeler(LABEL_SETS["every"], signature_function("env"))
    env = environments.make(name, **options)
    for seed in range(episodes):
        t, _ = _timed(lambda: env.reset(seed))
        times["reset"].append(t)
        while not env.done:
            t, action = _timed(env.oracle_action)
            times["oracle"].append(t)
            times["verify"].append(_timed(lambda: env.verify(action))[0])
            times["process_score"].append(_timed(env.process_score)[0])
            times["clone"].append(_timed(env.clone)[0])
            times["deepcopy"].append(_timed(lambda: copy.deepcopy(env))[0])
            text = env.answer_text(action)
            before, _ = _timed(lambda: labeler.before_step(env, action, ()))
            t, (_, _, _, info) = _timed(lambda: env.step(text))
            times["step"].append(t)
            times["labels"].append(before + _timed(
                lambda: labeler.after_step(env, action, info, ()))[0])
            seconds = float(info.get("subprocess_seconds") or 0.0)
            if seconds > 0:
                sandbox_turns.append(seconds)
    medians = {k: statistics.median(v) for k, v in times.items()}
    step_seconds = sum(times["step"]) / 1e6
    medians["turns_per_s"] = len(times["step"]) / step_seconds
    medians["subprocess_share"] = sum(sandbox_turns) / step_seconds
    medians["sandbox_turn_ms"] = (1e3 * statistics.median(sandbox_turns) if sandbox_turns
                                  else float("nan"))
    medians["sandbox_turns"] = len(sandbox_turns)
    medians["sandbox_ms_per_episode"] = 1e3 * sum(sandbox_turns) / episodes
    medians["labels_share"] = sum(times["labels"]) / (sum(times["labels"]) + sum(times["step"]))
    medians["deepcopy_over_clone"] = medians["deepcopy"] / medians["clone"]
    medians["states"] = len(times["step"])
    return medians


def success_rate(name: str, options: dict, seeds: int, policy: str) -> float:
    """Fraction of seeds 0..seeds-1 solved by the oracle or by uniformly random legal actions."""
    env = environments.make(name, **options)
    rng = np.random.default_rng(0)
    solved = 0
    for seed in range(seeds):
        env.reset(seed)
        info = {}
        while not env.done:
            action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
            _, _, _, info = env.step(env.answer_text(action))
        solved += bool(info["success"])
    return solved / seeds


def run(episodes: int, policy_seeds: int, output: str) -> None:
    results, rows = [], []
    for name, options in CONFIGS:
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        m = measure(name, options, episodes)
        m["oracle_success"] = success_rate(name, options, policy_seeds, "oracle")
        m["random_success"] = success_rate(name, options, policy_seeds, "random")
        results.append({"environment": name, "options": options, **m})
        rows.append([label, m["states"], m["reset"], m["step"], m["clone"], m["deepcopy"],
                     f"{m['deepcopy_over_clone']:.1f}x", m["verify"], m["oracle"],
                     m["process_score"], m["labels"], f"{m['labels_share']:.1%}",
                     m["turns_per_s"], f"{m['subprocess_share']:.0%}",
                     f"{m['sandbox_turn_ms']:.1f}" if m["sandbox_turns"] else "-",
                     f"{m['sandbox_ms_per_episode']:.1f}" if m["sandbox_turns"] else "-",
                     f"{m['oracle_success']:.1%}", f"{m['random_success']:.1%}"])
        print(f"  {label}: done", flush=True)
    print(f"\nenvironments: median microseconds per call over the states of {episodes} "
          f"oracle-played episodes each; success rates over seeds 0-{policy_seeds - 1}")
    table = print_table(["environment", "states", "reset", "step", "clone", "deepcopy",
                         "deepcopy/clone", "verify", "oracle", "process_score", "labels",
                         "labels share", "oracle turns/s", "in subprocesses",
                         "sandbox ms / turn", "sandbox ms / episode", "oracle success",
                         "random success"], rows)
    write_json(output, {"benchmark": "envs", "episodes": episodes, "policy_seeds": policy_seeds,
                        "results": results, "table": table})
