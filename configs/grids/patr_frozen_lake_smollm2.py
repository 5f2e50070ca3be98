"""PATR Table 1 on a pretrained model: GRPO vs Tree-Random vs PATR (Keep-All, heuristic scorer) on
FrozenLake 4x4 with chat prompts, SmolLM2-135M-Instruct (configs/frozen_lake_smollm2.py), 3 seeds;
the tiny model's table is configs/grids/patr_frozen_lake.py.

    python -m launch.compare --grid=configs/grids/patr_frozen_lake_smollm2.py \
        --out=/tmp/patr_frozen_lake_smollm2 --records=docs/grids/patr_frozen_lake_smollm2
    RECORDS=docs/grids/patr_frozen_lake_smollm2 LANES=1 bash launch/grid_lanes.sh \
        configs/grids/patr_frozen_lake_smollm2.py /tmp/patr_frozen_lake_smollm2
        # the same as one lane; 24 GB holds one

Both resume an interrupted grid when run again with the same output directory, and restore
the finished runs whose records are committed in docs/grids/patr_frozen_lake_smollm2 (running
only the others).

One warm start for every variant (the config's 8 SFT steps on oracle demonstrations), then 10
steps of 2 lakes x 8 trajectories: GRPO samples 8 independent episodes per lake; the trees start 4
branches per lake (PATR §5.1) and grow to at most 8 (GRPO's group, so every variant rolls out at
most the same 16 episodes a step). A warm-started SmolLM2 episode on a 4x4 lake lasts ~6 turns, so
PATR scores every K = 2 turns (two scoring points or more per tree, so that scoring can rank; K = 5 would
score most trees once or never), expands the top 2 branches into 2 children each and prunes below
the median - 0.5 or after 6 identical actions, with the environment's progress heuristic as the
scorer. Tree-Random expands 2 branches drawn at random and prunes by the repeat rule only.
Held-out: 12 lakes x 4 samples (success and pass@4) at steps 0, 5 and 10. Tree statistics: the
patr/* metrics (scoring points, expansions, prunes), the trajectories per lake
(rollout/episodes over the lakes) and the distinct final actions per lake
(rollout/distinct_answers), read as the aggregate's "mean over steps" (per step: 2 lakes), with
the share of training trajectories that reached the goal (rollout/success_rate), of groups
with a success (rollout/pass@group), of the update's tokens the prefix forest computes
(update/unique_token_fraction) and the policy's entropy on the training tokens.

A fourth variant, `grpo_lora_r16`, is GRPO on rank-16 adapters (every projection) over the same
warm start at LoRA's learning rate (1e-5, 10x the full model's: configs/grids/
lora_frozen_lake_smollm2.py says why): the LoRA-vs-full-fine-tuning quality check at this grid's
budget, its full-fine-tuning side being the `grpo` runs. Its adapters start at zero, so its step-0
evaluation is the warm start's, shared with the other runs.

Budget on the 2-core CPU: a whole GRPO step of this config's `:lora` variant took 448 s on two cores
(docs/benchmarks.md, "A whole GRPO step with LoRA": rollout 106 s, update 342 s; full fine-tuning's
update is within a few percent), so ~90 minutes a run with three evaluations of 48 episodes.
Measured in this grid's first run, in a lane pinned to one core: GRPO steps of 479-735 s (rollout
144-221 s, update 333-514 s), ~9 minutes an evaluation and ~20 for a process's first (the evaluation
engine compiles), so ~2.4 hours a run with its own step-0 evaluation and ~2.2 without: the runs
share the warm start's (evaluated by the first run to reach it, jaxtree.train.shared_eval), ~27
lane-hours for the 12 runs. Two SmolLM2 lanes did not fit in this machine's 24 GB (this grid's
lane reached 13.8 GB and a second grid's lane beside it was killed by the OOM killer: launch/
grid_lanes.sh), so one lane on both cores: ~19 hours at the ~1.4x a second core gives a SmolLM2
step: ~14.5 hours for the three PATR Table 1 variants, inside a grid's 15-hour budget, and ~4.5 more for
the LoRA variant. Those steps include the sampler/trainer agreement check's forward pass, about
0.3x of the optimizer step on SmolLM2 (docs/design.md): this grid checks on steps 1 and 6 only
(`train.agreement_every` 5), which should take roughly a quarter off the other steps' updates;
their time/update beside steps 1 and 6 measures it. Full fine-tuning at the
config's learning rate (1e-6, the papers' for 0.5B-7B models): ten steps may move a 135M model too
little for any variant to differ, which the results would show as overlapping intervals; a longer
run is the next step, not a larger learning rate for one side.
"""

LORA = {"model.lora.rank": 16, "optim.learning_rate": 1e-5}
TREE = {"rollout.strategy": "patr", "rollout.patr.initial_branches": 4,
        "rollout.patr.max_branches": 8, "rollout.patr.interval": 2}


def get_grid():
    return {
        "title": "FrozenLake 4x4 (chat), SmolLM2-135M-Instruct: GRPO vs Tree-Random vs PATR "
                 "(PATR Table 1)",
        "config": "frozen_lake_smollm2.py",
        "overrides": {"rollout.groups_per_step": 2, "rollout.group_size": 8,
                      "train.steps": 10, "eval.every": 5, "eval.num_tasks": 12,
                      "eval.samples_per_task": 4, "checkpoint.every": 1,
                      "train.agreement_every": 5},
        "variants": {
            "grpo": {},
            "tree_random": {**TREE, "rollout.patr.selection": "random"},
            "patr": dict(TREE),
            # LoRA's quality check at this grid's budget: GRPO on rank-16 adapters over the
            # same warm start, at LoRA's learning rate (configs/grids/lora_frozen_lake_smollm2.py)
            "grpo_lora_r16": dict(LORA),
        },
        "warm_start": {},
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/pass@4", "eval/mean_turns",
                    "rollout/episodes", "rollout/distinct_answers", "patr/scoring_points",
                    "patr/expanded", "patr/refused", "patr/pruned_score", "patr/pruned_repeat",
                    "rollout/success_rate", "rollout/pass@group", "update/unique_token_fraction",
                    "train/entropy", "time/step"),
    }
