"""Multi-process training with real JAX processes on this CPU (gloo collectives).

Two groups of tests/multihost_job.py processes start together when the module's first test
asks for them (their start-up, mostly imports and compilation, overlaps), every run starting from
one checkpoint of a one-block tiny model (`toy_run.one_layer_policy`):

  one   1 process x 4 fake devices: the toy run to step 2, then the resume of `two`'s step-1
        checkpoint (saved by 2 processes, resumed by 1)
  two   2 processes x 2 fake devices: the same run, then the resume of `one`'s step-1
        checkpoint (saved by 1 process, resumed by 2), then a long run during which the last
        test kills process 1: process 0 must stop by itself

Every comparison is against the single-process run: rollout and evaluation metrics exactly,
update metrics and parameters to 1e-5, so a multi-process run that drew other tasks, split the
groups wrongly, keyed its episodes differently or fed the update other rows fails.
launch/cloud/local_multiprocess.sh, which starts processes the same way, is checked on a
command that needs no JAX.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from toy_run import ROOT, one_layer_policy, run_module_jobs

JOB = os.path.join(ROOT, "tests", "multihost_job.py")
LAUNCHER = os.path.join(ROOT, "launch", "cloud", "local_multiprocess.sh")
HEARTBEAT = 20          # seconds, the pair's --heartbeat_timeout
EXIT_MARGIN = 20        # seconds allowed beyond it (a loaded 2-core machine)
JOB_TIMEOUT = 420


def _env(devices: int) -> dict:
    """The test session's environment (its XLA cache included) with `devices` CPU devices."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    flags = [f for f in flags if not f.startswith("--xla_force_host_platform_device_count")]
    return dict(os.environ, JAX_PLATFORMS="cpu",
                XLA_FLAGS=" ".join(flags + [f"--xla_force_host_platform_device_count={devices}"]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args, devices, log) -> subprocess.Popen:
    """The job in the background, its output into the file `log` (a pipe nobody reads while
    the test waits would fill up and stop the job)."""
    with open(log, "w") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen(args, cwd=ROOT, env=_env(devices), stdout=out,
                                stderr=subprocess.STDOUT)
    proc.log = log
    return proc


def _output(proc) -> str:
    with open(proc.log) as f:
        return f.read()


def _wait_for(paths, procs, timeout=JOB_TIMEOUT):
    """Until every path exists; fails with a process's output if one exits first."""
    deadline = time.time() + timeout
    while not all(os.path.exists(p) for p in paths):
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"{proc.args[2:4]} exited with status {proc.returncode}:\n"
                            f"{_output(proc)[-4000:]}")
        assert time.time() < deadline, f"{paths} did not appear in {timeout}s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{'one': dir, 'two': dir, 'long': dir, 'pair': [process 0, process 1]} once both groups
    finished their runs and resumes; the pair is then in its long run."""
    base = tmp_path_factory.mktemp("multihost")
    one, two, long = (str(base / name) for name in ("one", "two", "long"))
    model = one_layer_policy(str(base / "model"))
    port = _free_port()
    single = _start([sys.executable, JOB, f"--workdir={one}", f"--resume_peer={two}",
                     f"--model={model}"], 4, base / "one.log")
    pair = [_start([sys.executable, JOB, f"--workdir={two}", f"--resume_peer={one}",
                    f"--model={model}", f"--long_run={long}",
                    f"--coordinator_address=127.0.0.1:{port}",
                    "--num_processes=2", f"--process_id={i}", f"--heartbeat_timeout={HEARTBEAT}"],
                   2, base / f"two_{i}.log") for i in range(2)]
    try:
        single.wait(timeout=JOB_TIMEOUT)
        assert single.returncode == 0, f"one: {single.returncode}\n{_output(single)[-4000:]}"
        _wait_for([os.path.join(d, f"process_{i}.json") for d in (two, two + "_resumed")
                   for i in range(2)], pair)
        yield {"one": one, "two": two, "long": long, "pair": pair}
    finally:
        for proc in [single, *pair]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _params(workdir):
    import jax

    from jaxtree.checkpoints import load_policy_checkpoint

    return jax.tree_util.tree_map(np.asarray, load_policy_checkpoint(workdir)[1])


def _assert_same_run(reference, other):
    """Identical rollouts and evaluations, the same update to 1e-5, parameters to 1e-5."""
    import chex

    from jaxtree.rollout.stats import TIMING_METRICS

    expected, got = _metrics(reference), _metrics(other)
    assert [r["step"] for r in got] == [r["step"] for r in expected] == [0, 1, 2]
    for want, have in zip(expected, got):
        for key, value in want.items():
            if key.startswith("time/") or key in TIMING_METRICS:
                continue  # wall-clock measurements
            if key.startswith(("rollout/", "eval/", "step")):
                assert have[key] == value, (want["step"], key, value, have[key])
            else:
                assert have[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (key, want["step"])
    chex.assert_trees_all_close(_params(reference), _params(other), atol=1e-5, rtol=1e-5)


def test_two_processes_train_exactly_like_one(runs):
    """2 processes x 2 devices vs 1 process x 4: the same tasks, episodes, metrics and
    parameters after two update steps; both processes of the pair saw the same evaluations."""
    _assert_same_run(runs["one"], runs["two"])
    views = []
    for index in range(2):
        with open(os.path.join(runs["two"], f"process_{index}.json")) as f:
            views.append(json.load(f))
    assert views[0] == views[1] and views[0]["step"] == 2
    assert views[0]["final_eval"]["eval/episodes"] == 2


def test_checkpoints_resume_on_another_process_count(runs):
    """A step-1 checkpoint saved by 1 process resumes on 2 (orbax reads each process's shards)
    and one saved by 2 resumes on 1; both end where the uninterrupted run did."""
    _assert_same_run(runs["one"], runs["two"] + "_resumed")   # saved by 1, resumed by 2
    _assert_same_run(runs["one"], runs["one"] + "_resumed")   # saved by 2, resumed by 1


def test_a_dead_process_stops_the_others_within_the_heartbeat_timeout(runs):
    """Process 1 is killed during step 1 of the pair's long run. Process 0 must not wait for it
    forever: on CPU its next collective fails at once (gloo: connection reset) and it ends with
    one line, status 1; where a collective would wait instead, JAX's coordination service
    aborts it once process 1 has missed heartbeats for the timeout. Either way in bounded time."""
    first, second = runs["pair"]
    _wait_for([os.path.join(runs["long"], "metrics.jsonl")], runs["pair"])  # step 0 evaluated
    second.send_signal(signal.SIGKILL)
    killed = time.time()
    first.wait(timeout=HEARTBEAT + EXIT_MARGIN)
    waited = time.time() - killed
    err = _output(first)
    last = err.strip().splitlines()[-1]
    if first.returncode == 1:   # the collective failed: launch.processes.run_job's line
        assert last.startswith("error: process 0 of 2: JaxRuntimeError: "), err[-3000:]
        assert "another process of the job probably died" in last
    else:                       # the coordination service's abort (SIGABRT)
        assert first.returncode == -signal.SIGABRT, (first.returncode, err[-3000:])
        assert "stopped sending heartbeats" in err, err[-3000:]
    assert waited < HEARTBEAT + EXIT_MARGIN
    second.wait()


def test_local_launcher_appends_the_process_flags_and_stops_all_when_one_fails(tmp_path):
    """N processes with the coordinator on 127.0.0.1 and a free port; exit status 0 only when
    all succeed; a failure ends the others at once and is the script's status."""
    show = ("import sys, time; args = sys.argv[1:]; print(' '.join(args), flush=True); "
            "time.sleep(60 if args[-1] == '--process_id=0' else 0); "
            "sys.exit(3 if args[-1] == '--process_id=2' else 0)")
    env = dict(os.environ, JAXTREE_PROCESS_LOGS=str(tmp_path))
    ok = subprocess.run([LAUNCHER, "2", "--", sys.executable, "-c", show.replace("60", "0")],
                        capture_output=True, text=True, env=env, timeout=60)
    assert ok.returncode == 0, ok.stderr
    port = ok.stdout.split()[0].rsplit(":", 1)[1]
    assert ok.stdout.split() == [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
                                 "--process_id=0"]
    with open(tmp_path / "process_1.log") as f:
        assert f.read().split()[-1] == "--process_id=1"
    start = time.time()
    failed = subprocess.run([LAUNCHER, "3", "--", sys.executable, "-c", show],
                            capture_output=True, text=True, env=env, timeout=60)
    assert failed.returncode == 3 and time.time() - start < 30      # process 0 did not sleep on
    assert "process 2 exited with status 3; stopping the others" in failed.stderr


def test_invalid_process_flags_fail_at_launch_naming_the_flag():
    from toy_run import assert_one_line_error

    proc, = run_module_jobs(
        (("-m", "launch.train", "--config=configs/frozen_lake_grpo.py", "--workdir=/tmp/unused",
          "--coordinator_address=127.0.0.1:1234", "--num_processes=2", "--process_id=2"),
         _env(1)), timeout=120)
    assert_one_line_error(proc, 2, "--process_id: 2 is not in [0, 2)")


@pytest.mark.parametrize("values,message", [
    ({"num_processes": 0}, "--num_processes: 0 is not positive"),
    ({"coordinator_address": "localhost"}, "--coordinator_address: 'localhost' is not host:port"),
    ({"coordinator_address": "h:1", "num_processes": 2},
     "--process_id is required with --coordinator_address, --num_processes"),
    ({"heartbeat_timeout_seconds": 0}, "--heartbeat_timeout: 0 is not positive"),
])
def test_each_unusable_process_setting_is_named(values, message):
    from jaxtree.parallel.distributed import DistributedConfig, DistributedSetupError

    with pytest.raises(DistributedSetupError) as error:
        DistributedConfig(**values).check()
    assert str(error.value).startswith(message), str(error.value)


def test_shares_split_groups_contiguously_and_metrics_combine():
    from jaxtree.parallel.distributed import shares
    from jaxtree.rollout.strategies.base import combine_shares

    assert shares(5, 2) == [range(0, 3), range(3, 5)]
    assert shares(4, 4) == [range(i, i + 1) for i in range(4)]
    combined = combine_shares(
        [{"x/forks": 2.0, "x/size_min": 3.0, "x/size_max": 5.0, "x/rate": 0.5},
         {"x/forks": 1.0, "x/size_min": 2.0, "x/size_max": 4.0, "x/rate": 0.2}],
        groups=[3, 1], sums=("x/forks",))
    assert combined == {"x/forks": 3.0, "x/size_min": 2.0, "x/size_max": 5.0,
                        "x/rate": pytest.approx((3 * 0.5 + 0.2) / 4)}


def test_joined_shares_number_groups_and_episodes_step_wide():
    from jaxtree.rollout.trajectory import DONE, EpisodeRecord, TurnRecord, assemble, join_shares

    def share(groups, width):
        records = []
        for g in range(groups):
            for j in range(2):
                records.append(EpisodeRecord(
                    tokens=np.arange(width, dtype=np.int32), action_mask=np.ones(width, bool),
                    logprobs=np.zeros(width, np.float32), turn_index=np.zeros(width, np.int32),
                    turns=[TurnRecord(reward=1.0, valid=True, node_id=2 * g + j, labels={"verified": 1.0, "process_score": 0.5, "state_signature": "s", "action_signature": "a"})],
                    success=True, end_reason=DONE, context_full=False, task_id=10 * g,
                    group_id=g, episode_id=2 * g + j, parent_id=-1, fork_turn=-1, depth=0,
                    info={}))
        return assemble(records, pad_id=0)

    first, second = share(2, 5), share(1, 17)
    joined = join_shares([first, second], [0, 2], pad_id=0)
    assert joined.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
    assert joined.episode_ids.tolist() == list(range(6))
    assert len(set(joined.node_ids.ravel().tolist()) - {-1}) == 6
    assert joined.tokens.shape == (6, second.tokens.shape[1]) != first.tokens.shape
