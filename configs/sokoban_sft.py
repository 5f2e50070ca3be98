"""Warm start of the tiny byte-level model: Sokoban 6x6 with one box (TSR); at most 10 moves of ~50
tokens each.

    python -m launch.sft --config=configs/sokoban_sft.py --workdir=/tmp/sokoban_sft
    python -m launch.evaluate --config=configs/sokoban_sft.py --checkpoint=/tmp/sokoban_sft
"""

from jaxtree.experiment import base_config


def get_config():
    return base_config("sokoban", dict(size=6, num_boxes=1, style="compact"),
                       context_length=768, max_action_tokens=8, epsilon=0.2)
