"""A process reward model for PATR-PRM on FrozenLake 4x4 (deterministic, compact prompts).

    python -m launch.train_prm --config=configs/frozen_lake_prm.py --workdir=/tmp/prm_fl
    python -m launch.train --config=configs/frozen_lake_grpo.py --workdir=/tmp/fl_patr_prm \\
        --config.rollout.strategy=patr --config.rollout.patr.scorer=prm \\
        --config.rollout.patr.prm.model=/tmp/prm_fl/prm

The environment is the one the RL configs train on (frozen_lake_sft.py), so the PRM reads the
prompts and observations the policy sees. Episodes of the ε-oracle (ε = 0.3: about one move in
three is random, so prefixes that can still win and prefixes that cannot both appear) are labelled
by the success rate of 8 continuations of the same policy from each step's state (`prm.labels =
'mc'`; 'oracle' asks whether the oracle alone still wins). The PRM is the tiny preset's
architecture from random initialisation with a one-label head (`--config.model.name=/tmp/fl_sft`
starts from a warm-start policy instead), fit for 200 AdamW steps of 8 windows (about 7 labelled
steps each) at a peak learning rate of 2e-3.

`prm.*` holds the job's own settings (`jaxtree.scorers.prm_training.PrmTrainConfig`); the other
sections are the experiment's, validated like any job's.
"""

from jaxtree.experiment import sibling_config
from jaxtree.scorers.prm_training import PrmTrainConfig


def get_config():
    config = sibling_config(__file__, "frozen_lake_sft")
    config.prm = PrmTrainConfig.defaults()
    return config
