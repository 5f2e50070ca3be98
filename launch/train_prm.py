"""Fits a process reward model for PATR-PRM on the environment's labelled partial trajectories.

    python -m launch.train_prm --config=configs/frozen_lake_prm.py --workdir=/tmp/prm_fl

Plays ε-oracle episodes on training seeds, labels every step (Monte-Carlo success of
continuations, or whether the oracle still succeeds), trains `model.name`'s backbone with a linear
score head by binary cross-entropy at the step boundaries, and writes <workdir>/prm (a
token-classification checkpoint: `--config.rollout.patr.scorer=prm
--config.rollout.patr.prm.model=<workdir>/prm` in a PATR run) and <workdir>/prm_metrics.json
(BCE, accuracy and AUC of the step scores on training and held-out seeds)
(`jaxtree.scorers.prm_training`, `jaxtree.train.jobs`). Rerun in a workdir holding the same config's PRM it does nothing;
another config is refused unless --overwrite.
"""

from __future__ import annotations

from absl import flags
from ml_collections import config_flags

from jaxtree.train.jobs import train_prm_job
from launch.common import fail, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file with a `prm` "
                                          "section.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (the PRM, its metrics).")
_OVERWRITE = flags.DEFINE_boolean("overwrite", False, "Delete an earlier PRM in the workdir "
                                  "(prm/, metrics, config.json) and train anew.")


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        fail("--workdir is required")
    train_prm_job(_CONFIG.value, _WORKDIR.value, _OVERWRITE.value)


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
