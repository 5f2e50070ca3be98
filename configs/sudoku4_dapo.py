"""Sudoku 4x4 with 8 blanks (the tiny model's VPR task), tiny model: warm start (sudoku4_sft.py)
then DAPO (LATR Eq. 4: token-mean loss, clip-higher 0.2 / 0.28, no KL, dynamic sampling that
drops groups with identical rewards and refills the batch from fresh tasks); outcome reward
only.

    python -m launch.train --config=configs/sudoku4_dapo.py --workdir=/tmp/sudoku4_dapo

8 tasks x 8 rollouts per step, learning rate 5e-4: the tiny model's values (the papers' 1e-6 is for
0.5B-30B models).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "sudoku4_sft"), "dapo")
