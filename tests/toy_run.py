"""What the trainer and job tests share: the toy-sized experiment (the random tiny model on
FrozenLake, 2 lakes x 2 rollouts of at most 3 turns per step, and when a test asks for one a warm
start of a few steps on 16 demonstrations), and running jobs as subprocesses."""

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


def assert_one_line_error(proc, status, *fragments):
    """Exit `status` (2: user error, 1: fault), no traceback or usage text, and stderr ending in
    one `error:` line holding every fragment."""
    assert proc.returncode == status, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "USAGE" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in last, (fragment, last)
