"""Warm start of the tiny byte-level model on mini-SWE (RTMC's and PATR's SWE setting at this
machine's scale): single-file repairs of the training modules, held-out modules for evaluation.

    python -m launch.sft --config=configs/mini_swe_sft.py --workdir=/tmp/mini_swe_sft
    python -m launch.evaluate --config=configs/mini_swe_sft.py --checkpoint=/tmp/mini_swe_sft

Compact style: the first observation lists the files and the failing test (~75 bytes), tool
output is cut to 800 characters, and the oracle's fix (view the hunk, edit it back, run the tests,
submit) is ~800-1,100 bytes of episode, so 1,536 positions leave room for an extra view or two; an
edit with its replacement lines is at most ~105 bytes (112 action tokens). At most 8 turns. The
warm start pads every demonstration to the context; at 16 x 2,048 positions its step held 14.5 GB
and was killed on this 24 GB machine, so the context is 1,536, the batch 8, and the blocks are
recomputed in the backward pass (`model.remat`, for the RL update too).
sft.epsilon = 0.1: one demonstrated command in ten is a random one (a random view, search, edit,
test run or an early submit), so the warm start sees recoverable detours. Evaluations draw from
the held-out modules (`env.eval_options`).
"""

from jaxtree.experiment import base_config


def get_config():
    config = base_config("mini_swe", dict(style="compact", max_steps=8, max_output_chars=800),
                         context_length=1536, max_action_tokens=112, epsilon=0.1)
    config.env.eval_options = {"split": "test"}
    config.model.remat = True
    config.sft.batch_size = 8
    config.sft.steps = 300
    config.sft.checkpoint_every = 50  # the 300 steps took 97 minutes here (2 cores, shared)
    return config
