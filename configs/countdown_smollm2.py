"""SmolLM2-135M-Instruct on Countdown with 3 numbers in [1, 100] (LATR's setting, TinyZero's
prompt through the ChatML template), reasoning before it answers: the model LATR's sampling study
(`launch.latr_sampling`) and a short GRPO run compare stochastic sampling and LATR on.

    python -m launch.sft --config=configs/countdown_smollm2.py --workdir=/tmp/countdown_smollm2_sft
    python -m launch.latr_sampling --config=configs/countdown_smollm2.py \\
        --checkpoint=/tmp/countdown_smollm2_sft --tasks=128 --seeds=0,1,2 --groups_per_call=16
    python -m launch.train --config=configs/countdown_smollm2.py --workdir=/tmp/countdown_smollm2

Zero-shot, SmolLM2-135M never writes TinyZero's <answer> tags (greedy or at temperature 1: lines
like "1 + 2 = 3 ... The answer is 11."), so every answer is malformed and distinct answers, pass@1
and pass@k are degenerate. The warm start teaches the format on oracle demonstrations that think
first (`env.options.reasoning`: up to 6 wrong attempts worked out step by step, then the
answer's steps: 50-340 answer tokens, median 190, with SmolLM2's tokenizer), so the completions
LATR branches in are reasoning, as in the paper. 3 numbers only: 4-number tasks double the solver's and the demonstrations'
length for a model that solves few 3-number ones. Rollouts allow 400 tokens; the chat prompt is
~145, so 576 positions fit. The warm start pads every demonstration to the context: 8 x 576
tokens a step with `model.remat` and `model.logits_chunk` as in frozen_lake_smollm2.py. LATR's
thresholds and windows are the paper's defaults (τ_abs 0.25, τ_rel 0.15, τ_ed 0.4, windows 20, 30,
50 tokens); the RL run uses its Countdown η schedule.

LoRA adapters instead of the whole model (`jaxtree.experiment.LORA_VARIANT`, an option):

    python -m launch.train --config=configs/countdown_smollm2.py:lora \\
        --workdir=/tmp/countdown_smollm2_lora
"""

from jaxtree.experiment import SMOLLM2, base_config, rl_config, variant_overrides


def get_config(variant: str = ""):
    config = base_config("countdown", dict(min_numbers=3, max_numbers=3, max_number=100,
                                           max_target=100, style="chat", reasoning=6),
                         context_length=576, max_action_tokens=400, epsilon=0.05)
    return rl_config(config, "grpo", {
        **SMOLLM2,
        "sft.num_episodes": 512, "sft.steps": 40, "sft.batch_size": 8,
        "sft.learning_rate": 5e-5, "sft.warmup_steps": 4, "sft.log_every": 2,
        "sft.checkpoint_every": 5, "sft.pad_multiple": 0,
        "rollout.strategy": "latr", "rollout.num_slots": 64,
        "rollout.latr.eta_schedule": ((0, 1.0), (10, 0.75), (20, 0.5), (80, 0.25), (200, 0.0)),
        "rollout.groups_per_step": 4, "rollout.group_size": 8,
        "train.steps": 4, "train.micro_batch_size": 2, "optim.learning_rate": 1e-6,
        "eval.num_tasks": 32, "eval.samples_per_task": 1, "eval.every": 4,
        "checkpoint.every": 1,
        **variant_overrides(variant),
    })
