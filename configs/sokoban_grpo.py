"""Sokoban 6x6 with one box (TSR), tiny model: warm start (sokoban_sft.py) then GRPO (PATR Eq. 1-2:
group mean/std advantages, sequence-mean-token-mean loss, clip 0.2, KL coefficient 0.001); TSR's
instance filter is available as train.filter='top_std'.

    python -m launch.train --config=configs/sokoban_grpo.py --workdir=/tmp/sokoban_grpo

8 tasks x 8 rollouts per step, learning rate 5e-4: the tiny model's values (the papers' 1e-6 is for
0.5B-30B models).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "sokoban_sft"), "grpo")
