"""Config section `train`: the RL loop's own settings (`jaxtree.train.trainer`)."""

from __future__ import annotations

import dataclasses

from jaxtree.config import Section, between, one_of, option, positive

PREFIX_SHARING = ("auto", "on", "off")


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
    prefix_sharing: str = option(
        "auto", "compute every token prefix the trajectories of a group share once in the update "
        "('on': always; 'off': every trajectory from its first token; 'auto': when the batch's "
        "unique-token fraction is below train.prefix_break_even; jaxtree.train.forest_update)",
        check=one_of(PREFIX_SHARING))
    prefix_break_even: float = option(
        0.25, "'auto' shares prefixes when unique tokens / all tokens of the batch is below this "
        "(docs/benchmarks.md, 'Prefix-shared update': on the tiny model the forest broke even "
        "between 0.27 and 0.76 by batch shape)", check=between(0, 1))
    prefix_block: int = option(32, "tokens per block of the prefix-shared update's token trees",
                               check=positive())
    save_batches: int = option(
        0, "save the batches of the first N steps as the update receives them (tokens, masks, "
        "behaviour log-probs, groups, advantages, and the config) to "
        "<workdir>/batches/step_<n>.npz, for `launch.benchmark prefix_update`",
        check=between(0, None))
    agreement_every: int = option(
        1, "steps between the sampler/trainer agreement checks (update/logprob_gap_*: one "
        "forward pass of the policy over the batch, no backward, before the step's first "
        "optimizer step; about a quarter of a pretrained model's update on CPU): step 1 and "
        "every N-th step after it; 0 never", check=between(0, None))
    tensorboard: bool = option(True, "also write TensorBoard events (<workdir>/tensorboard)")
    max_skipped_steps: int = option(5, "end the run (exit status 1) after this many consecutive "
                                    "steps whose updates were all skipped as non-finite",
                                    check=positive())
