"""What the trainer and job tests share: the toy-sized experiment (the random tiny model on
FrozenLake, 2 lakes x 2 rollouts of at most 3 turns per step, and when a test asks for one a warm
start of a few steps on 16 demonstrations), and running jobs as subprocesses (on their own, or
several forked from one process that imported their libraries once)."""

import atexit
import os
import signal
import subprocess
import sys

from jaxtree.experiment import rl_config, set_path, sibling_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILE = os.path.join(ROOT, "configs", "frozen_lake_grpo.py")

# The entropy bonus gives every step a non-zero gradient even when all rewards in a group are
# equal. A context of 128 tokens (the prompt is 81) cuts every warm-start demonstration to one
# padded width, so the SFT step compiles once.
TOY = {
    "model.name": "tiny", "rollout.num_slots": 8, "rollout.context_length": 128,
    "rollout.max_turns": 3, "rollout.max_action_tokens": 4, "train.init": "model",
    "rollout.groups_per_step": 2, "rollout.group_size": 2, "train.micro_batch_size": 2,
    "loss.entropy_coef": 0.01, "optim.learning_rate": 1e-3, "eval.num_tasks": 2,
    "eval.samples_per_task": 1, "eval.every": 2, "checkpoint.every": 1,
    "train.tensorboard": False,
}
# A warm start of `sft.steps` steps on 16 demonstrations, logged every step.
TOY_SFT = {"train.init": "sft", "sft.num_episodes": 16, "sft.steps": 4, "sft.warmup_steps": 1,
           "sft.batch_size": 2, "sft.log_every": 1}


def one_layer_policy(path: str, seed: int = 0, context: int | None = None) -> str:
    """Saves at `path` (and returns it) a policy checkpoint of the tiny preset with one decoder
    block instead of four, random init (key `seed`): where nothing a test checks depends on the
    model's depth, each of its jobs traces and compiles its programs about three times faster.
    `context`: its max_position_embeddings instead of the preset's 4,096."""
    import jax

    from jaxtree import checkpoints, models
    config = models.get_preset("tiny").replace(num_layers=1)
    if context is not None:
        config = config.replace(max_position_embeddings=context)
    checkpoints.save_policy(path, 0, models.init_params(config, jax.random.key(seed)), config,
                            "byte")
    return path


def flags(values: dict) -> list[str]:
    """`--config.x.y=value` overrides of a job's command line."""
    return [f"--config.{key}={value}" for key, value in values.items()]


TOY_OVERRIDES = flags(TOY)


def toy_config(steps=4, **overrides):
    """The default experiment at toy size; `overrides` are {section__field: value}."""
    config = rl_config(sibling_config(CONFIG_FILE, "frozen_lake_sft"), "grpo", TOY)
    config.train.steps = steps
    for key, value in overrides.items():
        set_path(config, key.replace("__", "."), value)
    return config


def start_job(*args, cwd=ROOT, env=None) -> subprocess.Popen:
    """`python *args` in the background (e.g. "-m", "launch.train", ...)."""
    return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_jobs(*procs, timeout=300) -> list[subprocess.CompletedProcess]:
    """The results of jobs started together (their time overlaps: each is mostly imports)."""
    done = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return done


# A job is a fork of a Python process that imported these once (a fork server: one per test
# process and JAX environment, started on first use and kept for the session); each job then
# imports its launch module and runs it as `python -m` would (`runpy`, as __main__, with its own
# argv, working directory, environment and stdout / stderr). JAX is imported but never
# initialised in the server, so a job's XLA_FLAGS (the fake device count) still apply. A job
# started as a process of its own imports JAX and the library again (2-3 s of CPU each): with
# one server per test process instead of one per batch, and the single-job launches and
# fake-device scripts forked from it too, the suite took 467 s of CPU instead of 537 s (274 s
# instead of 313 s on 2 cores).
_PRELOAD = ("numpy", "jax", "jax.numpy", "absl.app", "absl.flags", "ml_collections.config_flags",
            "launch.common", "jaxtree.train.jobs", "jaxtree.evaluation", "jaxtree.policy",
            "orbax.checkpoint", "gymnasium")  # the last two: what jobs import on first use
_FORK_SERVER = r"""
import json, os, runpy, sys
sys.path[0] = os.getcwd()
for line in sys.stdin:
    spec = json.loads(line)
    for name in spec["preload"]:
        __import__(name)
    pids = []
    for job in spec["jobs"]:
        pid = os.fork()
        if pid == 0:
            # the job's own stdin, stdout and stderr: never the server's control pipes
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdin = open(os.devnull)
            for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            if "module" in job:
                sys.argv = [job["module"], *job["args"]]
                runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
            else:
                sys.argv = ["-c", *job["args"]]
                exec(compile(job["code"], "<string>", "exec"), {"__name__": "__main__"})
            sys.exit(0)
        pids.append(pid)
    print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]),
          flush=True)
"""
# {the JAX_ variables of the environment a server started in: server}. JAX reads them as it is
# imported, so jobs whose environments set them otherwise need a server of their own.
_SERVERS: dict = {}


def _jax_environment(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith("JAX_")))


def _fork_server(env: dict) -> subprocess.Popen:
    """The running fork server for jobs in `env`, started if there is none (or it died)."""
    key = _jax_environment(env)
    server = _SERVERS.get(key)
    if server is None or server.poll() is not None:
        # exactly the jobs' JAX_ variables: none of this process's that the jobs' lack
        server_env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
        server = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], cwd=ROOT,
                                  env={**server_env, **dict(key)}, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        _SERVERS[key] = server
    return server


def _stop(server: subprocess.Popen) -> None:
    """The server and every job it forked (its process group), killed."""
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait()


@atexit.register
def _stop_servers():
    for server in _SERVERS.values():
        if server.poll() is None:
            server.stdin.close()  # the server's loop ends; it has no job running between calls
            server.wait()


def run_module_jobs(*jobs, cwd=ROOT, timeout=300, preload=()) -> list[subprocess.CompletedProcess]:
    """The results of `python -m <module> <args>` jobs, each ("-m", module, *args) or
    (("-m", module, *args), env) or (("-m", module, *args), env, cwd) (env None: this
    process's), run together; ("-c", code, *args) in place of ("-m", ...) runs `python -c`.
    They start as forks of a process that has imported the libraries they share (`_PRELOAD`
    and `preload`, e.g. "torch" for jobs that all import it), so each skips the imports that
    are most of a job that only checks its flags and fails. Jobs that outlast `timeout` are
    killed (with the server) and raise subprocess.TimeoutExpired."""
    import json
    import select
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"preload": [*_PRELOAD, *preload], "jobs": []}
        for i, job in enumerate(jobs):
            args, env, job_cwd = ((job, None, cwd) if job[0] == "-m" else
                                  (*job, cwd) if len(job) == 2 else job)
            assert args[0] in ("-m", "-c"), args
            spec["jobs"].append({"module" if args[0] == "-m" else "code": args[1],
                                 "args": list(args[2:]), "cwd": str(job_cwd),
                                 "env": dict(os.environ if env is None else env),
                                 "stdout": os.path.join(tmp, f"{i}.out"),
                                 "stderr": os.path.join(tmp, f"{i}.err")})
        environments = {_jax_environment(job["env"]) for job in spec["jobs"]}
        assert len(environments) == 1, f"one batch, one JAX environment: {environments}"
        server = _fork_server(spec["jobs"][0]["env"])
        server.stdin.write(json.dumps(spec) + "\n")
        server.stdin.flush()
        ready, _, _ = select.select([server.stdout], [], [], timeout)
        reply = server.stdout.readline() if ready else ""
        if not reply:
            _stop(server)
            if not ready:
                raise subprocess.TimeoutExpired([job.get("module", "-c") for job in spec["jobs"]],
                                                timeout)
            raise AssertionError(f"the fork server died (status {server.returncode})")
        statuses = json.loads(reply)
        done = []
        for job, status in zip(spec["jobs"], statuses):
            command = ["-m", job["module"]] if "module" in job else ["-c", job["code"]]
            with open(job["stdout"]) as out, open(job["stderr"]) as err:
                done.append(subprocess.CompletedProcess(
                    [sys.executable, *command, *job["args"]], status, out.read(), err.read()))
        return done


def assert_one_line_error(proc, status, *fragments):
    """Exit `status` (2: user error, 1: fault), no traceback or usage text, and stderr ending in
    one `error:` line holding every fragment."""
    assert proc.returncode == status, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "USAGE" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in last, (fragment, last)
