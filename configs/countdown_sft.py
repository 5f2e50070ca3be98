"""Warm start of the tiny byte-level model: Countdown with 3-4 numbers (LATR), a single turn; a
random answer is a random expression over the numbers.

    python -m launch.sft --config=configs/countdown_sft.py --workdir=/tmp/countdown_sft
    python -m launch.evaluate --config=configs/countdown_sft.py --checkpoint=/tmp/countdown_sft
"""

from jaxtree.experiment import base_config


def get_config():
    return base_config("countdown", dict(min_numbers=3, max_numbers=4, style="compact"),
                       context_length=128, max_action_tokens=32, epsilon=0.2)
