"""Warm start of the tiny byte-level model: Minesweeper 5x5 with 5 mines (VPR); up to 25 turns.

    python -m launch.sft --config=configs/minesweeper_sft.py --workdir=/tmp/minesweeper_sft
    python -m launch.evaluate --config=configs/minesweeper_sft.py --checkpoint=/tmp/minesweeper_sft
"""

from jaxtree.experiment import base_config


def get_config():
    return base_config("minesweeper", dict(style="compact"),
                       context_length=2048, max_action_tokens=16, epsilon=0.1)
