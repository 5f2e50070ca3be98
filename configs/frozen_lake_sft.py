"""Warm start of the tiny byte-level model on FrozenLake 4x4 (deterministic), then evaluation.

    python -m launch.sft --config=configs/frozen_lake_sft.py --workdir=/tmp/fl_sft
    python -m launch.evaluate --config=configs/frozen_lake_sft.py --checkpoint=/tmp/fl_sft

ε (sft.epsilon) sets how often a demonstration plays a random move instead of the oracle's; it is
chosen so the warm-started policy solves roughly 30-60% of held-out lakes, leaving room for RL.
"""

import ml_collections


def get_config():
    config = ml_collections.ConfigDict()
    config.env = ml_collections.ConfigDict(dict(
        name="frozen_lake",
        options=dict(size=4, frozen_prob=0.8, slippery=False, style="compact")))
    config.model = ml_collections.ConfigDict(dict(name="tiny", dtype="", init_seed=0))
    config.sft = ml_collections.ConfigDict(dict(
        epsilon=0.2,            # random-action rate of the demonstrations
        num_episodes=2048,      # demonstrations (each from its own training seed)
        steps=150,
        batch_size=16,
        learning_rate=3e-3,
        warmup_steps=15,
        weight_decay=0.0,
        max_grad_norm=1.0,
        seed=0,
        log_every=10,
    ))
    config.rollout = ml_collections.ConfigDict(dict(
        num_slots=256, context_length=512, max_action_tokens=8, max_turns=0,
        temperature=1.0, top_k=0, top_p=1.0))
    config.eval = ml_collections.ConfigDict(dict(
        num_tasks=200,          # held-out tasks (seeds 1e9, 1e9 + 1, ...)
        samples_per_task=4,     # rollouts per task: pass@1 and pass@4
        temperature=1.0,        # the policy as RL samples it
        seed=0,
    ))
    return config
