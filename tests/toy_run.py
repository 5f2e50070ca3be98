"""What the trainer and job tests share: the toy-sized experiment (the random tiny model on
FrozenLake, 2 lakes x 2 rollouts of at most 3 turns per step, and when a test asks for one a warm
start of a few steps on 16 demonstrations), and running jobs as subprocesses (on their own, or
several forked from one process that imported their libraries once)."""

import os
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


def one_layer_policy(path: str, seed: int = 0) -> str:
    """Saves at `path` (and returns it) a policy checkpoint of the tiny preset with one decoder
    block instead of four, random init (key `seed`): where nothing a test checks depends on the
    model's depth, each of its jobs traces and compiles its programs about three times faster."""
    import jax

    from jaxtree import checkpoints, models
    config = models.get_preset("tiny").replace(num_layers=1)
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


# A job is a fork of one Python process that imported these once; each job then imports its
# launch module and runs it as `python -m` would (`runpy`, as __main__, with its own argv,
# working directory, environment and stdout / stderr). JAX is imported but not initialised
# before the fork, so a job's XLA_FLAGS still apply.
_PRELOAD = ("numpy", "jax", "jax.numpy", "absl.app", "absl.flags", "ml_collections.config_flags",
            "launch.common", "jaxtree.train.jobs", "jaxtree.evaluation", "jaxtree.policy")
_FORK_JOBS = r"""
import json, os, runpy, sys
sys.path[0] = os.getcwd()
spec = json.load(sys.stdin)
for name in spec["preload"]:
    __import__(name)
pids = []
for job in spec["jobs"]:
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        sys.argv = [job["module"], *job["args"]]
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        sys.exit(0)
    pids.append(pid)
print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]))
"""


def run_module_jobs(*jobs, cwd=ROOT, timeout=300, preload=()) -> list[subprocess.CompletedProcess]:
    """The results of `python -m <module> <args>` jobs, each ("-m", module, *args) or
    (("-m", module, *args), env) or (("-m", module, *args), env, cwd) (env None: this
    process's), run together. They start as forks of one process that has imported the
    libraries they share (`_PRELOAD` and `preload`, e.g. "torch" for jobs that all import it),
    so each skips the imports that are most of a job that only checks its flags and fails."""
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"preload": [*_PRELOAD, *preload], "jobs": []}
        for i, job in enumerate(jobs):
            args, env, job_cwd = ((job, None, cwd) if job[0] == "-m" else
                                  (*job, cwd) if len(job) == 2 else job)
            assert args[0] == "-m", args
            spec["jobs"].append({"module": args[1], "args": list(args[2:]), "cwd": str(job_cwd),
                                 "env": dict(os.environ if env is None else env),
                                 "stdout": os.path.join(tmp, f"{i}.out"),
                                 "stderr": os.path.join(tmp, f"{i}.err")})
        driver = subprocess.run([sys.executable, "-c", _FORK_JOBS], input=json.dumps(spec),
                                cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        assert driver.returncode == 0, driver.stderr[-3000:]
        statuses = json.loads(driver.stdout)
        done = []
        for job, status in zip(spec["jobs"], statuses):
            with open(job["stdout"]) as out, open(job["stderr"]) as err:
                done.append(subprocess.CompletedProcess(
                    [sys.executable, "-m", job["module"], *job["args"]], status, out.read(),
                    err.read()))
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
