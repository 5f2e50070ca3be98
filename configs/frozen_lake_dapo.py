"""FrozenLake 4x4 (deterministic), tiny model: warm start (frozen_lake_sft.py) then DAPO (LATR Eq.
4: token-mean loss, clip-higher 0.2 / 0.28, no KL, dynamic sampling that drops groups with
identical rewards and refills the batch from fresh tasks); 10 turns per episode (PATR).

    python -m launch.train --config=configs/frozen_lake_dapo.py --workdir=/tmp/frozen_lake_dapo

Everything else is the default experiment's (frozen_lake_grpo.py: 8 tasks x 8 rollouts per step,
learning rate 2e-4).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "frozen_lake_grpo"), "dapo")
