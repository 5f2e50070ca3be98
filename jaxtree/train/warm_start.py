"""Supervised warm start on the environment's ε-noisy oracle demonstrations (`launch.sft`, and the
first stage of `launch.train` when `train.init = 'sft'`).

Builds `sft.num_episodes` demonstrations from training seeds, trains with masked cross-entropy on
the action tokens (AdamW, warm-up + cosine), logs metrics to <workdir>/sft_metrics.jsonl and saves
an orbax checkpoint (params + metadata) under <workdir>/checkpoints/<steps>.
"""

from __future__ import annotations

import json
import time

import jax
import numpy as np
from absl import logging
from tqdm import tqdm

from jaxtree.rollout.demonstrations import demonstrate
from jaxtree.tasks import train_seeds
from jaxtree.train import checkpoints
from jaxtree.train.sft import make_optimizer, pad_batch, sft_step
from launch.common import env_factory, policy_from_config, require, workdir_path


def validate(config) -> None:
    s = config.sft
    require(0.0 <= s.epsilon <= 1.0, "sft.epsilon", f"{s.epsilon} must be in [0, 1]")
    for field in ("num_episodes", "steps", "batch_size"):
        require(s[field] > 0, f"sft.{field}", f"{s[field]} must be positive")
    require(s.learning_rate > 0, "sft.learning_rate", f"{s.learning_rate} must be positive")
    require(0 <= s.warmup_steps <= s.steps, "sft.warmup_steps", "must be in [0, sft.steps]")


def run(config, workdir: str) -> str:
    """Trains and checkpoints; returns the checkpoint directory."""
    validate(config)
    make_env = env_factory(config)
    policy = policy_from_config(config)
    s = config.sft
    rng = np.random.default_rng(s.seed)

    start = time.perf_counter()
    env = make_env()
    demos = [demonstrate(env, policy.tokenizer, seed, s.epsilon, rng,
                         config.rollout.context_length)
             for seed in train_seeds(rng, s.num_episodes)]
    demo_success = float(np.mean([d.success for d in demos]))
    logging.info("%d demonstrations in %.1fs, success %.1f%%", len(demos),
                 time.perf_counter() - start, 100 * demo_success)

    optimizer = make_optimizer(s.learning_rate, s.warmup_steps, s.steps, s.weight_decay,
                               s.max_grad_norm)
    params = policy.params
    opt_state = optimizer.init(params)
    metrics_path = workdir_path(workdir, "sft_metrics.jsonl")
    with open(metrics_path, "w") as log:
        for step in tqdm(range(1, s.steps + 1), desc="sft", unit="step"):
            batch = rng.integers(0, len(demos), size=s.batch_size)
            tokens, mask = pad_batch([demos[i].tokens for i in batch],
                                     [demos[i].loss_mask for i in batch], policy.tokenizer.pad_id)
            params, opt_state, metrics = sft_step(policy.config, optimizer, params, opt_state,
                                                  tokens, mask)
            if step % s.log_every == 0 or step == s.steps:
                record = {"step": step, **{k: float(v) for k, v in jax.device_get(metrics).items()}}
                log.write(json.dumps(record) + "\n")
                log.flush()
                logging.info("sft step %d: %s", step, record)
    path = checkpoints.save_policy(
        workdir, s.steps, params, policy.config, policy.tokenizer_spec,
        extra={"job": "sft", "config": config.to_dict(), "source": policy.source,
               "demonstration_success": demo_success})
    print(f"sft: {len(demos)} demonstrations (success {demo_success:.1%}), {s.steps} steps, "
          f"final loss {record['loss']:.4f}, {time.perf_counter() - start:.0f}s -> {path}")
    return path
