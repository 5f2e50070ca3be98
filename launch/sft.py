"""Supervised warm start on the environment's ε-noisy oracle demonstrations.

    python -m launch.sft --config=configs/frozen_lake_sft.py --workdir=/tmp/fl_sft

Builds `sft.num_episodes` demonstrations from training seeds, trains with masked cross-entropy on
the action tokens (AdamW, warm-up + cosine), logs metrics to <workdir>/sft_metrics.jsonl and saves
an orbax checkpoint (params + metadata) under <workdir>/checkpoints/<steps>
(`jaxtree.train.warm_start`).
"""

from __future__ import annotations

from absl import flags
from ml_collections import config_flags

from jaxtree.train.warm_start import warm_start
from jaxtree.experiment import Experiment
from launch.common import fail, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics).")


def run(config, workdir: str) -> str:
    """Trains and checkpoints; returns the checkpoint directory."""
    exp = Experiment.from_config(config)
    return warm_start(exp.sft, exp.model.load(), exp.env.factory(), exp.rollout.context_length,
                      workdir, {"job": "sft", "config": config.to_dict()})


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        fail("--workdir is required")
    run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
