"""Issue 43: faults and user errors a new user met. No run record is overwritten or made false
(warm-start workdirs inside a training workdir, configs that fail at their first use, a workdir
deleted under a running job, a kill before the first checkpoint), and every user error ends in
one line (exit status 2; a fault such as a full disk: 1), no traceback. Most checks call the
jobs and their parts in this process; the few that are about the exit status and the one line
run as launch jobs forked from one preloaded process (toy_run.run_module_jobs)."""

import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from jaxtree import checkpoints
from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment, set_path
from jaxtree.train import jobs
from jaxtree.train import workdir as workdir_lib
from jaxtree.train.metrics import MetricsWriter, read_jsonl, read_metrics
from jaxtree.train.workdir import WorkdirError, WorkdirLock, WorkdirVanished
from toy_run import CONFIG_FILE, ROOT, assert_one_line_error, run_module_jobs, start_job, \
    toy_config, wait_jobs

INVALID_UTF8 = b"caf\xff".decode("utf-8", "surrogateescape")  # how Python reads such argv bytes


# ----------------------------------------------------------------------------- one-line errors

@pytest.fixture(scope="module")
def launch_errors(tmp_path_factory):
    """{name: CompletedProcess} of launch jobs that must each stop in one line (items 7-10, 13),
    run together as forks of one process that imported the libraries once."""
    tmp = tmp_path_factory.mktemp("launch_errors")
    for name, body in (("as_dict", "return {'env': {'name': 'frozen_lake'}}"),
                       ("as_int", "return 3")):
        (tmp / f"{name}.py").write_text(f"def get_config():\n    {body}\n")
    copied = tmp / "copied" / "frozen_lake_grpo.py"  # a shipped config copied to edit it
    copied.parent.mkdir()
    shutil.copy(CONFIG_FILE, copied)
    workdir = str(tmp / "run")
    train = ("-m", "launch.train", "--config=configs/frozen_lake_grpo.py", f"--workdir={workdir}",
             "--config.train.init=model")
    jobs_by_name = {
        "env_option_type": (*train, "--config.env.options.size=abc"),
        "config_dict": ("-m", "launch.train", f"--config={tmp / 'as_dict.py'}",
                        f"--workdir={workdir}"),
        "config_int": ("-m", "launch.train", f"--config={tmp / 'as_int.py'}",
                       f"--workdir={workdir}", "--config.train.steps=2"),
        # loads (it finds the config it extends among the shipped ones): the error is the field's
        "config_copied": ("-m", "launch.train", f"--config={copied}", f"--workdir={workdir}",
                          "--config.rollout.group_size=1"),
        "sample_prompt": ("-m", "launch.sample", "--model=tiny", f"--prompt={INVALID_UTF8}"),
        "judge_url": (*train, "--config.rollout.strategy=patr", "--config.rollout.patr.scorer=judge",
                      "--config.rollout.patr.judge.backend=http",
                      f"--config.rollout.patr.judge.url=http://{INVALID_UTF8}/v1"),
        "stop_after": (*train, "--stop_after=-1"),
        "quoted_value": (*train, "--config.sft.steps=abc"),
    }
    # launch.compare as a user starts it: without the tests' JAX_PLATFORMS=cpu, JAX looks for
    # a TPU first and logs that it found none
    user_env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    compare = start_job("-m", "launch.compare", "--grid=configs/grids/frozen_lake_algorithms.py",
                        f"--out={tmp / 'grid'}", "--dry_run", env=user_env)
    results = run_module_jobs(*jobs_by_name.values())
    return {**dict(zip(jobs_by_name, results)), "compare": wait_jobs(compare)[0]}


def test_environment_options_are_checked_at_launch_naming_the_option(launch_errors):
    """Item 7: `--config.env.options.size=abc` is refused in one line naming the field and the
    option's type (it was a 24-line TypeError from ConfigDict's type check)."""
    assert_one_line_error(launch_errors["env_option_type"], 2, "env.options", "size='abc'",
                          "int")


def test_a_config_file_that_gives_no_config_is_refused_in_one_line(launch_errors):
    """Item 8: get_config() returning a dict or an int is refused naming the file; a shipped
    config copied to another folder finds the config it extends (its error here is the bad
    field the command sets, so it loaded)."""
    assert_one_line_error(launch_errors["config_dict"], 2, "as_dict.py", "dict",
                          "ConfigDict")
    assert_one_line_error(launch_errors["config_int"], 2, "as_int.py", "int", "ConfigDict")
    assert_one_line_error(launch_errors["config_copied"], 2, "rollout.group_size")


def test_a_missing_sibling_config_is_named_with_where_it_was_looked_for(tmp_path):
    """Item 8: a config extending one that exists nowhere says which and where."""
    from jaxtree.experiment import sibling_config
    with pytest.raises(FileNotFoundError, match="'nope', which is neither beside it"):
        sibling_config(str(tmp_path / "mine.py"), "nope")
    shutil.copy(CONFIG_FILE, tmp_path / "mine.py")
    assert sibling_config(str(tmp_path / "mine.py"), "frozen_lake_sft").env.name == "frozen_lake"


def test_text_that_is_not_utf8_is_refused_at_launch(launch_errors):
    """Item 9: an invalid UTF-8 byte in `launch.sample --prompt` and in the judge's URL stops the
    job at launch, naming the flag (the URL used to fail after a whole warm start); a config
    built in Python is refused naming the field."""
    assert_one_line_error(launch_errors["sample_prompt"], 2, "--prompt", "UTF-8", "ff")
    assert_one_line_error(launch_errors["judge_url"], 2, "rollout.patr.judge.url", "UTF-8")
    config = toy_config()
    with config.unlocked():
        set_path(config, "rollout.patr.judge.url", f"http://{INVALID_UTF8}/v1")
    with pytest.raises(ConfigError, match=r"rollout\.patr\.judge\.url.*not valid UTF-8"):
        Experiment.from_config(config)


def test_flag_values_are_checked_and_messages_keep_their_quotes(launch_errors):
    """Item 10: `--stop_after=-1` is refused (it used to run a whole warm start, then act like
    1); a message quoting the value keeps its closing quote."""
    assert_one_line_error(launch_errors["stop_after"], 2, "--stop_after=-1")
    assert_one_line_error(launch_errors["quoted_value"], 2, "config.sft.steps")
    assert launch_errors["quoted_value"].stderr.strip().endswith("'abc'")


def test_compare_prints_no_backend_noise(launch_errors):
    """Item 13: `launch.compare` no longer prints absl's "Unable to initialize backend 'tpu'"
    (the launch jobs' log level applies to it too)."""
    result = launch_errors["compare"]
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Unable to initialize backend" not in result.stderr + result.stdout


# ----------------------------------------------------------------------------- run records

def test_warm_start_inside_a_training_workdir_has_its_own_lock_and_record(tmp_path, monkeypatch):
    """Item 2: while a training job trains its warm start in <workdir>/sft, `launch.sft` on that
    directory is refused as busy; afterwards it holds the record of the warm start it trained,
    so `launch.sft` there with another `sft.epsilon` is refused naming the field (and offering
    only the flags launch.sft has, item 10) instead of claiming the new value."""
    workdir = str(tmp_path / "run")
    sft_dir = os.path.join(workdir, "sft")
    other = toy_config(train__init="sft", sft__epsilon=0.5)
    seen = {}

    class Stop(Exception):
        pass

    def training_warm_start(settings, policy, make_env, context, directory, *rest):
        with pytest.raises(WorkdirError, match="in use by"):
            jobs.sft_job(other, sft_dir)
        os.makedirs(os.path.join(directory, checkpoints.CHECKPOINTS, "1"), exist_ok=True)  # work
        seen["record"] = workdir_lib.read_config(directory)
        raise Stop

    monkeypatch.setattr(jobs, "warm_start", training_warm_start)
    with pytest.raises(Stop):
        jobs.train_job(toy_config(train__init="sft"), workdir)
    assert seen["record"]["sft"]["epsilon"] == 0.2
    with pytest.raises(WorkdirError, match=r"sft\.epsilon: 0\.2 -> 0\.5") as refused:
        jobs.sft_job(other, sft_dir)
    assert "--allow_config_change" not in str(refused.value)
    assert "--overwrite" in str(refused.value)
    assert workdir_lib.read_config(sft_dir)["sft"]["epsilon"] == 0.2


def test_a_config_that_fails_at_its_first_use_leaves_no_record(tmp_path, monkeypatch):
    """Item 3: `sft.steps=1, sft.warmup_steps=0` builds its optimizer (it was optax's
    decay_steps=0 error), and a job that fails before any output leaves no config.json, so the
    corrected command is not refused."""
    import jax.numpy as jnp
    from jaxtree.train.sft import make_optimizer
    make_optimizer(1e-3, 0, 1).init({"w": jnp.ones(2)})

    workdir = str(tmp_path / "run")

    def fails(*args):
        raise RuntimeError("fails at its first use")

    monkeypatch.setattr(jobs, "initial_policy", fails)
    with pytest.raises(RuntimeError, match="first use"):
        jobs.train_job(toy_config(sft__epsilon=0.7), workdir)
    assert workdir_lib.read_config(workdir) is None
    monkeypatch.setattr(jobs, "initial_policy", lambda *args: None)  # stopped in the warm start
    assert jobs.train_job(toy_config(), workdir) is None
    assert workdir_lib.read_config(workdir)["sft"]["epsilon"] == 0.2


def test_a_workdir_deleted_while_the_job_runs_stops_it(tmp_path):
    """Item 4: the workdir deleted between two steps (and made again by a write, as orbax's next
    save would) is detected at the next metrics record: WorkdirVanished naming it, not a
    partial run that reads as finished."""
    workdir = str(tmp_path / "run")
    os.makedirs(workdir)
    with WorkdirLock(workdir, "test"):
        writer = MetricsWriter(workdir, tensorboard=False)
        writer.write(0, {"eval/success_rate": 0.5})
        shutil.rmtree(workdir)
        os.makedirs(os.path.join(workdir, "checkpoints"))
        with pytest.raises(WorkdirVanished, match=f"workdir {workdir} was deleted"):
            writer.write(1, {"eval/success_rate": 0.5})
        with pytest.raises(WorkdirVanished):
            workdir_lib.check_unchanged(os.path.join(workdir, "sft"))
    workdir_lib.check_unchanged(workdir)  # no longer held: nothing to check


def test_records_of_a_run_killed_before_its_first_checkpoint_are_dropped(tmp_path):
    """Item 5: a run killed (-9) after its step-0 evaluation but before its first checkpoint
    resumes from step 0: the log it left is dropped, so step 0 is recorded once."""
    workdir = str(tmp_path)
    MetricsWriter(workdir, tensorboard=False).write(0, {"eval/success_rate": 0.25})
    writer = MetricsWriter(workdir, 0, tensorboard=False)  # the same command: no checkpoint
    writer.write(0, {"eval/success_rate": 0.25})
    assert [r["step"] for r in read_metrics(workdir)] == [0]
    writer.write(1, {})
    assert [r["step"] for r in read_jsonl(os.path.join(workdir, "metrics.jsonl"))] == [0, 1]
    MetricsWriter(workdir, 1, tensorboard=False)  # resumed from checkpoint 1: kept
    assert [r["step"] for r in read_metrics(workdir)] == [0, 1]


def test_a_metrics_line_that_is_not_utf8_is_one_dropped_line(tmp_path):
    """Item 12: a non-UTF-8 byte in metrics.jsonl costs its line (with a warning), as a torn
    line does; launch.plot draws the rest (it was a UnicodeDecodeError traceback)."""
    from jaxtree.train.plots import plot
    with open(tmp_path / "metrics.jsonl", "wb") as f:
        f.write(b'{"step": 0, "eval/success_rate": 0.5}\n{"step": 1, "x": "\xff"}\n'
                b'{"step": 1, "rollout/success_rate": 0.5}\n')
    assert [r["step"] for r in read_metrics(str(tmp_path))] == [0, 1]
    assert plot(str(tmp_path))


# ----------------------------------------------------------------------------- faults

def test_a_mini_swe_task_that_ends_the_process_is_refused_naming_it(tmp_path):
    """Item 11: a task (env.options.task_dir) whose test calls os._exit(3) no longer ends the
    job silently with status 3 during the task check: it is refused naming the task."""
    task = tmp_path / "tasks" / "quitter"
    task.mkdir(parents=True)
    (task / "quitter.py").write_text("def double(x):\n    return 2 * x\n")
    (task / "test_quitter.py").write_text(
        "import os\nfrom quitter import double\n\n\ndef test_double():\n"
        "    assert double(2) == 4\n    os._exit(3)\n")
    (task / "hidden.txt").write_text('("double", (3,), 6)\n')
    config = toy_config()
    with config.unlocked():
        config.env.name = "mini_swe"
        config.env.options = {"task_dir": str(tmp_path / "tasks")}
    with pytest.raises(ConfigError, match=r"env\.options.*quitter.*test_double: os\._exit\(3\)"):
        Experiment.from_config(config)


def _mount_small_tmpfs(path: str, size: str) -> bool:
    """A tmpfs of `size` mounted at `path` (root only); False where mounting is not allowed."""
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                          capture_output=True)
    return done.returncode == 0


_DISK_FULL_JOB = r"""
import sys
import numpy as np
from jaxtree.checkpoints import TrainCheckpointer
from launch.common import run_app

def main(argv):
    params = {"w": np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)}
    TrainCheckpointer(sys.argv[1]).save(1, params, {"job": "test"}, opt_state=params)

run_app(main)
"""


def test_a_full_disk_during_a_save_is_one_line_naming_the_workdir(tmp_path, monkeypatch):
    """Item 6: a checkpoint save on a full filesystem (a 512 KiB tmpfs; where this user may not
    mount one, ENOSPC raised where orbax's save reports it) ends the job with one line naming
    the checkpoint and the free space, exit status 1, no orbax tracebacks (there were ~800
    lines); the next job to open the checkpoints finds no unfinished save."""
    mount = str(tmp_path / "small")
    if _mount_small_tmpfs(mount, "512k"):
        try:
            done = subprocess.run([sys.executable, "-c", _DISK_FULL_JOB,
                                   os.path.join(mount, "run")], cwd=ROOT, capture_output=True,
                                  text=True, timeout=120)
            checkpoints.TrainCheckpointer(os.path.join(mount, "run")).close()  # the next job
            assert os.listdir(os.path.join(mount, "run", "checkpoints")) == []
        finally:
            subprocess.run(["umount", "-l", mount], check=False)
        assert_one_line_error(done, 1, f"{mount}/run/checkpoints/1", "no space left",
                              "free there")
        assert "ERROR" not in done.stderr, done.stderr[-2000:]
        return
    saver = checkpoints.TrainCheckpointer(str(tmp_path / "run"))

    def no_space(*args, **kwargs):
        os.makedirs(os.path.join(saver.directory, f"1{checkpoints.TMP_SUFFIX}"))
        raise ValueError("RESOURCE_EXHAUSTED: Failed writing: No space left on device "
                         "[os_error_code='28']")

    monkeypatch.setattr(saver._manager, "save", no_space)
    with pytest.raises(checkpoints.DiskFullError, match="no space left.*free there"):
        saver.save(1, {"w": np.zeros(4, np.float32)}, {})
    checkpoints.TrainCheckpointer(str(tmp_path / "run")).close()
    assert os.listdir(saver.directory) == []


def test_opening_checkpoints_leaves_no_background_thread(tmp_path, monkeypatch):
    """Item 13: an unfinished save is removed synchronously when a workdir's checkpoints are
    opened; orbax's own clean-up ran in a background thread that could outlive a short job (a
    rerun of a finished run) and print a 40-line 'cannot schedule new futures after shutdown'
    traceback during interpreter shutdown."""
    stale = tmp_path / checkpoints.CHECKPOINTS / f"3{checkpoints.TMP_SUFFIX}-1700000000"
    stale.mkdir(parents=True)
    started = []
    real_start = threading.Thread.start

    def start(thread):
        started.append(thread.name)
        return real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    saver = checkpoints.TrainCheckpointer(str(tmp_path))
    assert saver.latest_step() is None
    saver.close()
    assert started == [] and not stale.exists()
