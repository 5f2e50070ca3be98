"""The jobs behind `launch.sft`, `launch.train` and `launch.train_prm`, callable without flags.

Both make their workdir safe to re-run, kill, resume and share by mistake
(`jaxtree.train.workdir`): everything that can be checked is checked before any work, one job
holds the workdir at a time, `config.json` records the config the outputs belong to (another one
is refused unless the caller allows it or overwrites), a finished job is left exactly as it is,
and SIGTERM / SIGINT save a checkpoint and return (`jaxtree.train.stop`).

In a multi-process job (`jaxtree.parallel.distributed`) every process runs the job; process 0
alone holds the workdir lock and writes its bookkeeping files (config record, overwrite,
tokenizer files, summary), and its refusal stops the others with the same message.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any, Callable

from jaxtree import checkpoints
from jaxtree.experiment import Experiment
from jaxtree.parallel import distributed
from jaxtree.policy import Policy, save_tokenizer_for
from jaxtree.rollout.conversation import check_prompts_fit
from jaxtree.scorers.prm_training import LOG_FILE, METRICS_FILE, PRM_DIR, PrmTrainConfig, fit_prm
from jaxtree.tasks import eval_seeds
from jaxtree.train import workdir as workdir_lib
from jaxtree.train.stop import StopRequest
from jaxtree.train.pipeline import build_pipeline, check_experiment
from jaxtree.train.trainer import Trainer
from jaxtree.train.sft import make_optimizer
from jaxtree.train.warm_start import finished_checkpoint, warm_start
from jaxtree.utils import report

# What each job writes into its workdir (all of it removed by `overwrite`, nothing else).
SFT_OUTPUTS = ("checkpoints", "sft_metrics.jsonl", workdir_lib.CONFIG_FILE)
TRAIN_OUTPUTS = ("checkpoints", "sft", "batches", "metrics.jsonl", "tensorboard",
                 "train_summary.json", "transcripts", "plots", workdir_lib.CONFIG_FILE,
                 "config_changes.jsonl")
PRM_OUTPUTS = (PRM_DIR, METRICS_FILE, LOG_FILE, workdir_lib.CONFIG_FILE)
# Held-out tasks whose first prompts are checked to leave room for an action.
PROMPT_CHECK_TASKS = 4


def check_prompts(exp: Experiment) -> None:
    """The first prompts leave room for an action (the model's tokenizer only: no parameters
    are loaded)."""
    check_prompts_fit(exp.env.factory(), exp.model.tokenizer(), exp.rollout.context_length,
                      exp.rollout.max_action_tokens, eval_seeds(PROMPT_CHECK_TASKS))


def _overwrite(workdir: str, outputs) -> None:
    removed = workdir_lib.remove_outputs(workdir, outputs)
    report(f"--overwrite: removed {', '.join(removed) or 'nothing'} from {workdir}")


@contextlib.contextmanager
def _holding(workdir: str, job: str, setup: Callable[[], None]):
    """The workdir held for `job`, `setup()` (overwrite, config record) done once with the lock
    held: by the only process, or by process 0 while the others wait for its outcome (a
    refusal, WorkdirError, is raised on every process). The lock is released on exit."""
    lock = workdir_lib.WorkdirLock(workdir, job)

    def take() -> None:
        lock.__enter__()
        try:
            setup()
        except BaseException:
            lock.__exit__(None, None, None)
            raise

    distributed.on_first(take)
    try:
        yield
    finally:
        lock.__exit__(None, None, None)  # a no-op where it was not taken


def sft_job(config, workdir: str, overwrite: bool = False) -> str | None:
    """`launch.sft`: the finished warm start's checkpoint directory, or None when a signal
    stopped it early (the same call resumes). A workdir holding this config's finished warm
    start is left as it is; another config's is refused unless `overwrite`."""
    exp = Experiment.from_config(config)
    check_prompts(exp)
    workdir = workdir_lib.prepare(workdir)
    with workdir_lib.WorkdirLock(workdir, "launch.sft"), StopRequest() as stop:
        if overwrite:
            _overwrite(workdir, SFT_OUTPUTS)
        workdir_lib.record_config(workdir, exp.to_dict(), defaults=exp.defaults())
        done = finished_checkpoint(workdir)
        if done is not None:
            print(f"sft: {workdir} already holds this warm start: {done} (--overwrite trains "
                  "anew)")
            return done
        result = warm_start(exp.sft, exp.model.load(training=True), exp.env.factory(),
                            exp.rollout.context_length, workdir,
                            {"job": "sft", "config": config.to_dict()}, stop,
                            exp.model.training_memory())
    return result.path


def train_job(config, workdir: str, stop_after: int | None = None,
              allow_config_change: bool = False, overwrite: bool = False) -> dict | None:
    """`launch.train`: the trainer's result ({'step', 'preempted', 'initial_eval', 'final_eval',
    'seconds'}), or None when there was nothing to do (a finished run) or a signal stopped the
    warm start. Resumes whatever the workdir holds."""
    exp = Experiment.from_config(config)
    check_experiment(exp)
    check_prompts(exp)
    workdir = workdir_lib.prepare(workdir)

    def setup() -> None:
        if overwrite:
            _overwrite(workdir, TRAIN_OUTPUTS)
        workdir_lib.record_config(workdir, exp.to_dict(), allow_config_change,
                                  defaults=exp.defaults())

    with _holding(workdir, "launch.train", setup), StopRequest() as stop:
        existing = checkpoints.TrainCheckpointer(workdir)
        done = existing.latest_step()
        existing.close()
        if done is not None and done >= exp.train.steps:
            print(f"train: {workdir} already finished at step {done}; nothing to do "
                  "(--overwrite starts over)")
            return None
        start = time.perf_counter()
        policy = initial_policy(exp, config.to_dict(), workdir, stop)
        if policy is None:
            print("train: stopped during the warm start; checkpoint saved, the same command "
                  "resumes")
            return None
        metadata = {"job": "train", "model": policy.config.to_dict(),
                    "tokenizer": distributed.on_first(lambda: save_tokenizer_for(policy, workdir)),
                    "source": policy.source,
                    "config": config.to_dict()}
        result = Trainer(exp, build_pipeline(exp, policy), workdir, policy,
                         metadata).run(stop_after, stop)
        result["seconds"] = time.perf_counter() - start
        write_summary(workdir, result)
    return result


def initial_policy(exp: Experiment, config_dict: dict[str, Any], workdir: str,
                   stop: StopRequest) -> Policy | None:
    """The policy training starts from, running (or resuming) the warm start into <workdir>/sft
    first if the config says so; None when a stop request ended the warm start early."""
    if exp.train.init == "model":
        return exp.model.load(training=True)
    result = warm_start(exp.sft, exp.model.load(training=True), exp.env.factory(),
                        exp.rollout.context_length,
                        os.path.join(workdir, "sft"), {"job": "sft", "config": config_dict}, stop,
                        exp.model.training_memory())
    return exp.model.load(result.path, training=True) if result.finished else None


def write_summary(workdir: str, result: dict) -> None:
    """<workdir>/train_summary.json (replaced whole, never half-written) and the closing line."""
    summary = {k: result[k] for k in ("step", "preempted", "seconds")}
    for name in ("initial_eval", "final_eval"):
        if result[name]:
            summary[name] = {k: result[name][k] for k in ("eval/success_rate", "eval/pass@1")
                             if k in result[name]}
    if distributed.is_first():
        path = os.path.join(workdir, "train_summary.json")
        with open(path + ".tmp", "w") as f:
            json.dump(summary, f, indent=2)
        os.replace(path + ".tmp", path)
    status = "stopped early: checkpoint saved" if result["preempted"] else "done"
    print(f"train: {status} at step {result['step']} in {result['seconds']:.0f}s; "
          f"{json.dumps(summary)}")


def _format(metrics: dict[str, Any]) -> str:
    auc = "n/a" if metrics["auc"] is None else f"{metrics['auc']:.3f}"
    return f"BCE {metrics['bce']:.4f}, accuracy {metrics['accuracy']:.3f}, AUC {auc}"


def read_prm_config(config) -> tuple[Experiment, PrmTrainConfig]:
    """(the experiment sections, the `prm` section) of a train_prm config; ConfigError naming
    the first invalid field."""
    values = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    settings = PrmTrainConfig.from_config(values.pop("prm", None), "prm")
    return Experiment.from_config(values), settings


def train_prm_job(config, workdir: str, overwrite: bool = False) -> dict[str, Any]:
    """`launch.train_prm`: the metrics of the PRM in <workdir>/prm. A workdir holding this
    config's finished PRM is left as it is; another config's is refused unless `overwrite`."""
    exp, settings = read_prm_config(config)
    workdir = workdir_lib.prepare(workdir)
    with workdir_lib.WorkdirLock(workdir, "launch.train_prm"):
        if overwrite:
            removed = workdir_lib.remove_outputs(workdir, PRM_OUTPUTS)
            report(f"--overwrite: removed {', '.join(removed) or 'nothing'} from {workdir}")
        workdir_lib.record_config(workdir, {**exp.to_dict(), "prm": settings.to_dict()},
                                  defaults={**exp.defaults(), "prm": type(settings).defaults()})
        done = os.path.join(workdir, METRICS_FILE)
        if os.path.exists(done) and os.path.isdir(os.path.join(workdir, PRM_DIR)):
            with open(done) as f:
                results = json.load(f)
            print(f"train_prm: {workdir} already holds this PRM (--overwrite trains anew)")
        else:
            optimizer = make_optimizer(settings.learning_rate, settings.warmup_steps,
                                       settings.steps, settings.weight_decay,
                                       settings.max_grad_norm)
            results = fit_prm(settings, exp.model.load(training=True), exp.env.factory(), workdir,
                              optimizer)
    print(f"train_prm: '{settings.labels}' labels, {settings.steps} steps, "
          f"{results['seconds']:.0f}s -> {os.path.join(workdir, PRM_DIR)}")
    print(f"  train:    {_format(results['train'])}")
    heuristic = results["heldout"]["heuristic_auc"]
    print(f"  held-out: {_format(results['heldout'])} (environment heuristic AUC "
          f"{'n/a' if heuristic is None else f'{heuristic:.3f}'})")
    return results
