"""The default experiment: FrozenLake 4x4 (deterministic), tiny model, warm start then GRPO.

    python -m launch.train --config=configs/frozen_lake_grpo.py --workdir=/tmp/jaxtree_fl

The warm start (frozen_lake_sft.py: ε = 0.2 demonstrations) solves about half of the held-out
lakes; GRPO (PATR Eq. 1-2: group mean/std advantages, sequence-mean-token-mean loss) then trains
with the papers' clip range 0.2 and KL coefficient 0.001 (PATR) and 10 turns per episode (PATR),
8 lakes x 8 rollouts per step (the papers' 1e-6 learning rate is for 0.5B-30B models).

Learning rate 2e-4: with 5e-4 (the rate of the other RL configs) Adam's steps were large for the
noise of a 64-episode gradient, and the recipe depended on the seed: seed 0 improved held-out
success by 32 points, seed 1 collapsed after step 40 (entropy 0.16 -> 0.02 nats per token,
gradient spikes, KL to the reference up to 0.56, malformed actions up to 20%) and seed 2 never
improved. At 2e-4 every seed improves by 20-27 points and ends within 4 points of its best
evaluation (docs/results.md, configs/grids/frozen_lake_stability.py).
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "frozen_lake_sft"), "grpo",
                     {"optim.learning_rate": 2e-4})
