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
from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment
from jaxtree.parallel import distributed
from jaxtree.policy import Policy, save_tokenizer_for
from jaxtree.rollout.conversation import check_prompts_fit
from jaxtree.scorers.prm_training import LOG_FILE, METRICS_FILE, PRM_DIR, PrmTrainConfig, fit_prm
from jaxtree.tasks import eval_seeds
from jaxtree.train import shared_eval
from jaxtree.train import workdir as workdir_lib
from jaxtree.train.stop import StopRequest
from jaxtree.train.pipeline import build_pipeline, check_experiment
from jaxtree.train.trainer import Trainer
from jaxtree.train.sft import make_optimizer
from jaxtree.train.warm_start import finished_checkpoint, warm_start
from jaxtree.utils import report

# What each job writes into its workdir (all of it removed by `overwrite`, nothing else).
SFT_OUTPUTS = ("checkpoints", "sft_metrics.jsonl", shared_eval.DIRECTORY,
               workdir_lib.CONFIG_FILE)
# The outputs that show a job has started its work: until one exists, a job that fails leaves no
# config record (a config that fails at its first use must not refuse the corrected command).
SFT_WORK = ("checkpoints", "sft_metrics.jsonl")
TRAIN_WORK = ("checkpoints", "metrics.jsonl", "batches", "transcripts", "train_summary.json",
              *(os.path.join("sft", name) for name in SFT_WORK))
# The fields a warm start depends on (jaxtree.compare shares warm starts by the same ones): a
# warm-start workdir's config.json records these alone.
WARM_START_SECTIONS = ("env", "model", "sft")
WARM_START_ROLLOUT_FIELDS = ("context_length",)
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


def warm_start_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config (or of its defaults) that determines its warm start."""
    rollout = config.get("rollout", {})
    return {**{name: config[name] for name in WARM_START_SECTIONS if name in config},
            "rollout": {k: rollout[k] for k in WARM_START_ROLLOUT_FIELDS if k in rollout}}


def _trained_with(workdir: str) -> dict[str, Any] | None:
    """The warm-start fields of the config the newest checkpoint in `workdir` was trained with
    (its metadata records the job's config), or None when there is none or it does not read as
    an experiment (a checkpoint of an older jaxtree)."""
    if not checkpoints.complete_steps(workdir):
        return None
    try:
        config = checkpoints.read_policy_metadata(workdir)["config"]
        return warm_start_fields(Experiment.from_config(config).to_dict())
    except (ConfigError, KeyError, TypeError, ValueError):
        return None


def record_warm_start(workdir: str, exp: Experiment, allow_change: bool = False,
                      change_flag: str | None = None) -> None:
    """Records in <workdir>/config.json the warm-start fields of `exp`, refusing (WorkdirError,
    naming the fields) a workdir whose warm start was trained with other ones unless
    `allow_change`. A workdir without a record whose checkpoints were written by a job (the
    warm start of a training job, before warm starts had records) is first given the record of
    the config its checkpoints name: a record always describes the files beside it."""
    fields = warm_start_fields(exp.to_dict())
    if workdir_lib.read_config(workdir) is None:
        trained = _trained_with(workdir)
        if trained is not None:
            workdir_lib.record_config(workdir, trained)
    workdir_lib.record_config(workdir, fields, allow_change,
                              defaults=warm_start_fields(exp.defaults()),
                              change_flag=change_flag, project=warm_start_fields)


@contextlib.contextmanager
def _tentative_record(workdir: str, work: tuple[str, ...], existed: bool):
    """A config record this job wrote (`existed`: whether config.json was there before) is
    removed again when the job fails before any of its `work` outputs exists, so the corrected
    command is not refused for a config that never produced anything."""
    try:
        yield
    except BaseException:
        path = os.path.join(workdir, workdir_lib.CONFIG_FILE)
        if (not existed and distributed.is_first()
                and not any(_has_output(os.path.join(workdir, name)) for name in work)):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        raise


def _has_output(path: str) -> bool:
    """A file, or a directory holding anything (opening a workdir's checkpoints creates their
    empty directory before any work)."""
    if os.path.isdir(path) and not os.path.islink(path):
        return bool(os.listdir(path))
    return os.path.lexists(path)


def _has_record(workdir: str) -> bool:
    return os.path.exists(os.path.join(workdir, workdir_lib.CONFIG_FILE))


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
        with _tentative_record(workdir, SFT_WORK, _has_record(workdir)):
            record_warm_start(workdir, exp)
            done = finished_checkpoint(workdir)
            if done is not None:
                print(f"sft: {workdir} already holds this warm start: {done} (--overwrite "
                      "trains anew)")
                return done
            result = warm_start(exp.sft, exp.model.load(training=True), exp.env.factory(),
                                exp.rollout.context_length, workdir,
                                {"job": "sft", "config": config.to_dict()}, stop,
                                exp.model.training_memory())
            workdir_lib.check_unchanged(workdir)
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
    recorded = _has_record(workdir) and not overwrite

    def setup() -> None:
        if overwrite:
            _overwrite(workdir, TRAIN_OUTPUTS)
        workdir_lib.record_config(workdir, exp.to_dict(), allow_config_change,
                                  defaults=exp.defaults())

    with _holding(workdir, "launch.train", setup), StopRequest() as stop, \
            _tentative_record(workdir, TRAIN_WORK, recorded):
        existing = checkpoints.TrainCheckpointer(workdir)
        done = existing.latest_step()
        existing.close()
        if done is not None and done >= exp.train.steps:
            print(f"train: {workdir} already finished at step {done}; nothing to do "
                  "(--overwrite starts over)")
            return None
        start = time.perf_counter()
        policy = initial_policy(exp, config.to_dict(), workdir, stop, allow_config_change)
        if policy is None:
            print("train: stopped during the warm start; checkpoint saved, the same command "
                  "resumes")
            return None
        metadata = {"job": "train", "model": policy.config.to_dict(),
                    "tokenizer": distributed.on_first(lambda: save_tokenizer_for(policy, workdir)),
                    "source": policy.source,
                    "config": config.to_dict()}
        # runs from one warm start (a grid's, linked as their `sft`) evaluate it once
        shared = (shared_eval.SharedEvaluations(os.path.join(workdir, "sft", shared_eval.DIRECTORY))
                  if exp.train.init == "sft" else None)
        result = Trainer(exp, build_pipeline(exp, policy), workdir, policy, metadata,
                         shared).run(stop_after, stop)
        result["seconds"] = time.perf_counter() - start
        workdir_lib.check_unchanged(workdir)  # the last save may have recreated a deleted one
        write_summary(workdir, result)
    return result


def initial_policy(exp: Experiment, config_dict: dict[str, Any], workdir: str,
                   stop: StopRequest, allow_config_change: bool = False) -> Policy | None:
    """The policy training starts from, running (or resuming) the warm start into <workdir>/sft
    first if the config says so; None when a stop request ended the warm start early.

    <workdir>/sft is a warm-start workdir like launch.sft's: while the warm start trains there
    it holds its own lock (a launch.sft on it is refused) and its config record (the fields of
    this warm start: launch.sft there with another one is refused). A finished one is only
    read, so runs that share one (jaxtree.compare's links) load it side by side."""
    if exp.train.init == "model":
        return exp.model.load(training=True)
    sft_dir = os.path.join(workdir, "sft")
    train = lambda: warm_start(  # noqa: E731
        exp.sft, exp.model.load(training=True), exp.env.factory(), exp.rollout.context_length,
        sft_dir, {"job": "sft", "config": config_dict}, stop, exp.model.training_memory())
    if finished_checkpoint(sft_dir) is not None:
        result = train()
    else:
        sft_dir = workdir_lib.prepare(sft_dir)
        recorded = _has_record(sft_dir)
        with _holding(sft_dir, "launch.train (its warm start)", lambda: record_warm_start(
                sft_dir, exp, allow_config_change, "--allow_config_change")), \
                _tentative_record(sft_dir, SFT_WORK, recorded):
            result = train()
    workdir_lib.check_unchanged(workdir)
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
