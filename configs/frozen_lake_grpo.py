"""The default experiment: FrozenLake 4x4 (deterministic), tiny model, warm start then GRPO.

    python -m launch.train --config=configs/frozen_lake_grpo.py --workdir=/tmp/jaxtree_fl

The warm start (frozen_lake_sft.py: ε = 0.2 demonstrations) solves about half of the held-out
lakes; GRPO (PATR Eq. 1-2: group mean/std advantages, sequence-mean-token-mean loss) then trains
with the papers' clip range 0.2 and KL coefficient 0.001 (PATR) and 10 turns per episode (PATR).
The learning rate (5e-4) and batch (8 lakes x 8 rollouts) are the tiny model's: the papers' 1e-6
is for 0.5B-30B models.
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "frozen_lake_sft"), "grpo")
