"""Warm start of the tiny byte-level model: Tic-Tac-Toe against VPR's mixed MCTS/random opponents,
the agent's mark drawn per episode.

    python -m launch.sft --config=configs/tictactoe_sft.py --workdir=/tmp/tictactoe_sft
    python -m launch.evaluate --config=configs/tictactoe_sft.py --checkpoint=/tmp/tictactoe_sft
"""

from jaxtree.experiment import base_config


def get_config():
    return base_config("tictactoe", dict(style="compact"),
                       context_length=384, max_action_tokens=8, epsilon=0.2)
