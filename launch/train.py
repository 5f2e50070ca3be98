"""RL training of an agent: the main job.

    python -m launch.train --config=configs/frozen_lake_grpo.py --workdir=/tmp/jaxtree_fl

The pipeline (rollout strategy -> rewards -> group filter -> advantages -> loss -> update) is set
by the config's sections; `configs/README.md` lists every field, e.g.

    --config.rollout.strategy=latr --config.advantage.name=rloo --config.loss.kl_coef=0.01

With `train.init = 'sft'` the warm start runs first into <workdir>/sft (skipped when a checkpoint
is already there); with 'model' training starts from `config.model.name` (a preset, a jaxtree
checkpoint or a Hugging Face directory). An existing training checkpoint in the workdir is resumed.
SIGTERM saves a checkpoint and exits cleanly. Writes <workdir>/metrics.jsonl, TensorBoard events in
<workdir>/tensorboard and checkpoints in <workdir>/checkpoints; `python -m launch.plot
--workdir=...` draws the learning curves.
"""

from __future__ import annotations

import json
import os
import time

import jax
from absl import flags, logging
from ml_collections import config_flags

from jaxtree import checkpoints
from jaxtree.experiment import Experiment
from jaxtree.train.trainer import Trainer, check_experiment
from jaxtree.train.warm_start import warm_start
from launch.common import fail, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics).")
_STOP_AFTER = flags.DEFINE_integer("stop_after", None, "Stop (with a checkpoint) after this many "
                                   "steps of this job; a later job resumes.")


def initial_policy(exp: Experiment, config_dict: dict, workdir: str):
    """The policy training starts from (running the warm start first if the config says so)."""
    if exp.train.init == "model":
        return exp.model.load()
    sft_dir = os.path.join(workdir, "sft")
    if not (os.path.isdir(sft_dir) and checkpoints.is_policy_checkpoint(sft_dir)):
        logging.info("warm start into %s", sft_dir)
        warm_start(exp.sft, exp.model.load(), exp.env.factory(), exp.rollout.context_length,
                   sft_dir, {"job": "sft", "config": config_dict})
    return exp.model.load(sft_dir)


def run(config, workdir: str, stop_after: int | None = None) -> dict:
    exp = Experiment.from_config(config)
    check_experiment(exp)
    start = time.perf_counter()
    policy = initial_policy(exp, config.to_dict(), workdir)
    metadata = {"job": "train", "model": policy.config.to_dict(),
                "tokenizer": policy.tokenizer_spec, "source": policy.source,
                "config": config.to_dict()}
    result = Trainer(exp, workdir, policy, metadata).run(stop_after)
    result["seconds"] = time.perf_counter() - start
    summary = {k: result[k] for k in ("step", "preempted", "seconds")}
    for name in ("initial_eval", "final_eval"):
        if result[name]:
            summary[name] = {k: result[name][k] for k in ("eval/success_rate", "eval/pass@1")
                             if k in result[name]}
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "train_summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    status = "stopped early: checkpoint saved" if result["preempted"] else "done"
    print(f"train: {status} at step {result['step']} in {result['seconds']:.0f}s; "
          f"{json.dumps(summary)}")
    return result


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        fail("--workdir is required")
    run(_CONFIG.value, _WORKDIR.value, _STOP_AFTER.value)


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
