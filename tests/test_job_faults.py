"""Jobs never lose or mix results: faults injected into `launch.sft` and `launch.train` (signals,
kills, unfinished saves, damaged checkpoints, torn logs, concurrent and repeated runs, changed
configs) leave every workdir consistent, and each error ends the job with one line: exit status
2 for a user error, 1 for a fault."""

import json
import os
import shutil
import signal
import time

import chex
import jax
import numpy as np
import pytest

from jaxtree import checkpoints
from jaxtree.experiment import Experiment, set_path, sibling_config
from jaxtree.policy import load_policy
from jaxtree.train.metrics import read_jsonl, read_metrics
from jaxtree.train.warm_start import finished_checkpoint
from jaxtree.train import workdir as workdir_lib
from jaxtree.train.workdir import WorkdirError, WorkdirLock
from toy_run import (CONFIG_FILE, ROOT, TOY, TOY_SFT, assert_one_line_error, flags,
                     one_layer_policy, run_module_jobs, start_job, toy_config)

SFT_CONFIG = os.path.join(ROOT, "configs", "frozen_lake_sft.py")


_assert_one_line_error = assert_one_line_error


def _sft_config(steps, model=TOY["model.name"]):
    config = sibling_config(CONFIG_FILE, "frozen_lake_sft")
    for key, value in {**TOY, **TOY_SFT, "sft.steps": steps, "model.name": model}.items():
        set_path(config, key, value)
    return config


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The policy the jobs of this file start from (`model.name`), except where a test is about
    the tiny preset itself: the tiny preset with one decoder block (`one_layer_policy`)."""
    return one_layer_policy(str(tmp_path_factory.mktemp("model")))


def _files(workdir):
    """{relative path: bytes} of every file under `workdir` but the lock."""
    out = {}
    for root, _, names in os.walk(workdir):
        for name in names:
            path = os.path.join(root, name)
            if name != ".lock":
                with open(path, "rb") as f:
                    out[os.path.relpath(path, workdir)] = f.read()
    return out


def _damage(step_dir):
    """Truncates every data file of a checkpoint's parameters, as a disk-full or a copy cut
    short would."""
    for root, _, names in os.walk(os.path.join(step_dir, "params")):
        for name in names:
            path = os.path.join(root, name)
            if os.path.basename(root) == "d" and os.path.getsize(path) > 64:
                with open(path, "r+b") as f:
                    f.truncate(16)


# ----------------------------------------------------------------------------- warm start

SFT_STEPS = 12  # long enough for Ctrl-C to land in the middle of the warm start


@pytest.fixture(scope="module")
def finished_sft(tmp_path_factory, model):
    """An uninterrupted `launch.sft` warm start of SFT_STEPS steps (its workdir), shared."""
    from jaxtree.train import jobs
    workdir = str(tmp_path_factory.mktemp("finished_sft") / "sft")
    jobs.sft_job(_sft_config(SFT_STEPS, model), workdir)
    return workdir


def test_rerunning_sft_keeps_its_result_refuses_another_config_and_overwrite_replaces(
        tmp_path, finished_sft, model):
    """Item 1: a rerun of the same warm start leaves it as it is; another config is refused
    (naming the changed field) unless --overwrite, which replaces checkpoint, log and
    config.json together, so the printed path and the files always agree."""
    from jaxtree.train import jobs
    workdir = str(tmp_path / "sft")
    shutil.copytree(finished_sft, workdir)
    first = os.path.join(workdir, "checkpoints", str(SFT_STEPS))
    before = _files(workdir)
    assert jobs.sft_job(_sft_config(SFT_STEPS, model), workdir) == first
    assert _files(workdir) == before

    with pytest.raises(WorkdirError, match=rf"sft\.steps: {SFT_STEPS} -> 2.*--overwrite"):
        jobs.sft_job(_sft_config(2, model), workdir)
    assert _files(workdir) == before

    second = jobs.sft_job(_sft_config(2, model), workdir, overwrite=True)
    assert second.endswith(os.path.join("checkpoints", "2")) and os.path.isdir(second)
    assert checkpoints.complete_steps(workdir) == [2]
    assert [r["step"] for r in read_jsonl(os.path.join(workdir, "sft_metrics.jsonl"))] == [1, 2]
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["sft"]["steps"] == 2
    chex.assert_trees_all_equal(load_policy(workdir).params, load_policy(second).params)


def test_a_crashed_warm_start_resumes_from_its_periodic_checkpoint_exactly(
        tmp_path, monkeypatch, finished_sft, model):
    """`sft.checkpoint_every`: a warm start that dies without a chance to save (here the step
    function raises at step 7) keeps its last periodic checkpoint (step 4, resumable, not a
    finished warm start); the same command resumes from it and ends exactly as an uninterrupted
    warm start, log included."""
    from jaxtree.train import jobs, warm_start
    config = _sft_config(SFT_STEPS, model)
    config.sft.checkpoint_every = 4
    workdir = str(tmp_path / "sft")
    real_step, calls = warm_start.sft_step, []

    def dies_at_step_7(*args, **kwargs):
        calls.append(None)
        if len(calls) == 7:
            raise RuntimeError("simulated crash")
        return real_step(*args, **kwargs)

    monkeypatch.setattr(warm_start, "sft_step", dies_at_step_7)
    with pytest.raises(RuntimeError, match="simulated crash"):
        jobs.sft_job(config, workdir)
    assert checkpoints.TrainCheckpointer(workdir).resumable_steps() == [4]
    assert finished_checkpoint(workdir) is None

    monkeypatch.setattr(warm_start, "sft_step", real_step)
    path = jobs.sft_job(config, workdir)
    assert path.endswith(os.path.join("checkpoints", str(SFT_STEPS)))
    chex.assert_trees_all_equal(load_policy(path).params,
                                load_policy(finished_checkpoint(finished_sft)).params)
    assert (read_jsonl(os.path.join(workdir, "sft_metrics.jsonl"))
            == read_jsonl(os.path.join(finished_sft, "sft_metrics.jsonl")))


class _FirstBatch(Exception):
    """Raised by a stand-in SFT step with the batch's token shape."""


@pytest.mark.parametrize("pad_multiple", [64, 0])
def test_the_warm_start_pads_its_batches_as_sft_pad_multiple_says(tmp_path, monkeypatch, model,
                                                                     pad_multiple):
    """`sft.pad_multiple`: 64 pads a batch to its longest demonstration rounded up to 64 tokens;
    0 pads every batch to rollout.context_length (one shape, one compilation)."""
    from jaxtree.train import jobs, warm_start
    config = _sft_config(2, model)
    config.sft.pad_multiple = pad_multiple
    context = config.rollout.context_length = 512  # well above the toy demonstrations' length

    def first_batch(config, optimizer, params, opt_state, tokens, mask, *rest):
        raise _FirstBatch(*tokens.shape)

    monkeypatch.setattr(warm_start, "sft_step", first_batch)
    with pytest.raises(_FirstBatch) as caught:
        jobs.sft_job(config, str(tmp_path / "sft"))
    batch, width = caught.value.args
    assert batch == config.sft.batch_size
    if pad_multiple:
        assert width % pad_multiple == 0 and width < context, (width, context)
    else:
        assert width == context


def test_training_jobs_keep_float32_weights_under_bfloat16_computation(tmp_path, monkeypatch):
    """`model.param_dtype` '': a job that trains (here the warm start) stores the parameters in
    float32 while computing in the requested bfloat16 (AdamW's updates at a real model's
    learning rates are below bfloat16's resolution of the weights); a job that only samples
    stores them in the computation dtype."""
    from jaxtree.train import jobs, warm_start
    config = _sft_config(2)
    config.model.dtype = "bfloat16"

    def first_batch(model_config, optimizer, params, opt_state, tokens, mask, *rest):
        raise _FirstBatch(model_config.dtype, model_config.param_dtype,
                          {str(x.dtype) for x in jax.tree_util.tree_leaves(params)})

    monkeypatch.setattr(warm_start, "sft_step", first_batch)
    with pytest.raises(_FirstBatch) as caught:
        jobs.sft_job(config, str(tmp_path / "sft"))
    assert caught.value.args == ("bfloat16", "float32", {"float32"})

    sampling = Experiment.from_config(config).model.load()
    assert sampling.config.param_dtype == "bfloat16"
    assert {str(x.dtype) for x in jax.tree_util.tree_leaves(sampling.params)} == {"bfloat16"}
    config.model.param_dtype = "bfloat16"  # asked for: pure bfloat16 training
    assert Experiment.from_config(config).model.load(training=True).config.param_dtype == \
        "bfloat16"


def _signal_when(proc, signum, ready, what):
    """Sends `signum` to `proc` once `ready()` holds; returns (stdout, stderr) after it exits."""
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not ready():
        time.sleep(0.1)
    assert proc.poll() is None, (what, proc.communicate()[1][-3000:])
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, (what, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    return stdout, stderr


@pytest.mark.slow
def test_ctrl_c_in_the_warm_start_and_sigterm_in_the_rl_loop_save_and_resume_exactly(
        tmp_path, finished_sft, model):
    """Item 8: Ctrl-C during the warm start of `launch.train` saves a resumable checkpoint and
    exits 0 without a traceback; the same command resumes the warm start, which ends exactly as
    an uninterrupted one (the `launch.sft` job of the same settings), and SIGTERM in the RL loop
    then saves a training checkpoint and exits 0. Item 3: an unfinished save (what a kill -9
    during it leaves behind) does not count as a warm start and is cleaned up."""
    workdir = tmp_path / "run"
    sft_dir = workdir / "sft"
    unfinished = sft_dir / "checkpoints" / f"{SFT_STEPS}.orbax-checkpoint-tmp-1700000000"
    os.makedirs(unfinished / "params")
    (unfinished / "params" / "manifest.ocdbt").write_bytes(b"\0" * 10)
    log, metrics = sft_dir / "sft_metrics.jsonl", workdir / "metrics.jsonl"
    argv = ("-m", "launch.train", f"--config={CONFIG_FILE}", f"--workdir={workdir}",
            *flags({**TOY, **TOY_SFT, "sft.steps": SFT_STEPS, "model.name": model}),
            "--config.train.steps=1000")

    stdout, _ = _signal_when(start_job(*argv), signal.SIGINT,
                             lambda: log.exists() and len(read_jsonl(str(log))) >= 3,
                             "the warm start")
    assert "stopped during the warm start" in stdout
    assert not unfinished.exists()
    (saved,) = checkpoints.TrainCheckpointer(str(sft_dir)).resumable_steps()
    assert 3 <= saved < SFT_STEPS and finished_checkpoint(str(sft_dir)) is None
    assert [r["step"] for r in read_jsonl(str(log))] == list(range(1, saved + 1))

    stdout, _ = _signal_when(
        start_job(*argv), signal.SIGTERM,
        lambda: metrics.exists() and any(r["step"] >= 1 for r in read_jsonl(str(metrics))),
        "the RL loop")
    assert "stopped early: checkpoint saved" in stdout
    step = checkpoints.TrainCheckpointer(str(workdir)).latest_step()
    assert step is not None and 1 <= step < 1000
    assert checkpoints.load_policy_checkpoint(str(workdir))[3]["job"] == "train"
    # the step-0 evaluation of the warm start is kept beside it for runs that share it
    (record,) = os.listdir(sft_dir / "initial_evals")
    with open(sft_dir / "initial_evals" / record) as f:
        kept = json.load(f)["metrics"]
    assert {f"eval/{k}": v for k, v in kept.items()} == {
        k: v for k, v in read_jsonl(str(metrics))[0].items() if k.startswith("eval/")}

    resumed = finished_checkpoint(str(sft_dir))
    assert resumed.endswith(os.path.join("checkpoints", str(SFT_STEPS)))
    chex.assert_trees_all_equal(load_policy(resumed).params,
                                load_policy(finished_checkpoint(finished_sft)).params)
    assert read_jsonl(str(log)) == read_jsonl(os.path.join(finished_sft, "sft_metrics.jsonl"))


# ----------------------------------------------------------------------------- RL runs

@pytest.mark.slow
def test_train_resumes_past_damage_and_leaves_finished_or_other_config_runs_alone(
        tmp_path, capfd, model):
    """Items 4-7 on one run: a damaged newest checkpoint is skipped (saying which and why) for
    the newest one that restores; a torn last line of metrics.jsonl is dropped (by the plots
    and by the resumed run); a finished run
    rerun changes no file; another config is refused with a one-line diff unless
    --allow_config_change (recorded); evaluating a damaged checkpoint names the bad tensor."""
    from jaxtree.train import jobs
    workdir = str(tmp_path / "run")
    def config(steps):  # the toy experiment from `model`
        return toy_config(steps, model__name=model)

    assert jobs.train_job(config(3), workdir, stop_after=2)["step"] == 2
    root = os.path.join(workdir, "checkpoints")
    assert checkpoints.complete_steps(workdir) == [1, 2]
    _damage(os.path.join(root, "2"))
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        f.write('{"step": 3, "rollout/succ')  # the process died mid-write
    from jaxtree.train.plots import plot
    assert os.path.basename(plot(workdir)[-1]) == "curves.png"  # the torn line is dropped
    capfd.readouterr()

    assert jobs.train_job(config(3), workdir)["step"] == 3
    err = capfd.readouterr().err
    assert f"skipping checkpoint {root}/2 is incomplete or corrupt" in err
    assert f"resumed from {root}/1" in err
    assert [r["step"] for r in read_metrics(workdir)] == [0, 1, 2, 3]

    finished = _files(workdir)
    assert jobs.train_job(config(3), workdir) is None
    assert _files(workdir) == finished

    # a run recorded by an older jaxtree, before a field existed: that field at its default is
    # no change, set otherwise it is one
    config_path = os.path.join(workdir, "config.json")
    with open(config_path) as f:
        recorded = json.load(f)
    del recorded["model"]["remat"]
    with open(config_path, "w") as f:
        json.dump(recorded, f)
    assert jobs.train_job(config(3), workdir) is None
    assert _files(workdir) == finished
    assert workdir_lib.config_diff(recorded, {**recorded, "model": {**recorded["model"],
                                                                    "remat": True}},
                                   Experiment.defaults()) == ["model.remat: '(absent)' -> True"]

    assert jobs.train_job(config(4), workdir, allow_config_change=True)["step"] == 4
    with open(os.path.join(workdir, "config_changes.jsonl")) as f:
        assert json.loads(f.readline())["changes"] == ["train.steps: 3 -> 4"]

    # the two jobs run together (forked from one process that imported their libraries once):
    # another config without --allow_config_change, and an evaluation of a damaged checkpoint
    _damage(os.path.join(root, "4"))
    before = _files(workdir)
    changed, evaluated = run_module_jobs(
        ("-m", "launch.train", f"--config={CONFIG_FILE}", f"--workdir={workdir}",
         *flags({**TOY, "model.name": model}), "--config.train.steps=3",
         "--config.optim.learning_rate=0.2",
         "--config.rollout.group_size=4", "--config.advantage.grpo.epsilon=0.001"),
        ("-m", "launch.evaluate", f"--config={CONFIG_FILE}", f"--checkpoint={workdir}",
         *flags({**TOY, "model.name": model})))
    # a part's setting is part of the record like any field
    _assert_one_line_error(changed, 2, "advantage.grpo.epsilon: 1e-06 -> 0.001",
                           "optim.learning_rate: 0.001 -> 0.2", "rollout.group_size: 2 -> 4",
                           "--allow_config_change")
    assert _files(workdir) == before
    _assert_one_line_error(evaluated, 1, f"checkpoint {root}/4 is incomplete or corrupt",
                           "params")


# ----------------------------------------------------------------------------- one-line errors

@pytest.fixture(scope="module")
def launch_errors(tmp_path_factory, model):
    """The jobs that end at launch, run together (forked from one process that imported their
    libraries once) while another process holds the workdir of the `busy` one: {case: finished
    job}, with `holder` (that process, killed with SIGKILL once the jobs ended), `busy_workdir`
    (what was in it then) and `tmp` (the directory of the cases' paths)."""
    tmp = tmp_path_factory.mktemp("launch_errors")
    a_file = tmp / "a_file"
    a_file.write_text("")
    busy = tmp / "run"
    busy.mkdir()
    fake_devices = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "") +
                        " --xla_force_host_platform_device_count=2")
    train = ["-m", "launch.train", f"--config={CONFIG_FILE}", f"--workdir={tmp / 'w'}"]
    cases = {
        "float16": (train + ["--config.model.dtype=float16"], None),
        "moved": (train + ["--config.train.kl_coef=0.1"], None),
        "context": (train + ["--config.rollout.context_length=40"], None),
        "mesh": (train + ["--config.mesh.fsdp=3"], None),
        "micro_batch": (train + ["--config.train.micro_batch_size=3"], fake_devices),
        "config_file": (["-m", "launch.train", "--config=configs/nothing.py",
                         f"--workdir={tmp}"], None),
        "under_a_file": (["-m", "launch.sft", f"--config={SFT_CONFIG}",
                          f"--workdir={a_file / 'sft'}"], None),
        "diverged": (train[:-1] + [f"--workdir={tmp / 'nan'}",
                                   *flags({**TOY, "model.name": model}),
                                   "--config.train.steps=6", "--config.optim.learning_rate=1e30",
                                   "--config.train.max_skipped_steps=2"], None),
        # the README's relative --config, run from outside the repository
        "busy": (["-m", "launch.train", "--config=configs/frozen_lake_grpo.py",
                  f"--workdir={busy}", *flags(TOY)], None, tmp),
    }
    holder = start_job("-c", "import sys, time\nfrom jaxtree.train.workdir import WorkdirLock\n"
                       "lock = WorkdirLock(sys.argv[1], 'holder').__enter__()\n"
                       "print('locked', flush=True)\ntime.sleep(600)", str(busy))
    try:
        assert holder.stdout.readline().strip() == "locked"
        results = dict(zip(cases, run_module_jobs(*cases.values())))
        busy_workdir = os.listdir(busy)
    finally:
        holder.kill()
        holder.wait()
    return dict(results, holder=holder, busy_workdir=busy_workdir, tmp=tmp)


def test_a_busy_workdir_is_refused_and_a_killed_holder_leaves_no_stale_lock(launch_errors):
    """Item 2: a second job on a workdir in use is refused naming the holder's pid (here with
    the README's relative --config, run from outside the repository); once the holder is
    killed with SIGKILL the workdir is free again."""
    holder = launch_errors["holder"]
    _assert_one_line_error(launch_errors["busy"], 2, f"pid {holder.pid} on", "(holder, since",
                           "in use")
    assert launch_errors["busy_workdir"] == [".lock"]
    assert holder.returncode == -signal.SIGKILL
    with WorkdirLock(str(launch_errors["tmp"] / "run"), "test"):
        pass


def test_user_errors_and_faults_at_launch_are_one_line(launch_errors):
    """Bad fields and values, and every check that can run before any work, end the job in one
    line with status 2; a run whose updates stay non-finite stops with status 1 (the jobs run
    together, forked from one process)."""
    tmp = launch_errors["tmp"]
    expected = {
        "float16": (2, ["config.model.dtype: 'float16' is not one of ('', 'float32', "
                        "'bfloat16')"]),
        "moved": (2, ["config.train.kl_coef moved to config.loss.kl_coef"]),
        "context": (2, ["config.rollout.context_length: 40 is too short", "81 tokens"]),
        "mesh": (2, ["config.mesh:", "devices"]),
        "micro_batch": (2, ["config.train.micro_batch_size: 3 is not a multiple", "= 2"]),
        "config_file": (2, ["--config=configs/nothing.py: no such config file"]),
        "under_a_file": (2, [f"workdir {tmp / 'a_file' / 'sft'} is not usable"]),
        "diverged": (1, ["2 consecutive steps (to step 3) had no finite update",
                         "optim.learning_rate"]),
    }
    for name, (status, fragments) in expected.items():
        _assert_one_line_error(launch_errors[name], status, *fragments)
    # the workdir was checked before any demonstration was built
    under_a_file = launch_errors["under_a_file"]
    assert "demonstrations" not in under_a_file.stdout + under_a_file.stderr
    records = read_metrics(str(tmp / "nan"))
    assert [r["train/skipped"] == r["train/updates"] for r in records[1:]] == [False, True, True]
    # the parameters of the last checkpoint are finite: the skipped updates never reached them
    params = checkpoints.load_policy_checkpoint(str(tmp / "nan"))[1]
    assert all(np.isfinite(x).all() for x in jax.tree_util.tree_leaves(params))
