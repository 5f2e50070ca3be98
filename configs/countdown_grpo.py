"""Countdown, one turn, tiny model (2 numbers; see countdown_sft.py): warm start (countdown_sft.py)
then GRPO (PATR Eq. 1-2: group mean/std advantages, sequence-mean-token-mean loss, clip 0.2, KL
coefficient 0.001); the same-budget stochastic-sampling baseline of LATR (countdown_latr.py).

    python -m launch.train --config=configs/countdown_grpo.py --workdir=/tmp/countdown_grpo

8 tasks x 8 rollouts per step, learning rate 5e-4: the tiny model's values (the papers' 1e-6 is for
0.5B-30B models).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "countdown_sft"), "grpo")
