"""Warm start of the tiny byte-level model on Countdown, a single turn; a random answer is a random
expression over the numbers.

    python -m launch.sft --config=configs/countdown_sft.py --workdir=/tmp/countdown_sft
    python -m launch.evaluate --config=configs/countdown_sft.py --checkpoint=/tmp/countdown_sft

The tiny model plays Countdown with 2 numbers in [1, 10] (targets up to 100). LATR's setting,
3-4 numbers in [1, 100] (TinyZero's task set), is out of its reach from demonstrations: 500 steps
on 8,192 ε = 0.05 demonstrations reached 0% held-out success (random answers: 2%), and 3 numbers in
[1, 10] reached 2% (random: 7%). With 2 numbers, these settings reach ~49% (pass@4 ~75%) against
23% for random answers, a partly correct policy that RL can improve. For LATR's setting with a
real model: --config.env.options.min_numbers=3 --config.env.options.max_numbers=4
--config.env.options.max_number=100.
"""

from jaxtree.experiment import base_config


def get_config():
    config = base_config(
        "countdown", dict(min_numbers=2, max_numbers=2, max_number=10, max_target=100,
                          style="compact"),
        context_length=128, max_action_tokens=32, epsilon=0.05)
    config.sft.update(dict(steps=300, num_episodes=4096, batch_size=32))
    return config
