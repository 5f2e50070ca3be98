"""Probes PATR's process scorer before a run: does it separate oracle branches from random ones?

    python -m launch.probe_scorer --config=configs/frozen_lake_grpo.py \
        --config.rollout.strategy=patr --config.rollout.patr.scorer=judge --config.rollout.patr.judge.model=DIR [--tasks=32] \
        [--turns=3] [--output=probe.json]

For each held-out task, one branch plays `--turns` oracle moves and one plays random moves (pairs
where either ended are skipped); the configured scorer (`rollout.patr.scorer` with its settings)
and the environment's heuristic score every branch. Prints one row per scorer: AUC of oracle vs
random branches (0.5 = no separation), the mean scores of each kind, the spread, the correlation
with the heuristic, and seconds per branch after compilation (jaxtree.scorers.probe); a
judge also gets a row of its own scores, unblended from Eq. 8.
"""

from __future__ import annotations

import json

from absl import flags
from ml_collections import config_flags

from jaxtree.experiment import Experiment
from jaxtree.scorers.probe import (heuristic_scores, probe_branches, probe_report,
                                          timed_scores, unblended_judge)
from jaxtree.scorers import SCORERS
from jaxtree.tasks import eval_seeds
from jaxtree.utils import print_table
from launch.common import fail, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_TASKS = flags.DEFINE_integer("tasks", 32, "Held-out tasks (a pair of branches each).",
                              lower_bound=1)
_TURNS = flags.DEFINE_integer("turns", 3, "Turns each branch plays before it is scored.",
                              lower_bound=0)
_OUTPUT = flags.DEFINE_string("output", None, "JSON output path (default: print only).")


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _CONFIG.value is None:
        fail("--config is required")
    exp = Experiment.from_config(_CONFIG.value)
    if exp.rollout.strategy != "patr":
        fail(f"the probe scores with PATR's scorer: add --config.rollout.strategy=patr (the "
             f"config has {exp.rollout.strategy!r})")
    settings = exp.rollout.part_settings("patr")
    tokenizer = exp.model.tokenizer()
    episodes, labels = probe_branches(exp.env.factory(), tokenizer, eval_seeds(_TASKS.value),
                                      _TURNS.value)
    if not len(episodes):
        fail(f"every pair ended within {_TURNS.value} turns; probe fewer turns")
    heuristic = heuristic_scores(episodes)
    rows = {}
    for name in dict.fromkeys(("heuristic", settings.scorer)):
        part = settings.part_settings(name)
        scorer = SCORERS.build(name, part)
        scorer(episodes[:2])                      # compile outside the timing
        scores, seconds = timed_scores(scorer, episodes)
        rows[name] = probe_report(scores, labels, heuristic, seconds)
        if name == "judge" and part.weight > 0:   # the judge's own ranking, without the blend
            rows["judge (unblended)"] = probe_report(
                unblended_judge(scores, heuristic, part.weight), labels, heuristic, seconds)
    print(f"{len(episodes)} branches ({len(episodes) // 2} tasks x oracle / random), "
          f"{_TURNS.value} turns each, on {exp.env.name}")
    columns = list(next(iter(rows.values())))
    print_table(["scorer", *columns], [[name, *(row[c] for c in columns)]
                                       for name, row in rows.items()])
    if _OUTPUT.value:
        with open(_OUTPUT.value, "w") as f:
            json.dump({"env": exp.env.name, "turns": _TURNS.value, "scorers": rows}, f, indent=2)
        print(f"wrote {_OUTPUT.value}")


if __name__ == "__main__":
    run_app(main)
