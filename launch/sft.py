"""Supervised warm start on the environment's ε-noisy oracle demonstrations.

    python -m launch.sft --config=configs/frozen_lake_sft.py --workdir=/tmp/fl_sft

Builds `sft.num_episodes` demonstrations from training seeds, trains with masked cross-entropy on
the action tokens (AdamW, warm-up + cosine), logs metrics to <workdir>/sft_metrics.jsonl and saves
an orbax checkpoint (params + metadata) under <workdir>/checkpoints/<steps>.
"""

from __future__ import annotations

from absl import app, flags
from ml_collections import config_flags

from launch.common import ConfigError, run_app
from launch.warm_start import run

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        raise app.UsageError("--workdir is required")
    try:
        run(_CONFIG.value, _WORKDIR.value)
    except ConfigError as e:
        raise app.UsageError(str(e)) from e


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
