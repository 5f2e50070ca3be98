"""Warm start of the tiny byte-level model: Sudoku 4x4 with 8 blanks, the tiny model's variant of
VPR's 9x9 puzzles.

    python -m launch.sft --config=configs/sudoku4_sft.py --workdir=/tmp/sudoku_sft
    python -m launch.evaluate --config=configs/sudoku4_sft.py --checkpoint=/tmp/sudoku_sft
"""

from jaxtree.experiment import base_config


def get_config():
    return base_config("sudoku", dict(size=4, style="compact"),
                       context_length=1024, max_action_tokens=16, epsilon=0.1)
