"""PATR Table 1 at the tiny scale, FrozenLake 4x4: GRPO vs DAPO vs Tree-Random vs ARPO-style
branching vs PATR (heuristic, PRM and judge scorers), and PATR's group construction (Keep-All vs
Best-n, Table 4), 3 seeds.

    python -m launch.compare --grid=configs/grids/patr_frozen_lake.py --out=/tmp/patr_frozen_lake

Every variant starts from the same warm start and trains 60 steps on 8 lakes per step with GRPO's
loss (configs/frozen_lake_grpo.py: 10 turns per episode, as PATR §5.1), except DAPO, which uses
its own recipe. GRPO and DAPO sample 8 independent episodes per lake; the tree variants start 4
branches per lake (PATR §5.1: "four initial branches"). PATR scores them every K = 5 turns,
expands the top 2 into 2 children each and prunes below the median - 0.5 or after 6 identical
actions; its scorer is the environment's progress heuristic (accumulated reward and shortest-path
distance to the goal, holes blocked), a process reward model trained here (PATR-PRM: the grid's
`prm` artifact, `launch.train_prm` with configs/frozen_lake_prm.py, built once before the first
run that needs it), or the in-process LLM judge blended with the heuristic (PATR-judge, Eq. 8;
the judge is the run's own warm-start policy: SmolLM2-135M-Instruct, the one instruct model at
hand, scores these branches no better than chance at 10 s per branch on this CPU, see
docs/results.md). Tree-Random expands 2 branches drawn at
random and prunes by the repeat rule only. ARPO forks after each turn with probability
0.5 + 0.2 * (rise of the reply's entropy over its first reply's), up to 8 trajectories per lake
(GRPO's group size). Group sizes vary with the tree (patr/*, arpo/* metrics); group-relative
advantages use each group's own rows. Metrics: success, pass@4 (each held-out lake sampled 4
times, as PATR evaluates), turns and response length. Results: docs/results.md.
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
            "arpo": {"rollout.strategy": "arpo", "rollout.arpo.initial_branches": 4,
                     "rollout.arpo.max_branches": 8},
            "patr": dict(TREE),
            "patr_prm": {**TREE, "rollout.patr.scorer": "prm",
                         "rollout.patr.prm.model": "{artifact:prm}/prm"},
            "patr_judge": {**TREE, "rollout.patr.scorer": "judge",
                           "rollout.patr.judge.model": "{warm_start}"},
            "patr_best_n": {**TREE, "rollout.patr.group": "best_n"},
            # PATR Table 3: shorter scoring intervals score more often. At K = 5 most 4x4
            # episodes (~5.7 turns) have ended before the first scoring point.
            "patr_k2": {**TREE, "rollout.patr.interval": 2},
        },
        "artifacts": {"prm": {"job": "launch.train_prm", "config": "frozen_lake_prm.py"}},
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/pass@4", "eval/mean_turns",
                    "eval/response_tokens"),
    }
