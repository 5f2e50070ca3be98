"""Supervised warm start on the environment's ε-noisy oracle demonstrations.

    python -m launch.sft --config=configs/frozen_lake_sft.py --workdir=/tmp/fl_sft

Builds `sft.num_episodes` demonstrations from training seeds, trains with masked cross-entropy on
the action tokens (AdamW, warm-up + cosine), logs metrics to <workdir>/sft_metrics.jsonl and saves
an orbax checkpoint (params + metadata) under <workdir>/checkpoints/<steps>
(`jaxtree.train.warm_start`). Rerun in a workdir holding the same config's finished warm start it
does nothing; SIGTERM or Ctrl-C saves a resumable checkpoint; another config is refused unless
--overwrite (`jaxtree.train.jobs`).
"""

from __future__ import annotations

from absl import flags
from ml_collections import config_flags

from jaxtree.train.jobs import sft_job
from launch.common import fail, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics).")
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Delete an earlier warm start in the "
                                  "workdir (checkpoints, metrics, config.json) and train anew.")


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        fail("--workdir is required")
    sft_job(_CONFIG.value, _WORKDIR.value, _OVERWRITE.value)


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
