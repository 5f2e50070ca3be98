"""Supervised warm start on the environment's ε-noisy oracle demonstrations (`launch.sft`, and the
first stage of `launch.train` when `train.init = 'sft'`).

Builds `sft.num_episodes` demonstrations from training seeds, trains with masked cross-entropy on
the action tokens (AdamW, warm-up + cosine, `jaxtree.train.sft`), logs metrics to
<workdir>/sft_metrics.jsonl and saves an orbax checkpoint (params + metadata) under
<workdir>/checkpoints/<steps>.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable

import jax
import numpy as np
from absl import logging
from tqdm import tqdm

from environments.base import TextEnv
from jaxtree import checkpoints
from jaxtree.config import Section, between, non_negative, option, positive, require
from jaxtree.policy import Policy
from jaxtree.rollout.demonstrations import demonstrate
from jaxtree.tasks import train_seeds
from jaxtree.train.sft import make_optimizer, pad_batch, sft_step


@dataclasses.dataclass(frozen=True)
class WarmStartConfig(Section):
    """Config section `sft`: the supervised warm start."""

    epsilon: float = option(0.2, "rate of uniformly random actions in the oracle demonstrations",
                            check=between(0, 1))
    num_episodes: int = option(2048, "demonstrations (from training seeds)", check=positive())
    steps: int = option(150, "optimizer steps", check=positive())
    batch_size: int = option(16, "demonstrations per step", check=positive())
    learning_rate: float = option(3e-3, "peak learning rate (warm-up, then cosine to 10%)",
                                  check=positive())
    warmup_steps: int = option(15, "linear warm-up steps", check=non_negative())
    weight_decay: float = option(0.0, "AdamW weight decay", check=non_negative())
    max_grad_norm: float = option(1.0, "global gradient-norm clip", check=positive())
    seed: int = option(0, "seed of the demonstration tasks, their noise and the batches")
    log_every: int = option(10, "steps between metric records", check=positive())

    def check(self):
        require(self.warmup_steps <= self.steps, "warmup_steps",
                f"{self.warmup_steps} is not in [0, sft.steps={self.steps}]")


def warm_start(settings: WarmStartConfig, policy: Policy, make_env: Callable[[], TextEnv],
               context_length: int, workdir: str, metadata: dict[str, Any]) -> str:
    """Trains `policy` on demonstrations of at most `context_length` tokens and checkpoints it
    into `workdir` (metadata added to the checkpoint's); returns the checkpoint directory."""
    s = settings
    rng = np.random.default_rng(s.seed)
    start = time.perf_counter()
    env = make_env()
    demos = [demonstrate(env, policy.tokenizer, seed, s.epsilon, rng, context_length)
             for seed in train_seeds(rng, s.num_episodes)]
    demo_success = float(np.mean([d.success for d in demos]))
    logging.info("%d demonstrations in %.1fs, success %.1f%%", len(demos),
                 time.perf_counter() - start, 100 * demo_success)

    optimizer = make_optimizer(s.learning_rate, s.warmup_steps, s.steps, s.weight_decay,
                               s.max_grad_norm)
    params = policy.params
    opt_state = optimizer.init(params)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "sft_metrics.jsonl"), "w") as log:
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
        extra={**metadata, "source": policy.source, "demonstration_success": demo_success})
    print(f"sft: {len(demos)} demonstrations (success {demo_success:.1%}), {s.steps} steps, "
          f"final loss {record['loss']:.4f}, {time.perf_counter() - start:.0f}s -> {path}")
    return path
