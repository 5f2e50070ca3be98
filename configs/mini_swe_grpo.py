"""mini-SWE, tiny model: warm start (mini_swe_sft.py) then GRPO (PATR Eq. 1-2: group mean/std
advantages, sequence-mean-token-mean loss, clip 0.2, KL coefficient 0.001); evaluated on the
held-out modules. RTMC's signatures (`env.options.action_signatures="rtmc"`) and step rewards are
set by configs/grids/mini_swe_credit.py.

    python -m launch.train --config=configs/mini_swe_grpo.py --workdir=/tmp/mini_swe_grpo

8 tasks x 8 rollouts per step at the tiny model's learning rate (5e-4; the papers' 1e-6 is for
7B-32B models).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    # 8 rows of 1,536 positions per micro-batch (the warm start's memory note)
    return rl_config(sibling_config(__file__, "mini_swe_sft"), "grpo",
                     {"train.micro_batch_size": 8})
