"""The RL training loop: rollout -> rewards -> advantages -> update -> metrics -> eval -> checkpoint.

One training step:

  1. draw `groups_per_step` training tasks and roll out `group_size` episodes of each (the slot
     engine, independent sampling); with DAPO dynamic sampling, groups whose rewards are all equal
     are dropped and further rounds of fresh tasks refill the batch (at most
     `max_sampling_rounds`); with instance filtering only the top `keep_fraction` groups by reward
     std are kept;
  2. advantages per episode (GRPO, Dr.GRPO, RLOO) or per turn (GRPO + step reward), placed on the
     episode's action tokens;
  3. the frozen reference policy's log-probs (KL penalty, and the KL diagnostic);
  4. `epochs` passes over the batch in `num_minibatches` shuffled minibatches, one optimizer step
     each (clipped surrogate, micro-batch accumulation, sharded over the mesh);
  5. metrics to JSONL / TensorBoard; held-out evaluation every `eval_every` steps; a checkpoint
     every `save_every` steps, at the end, and when SIGTERM arrives.

Everything random is derived from the step number (rollout keys `fold_in(key, step)`, minibatch
shuffles from (seed, step)) or checkpointed (the task sampler), so a resumed run reproduces the
uninterrupted one exactly.
"""

from __future__ import annotations

import signal
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from tqdm import tqdm

from environments.base import TextEnv
from jaxtree import advantages as adv
from jaxtree import evaluation, losses
from jaxtree.policy import Policy
from jaxtree.rollout.engine import RolloutConfig, SlotEngine
from jaxtree.rollout.independent import sample_independent
from jaxtree.rollout.latr_rollout import eta_at, num_tree_slots, sample_latr
from jaxtree.rollout.trajectory import TrajectoryBatch, concatenate
from jaxtree.sampling.latr import LatrConfig
from jaxtree.tasks import TaskSampler, eval_seeds
from jaxtree.train import checkpoints
from jaxtree.train import mesh as mesh_lib
from jaxtree.train.metrics import MetricsWriter
from jaxtree.train.update import (UpdateConfig, Updater, make_optimizer, make_schedule)

WIDTH_MULTIPLE = 64  # token widths are padded to a multiple of this: few distinct shapes


def group_diversity(batch: TrajectoryBatch) -> dict[str, float]:
    """pass@1 (mean success), pass@k (groups with a success) and distinct final answers per group
    (LATR Table 4): the number of different actions the environment parsed in a group's
    single-turn episodes, or different final actions for multi-turn ones."""
    groups = np.unique(batch.group_ids)
    solved, distinct = [], []
    for g in groups:
        rows = np.flatnonzero(batch.group_ids == g)
        solved.append(bool(batch.success[rows].any()))
        distinct.append(len({str(batch.infos[i].get("action", "")) for i in rows}))
    sizes = [int((batch.group_ids == g).sum()) for g in groups]
    return {"rollout/pass@1": float(batch.success.mean()),
            f"rollout/pass@{max(sizes)}": float(np.mean(solved)),
            "rollout/distinct_answers": float(np.mean(distinct))}


class Trainer:
    """Runs `config.train` on `policy` (its params are the starting point and, frozen, the KL
    reference). `rollout` and `eval_rollout` configure the slot engines."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str, policy: Policy,
                 make_env: Callable[[], TextEnv], rollout: RolloutConfig,
                 eval_rollout: RolloutConfig, metadata: dict[str, Any]):
        self.config = config
        self.t = config.train
        self.workdir = workdir
        self.policy = policy
        self.metadata = metadata
        t = self.t
        self.schedule = make_schedule(t.learning_rate, warmup_steps=t.warmup_steps,
                                      total_steps=t.steps * t.epochs * t.num_minibatches,
                                      schedule=t.lr_schedule)
        optimizer = make_optimizer(self.schedule, weight_decay=t.weight_decay,
                                   max_grad_norm=t.max_grad_norm, b1=t.adam_b1, b2=t.adam_b2)
        mesh = mesh_lib.make_mesh(t.mesh.data, t.mesh.fsdp, t.mesh.tensor)
        self.updater = Updater(policy.config, optimizer, UpdateConfig(
            eps_low=t.eps_low, eps_high=t.eps_high, kl_coef=t.kl_coef,
            entropy_coef=t.entropy_coef, micro_batch_size=t.micro_batch_size), mesh,
            policy.params)
        self.reference = self.updater.place_params(policy.params)
        self.engine = SlotEngine(policy.config, policy.tokenizer, make_env, rollout)
        self.eval_engine = SlotEngine(policy.config, policy.tokenizer, make_env, eval_rollout)
        self.make_env = make_env
        self.norm_constant = t.norm_constant or float(
            rollout.max_action_tokens * (rollout.max_turns or make_env().max_steps))
        self.checkpointer = checkpoints.TrainCheckpointer(workdir, t.keep_checkpoints)
        self.rollout_config = rollout
        if t.strategy == "latr":
            lc = config.latr
            self.latr = LatrConfig(k=t.group_size, tau_abs=lc.tau_abs, tau_rel=lc.tau_rel,
                                   tau_ed=lc.tau_ed, windows=tuple(lc.windows),
                                   completion=lc.completion)
        self._stop_requested = False

    # ------------------------------------------------------------------ rollout and advantages

    def rollout(self, params, step: int, sampler: TaskSampler) -> tuple[TrajectoryBatch, dict]:
        """The step's batch of episodes (after filtering) and rollout metrics."""
        t = self.t
        step_key = jax.random.fold_in(jax.random.key(t.seed), step)
        rounds = t.max_sampling_rounds if t.filter == "dynamic_sampling" else 1
        kept, all_batches, group_offset = [], [], 0
        for round_index in range(rounds):
            tasks = sampler.draw(t.groups_per_step)
            batch, tree_stats = self._sample(params, jax.random.fold_in(step_key, round_index),
                                             tasks, step)
            batch.group_ids += group_offset
            batch.episode_ids += group_offset * t.group_size
            group_offset += len(tasks)
            all_batches.append(batch)
            if t.filter == "dynamic_sampling":
                batch = batch.select(np.flatnonzero(adv.dynamic_sampling_keep(
                    batch.outcome_reward, batch.group_ids)))
            kept.append(batch)
            if len(np.unique(np.concatenate([b.group_ids for b in kept]))) >= t.groups_per_step:
                break
        pad = self.policy.tokenizer.pad_id
        sampled = concatenate(all_batches, pad)
        batch = concatenate(kept, pad)
        if t.filter == "dynamic_sampling":
            keep = np.ones(len(batch), bool)
            batch = batch.select(adv.select_groups(keep, batch.group_ids, t.groups_per_step))
        elif t.filter == "top_std":
            batch = batch.select(np.flatnonzero(adv.top_std_groups_keep(
                batch.outcome_reward, batch.group_ids, t.keep_fraction)))
        turns = max(int(sampled.num_turns.sum()), 1)
        metrics = {
            **group_diversity(sampled),
            **tree_stats,
            "rollout/success_rate": float(sampled.success.mean()),
            "rollout/reward_mean": float(sampled.outcome_reward.mean()),
            "rollout/turns": float(sampled.num_turns.mean()),
            "rollout/response_tokens": float(sampled.response_lengths.sum()) / turns,
            "rollout/invalid_rate": float(sampled.num_invalid.sum()) / turns,
            "rollout/truncated_rate": float(sampled.truncated.mean()),
            "rollout/episodes": len(sampled),
            "rollout/sampling_rounds": len(all_batches),
            "rollout/kept_groups": len(np.unique(batch.group_ids)) if len(batch) else 0,
        }
        return batch, metrics

    def _sample(self, params, rng, tasks, step: int) -> tuple[TrajectoryBatch, dict]:
        """One round of `group_size` rollouts per task with the configured strategy."""
        t = self.t
        if t.strategy == "independent":
            return sample_independent(self.engine, params, rng, tasks, t.group_size), {}
        lc = self.config.latr
        tree_slots = num_tree_slots(eta_at(step - 1, lc.eta0, lc.gamma,
                                           tuple(tuple(p) for p in lc.eta_schedule)),
                                    t.group_size)
        return sample_latr(self.policy.config, self.policy.tokenizer, self.make_env, params, rng,
                           tasks, self.latr, tree_slots, self.rollout_config.sampling,
                           self.rollout_config.max_action_tokens)

    def token_advantages(self, batch: TrajectoryBatch) -> np.ndarray:
        """float32[N, T] advantages on the action tokens of `batch`."""
        t = self.t
        _, groups = np.unique(batch.group_ids, return_inverse=True)
        num_groups = int(groups.max()) + 1
        groups = jnp.asarray(groups, jnp.int32)
        rewards = jnp.asarray(batch.outcome_reward)
        mask = jnp.asarray(batch.action_mask)
        if t.advantage in ("grpo", "drgrpo"):
            a = adv.grpo_advantages(rewards, groups, num_groups, epsilon=t.adv_epsilon,
                                    normalize_std=t.advantage == "grpo")
            out = adv.sequence_to_tokens(a, mask)
        elif t.advantage == "rloo":
            out = adv.sequence_to_tokens(adv.rloo_advantages(rewards, groups, num_groups), mask)
        else:  # step_reward: RTMC's "GRPO + step reward" baseline
            turns = np.arange(batch.turn_valid.shape[1])[None, :] < batch.num_turns[:, None]
            step_rewards = np.where(batch.turn_valid, t.step_reward_valid,
                                    -t.step_reward_invalid) * turns
            a = adv.step_reward_advantages(rewards, jnp.asarray(step_rewards, jnp.float32),
                                           jnp.asarray(batch.num_turns), groups, num_groups,
                                           gamma=t.gamma, epsilon=t.adv_epsilon)
            out = adv.turns_to_tokens(a, jnp.asarray(batch.turn_index), mask)
        return np.asarray(out, np.float32)

    # ------------------------------------------------------------------ update

    def _minibatch_rows(self, real: int) -> int:
        """Rows of every minibatch: the largest shuffled chunk rounded up to the updater's row
        multiple (a fixed shape for the whole run when the batch size is fixed)."""
        chunk = -(-real // self.t.num_minibatches)
        return -(-chunk // self.updater.row_multiple) * self.updater.row_multiple

    def _padded(self, batch: TrajectoryBatch, advantages: np.ndarray,
                extra_rows: int) -> dict[str, np.ndarray]:
        """The batch's token arrays plus `extra_rows` empty rows (no action token, so no loss)
        and the width rounded up to WIDTH_MULTIPLE."""
        width = -(-batch.tokens.shape[1] // WIDTH_MULTIPLE) * WIDTH_MULTIPLE
        def pad(x, fill):
            return np.pad(x, ((0, extra_rows), (0, width - x.shape[1])), constant_values=fill)
        return {"tokens": pad(batch.tokens, self.policy.tokenizer.pad_id),
                "action_mask": pad(batch.action_mask, False),
                "old_logprobs": pad(batch.behaviour_logprobs, 0.0),
                "advantages": pad(advantages, 0.0)}

    def update(self, state, batch: TrajectoryBatch, advantages: np.ndarray, step: int):
        """`epochs` x `num_minibatches` optimizer steps on the batch; returns (state, metrics)."""
        t = self.t
        real = len(batch)
        rows = self._minibatch_rows(real)
        # enough empty rows to pad any chunk, and a row count the reference pass can split
        total = -(-(real + rows) // self.updater.row_multiple) * self.updater.row_multiple
        arrays = self._padded(batch, advantages, total - real)
        arrays["ref_logprobs"] = np.asarray(self.updater.logprobs(self.reference,
                                                                  arrays["tokens"]))
        rng = np.random.default_rng([t.seed, step])
        collected = []
        for _ in range(t.epochs):
            for chunk in np.array_split(rng.permutation(real), t.num_minibatches):
                index = np.concatenate([chunk, np.arange(real, real + rows - len(chunk))])
                mb = {k: v[index] for k, v in arrays.items()}
                mb["weights"] = np.asarray(losses.aggregation_weights(
                    jnp.asarray(mb["action_mask"]), t.loss_aggregation, self.norm_constant))
                state, metrics = self.updater.step(state, mb)
                collected.append(jax.device_get(metrics))
        out = {f"train/{k}": float(np.mean([m[k] for m in collected])) for k in collected[0]}
        out["train/skipped"] = int(sum(int(m["skipped"]) for m in collected))
        out["train/grad_norm_max"] = float(max(m["grad_norm"] for m in collected))
        out["train/learning_rate"] = float(self.schedule(int(state.step) - 1))
        if out["train/skipped"]:
            logging.warning("step %d: %d update(s) skipped (non-finite loss or gradient)",
                            step, out["train/skipped"])
        return state, out

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, params) -> dict[str, float]:
        """Held-out success and the evaluation metrics on `eval_num_tasks` tasks."""
        t, k = self.t, self.t.eval_samples_per_task
        batch = sample_independent(self.eval_engine, params,
                                   jax.random.key(self.config.eval.seed),
                                   eval_seeds(t.eval_num_tasks), k)
        result = evaluation.metrics(evaluation.summaries_from_batch(batch), k)
        return {f"eval/{key}": value for key, value in result.items()}

    # ------------------------------------------------------------------ the loop

    def _on_sigterm(self, signum, frame):
        logging.warning("SIGTERM: saving a checkpoint after the current step, then exiting")
        self._stop_requested = True

    def run(self, stop_after: int | None = None) -> dict[str, Any]:
        """Trains to `train.steps` (resuming from the newest checkpoint in the workdir).

        `stop_after` ends this run after that many steps with a checkpoint, as a preemption
        would (for jobs on time-limited queues, and for resume tests).

        Returns {'step', 'preempted', 'final_eval', 'initial_eval'} for the caller's summary.
        """
        t = self.t
        sampler = TaskSampler(t.seed)
        state = self.updater.init_state(self.policy.params)
        rng = jax.random.key(t.seed)
        start_step, trainer_state = 0, {}
        latest = self.checkpointer.latest_step()
        if latest is not None:
            params, opt_state, rng, trainer_state = self.checkpointer.restore(
                latest, state.params, state.opt_state)
            optimizer_steps = jax.device_put(jnp.asarray(trainer_state["optimizer_steps"],
                                                         jnp.int32),
                                             self.updater.state_shardings.step)
            state = type(state)(optimizer_steps, params, opt_state)
            sampler.set_state(trainer_state["sampler"])
            start_step = latest
            logging.info("resumed from %s/checkpoints/%d", self.workdir, latest)
        writer = MetricsWriter(self.workdir, start_step, t.tensorboard)
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        initial_eval = trainer_state.get("initial_eval")
        final_eval, preempted, step = None, False, start_step
        try:
            if start_step == 0:
                initial_eval = self.evaluate(state.params)
                writer.write(0, initial_eval)
            bar = tqdm(range(start_step + 1, t.steps + 1), desc="train", unit="step",
                       initial=start_step, total=t.steps)
            for step in bar:
                state, metrics = self.train_step(state, step, sampler)
                if step % t.eval_every == 0 or step == t.steps:
                    final_eval = self.evaluate(state.params)
                    metrics.update(final_eval)
                writer.write(step, metrics)
                bar.set_postfix(success=f"{metrics['rollout/success_rate']:.2f}",
                                kl=f"{metrics['train/kl']:.3f}")
                preempted = self._stop_requested or (
                    stop_after is not None and step - start_step >= stop_after and step < t.steps)
                if step % t.save_every == 0 or step == t.steps or preempted:
                    self._save(state, rng, sampler, step, initial_eval)
                if preempted:
                    break
        finally:
            signal.signal(signal.SIGTERM, previous)
            writer.close()
            self.checkpointer.close()
        self.state = state
        return {"step": step, "preempted": preempted, "initial_eval": initial_eval,
                "final_eval": final_eval}

    def train_step(self, state, step: int, sampler: TaskSampler):
        """Rollout, advantages and update of one step; returns (state, metrics)."""
        start = time.perf_counter()
        batch, metrics = self.rollout(state.params, step, sampler)
        rollout_seconds = time.perf_counter() - start
        if len(batch) == 0:
            logging.warning("step %d: every group was filtered out; no update", step)
            metrics.update({"train/skipped": 1, "train/kl": float("nan")})
        else:
            advantages = self.token_advantages(batch)
            state, update_metrics = self.update(state, batch, advantages, step)
            metrics.update(update_metrics)
        metrics.update({"time/rollout": rollout_seconds,
                        "time/update": time.perf_counter() - start - rollout_seconds,
                        "time/step": time.perf_counter() - start})
        if self.t.strategy == "independent":
            metrics["rollout/host_share"] = self.engine.stats.host_share
        return state, metrics

    def _save(self, state, rng, sampler: TaskSampler, step: int, initial_eval) -> None:
        self.checkpointer.save(
            step, state.params, state.opt_state, rng,
            {"step": step, "optimizer_steps": int(state.step), "sampler": sampler.state(),
             "initial_eval": initial_eval},
            self.metadata)
