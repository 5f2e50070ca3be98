"""LoRA against full fine-tuning on a real model: SmolLM2-135M-Instruct on FrozenLake 4x4 (chat),
one shared warm start (full fine-tuning on oracle demonstrations, configs/frozen_lake_smollm2.py),
then GRPO for the same number of steps either on the whole model or on rank-16 adapters over the
warm start (`model.lora.rank=16`, every projection: q, k, v, o, gate, up, down), 3 seeds each.

    python -m launch.compare --grid=configs/grids/lora_frozen_lake_smollm2.py \
        --out=/tmp/lora_frozen_lake_smollm2
    python -m launch.compare --grid=configs/grids/lora_frozen_lake_smollm2.py \
        --out=/tmp/lora_frozen_lake_smollm2 --dry_run

The question (LoRA's quality check) is whether LoRA's held-out success stays within 5 points
of full fine-tuning. LoRA's learning rate is 10x the full model's (1e-5 against 1e-6): adapters
start at zero and move through a rank-16 bottleneck, and the best LoRA rate is ~10x the full
fine-tuning one across model sizes (Schulman et al., "LoRA Without Regret", 2025). If LoRA falls
short, rank, learning rate and targets are the levers to measure, in that order. Both variants
share the warm start (`warm_start: {}`), so the comparison is of the RL update alone. Hours on
the 2-core CPU (6 runs of 30 steps of a 135M model): run it on an accelerator, or with
launch/grid_lanes.sh. On the CPU the same check runs at a third of the steps as the
`grpo_lora_r16` variant of configs/grids/patr_frozen_lake_smollm2.py (10 steps of 2 lakes x 8,
beside its full-fine-tuning `grpo` runs): there LoRA ended 3.5 points below full fine-tuning
(0.097 against 0.132 held-out success, lower in every seed; docs/results.md).
"""


def get_grid():
    return {
        "title": "SmolLM2-135M-Instruct on FrozenLake 4x4 (chat): LoRA r=16 vs full fine-tuning",
        "config": "frozen_lake_smollm2.py",
        "overrides": {"train.steps": 30, "eval.every": 10, "eval.num_tasks": 32,
                      "checkpoint.every": 5},
        "variants": {
            "full": {},
            "lora_r16": {"model.lora.rank": 16, "optim.learning_rate": 1e-5},
        },
        "warm_start": {},
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/pass@1", "time/update", "time/step"),
    }
