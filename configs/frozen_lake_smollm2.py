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
which is what bounds the slot count on a 24 GB machine (16 slots: 1.5 GB). The losses
materialise the logits of every token of a (micro-)batch, [rows, ~1,500, 49,152] in float32 with
their gradients and log-softmax: 4 rows per batch peaked at 17.6 GB and was killed on this
machine, hence one row per SFT batch and per RL micro-batch. The learning rates are
the small-model end of the papers' ranges (SFT 1e-5, RL 1e-6 in PATR/LATR for 0.5B-7B models,
here 2e-5 and 1e-6) rather than the tiny model's.
"""

from jaxtree.experiment import base_config, rl_config


def get_config():
    config = base_config("frozen_lake", dict(size=4, frozen_prob=0.8, slippery=False,
                                             style="chat"),
                         context_length=2048, max_action_tokens=48, epsilon=0.2)
    return rl_config(config, "grpo", {
        "model.name": "smollm2-135m-instruct",
        "sft.num_episodes": 64, "sft.steps": 8, "sft.batch_size": 1,
        "sft.learning_rate": 2e-5, "sft.warmup_steps": 2, "sft.log_every": 1,
        "rollout.num_slots": 16, "rollout.groups_per_step": 4, "rollout.group_size": 4,
        "train.steps": 3, "train.micro_batch_size": 1, "optim.learning_rate": 1e-6,
        "eval.num_tasks": 8, "eval.samples_per_task": 1, "eval.every": 3,
        "checkpoint.every": 1,
    })
