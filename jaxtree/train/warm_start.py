"""Supervised warm start on the environment's ε-noisy oracle demonstrations (`launch.sft`, and the
first stage of `launch.train` when `train.init = 'sft'`).

Builds `sft.num_episodes` demonstrations from training seeds, trains with masked cross-entropy on
the action tokens (AdamW, warm-up + cosine, `jaxtree.train.sft`), logs metrics to
<workdir>/sft_metrics.jsonl and saves an orbax checkpoint (params + metadata) under
<workdir>/checkpoints/<steps>. With `Policy.lora` (`model.lora.rank` > 0) it trains adapters over
the frozen policy and its checkpoints hold them and name the base (`jaxtree.checkpoints`); loading
the finished one gives base + adapters merged (`jaxtree.policy.load_policy`).

In a multi-process job every process trains the same warm start on its own first device (the
demonstrations and batches come from the seed; the model is small next to the RL run's), process
0 writes the log and the tokenizer files, and the checkpoint holds process 0's parameters, which
every process then loads: the RL run starts from one set of parameters even where two devices
would not compute bit-identical results.
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
from jaxtree.config import ConfigError, Section, between, non_negative, option, positive, require
from jaxtree.parallel import distributed
from jaxtree.policy import Policy, save_tokenizer_for
from jaxtree.rollout.demonstrations import demonstrate
from jaxtree.tasks import train_seeds
from jaxtree.train.metrics import keep_records_until
from jaxtree.models.lora import init_adapters
from jaxtree.models.token_scores import TrainingMemory
from jaxtree.train.sft import make_optimizer, pad_batch, sft_step
from jaxtree.train.stop import StopRequest
from jaxtree.utils import report


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
    checkpoint_every: int = option(
        0, "steps between resumable checkpoints (0: only when stopped and at the end); a long "
        "warm start of a real model then loses at most this many steps to a kill or a crash",
        check=non_negative())
    pad_multiple: int = option(
        64, "batches are right-padded to their longest demonstration rounded up to this many "
        "tokens (few shapes, little padding); 0 pads every batch to rollout.context_length: one "
        "shape, one compilation, which a real model's warm start wants (each new width "
        "recompiles its step)", check=non_negative())

    def check(self):
        require(self.warmup_steps <= self.steps, "warmup_steps",
                f"{self.warmup_steps} is not in [0, sft.steps={self.steps}]")


@dataclasses.dataclass
class WarmStartResult:
    path: str | None       # the finished checkpoint's directory (None when stopped early)
    finished: bool
    step: int              # the last optimizer step done


def finished_checkpoint(workdir: str) -> str | None:
    """The directory of the finished warm start in `workdir`, or None. Only the last save holds
    no optimizer state (an interrupted one does, to resume), so a finished warm start stays
    the one used when a resumed job's config changes `sft.steps` (--allow_config_change)."""
    root = os.path.join(os.path.abspath(workdir), checkpoints.CHECKPOINTS)
    finished = [step for step in checkpoints.complete_steps(workdir)
                if not os.path.isdir(os.path.join(root, str(step), "opt_state"))]
    return os.path.join(root, str(finished[-1])) if finished else None


def warm_start(settings: WarmStartConfig, policy: Policy, make_env: Callable[[], TextEnv],
               context_length: int, workdir: str, metadata: dict[str, Any],
               stop: StopRequest | None = None,
               memory: TrainingMemory = TrainingMemory()) -> WarmStartResult:
    """Trains `policy` on demonstrations of at most `context_length` tokens and checkpoints it
    into `workdir` (metadata added to the checkpoint's); `memory` trades compute for activation
    memory (`jaxtree.models.token_scores`).

    Resumable: a finished warm start in `workdir` is returned as it is; an interrupted one (a
    stop request, SIGTERM / SIGINT, saved params + optimizer state + the batch sampler's state)
    goes on from its step and ends exactly where an uninterrupted run would.
    """
    if stop is None:
        with StopRequest() as own:
            return warm_start(settings, policy, make_env, context_length, workdir, metadata, own,
                              memory)
    done = finished_checkpoint(workdir)
    if done is not None:
        return WarmStartResult(done, True, int(os.path.basename(done)))
    s = settings
    rng = np.random.default_rng(s.seed)
    start = time.perf_counter()
    env = make_env()
    demos = [demonstrate(env, policy.tokenizer, seed, s.epsilon, rng, context_length)
             for seed in train_seeds(rng, s.num_episodes)]
    demo_success = float(np.mean([d.success for d in demos]))
    action_tokens = sum(int(np.sum(d.loss_mask)) for d in demos)
    if action_tokens == 0:
        raise ConfigError("rollout.context_length", f"{context_length}: no demonstration keeps "
                          "an action token within it (the prompts are longer)")
    logging.info("%d demonstrations in %.1fs, success %.1f%%", len(demos),
                 time.perf_counter() - start, 100 * demo_success)

    optimizer = make_optimizer(s.learning_rate, s.warmup_steps, s.steps, s.weight_decay,
                               s.max_grad_norm)
    lora = policy.lora
    # with LoRA the step trains adapters; the base is a frozen input, never donated
    base, scale = (None, 1.0) if lora is None else (policy.params, lora.scale)
    params = policy.params if lora is None else init_adapters(lora, base)
    opt_state = optimizer.init(params)
    os.makedirs(workdir, exist_ok=True)
    saver = checkpoints.TrainCheckpointer(workdir, max_to_keep=1)
    metadata = {**metadata, "source": policy.source, "demonstration_success": demo_success}
    model_metadata = {"model": policy.config.to_dict(),
                      "tokenizer": distributed.on_first(lambda: save_tokenizer_for(policy,
                                                                                   workdir)),
                      **policy.lora_metadata()}
    # process 0 writes the log; the others write theirs to nowhere
    log_path = os.path.join(workdir, "sft_metrics.jsonl") if distributed.is_first() else os.devnull
    first = 1
    restored = saver.restore_latest(params, opt_state, report=report,
                                    lora=model_metadata.get("lora"))
    if restored is not None:
        first_done, params, opt_state, _, state = restored
        rng.bit_generator.state = state["batch_rng"]
        first = first_done + 1
        report(f"sft: resumed from {saver.directory}/{first_done}")
    if distributed.is_first():
        keep_records_until(log_path, first - 1)
    step, record = first - 1, {}
    try:
        with open(log_path, "a") as log:
            for step in tqdm(range(first, s.steps + 1), desc="sft", unit="step",
                             initial=first - 1, total=s.steps):
                batch = rng.integers(0, len(demos), size=s.batch_size)
                tokens, mask = pad_batch([demos[i].tokens for i in batch],
                                         [demos[i].loss_mask for i in batch],
                                         policy.tokenizer.pad_id,
                                         s.pad_multiple or context_length)
                params, opt_state, metrics = sft_step(policy.config, optimizer, params, opt_state,
                                                      tokens, mask, memory, base, scale)
                if step % s.log_every == 0 or step == s.steps:
                    record = {"step": step,
                              **{k: float(v) for k, v in jax.device_get(metrics).items()}}
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    logging.info("sft step %d: %s", step, record)
                if step == s.steps:
                    break
                # agreed: a signal that reached one process stops them all at this step
                stopping = distributed.any_process(stop.requested)
                if stopping or (s.checkpoint_every and step % s.checkpoint_every == 0):
                    saver.save(step, params, {**model_metadata, **metadata, "finished": False},
                               opt_state=opt_state,
                               trainer={"step": step, "batch_rng": rng.bit_generator.state})
                if stopping:
                    report(f"sft: stopped at step {step} of {s.steps}; checkpoint "
                           f"{saver.directory}/{step} (the same command resumes)")
                    return WarmStartResult(None, False, step)
        saver.save(s.steps, params, {**model_metadata, **metadata, "finished": True})
    finally:
        saver.close()
    path = finished_checkpoint(workdir)
    loss = f", final loss {record['loss']:.4f}" if "loss" in record else ""
    print(f"sft: {len(demos)} demonstrations (success {demo_success:.1%}), {s.steps} steps"
          f"{loss}, {time.perf_counter() - start:.0f}s -> {path}")
    return WarmStartResult(path, True, s.steps)
