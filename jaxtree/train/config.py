"""Config section `train`: the RL loop's own settings (`jaxtree.train.trainer`)."""

from __future__ import annotations

import dataclasses

from jaxtree.config import Section, one_of, option, positive


@dataclasses.dataclass(frozen=True)
class TrainConfig(Section):
    """Config section `train`: the RL loop."""

    init: str = option("sft", "'sft': warm start into <workdir>/sft first (config.sft); "
                       "'model': start from config.model.name", check=one_of(("sft", "model")))
    steps: int = option(60, "training steps (rollout + update each)", check=positive())
    seed: int = option(0, "seed of the task sampler, the rollouts and the minibatch shuffles")
    epochs: int = option(1, "passes over each step's batch", check=positive())
    num_minibatches: int = option(1, "optimizer steps per pass (shuffled minibatches)",
                                  check=positive())
    micro_batch_size: int = option(16, "rows per gradient-accumulation micro-batch (a multiple "
                                   "of mesh data x fsdp)", check=positive())
    micro_batches_by_length: bool = option(
        True, "group a minibatch's rows by length into micro-batches, each cut to its own "
        "rows' width (False: every micro-batch as wide as the minibatch's longest row, one fused "
        "step; jaxtree.train.update)")
    tensorboard: bool = option(True, "also write TensorBoard events (<workdir>/tensorboard)")
    max_skipped_steps: int = option(5, "end the run (exit status 1) after this many consecutive "
                                    "steps whose updates were all skipped as non-finite",
                                    check=positive())
