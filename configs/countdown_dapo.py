"""Countdown, one turn, tiny model (2 numbers; see countdown_sft.py): warm start (countdown_sft.py)
then DAPO (LATR Eq. 4: token-mean loss, clip-higher 0.2 / 0.28, no KL, dynamic sampling that
drops groups with identical rewards and refills the batch from fresh tasks); the same-budget
stochastic-sampling baseline of LATR.

    python -m launch.train --config=configs/countdown_dapo.py --workdir=/tmp/countdown_dapo

8 tasks x 8 rollouts per step, learning rate 5e-4: the tiny model's values (the papers' 1e-6 is for
0.5B-30B models).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "countdown_sft"), "dapo")
