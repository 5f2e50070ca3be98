"""Warm start of the tiny byte-level model on FrozenLake 4x4 (deterministic), then evaluation.

    python -m launch.sft --config=configs/frozen_lake_sft.py --workdir=/tmp/fl_sft
    python -m launch.evaluate --config=configs/frozen_lake_sft.py --checkpoint=/tmp/fl_sft

sft.epsilon = 0.2: a fifth of the demonstrated moves are random, which leaves the warm-started
policy solving roughly half of the held-out lakes at temperature 1 (0.4 gave ~20%), so RL has room
to improve. Episodes are at most ~340 tokens in compact style; 512 positions leave room for
longer, wandering episodes.
"""

from jaxtree.experiment import base_config


def get_config():
    return base_config("frozen_lake", dict(size=4, frozen_prob=0.8, slippery=False,
                                           style="compact"),
                       context_length=512, max_action_tokens=8, epsilon=0.2)
