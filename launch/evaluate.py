"""Evaluates a policy on held-out tasks, next to the oracle and a random policy.

    python -m launch.evaluate --config=configs/frozen_lake_sft.py --checkpoint=/tmp/fl_sft

--checkpoint is a jaxtree workdir / checkpoint, a Hugging Face directory or a preset (default:
config.model.name). Tasks are the fixed held-out seeds (`jaxtree.tasks.eval_seeds`), disjoint from
every training seed; each is played `eval.samples_per_task` times (config section `eval`, the same
evaluation the RL job runs during training). Prints a table and writes JSON
(--output, default <checkpoint>/eval.json for a checkpoint directory, else ./eval.json).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from absl import flags
from ml_collections import config_flags

from jaxtree import evaluation
from jaxtree.rollout.engine import SlotEngine
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.tasks import eval_seeds
from jaxtree.utils import print_table
from jaxtree.experiment import Experiment
from launch.common import fail, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Policy to evaluate (default: "
                                  "config.model.name).")
_OUTPUT = flags.DEFINE_string("output", None, "JSON output path.")


def run(config, checkpoint: str | None, output: str | None) -> dict:
    exp = Experiment.from_config(config)
    e = exp.eval
    make_env = exp.env.factory()
    policy = exp.model.load(checkpoint)
    k = e.samples_per_task

    start = time.perf_counter()
    engine_config = exp.rollout.engine()
    engine = SlotEngine(policy.config, policy.tokenizer, make_env, dataclasses.replace(
        engine_config, sampling=SamplingConfig(e.temperature, engine_config.sampling.top_k,
                                               engine_config.sampling.top_p)))
    rows = {"policy": evaluation.evaluate(engine, policy.params, e)}
    seconds = time.perf_counter() - start
    tasks = eval_seeds(e.num_tasks)
    for reference in ("oracle", "random"):
        rows[reference] = evaluation.metrics(
            evaluation.play_reference(make_env, tasks, reference, k, seed=e.seed), k)

    columns = list(rows["policy"])
    for name in ("oracle", "random"):
        columns += [c for c in rows[name] if c not in columns]
    print(f"evaluation of {policy.source} on {exp.env.name}: {e.num_tasks} held-out tasks x "
          f"{k} samples, temperature {e.temperature} ({seconds:.0f}s)")
    print_table(["policy"] + columns,
                [[name] + [_fmt(row.get(c)) for c in columns] for name, row in rows.items()])
    result = {"checkpoint": policy.source, "env": exp.env.to_dict(), "eval": e.to_dict(),
              "seconds": seconds, "rows": rows}
    if output is None:
        base = checkpoint if checkpoint and os.path.isdir(checkpoint) else "."
        output = os.path.join(base, "eval.json")
    with open(output, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {output}")
    return result


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) and abs(value) < 100 else str(value)


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    run(_CONFIG.value, _CHECKPOINT.value, _OUTPUT.value)


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
