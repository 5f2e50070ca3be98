"""The RL training loop: it only composes the registered stages of the pipeline.

    tasks -> rollout strategy -> rewards -> group filter -> advantages -> loss / optax update
          -> metrics -> held-out evaluation -> checkpoint

The trainer receives its parts built (`jaxtree.train.pipeline.build_pipeline`). One training
step:

  1. draw `rollout.groups_per_step` training tasks and let the rollout strategy play them
     (`jaxtree.rollout.strategies`); the reward terms (`jaxtree.rewards`) score the round and the
     group filter (`jaxtree.advantages.group_filters`) keeps whole groups; a filter with several
     rounds (DAPO dynamic sampling) draws fresh tasks until the batch holds `groups_per_step`
     kept groups or its rounds are spent;
  2. the advantage function (`jaxtree.advantages`) turns the batch and its rewards into per-token
     advantages;
  3. the frozen reference policy's log-probs (KL penalty, and the KL diagnostic; skipped when
     `loss.kl_coef` = 0; with LoRA the reference is the base, adapters off);
  4. `train.epochs` passes over the batch in `train.num_minibatches` shuffled minibatches, one
     optimizer step each (clipped surrogate, micro-batches grouped by length and accumulated,
     sharded over the mesh);
  5. metrics to JSONL / TensorBoard; held-out evaluation every `eval.every` steps; a checkpoint
     every `checkpoint.every` steps, at the end, and when SIGTERM arrives.

The step-0 evaluation of the starting parameters is read from `shared_evaluations` when another
run already evaluated the same parameters with the same settings (`jaxtree.train.shared_eval`:
the runs of a grid that share a warm start).

Everything random is derived from the step number (rollout keys `fold_in(key, step)`, minibatch
shuffles from (seed, step)) or checkpointed (the task sampler), so a resumed run reproduces the
uninterrupted one exactly.

With several processes (`jaxtree.parallel.distributed`) every process draws the step's tasks
from the same task stream, plays its contiguous share of the groups on its own devices with a
process-local copy of the parameters, and the shares are exchanged: every process then holds the
same step batch, so the group filter, advantages, metrics and minibatches are those of a single
process, and the update runs once over the global mesh. Stop requests are agreed on, so all
processes end at the same step; metrics, transcripts and trees are written by process 0.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from jaxtree import checkpoints, evaluation
from jaxtree.advantages import select_groups
from jaxtree.experiment import Experiment
from jaxtree.parallel import distributed
from jaxtree.policy import Policy
from jaxtree.rewards.base import Rewards, concatenate_rewards
from jaxtree.rollout.tree_record import first_tree_group, group_tree, write_tree
from jaxtree.rollout.trajectory import TrajectoryBatch, concatenate
from jaxtree.tasks import TaskSampler
from jaxtree.train.metrics import MetricsWriter
from jaxtree.train.pipeline import Pipeline
from jaxtree.train.shared_eval import SharedEvaluations
from jaxtree.train.shares import sample_round
from jaxtree.train.stop import StopRequest
from jaxtree.train.batch_update import BatchUpdate, SavedBatch, batch_path, logprob_gaps, \
    save_batch
from jaxtree.utils import report


class TrainingDiverged(RuntimeError):
    """Training cannot go on: every update of several consecutive steps was non-finite."""


def group_diversity(batch: TrajectoryBatch) -> dict[str, float]:
    """pass@1 (mean success), pass@group (groups with a success) and distinct final answers per
    group (LATR Table 4): the number of different actions the environment parsed in a group's
    single-turn episodes, or different final actions for multi-turn ones. When every group has
    the same size k, pass@group is also logged as pass@k; tree rollouts, whose groups vary, log
    the mean group size instead."""
    groups = np.unique(batch.group_ids)
    if not len(groups):
        return {"rollout/pass@1": 0.0, "rollout/pass@group": 0.0,
                "rollout/distinct_answers": 0.0, "rollout/group_size": 0.0}
    solved, distinct = [], []
    for g in groups:
        rows = np.flatnonzero(batch.group_ids == g)
        solved.append(bool(batch.success[rows].any()))
        distinct.append(len({str(batch.infos[i].get("action", "")) for i in rows}))
    sizes = [int((batch.group_ids == g).sum()) for g in groups]
    metrics = {"rollout/pass@1": float(batch.success.mean()),
               "rollout/pass@group": float(np.mean(solved)),
               "rollout/distinct_answers": float(np.mean(distinct))}
    if len(set(sizes)) == 1:
        metrics[f"rollout/pass@{sizes[0]}"] = metrics["rollout/pass@group"]
    else:
        metrics["rollout/group_size"] = float(np.mean(sizes))
    return metrics


class Trainer:
    """Runs the RL loop of `exp` with the parts of `pipeline` on `policy` (its params are the
    starting point and, frozen, the KL reference), writing into `workdir`."""

    def __init__(self, exp: Experiment, pipeline: Pipeline, workdir: str, policy: Policy,
                 metadata: dict[str, Any], shared_evaluations: SharedEvaluations | None = None):
        self.exp = exp
        # where the step-0 evaluation of the starting parameters may be another run's
        self.shared_evaluations = shared_evaluations
        self.pipeline = pipeline
        self.workdir = workdir
        self.policy = policy
        # a LoRA run's checkpoints name its base (jaxtree.checkpoints.check_lora_base)
        self.metadata = {**metadata, **policy.lora_metadata()}
        self.updater = pipeline.updater
        self.batch_update = BatchUpdate(self.updater, exp.train, policy.tokenizer.pad_id)
        # with LoRA the base itself; none is held when the KL term is off (never used)
        self.reference = (self.updater.reference_params(policy.params)
                          if exp.loss.kl_coef > 0 else None)
        self.checkpointer = checkpoints.TrainCheckpointer(workdir, exp.checkpoint.keep)

    # ------------------------------------------------------------------ rollout and rewards

    def rollout(self, params, step: int,
                sampler: TaskSampler) -> tuple[TrajectoryBatch, Rewards, dict]:
        """The step's batch of episodes after the group filter, its rewards, and metrics."""
        r = self.exp.rollout
        params = self._local(params)
        step_key = jax.random.fold_in(jax.random.key(self.exp.train.seed), step)
        sampled, rewards, kept, strategy_metrics = [], [], [], []
        groups = episodes = nodes = 0
        pipeline = self.pipeline
        for round_index in range(pipeline.filter.max_rounds):
            tasks = sampler.draw(r.groups_per_step)
            batch, metrics = sample_round(pipeline.strategy, params,
                                          jax.random.fold_in(step_key, round_index), tasks, step,
                                          self.policy.tokenizer.pad_id)
            batch = batch.renumbered(groups, episodes, nodes)
            groups += len(tasks)
            if len(batch):   # a round of trees whose every branch was dropped is empty
                episodes = int(batch.episode_ids.max()) + 1
                nodes = max(nodes, int(batch.node_ids.max()) + 1)
            round_rewards = pipeline.rewards(batch)
            keep = pipeline.filter.keep(batch, round_rewards)
            sampled.append(batch)
            rewards.append(round_rewards)
            kept.append(keep)
            strategy_metrics.append(metrics)
            kept_groups = np.unique(np.concatenate([b.group_ids[k] for b, k in zip(sampled, kept)]))
            if len(kept_groups) >= r.groups_per_step:
                break
        pad = self.policy.tokenizer.pad_id
        everything = concatenate(sampled, pad)
        all_rewards = concatenate_rewards(rewards)
        rows = select_groups(np.concatenate(kept), everything.group_ids, r.groups_per_step)
        batch, batch_rewards = everything.select(rows), all_rewards.select(rows)
        turns = max(int(everything.num_turns.sum()), 1)

        def mean(values) -> float:  # 0 over no episode: every tree of the step dropped them all
            return float(np.mean(values)) if len(values) else 0.0
        metrics = {
            **group_diversity(everything),
            **{k: float(np.mean([m[k] for m in strategy_metrics])) for k in strategy_metrics[0]},
            "rollout/success_rate": mean(everything.success),
            "rollout/reward_mean": mean(all_rewards.outcome),
            "rollout/turns": mean(everything.num_turns),
            "rollout/response_tokens": float(everything.response_lengths.sum()) / turns,
            "rollout/invalid_rate": float(everything.num_invalid.sum()) / turns,
            "rollout/truncated_rate": mean(everything.truncated),
            "rollout/episodes": len(everything),
            # groups left without a trajectory (a Best-n tree whose every branch was pruned)
            "rollout/empty_groups": groups - len(np.unique(everything.group_ids)),
            "rollout/sampling_rounds": len(sampled),
            "rollout/kept_groups": len(np.unique(batch.group_ids)) if len(batch) else 0,
        }
        if "verified" in everything.labels:  # when the experiment reads the verifier's verdict
            metrics["rollout/verified_rate"] = float(
                np.nansum(everything.labels["verified"])) / turns
        return batch, batch_rewards, metrics

    def _local(self, params):
        """The parameters rollouts and evaluations use: the train state's own with one process;
        with several, this process's copy (rollout calls are not lockstep across processes, so
        they cannot run on arrays that span other processes' devices)."""
        params = self.updater.sampling_params(params)  # with LoRA: the adapters merged
        if not distributed.is_multiprocess():
            return params
        return distributed.local_copy(self.updater.replicated_params(params))

    # ------------------------------------------------------------------ update

    def update(self, state, batch: TrajectoryBatch, advantages: np.ndarray, step: int):
        """`epochs` x `num_minibatches` optimizer steps on the batch; returns (state, metrics)."""
        inputs = self.batch_update.inputs(batch.tokens, batch.action_mask,
                                          batch.behaviour_logprobs, advantages, batch.group_ids)
        shared = self.batch_update.shares_prefixes(inputs)
        ref_logprobs = self.batch_update.reference_logprobs(self.reference, inputs, shared)
        gap = {}
        every = self.exp.train.agreement_every
        if every and (step - 1) % every == 0:  # the check costs a forward pass of the batch
            gap = logprob_gaps(self.batch_update.logprobs(
                self.updater.policy_params(state.params), inputs, shared),
                inputs.old_logprobs, inputs.action_mask)
        state, collected = self.batch_update.optimizer_steps(state, inputs, ref_logprobs, shared,
                                                             step)
        out = {f"train/{k}": float(np.mean([m[k] for m in collected])) for k in collected[0]}
        out.update({"update/unique_token_fraction": inputs.unique_fraction,
                    "update/prefix_shared": int(shared),
                    "update/forest_shapes": len(self.batch_update.forest.shapes),
                    **{f"update/{k}": v for k, v in gap.items()}})
        out["train/updates"] = len(collected)
        out["train/skipped"] = int(sum(int(m["skipped"]) for m in collected))
        out["train/grad_norm_max"] = float(max(m["grad_norm"] for m in collected))
        out["train/learning_rate"] = float(self.updater.schedule(int(state.step) - 1))
        if out["train/skipped"]:
            report(f"step {step}: {out['train/skipped']} of {len(collected)} update(s) skipped "
                   "(non-finite loss or gradient)")
        return state, out

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, params, step: int) -> dict[str, float]:
        """Held-out success and the evaluation metrics (config section `eval`); the evaluation's
        transcripts go to <workdir>/transcripts/step_<step>.{jsonl,txt}."""
        return self._record_evaluation(self.pipeline.evaluator(self._local(params)), step)

    def _record_evaluation(self, result: evaluation.EvalResult, step: int) -> dict[str, float]:
        # Every process holds every evaluated episode (each played a share); one writes them.
        if result.transcripts and distributed.is_first():
            evaluation.write_transcripts(f"{self.workdir}/transcripts", f"step_{step}",
                                         result.transcripts)
        return {f"eval/{key}": value for key, value in result.metrics.items()}

    def evaluation_settings(self) -> dict[str, Any]:
        """Everything besides the parameters that the held-out evaluation reads."""
        return {"model": self.policy.config.to_dict(), "env": self.exp.env.to_dict(),
                "engine": self.exp.rollout.engine().to_dict(), "eval": self.exp.eval.to_dict()}

    def initial_evaluation(self, params) -> dict[str, float]:
        """`evaluate(params, 0)`, read from `shared_evaluations` when a run starting from the
        same parameters with the same settings already evaluated them (one process only: the
        record is written by the process that evaluated)."""
        shared = self.shared_evaluations
        if shared is None or distributed.is_multiprocess():
            return self.evaluate(params, 0)
        params = self._local(params)
        settings = self.evaluation_settings()
        key = shared.key(params, settings)
        result = shared.load(key)
        if result is None:
            result = self.pipeline.evaluator(params)
            try:
                shared.save(key, result, settings)
            except OSError as e:  # a read-only warm start: the run goes on, later ones evaluate
                report(f"step 0: could not keep the evaluation for later runs ({e})")
        else:
            report(f"step 0: evaluation read from {shared.path(key)} (these parameters, "
                   "evaluated with these settings by an earlier run)")
        return self._record_evaluation(result, 0)

    # ------------------------------------------------------------------ the loop

    def resume(self, state, sampler: TaskSampler):
        """(state, rng, start step, trainer dict) from the newest checkpoint that restores (a
        damaged newer one is skipped, saying so), or the fresh state at step 0."""
        rng = jax.random.key(self.exp.train.seed)
        restored = self.checkpointer.restore_latest(state.params, state.opt_state, report=report,
                                                    lora=self.metadata.get("lora"))
        if restored is None:
            return state, rng, 0, {}
        step, params, opt_state, rng, trainer_state = restored
        optimizer_steps = distributed.put(jnp.asarray(trainer_state["optimizer_steps"], jnp.int32),
                                          self.updater.state_shardings.step)
        sampler.set_state(trainer_state["sampler"])
        report(f"resumed from {self.checkpointer.directory}/{step}")
        return type(state)(optimizer_steps, params, opt_state), rng, step, trainer_state

    def run(self, stop_after: int | None = None, stop: StopRequest | None = None) -> dict[str, Any]:
        """Trains to `train.steps` (resuming from the newest checkpoint in the workdir).

        A stop request (SIGTERM / SIGINT, `jaxtree.train.stop`; installed here when `stop` is
        None) or `stop_after` steps of this run end it after the current step with a checkpoint,
        as a preemption would (for jobs on time-limited queues, and for resume tests).
        `train.max_skipped_steps` consecutive steps without a finite update end it with
        TrainingDiverged (the last checkpoint holds the parameters before them).

        Returns {'step', 'preempted', 'final_eval', 'initial_eval'} for the caller's summary.
        """
        if stop is None:
            with StopRequest() as own:
                return self.run(stop_after, own)
        t = self.exp.train
        sampler = TaskSampler(t.seed)
        state, rng, start_step, trainer_state = self.resume(
            self.updater.init_state(self.policy.params), sampler)
        writer = MetricsWriter(self.workdir, start_step, t.tensorboard)
        initial_eval = trainer_state.get("initial_eval")
        final_eval, preempted, step, skipped_run = None, False, start_step, 0
        try:
            if start_step == 0:
                initial_eval = self.initial_evaluation(state.params)
                writer.write(0, initial_eval)
            bar = tqdm(range(start_step + 1, t.steps + 1), desc="train", unit="step",
                       initial=start_step, total=t.steps)
            for step in bar:
                state, metrics = self.train_step(state, step, sampler)
                if self.is_eval_step(step):
                    final_eval = self.evaluate(state.params, step)
                    metrics.update(final_eval)
                writer.write(step, metrics)
                bar.set_postfix(success=f"{metrics['rollout/success_rate']:.2f}",
                                kl=f"{metrics['train/kl']:.3f}")
                all_skipped = metrics.get("train/skipped") == metrics.get("train/updates")
                skipped_run = skipped_run + 1 if all_skipped else 0
                if skipped_run >= t.max_skipped_steps:
                    raise TrainingDiverged(
                        f"{skipped_run} consecutive steps (to step {step}) had no finite update "
                        "(NaN/inf loss or gradient), so the run stops; skipped updates leave the "
                        "parameters as they were: lower optim.learning_rate or check model.dtype")
                # agreed: a signal that reached one process stops them all at this step
                preempted = distributed.any_process(stop.requested) or (
                    stop_after is not None and step - start_step >= stop_after and step < t.steps)
                if step % self.exp.checkpoint.every == 0 or step == t.steps or preempted:
                    self._save(state, rng, sampler, step, initial_eval)
                if preempted:
                    break
        finally:
            writer.close()
            self.checkpointer.close()
        self.state = state
        return {"step": step, "preempted": preempted, "initial_eval": initial_eval,
                "final_eval": final_eval}

    def is_eval_step(self, step: int) -> bool:
        return step % self.exp.eval.every == 0 or step == self.exp.train.steps

    def train_step(self, state, step: int, sampler: TaskSampler):
        """Rollout, rewards, advantages and update of one step; returns (state, metrics)."""
        start = time.perf_counter()
        batch, rewards, metrics = self.rollout(state.params, step, sampler)
        rollout_seconds = time.perf_counter() - start
        # A tree rollout saves one group's tree at every evaluation step (launch.show_tree).
        group = first_tree_group(batch) if len(batch) else None
        if group is not None and self.is_eval_step(step) and distributed.is_first():
            write_tree(self.workdir, step, group_tree(batch, group))
        if len(batch) == 0:
            report(f"step {step}: every group was filtered out; no update")
            metrics.update({"train/skipped": 1, "train/kl": float("nan")})
        else:
            advantages = self.pipeline.advantage(batch, rewards)
            metrics.update(self.pipeline.advantage.metrics(batch, rewards))
            if step <= self.exp.train.save_batches and distributed.is_first():
                save_batch(batch_path(self.workdir, step), SavedBatch(
                    batch.tokens, batch.action_mask, batch.behaviour_logprobs, advantages,
                    batch.group_ids, self.exp.to_dict(), step))
            state, update_metrics = self.update(state, batch, advantages, step)
            metrics.update(update_metrics)
        metrics.update({"time/rollout": rollout_seconds,
                        "time/update": time.perf_counter() - start - rollout_seconds,
                        "time/step": time.perf_counter() - start})
        return state, metrics

    def _save(self, state, rng, sampler: TaskSampler, step: int, initial_eval) -> None:
        self.checkpointer.save(
            step, state.params, self.metadata, opt_state=state.opt_state, rng=rng,
            trainer={"step": step, "optimizer_steps": int(state.step), "sampler": sampler.state(),
                     "initial_eval": initial_eval})
