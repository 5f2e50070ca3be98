"""PATR Table 1 at the tiny scale, FrozenLake 4x4: GRPO vs DAPO vs Tree-Random vs PATR (heuristic
scorer), and PATR's group construction (Keep-All vs Best-n, Table 4), 3 seeds.

    python -m launch.compare --grid=configs/grids/patr_frozen_lake.py --out=/tmp/patr_frozen_lake

Every variant starts from the same warm start and trains 60 steps on 8 lakes per step with GRPO's
loss (configs/frozen_lake_grpo.py: 10 turns per episode, as PATR §5.1), except DAPO, which uses
its own recipe. GRPO and DAPO sample 8 independent episodes per lake; the tree variants start 4
branches per lake (PATR §5.1: "four initial branches"), score them every K = 5 turns with the
environment's progress heuristic (accumulated reward and shortest-path distance to the goal,
holes blocked), expand the top 2 into 2 children each and prune below the median - 0.5 or after
6 identical actions. Tree-Random expands 2 branches drawn at random and prunes by the repeat rule
only. Group sizes vary with the tree (patr/* metrics); group-relative advantages use each group's
own rows. Metrics: success, pass@4 (each held-out lake sampled 4 times, as PATR evaluates),
turns and response length. Results: docs/results.md.
"""

from jaxtree.experiment import RECIPES

TREE = {"rollout.strategy": "patr", "rollout.patr.initial_branches": 4,
        "rollout.patr.interval": 5}


def get_grid():
    return {
        "title": "FrozenLake 4x4: GRPO vs DAPO vs Tree-Random vs PATR (PATR Table 1, tiny scale)",
        "config": "frozen_lake_grpo.py",
        "overrides": {**RECIPES["grpo"], "train.steps": 60, "eval.samples_per_task": 4},
        "variants": {
            "grpo": {},
            "dapo": dict(RECIPES["dapo"]),
            "tree_random": {**TREE, "rollout.patr.selection": "random"},
            "patr": dict(TREE),
            "patr_best_n": {**TREE, "rollout.patr.group": "best_n"},
        },
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/pass@4", "eval/mean_turns",
                    "eval/response_tokens"),
    }
