"""GRPO vs DAPO vs Dr.GRPO on the default experiment (FrozenLake 4x4, tiny model), 3 seeds.

    python -m launch.compare --grid=configs/grids/frozen_lake_algorithms.py --out=/tmp/fl_algorithms

Every variant starts from the same warm start and trains 60 steps of 8 lakes x 8 rollouts; the
variants differ only in the settings that define each algorithm (`jaxtree.experiment.RECIPES`):
GRPO (std-normalised advantages, per-response length normalisation, symmetric clip, KL 0.001),
DAPO (token-mean loss, clip-higher 0.28, no KL, dynamic sampling refills uniform groups) and
Dr.GRPO (no std division, a constant instead of the length normalisation). Results:
docs/results.md.
"""

from jaxtree.experiment import RECIPES


def get_grid():
    return {
        "title": "FrozenLake 4x4: GRPO vs DAPO vs Dr.GRPO",
        "config": "frozen_lake_grpo.py",
        "variants": {name: dict(RECIPES[name]) for name in ("grpo", "dapo", "drgrpo")},
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/pass@2"),
    }
