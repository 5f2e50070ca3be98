"""SmolLM2-135M-Instruct on mini-SWE (chat prompts through its ChatML template): a warm start on
oracle repairs, then GRPO, sized for a 2-core CPU. The tiny byte model's warm start learns the
commands' shapes but not to copy a file name from the observation (docs/results.md, "mini-SWE");
a pretrained model copies names. This is the base for RTMC's and PATR's SWE comparisons on a real
model (the variants of configs/grids/mini_swe_credit.py), once a measured step says how many
steps and seeds this machine affords.

    python -m launch.sft --config=configs/mini_swe_smollm2.py --workdir=/tmp/mswe_smollm2_sft
    python -m launch.evaluate --config=configs/mini_swe_smollm2.py --checkpoint=/tmp/mswe_smollm2_sft
    python -m launch.train --config=configs/mini_swe_smollm2.py --workdir=/tmp/mswe_smollm2 \
        --config.train.init=model --config.model.name=/tmp/mswe_smollm2_sft

Sizes: the chat prompt (task, file list, failing test, instructions) is ~385 SmolLM2 tokens and
the oracle's 4-turn repair ~750, so 8 turns with 800-character tool output fit 2,048 positions;
an edit with its replacement lines stays under 128 tokens. The warm start pads every
demonstration to the context, so its batch is 4 (8 x 576 positions of the Countdown warm start
held 7 GB with the two memory knobs); it checkpoints every 10 steps (a step takes minutes here).
The learning rates are the small-model end of the papers' ranges, as in frozen_lake_smollm2.py.

LoRA adapters instead of the whole model (`jaxtree.experiment.LORA_VARIANT`, an option):

    python -m launch.train --config=configs/mini_swe_smollm2.py:lora \\
        --workdir=/tmp/mswe_smollm2_lora
"""

from jaxtree.experiment import SMOLLM2, base_config, rl_config, variant_overrides


def get_config(variant: str = ""):
    config = base_config("mini_swe", dict(style="chat", max_steps=8, max_output_chars=800),
                         context_length=2048, max_action_tokens=128, epsilon=0.1)
    config.env.eval_options = {"split": "test"}
    return rl_config(config, "grpo", {
        **SMOLLM2,
        "sft.num_episodes": 256, "sft.steps": 60, "sft.batch_size": 4,
        "sft.learning_rate": 5e-5, "sft.warmup_steps": 6, "sft.log_every": 2,
        "sft.checkpoint_every": 10, "sft.pad_multiple": 0,
        "rollout.num_slots": 16, "rollout.groups_per_step": 4, "rollout.group_size": 4,
        "train.steps": 2, "train.micro_batch_size": 2, "optim.learning_rate": 1e-6,
        "eval.num_tasks": 16, "eval.samples_per_task": 1, "eval.every": 2,
        "checkpoint.every": 1,
        **variant_overrides(variant),
    })
