"""Environment costs: microseconds per step, clone, verify, oracle call and process score.

Each environment plays `episodes` seeds under its own oracle; at every visited state each query is
timed on its own. Clones are also timed against `copy.deepcopy` of the same object, the baseline
the explicit `_copy_state` implementations replace. Reported numbers are medians over all visited
states (oracle and verifier caches start cold at every reset, as in training).
"""

from __future__ import annotations

import copy
import statistics
import time

import environments
from launch.benchmarks.common import print_table, write_json

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
]


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter_ns()
    out = fn()
    return (time.perf_counter_ns() - start) / 1e3, out


def measure(name: str, options: dict, episodes: int) -> dict:
    times: dict[str, list[float]] = {k: [] for k in
                                     ("reset", "step", "clone", "deepcopy", "verify", "oracle",
                                      "process_score")}
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
            times["step"].append(_timed(lambda: env.step(text))[0])
    medians = {k: statistics.median(v) for k, v in times.items()}
    medians["deepcopy_over_clone"] = medians["deepcopy"] / medians["clone"]
    medians["states"] = len(times["step"])
    return medians


def run(episodes: int, output: str) -> None:
    results, rows = [], []
    for name, options in CONFIGS:
        label = name + "".join(f" {k}={v}" for k, v in options.items())
        m = measure(name, options, episodes)
        results.append({"environment": name, "options": options, **m})
        rows.append([label, m["states"], m["reset"], m["step"], m["clone"], m["deepcopy"],
                     f"{m['deepcopy_over_clone']:.1f}x", m["verify"], m["oracle"],
                     m["process_score"]])
        print(f"  {label}: done", flush=True)
    print(f"\nenvironments: median microseconds per call over the states of {episodes} "
          "oracle-played episodes each")
    table = print_table(["environment", "states", "reset", "step", "clone", "deepcopy",
                         "deepcopy/clone", "verify", "oracle", "process_score"], rows)
    write_json(output, {"benchmark": "envs", "episodes": episodes, "results": results,
                        "table": table})
