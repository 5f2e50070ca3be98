"""SmolLM2-135M-Instruct on FrozenLake 4x4 (chat prompts through its ChatML template): a short
warm start on oracle demonstrations, then GRPO, sized for a 2-core CPU (a few steps each: the
run shows every stage working on a real model and its costs; scale sft.steps, train.steps and
the batch on an accelerator).

    python -m launch.train --config=configs/frozen_lake_smollm2.py --workdir=/tmp/fl_smollm2
    python -m launch.sft --config=configs/frozen_lake_smollm2.py --workdir=/tmp/fl_smollm2_sft
    python -m launch.evaluate --config=configs/frozen_lake_smollm2.py --checkpoint=/tmp/fl_smollm2

The model is found by name in the model folder (README: "A real chat model"). Chat-style
observations are ~150 tokens a turn, so 10 turns fit 2,048 positions; the KV cache of one slot
then holds 2,048 x 30 layers x 3 KV heads x 64 x 2 (keys, values) x 4 bytes = 94 MB in float32,
which is what bounds the slot count on a 24 GB machine (16 slots: 1.5 GB). The losses recompute
each block and project onto the 49,152-token vocabulary 256 positions at a time
(`model.remat`, `model.logits_chunk`): one update of 2 rows x 1,024 tokens holds 1.7 GB of
temporaries instead of 6.1 GB, for 1.2x the time (docs/benchmarks.md); without them 4 rows of
~1,500 tokens peaked at 17.6 GB and were killed on this machine. The learning rates are
the small-model end of the papers' ranges (SFT 1e-5, RL 1e-6 in PATR/LATR for 0.5B-7B models,
here 2e-5 and 1e-6) rather than the tiny model's.

LoRA adapters instead of the whole model (`jaxtree.experiment.LORA_VARIANT`, an option):

    python -m launch.train --config=configs/frozen_lake_smollm2.py:lora \\
        --workdir=/tmp/fl_smollm2_lora
"""

from jaxtree.experiment import SMOLLM2, base_config, rl_config, variant_overrides


def get_config(variant: str = ""):
    config = base_config("frozen_lake", dict(size=4, frozen_prob=0.8, slippery=False,
                                             style="chat"),
                         context_length=2048, max_action_tokens=48, epsilon=0.2)
    return rl_config(config, "grpo", {
        **SMOLLM2,
        "sft.num_episodes": 64, "sft.steps": 8, "sft.batch_size": 4,
        "sft.learning_rate": 2e-5, "sft.warmup_steps": 2, "sft.log_every": 1,
        "rollout.num_slots": 16, "rollout.groups_per_step": 4, "rollout.group_size": 4,
        "train.steps": 3, "train.micro_batch_size": 2, "optim.learning_rate": 1e-6,
        "eval.num_tasks": 8, "eval.samples_per_task": 1, "eval.every": 3,
        "checkpoint.every": 1,
        **variant_overrides(variant),
    })
