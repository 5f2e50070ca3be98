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
  train    RL (added by `rl_config`; every field is listed in `launch/train.py`)
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


# Settings that define the two RL recipes; everything else in `config.train` is shared.
ALGORITHMS = {
    # GRPO (PATR Eq. 1-2, LATR Eq. 2): group mean/std advantages, sequence-mean-token-mean loss,
    # symmetric clip, a small KL penalty to the reference policy.
    "grpo": dict(advantage="grpo", loss_aggregation="seq-mean-token-mean", eps_low=0.2,
                 eps_high=0.2, kl_coef=0.001, filter="none"),
    # DAPO (LATR Eq. 4): token-mean loss, clip-higher, no KL term, dynamic sampling.
    "dapo": dict(advantage="grpo", loss_aggregation="token-mean", eps_low=0.2, eps_high=0.28,
                 kl_coef=0.0, filter="dynamic_sampling"),
}


def rl_config(config: ml_collections.ConfigDict, algorithm: str,
              **overrides) -> ml_collections.ConfigDict:
    """Adds the `train` section (RL) to a `base_config`; see `launch.train` for every field.

    The papers train multi-billion-parameter models with learning rates ~1e-6 and 256-trajectory
    batches; the tiny model learns with a larger rate and smaller batches, which is what the
    defaults here are tuned for.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}: expected one of {sorted(ALGORITHMS)}")
    train = dict(
        algorithm=algorithm,
        init="sft",                 # 'sft': warm start into <workdir>/sft first; 'model': model.name
        strategy="independent",     # independent | latr (single-turn tasks; see config.latr)
        steps=60, groups_per_step=8, group_size=8,
        advantage="grpo",           # grpo | drgrpo | rloo | step_reward
        adv_epsilon=1e-6,
        gamma=1.0, step_reward_valid=0.005, step_reward_invalid=0.005,   # step_reward only
        filter="none",              # none | dynamic_sampling | top_std
        keep_fraction=0.25,         # top_std only
        max_sampling_rounds=3,      # dynamic_sampling: rollout rounds to refill the batch
        loss_aggregation="seq-mean-token-mean", norm_constant=0.0,  # 0: turns x action tokens
        eps_low=0.2, eps_high=0.2, kl_coef=0.0, entropy_coef=0.0,
        learning_rate=5e-4, lr_schedule="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, adam_b1=0.9, adam_b2=0.999,
        epochs=1, num_minibatches=1, micro_batch_size=16,
        mesh=dict(data=-1, fsdp=1, tensor=1),
        eval_every=10, eval_num_tasks=100, eval_samples_per_task=2,
        save_every=10, keep_checkpoints=3, seed=0, tensorboard=True,
    )
    train.update(ALGORITHMS[algorithm])
    unknown = set(overrides) - set(train)
    if unknown:
        raise ValueError(f"unknown train fields {sorted(unknown)}")
    train.update(overrides)
    config.train = ml_collections.ConfigDict(train)
    # LATR rollouts (train.strategy = 'latr'); defaults: LATR App. B.3
    config.latr = ml_collections.ConfigDict(dict(
        tau_abs=0.25, tau_rel=0.15, tau_ed=0.4, windows=(20, 30, 50),
        completion="fresh",             # fresh | restart | duplicate (jaxtree.sampling.latr)
        eta0=1.0, gamma=0.985,          # η = η0·γ^step (Eq. 10; γ = 0.985 for Countdown)
        eta_schedule=(),                # or ((from_step, η), ...), piecewise constant
    ))
    return config


def sibling_config(config_file: str, name: str) -> ml_collections.ConfigDict:
    """`get_config()` of configs/<name>.py next to `config_file`, so an experiment can extend
    another one (e.g. RL on top of its warm-start config) wherever the configs directory lives."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(config_file)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_jaxtree_config_{name}", path)
    if spec is None or not os.path.exists(path):
        raise FileNotFoundError(f"no config file {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()
