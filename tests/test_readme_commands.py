"""README.md's method commands, each run as written for one training step.

README.md gives one `launch.train` command per method (the block under `<!-- method commands`).
Each runs here as its line says, parsed by the flags machinery launch.train uses, with a one-step
budget appended (BUDGET: steps, warm-start length, rollouts per step, evaluation size and the tiny
model's depth, and the engine's slots scaled with the tasks a step; sizes only, no method
setting), after the command as written has passed every check launch.train makes before it starts
work: a command that fails when a new user pastes it
(TSR's beam and lookahead once had too few slots for their searches) fails here, at its launch
checks or in its first step.
Commands whose warm starts are configured alike share one warm start, linked as each run's `sft`
the way launch.compare's grids share theirs. The methods themselves are trained and checked
elsewhere (tests/pipeline_digests.py: every strategy and advantage estimator, two steps)."""

import json
import math
import os
import shlex
import sys

import pytest
from absl import flags as absl_flags
from ml_collections import config_flags

from jaxtree.experiment import Experiment
from jaxtree.train import jobs
from jaxtree.train.metrics import read_metrics
from jaxtree.train.pipeline import check_experiment
from launch.common import apply_free_form_overrides, resolve_config_path, \
    split_free_form_overrides
from toy_run import ROOT, one_layer_policy

# One step of one group of two rollouts, a two-step warm start on 8 demonstrations, a held-out
# evaluation of one task, and the tiny model with one decoder block instead of four (`model.name`,
# set to `one_layer_policy`'s checkpoint by the fixture: its programs trace and compile about three
# times faster): what every method's first step needs, and no more.
BUDGET = {"train.steps": 1, "rollout.groups_per_step": 1, "rollout.group_size": 2,
          "train.micro_batch_size": 2, "sft.steps": 2, "sft.warmup_steps": 1,
          "sft.num_episodes": 8, "eval.num_tasks": 1, "eval.samples_per_task": 1,
          "train.tensorboard": False}

# {method (the command's workdir is /tmp/m_<method>): (a config field, the value that selects
# the method)}: the command must run with its method in effect.
METHODS = {"grpo": ("advantage.name", "grpo"), "dapo": ("filter.name", "dynamic_sampling"),
           "drgrpo": ("advantage.name", "drgrpo"), "rloo": ("advantage.name", "rloo"),
           "latr": ("rollout.strategy", "latr"), "patr": ("rollout.strategy", "patr"),
           "tree_random": ("rollout.patr.selection", "random"),
           "arpo": ("rollout.strategy", "arpo"), "best_of_n": ("rollout.strategy", "best_of_n"),
           "beam": ("rollout.strategy", "beam"), "lookahead": ("rollout.strategy", "lookahead"),
           "rtmc": ("advantage.name", "rtmc"), "gigpo": ("advantage.name", "gigpo"),
           "vpr": ("advantage.name", "vpr"), "mcpr": ("rollout.strategy", "mc_values")}

# The metric a method's own rollout strategy or advantage logs in its step: evidence that the
# step ran that method's code, not only that its config said so.
EVIDENCE = {"latr": "latr/forwards", "patr": "patr/scoring_points",
            "tree_random": "patr/scoring_points", "arpo": "arpo/forks",
            "best_of_n": "tsr/candidates", "beam": "tsr/candidates",
            "lookahead": "tsr/lookahead_turns", "rtmc": "rtmc/pairs",
            "gigpo": "gigpo/step_groups", "vpr": "vpr/turn_reward_mean",
            "mcpr": "mc/continuations"}


def readme_method_commands() -> dict[str, list[str]]:
    """{method: the arguments after `python -m launch.train`} of README.md's method block."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = text.split("<!-- method commands")[1].split("```bash")[1].split("```")[0]
    commands = {}
    for line in block.splitlines():
        if line.startswith("python -m launch.train "):
            args = shlex.split(line)[3:]
            workdir = next(a for a in args if a.startswith("--workdir="))
            commands[workdir.rsplit("/m_", 1)[1]] = args
    return commands


def command_config(args: list[str]):
    """The config `launch.train args` would run, parsed by the flags machinery it uses."""
    values = absl_flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=values, lock_config=True)
    absl_flags.DEFINE_string("workdir", None, "", flag_values=values)
    args = [f"--config={resolve_config_path(a[len('--config='):])}"
            if a.startswith("--config=") else a for a in args]
    args, free_form = split_free_form_overrides(args)
    saved = sys.argv
    sys.argv = ["launch.train", *args]  # config_flags reads its overrides from sys.argv
    try:
        values(sys.argv)
    finally:
        sys.argv = saved
    apply_free_form_overrides(values.config, free_form)
    return values.config


def budget_slots(written) -> int:
    """The command's `rollout.num_slots` in the same proportion to the budget's tasks a step as
    to the command's own (rounded up): a tree or search holds its slots per task, so each keeps
    what it needs, and no engine holds hundreds of idle slots."""
    return -(-written.num_slots * BUDGET["rollout.groups_per_step"] // written.groups_per_step)


COMMANDS = readme_method_commands()


def test_the_readme_gives_one_command_per_method():
    assert set(COMMANDS) == set(METHODS), sorted(COMMANDS)


class WarmStarts:
    """The one-block tiny model the runs start from (`model`), and one warm start per distinct
    (env, model, sft) configuration among the commands, trained as the runs first need it."""

    def __init__(self, root: str):
        self.root = root
        self.model = one_layer_policy(os.path.join(root, "one_layer"))
        self.built: dict[str, str] = {}

    def __call__(self, config) -> str:
        key = json.dumps({s: config[s].to_dict() for s in jobs.WARM_START_SECTIONS},
                         sort_keys=True, default=str)
        if key not in self.built:
            path = os.path.join(self.root, f"warm_start_{len(self.built)}")
            assert jobs.sft_job(config, path) is not None
            self.built[key] = path
        return self.built[key]


@pytest.fixture(scope="module")
def warm_starts(tmp_path_factory):
    return WarmStarts(str(tmp_path_factory.mktemp("readme_warm_starts")))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_readme_method_command_trains_a_step_as_written(method, warm_starts, tmp_path):
    args = [a for a in COMMANDS[method] if not a.startswith("--workdir=")]
    # as written, the command passes every check launch.train makes before it works (a
    # search's slots against its tasks among them; the budget keeps slots per task)
    exp = Experiment.from_config(command_config(args))
    check_experiment(exp)
    jobs.check_prompts(exp)
    budget = {**BUDGET, "model.name": warm_starts.model,
              "rollout.num_slots": budget_slots(exp.rollout)}
    config = command_config(args + [f"--config.{field}={value}"
                                    for field, value in budget.items()])
    workdir = str(tmp_path / f"m_{method}")
    os.makedirs(workdir)
    os.symlink(warm_starts(config), os.path.join(workdir, "sft"))

    result = jobs.train_job(config, workdir)

    assert result is not None and result["step"] == 1, result
    with open(os.path.join(workdir, "config.json")) as f:
        recorded = json.load(f)
    field, value = METHODS[method]
    setting = recorded
    for key in field.split("."):
        setting = setting[key]
    assert setting == value, (method, field, setting)  # the job's record: what ran
    last = read_metrics(workdir)[-1]
    assert last["step"] == 1
    numbers = {k: v for k, v in last.items() if isinstance(v, (int, float))}
    assert all(math.isfinite(v) for v in numbers.values()), numbers
    if method in EVIDENCE:
        assert EVIDENCE[method] in last, sorted(last)
