"""The experiment config every launch job reads, with its defaults.

Config files in `configs/` call `base_config(...)` and override what their experiment changes, so
every job sees the same sections:

  env      name, options (passed to `environments.make`)
  model    name (preset, jaxtree checkpoint or Hugging Face directory), dtype ('' = by backend),
           init_seed (random init of presets)
  sft      warm start: epsilon (random-action rate of demonstrations), num_episodes, steps,
           batch_size, learning_rate, warmup_steps, weight_decay, max_grad_norm, seed, log_every
  rollout  num_slots, context_length, max_action_tokens, max_turns (0 = the environment's),
           temperature, top_k, top_p
  eval     num_tasks (held-out seeds), samples_per_task (pass@k), temperature, seed
"""

from __future__ import annotations

import ml_collections


def base_config(env: str, env_options: dict, *, context_length: int, max_action_tokens: int,
                epsilon: float) -> ml_collections.ConfigDict:
    """Defaults for the tiny byte-level model on one environment (compact prompts)."""
    config = ml_collections.ConfigDict()
    config.env = ml_collections.ConfigDict(dict(name=env, options=dict(env_options)))
    config.model = ml_collections.ConfigDict(dict(name="tiny", dtype="", init_seed=0))
    config.sft = ml_collections.ConfigDict(dict(
        epsilon=epsilon, num_episodes=2048, steps=150, batch_size=16, learning_rate=3e-3,
        warmup_steps=15, weight_decay=0.0, max_grad_norm=1.0, seed=0, log_every=10))
    config.rollout = ml_collections.ConfigDict(dict(
        num_slots=64, context_length=context_length, max_action_tokens=max_action_tokens,
        max_turns=0, temperature=1.0, top_k=0, top_p=1.0))
    config.eval = ml_collections.ConfigDict(dict(
        num_tasks=200, samples_per_task=4, temperature=1.0, seed=0))
    return config
