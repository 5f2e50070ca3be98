"""RL training of an agent: the main job.

    python -m launch.train --config=configs/frozen_lake_grpo.py --workdir=/tmp/jaxtree_fl

The pipeline (rollout strategy -> rewards -> group filter -> advantages -> loss -> update) is set
by the config's sections; `configs/README.md` lists every field, e.g.

    --config.rollout.strategy=latr --config.advantage.name=rloo --config.loss.kl_coef=0.01

With `train.init = 'sft'` the warm start runs first into <workdir>/sft (resumed, or skipped when
it finished); with 'model' training starts from `config.model.name` (a preset, a jaxtree
checkpoint or a Hugging Face directory). The same command again resumes from the newest checkpoint
that restores and leaves a finished run as it is; SIGTERM or Ctrl-C saves a checkpoint and exits
with status 0; a second job on the workdir, or another config in it, is refused in one line
(`jaxtree.train.jobs`). Writes <workdir>/config.json, metrics.jsonl, transcripts/, TensorBoard
events in tensorboard/ and checkpoints in checkpoints/; `python -m launch.plot --workdir=...`
draws the learning curves.

Several processes (a TPU pod, GPU hosts) run the same command with `--distributed`, or with
`--coordinator_address`, `--num_processes` and `--process_id` (`launch/processes.py`;
launchers in `launch/cloud/`); the workdir must be a directory every process can reach.
"""

from __future__ import annotations

from absl import flags
from ml_collections import config_flags

from jaxtree.train.jobs import train_job
from launch.common import fail, run_app
from launch.processes import run_job

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics).")
_STOP_AFTER = flags.DEFINE_integer("stop_after", None, "Stop (with a checkpoint) after this many "
                                   "steps of this job; a later job resumes.", lower_bound=1)
_ALLOW_CONFIG_CHANGE = flags.DEFINE_boolean(
    "allow_config_change", False, "Resume a workdir whose config.json differs from this config "
    "(the change is recorded in config_changes.jsonl).")
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Delete this job's outputs in the workdir "
                                  "(checkpoints, logs, warm start) and start over.")


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        fail("--workdir is required")
    run_job(lambda: train_job(_CONFIG.value, _WORKDIR.value, _STOP_AFTER.value,
                              _ALLOW_CONFIG_CHANGE.value, _OVERWRITE.value))


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
