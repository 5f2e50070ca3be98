"""RL training of an agent: the main job.

    python -m launch.train --config=configs/frozen_lake_grpo.py --workdir=/tmp/jaxtree_fl

With `train.init = 'sft'` the warm start runs first into <workdir>/sft (skipped when a checkpoint
is already there); with 'model' training starts from `config.model.name` (a preset, a jaxtree
checkpoint or a Hugging Face directory). An existing training checkpoint in the workdir is resumed.
SIGTERM saves a checkpoint and exits cleanly. Writes <workdir>/metrics.jsonl, TensorBoard events in
<workdir>/tensorboard and checkpoints in <workdir>/checkpoints; `python -m launch.plot
--workdir=...` draws the learning curves.

config.train fields (defaults in `jaxtree.experiment.rl_config`):
  algorithm                 'grpo' or 'dapo' (sets the fields below that define the recipe)
  init                      'sft' | 'model'
  strategy                  'independent' | 'latr' (single-turn tasks; config.latr: tau_abs,
                            tau_rel, tau_ed, windows, completion, eta0, gamma, eta_schedule)
  steps, groups_per_step, group_size     tasks per step and rollouts per task
  advantage                 'grpo' (mean/std) | 'drgrpo' (mean only) | 'rloo' | 'step_reward'
  adv_epsilon               std epsilon of GRPO
  gamma, step_reward_valid, step_reward_invalid    'step_reward': discount, +bonus / -penalty
  filter                    'none' | 'dynamic_sampling' (DAPO) | 'top_std' (TSR/StarPO)
  keep_fraction             'top_std': fraction of groups kept
  max_sampling_rounds       'dynamic_sampling': rollout rounds to refill the batch
  loss_aggregation          'seq-mean-token-mean' | 'token-mean' | 'seq-sum'
  norm_constant             'seq-sum' constant (0: max turns x max action tokens)
  eps_low, eps_high         clip range (clip-higher when eps_high > eps_low)
  kl_coef, entropy_coef     KL (k3) to the frozen initial policy; entropy bonus
  learning_rate, lr_schedule ('constant' | 'cosine'), warmup_steps, weight_decay, max_grad_norm,
  adam_b1, adam_b2          the optimizer
  epochs, num_minibatches, micro_batch_size       passes, optimizer steps per pass, accumulation
  mesh.data/fsdp/tensor     device mesh (data=-1: the remaining devices)
  eval_every, eval_num_tasks, eval_samples_per_task     held-out evaluation during training
  save_every, keep_checkpoints, seed, tensorboard
"""

from __future__ import annotations

import json
import os
import time

import jax
import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from jaxtree import losses
from jaxtree.experiment import ALGORITHMS
from jaxtree.sampling.latr import COMPLETIONS
from jaxtree.train import checkpoints
from jaxtree.train.trainer import Trainer
from launch import warm_start
from launch.common import (ConfigError, env_factory, policy_from_config, require, rollout_config,
                           run_app)

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (checkpoints, metrics).")
_STOP_AFTER = flags.DEFINE_integer("stop_after", None, "Stop (with a checkpoint) after this many "
                                   "steps of this job; a later job resumes.")

_CHOICES = {
    "algorithm": tuple(ALGORITHMS),
    "init": ("sft", "model"),
    "strategy": ("independent", "latr"),
    "advantage": ("grpo", "drgrpo", "rloo", "step_reward"),
    "filter": ("none", "dynamic_sampling", "top_std"),
    "loss_aggregation": losses.AGGREGATIONS,
    "lr_schedule": ("constant", "cosine"),
}


def validate(config: ml_collections.ConfigDict) -> None:
    """Fails with a ConfigError naming the field on any invalid `train` value."""
    require("train" in config, "train", "missing: build the config with jaxtree.experiment."
            "rl_config")
    t = config.train
    for field, choices in _CHOICES.items():
        require(t[field] in choices, f"train.{field}", f"{t[field]!r} is not one of {choices}")
    for field in ("steps", "groups_per_step", "group_size", "epochs", "num_minibatches",
                  "micro_batch_size", "eval_every", "save_every", "keep_checkpoints",
                  "max_sampling_rounds", "eval_num_tasks", "eval_samples_per_task"):
        require(int(t[field]) > 0, f"train.{field}", f"{t[field]} must be positive")
    require(t.learning_rate > 0, "train.learning_rate", f"{t.learning_rate} must be positive")
    require(0 <= t.eps_low < 1, "train.eps_low", f"{t.eps_low} must be in [0, 1)")
    require(t.eps_high >= 0, "train.eps_high", f"{t.eps_high} must be non-negative")
    require(t.kl_coef >= 0, "train.kl_coef", f"{t.kl_coef} must be non-negative")
    require(0 < t.keep_fraction <= 1, "train.keep_fraction", f"{t.keep_fraction} not in (0, 1]")
    require(0 <= t.gamma <= 1, "train.gamma", f"{t.gamma} must be in [0, 1]")
    require(t.norm_constant >= 0, "train.norm_constant", "must be non-negative (0: automatic)")
    require(0 <= t.warmup_steps <= t.steps * t.epochs * t.num_minibatches, "train.warmup_steps",
            "must be between 0 and the number of optimizer steps")
    require(t.group_size > 1 or t.advantage not in ("grpo", "drgrpo", "rloo", "step_reward"),
            "train.group_size", "group-relative advantages need at least 2 rollouts per task")
    require(t.num_minibatches <= t.groups_per_step * t.group_size, "train.num_minibatches",
            "more minibatches than episodes per step")
    for axis in ("data", "fsdp", "tensor"):
        size = t.mesh[axis]
        require(size > 0 or (axis == "data" and size == -1), f"train.mesh.{axis}",
                f"{size} must be positive (data may be -1)")
    if t.strategy == "latr":
        validate_latr(config)
    if config.train.init == "sft":
        warm_start.validate(config)


def validate_latr(config: ml_collections.ConfigDict) -> None:
    lc = config.latr
    for field in ("tau_abs", "tau_rel", "tau_ed", "eta0"):
        require(0 <= lc[field] <= 1, f"latr.{field}", f"{lc[field]} must be in [0, 1]")
    require(0 < lc.gamma <= 1, "latr.gamma", f"{lc.gamma} must be in (0, 1]")
    require(len(lc.windows) > 0 and all(int(w) > 0 for w in lc.windows), "latr.windows",
            f"{lc.windows} must be positive token counts")
    require(lc.completion in COMPLETIONS, "latr.completion",
            f"{lc.completion!r} is not one of {COMPLETIONS}")
    require(all(len(p) == 2 and p[0] >= 0 and 0 <= p[1] <= 1 for p in lc.eta_schedule),
            "latr.eta_schedule", "must be ((from_step, eta in [0, 1]), ...)")
    max_steps = env_factory(config)().max_steps
    require(max_steps == 1, "train.strategy",
            f"'latr' branches inside one generation and needs a single-turn environment; "
            f"{config.env.name} allows {max_steps} turns")


def initial_policy(config, workdir: str):
    """The policy training starts from (running the warm start first if the config says so)."""
    if config.train.init == "model":
        return policy_from_config(config)
    sft_dir = os.path.join(workdir, "sft")
    if not (os.path.isdir(sft_dir) and checkpoints.is_policy_checkpoint(sft_dir)):
        logging.info("warm start into %s", sft_dir)
        warm_start.run(config, sft_dir)
    return policy_from_config(config, sft_dir)


def run(config, workdir: str, stop_after: int | None = None) -> dict:
    validate(config)
    start = time.perf_counter()
    make_env = env_factory(config)
    rollout = rollout_config(config)
    eval_rollout = rollout_config(config, temperature=config.eval.temperature)
    policy = initial_policy(config, workdir)
    metadata = {"job": "train", "model": policy.config.to_dict(),
                "tokenizer": policy.tokenizer_spec, "source": policy.source,
                "config": config.to_dict()}
    try:
        trainer = Trainer(config, workdir, policy, make_env, rollout, eval_rollout, metadata)
    except ValueError as e:
        raise ConfigError(f"config.train: {e}") from e
    result = trainer.run(stop_after)
    result["seconds"] = time.perf_counter() - start
    summary = {k: result[k] for k in ("step", "preempted", "seconds")}
    for name in ("initial_eval", "final_eval"):
        if result[name]:
            summary[name] = {k: result[name][k] for k in ("eval/success_rate", "eval/pass@1")
                             if k in result[name]}
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "train_summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    status = "stopped early: checkpoint saved" if result["preempted"] else "done"
    print(f"train: {status} at step {result['step']} in {result['seconds']:.0f}s; "
          f"{json.dumps(summary)}")
    return result


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None:
        raise app.UsageError("--workdir is required")
    try:
        run(_CONFIG.value, _WORKDIR.value, _STOP_AFTER.value)
    except ConfigError as e:
        raise app.UsageError(str(e)) from e


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
