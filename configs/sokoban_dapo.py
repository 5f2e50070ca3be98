"""Sokoban 6x6 with one box (TSR), tiny model: warm start (sokoban_sft.py) then DAPO (LATR Eq. 4:
token-mean loss, clip-higher 0.2 / 0.28, no KL, dynamic sampling that drops groups with identical
rewards and refills the batch from fresh tasks); TSR's instance filter is available as
train.filter='top_std'.

    python -m launch.train --config=configs/sokoban_dapo.py --workdir=/tmp/sokoban_dapo

8 tasks x 8 rollouts per step, learning rate 5e-4: the tiny model's values (the papers' 1e-6 is for
0.5B-30B models).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "sokoban_sft"), "dapo")
