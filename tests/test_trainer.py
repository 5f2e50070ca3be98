"""The RL trainer end to end at toy size: exact resume, SIGTERM, config validation, plots."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from ml_collections import config_flags

from jaxtree.experiment import rl_config, sibling_config
from jaxtree.train import checkpoints
from jaxtree.train.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILE = os.path.join(ROOT, "configs", "frozen_lake_grpo.py")

# Toy run: the random tiny model, 2 lakes x 2 rollouts of at most 3 turns per step. The entropy
# bonus gives every step a non-zero gradient even when all rewards in a group are equal.
TOY_OVERRIDES = [
    "--config.train.init=model", "--config.model.name=tiny", "--config.rollout.num_slots=8",
    "--config.rollout.context_length=256", "--config.rollout.max_turns=3",
    "--config.rollout.max_action_tokens=4", "--config.train.groups_per_step=2",
    "--config.train.group_size=2", "--config.train.micro_batch_size=2",
    "--config.train.entropy_coef=0.01", "--config.train.learning_rate=1e-3",
    "--config.train.eval_num_tasks=2", "--config.train.eval_samples_per_task=1",
    "--config.train.eval_every=2", "--config.train.save_every=1",
    "--config.train.tensorboard=False",
]


def toy_config(steps=4, **train):
    config = rl_config(sibling_config(CONFIG_FILE, "frozen_lake_sft"), "grpo")
    config.model.name = "tiny"
    config.rollout.update(num_slots=8, context_length=256, max_turns=3, max_action_tokens=4)
    config.train.update(dict(init="model", steps=steps, groups_per_step=2, group_size=2,
                             micro_batch_size=2, entropy_coef=0.01, learning_rate=1e-3,
                             eval_num_tasks=2, eval_samples_per_task=1, eval_every=2,
                             save_every=1, tensorboard=False))
    config.train.update(train)
    return config


def _final_params(workdir):
    from jaxtree.train.checkpoints import load_policy_checkpoint
    return load_policy_checkpoint(workdir)[1]


def _deterministic(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "rollout/host_share"}
            for r in records]


def test_four_steps_equal_two_then_resume_then_two_bitwise(tmp_path):
    from launch import train
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    first = train.run(toy_config(), straight)
    assert first["step"] == 4 and not first["preempted"]

    partial = train.run(toy_config(), resumed, stop_after=2)
    assert partial["step"] == 2 and partial["preempted"]
    assert checkpoints.TrainCheckpointer(resumed).latest_step() == 2
    rest = train.run(toy_config(), resumed)
    assert rest["step"] == 4

    a, b = _final_params(straight), _final_params(resumed)
    jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)
    records = read_metrics(straight)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    assert _deterministic(records) == _deterministic(read_metrics(resumed))
    # the run did learn something: parameters moved, and every step made one optimizer update
    initial = jax.tree_util.tree_leaves(
        __import__("jaxtree.policy", fromlist=["x"]).load_policy("tiny").params)
    assert any(not np.array_equal(x, y) for x, y in zip(initial, jax.tree_util.tree_leaves(a)))
    assert all(r["train/skipped"] == 0 for r in records[1:])
    assert "eval/success_rate" in records[0] and "eval/success_rate" in records[4]

    # plots from the run's metrics
    from jaxtree.train.plots import plot
    paths = plot(straight)
    assert {os.path.basename(p) for p in paths} >= {"success_rate.png", "kl.png", "entropy.png",
                                                    "reward.png", "response_length.png",
                                                    "grad_norm.png", "curves.png"}
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_sigterm_saves_a_restorable_checkpoint_and_exits_cleanly(tmp_path):
    workdir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.train", f"--config={CONFIG_FILE}",
         f"--workdir={workdir}", "--config.train.steps=1000", *TOY_OVERRIDES],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = workdir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and any(json.loads(l)["step"] >= 1
                                    for l in metrics.read_text().splitlines() if l.strip()):
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert "stopped early: checkpoint saved" in stdout
    step = checkpoints.TrainCheckpointer(str(workdir)).latest_step()
    assert step is not None and 1 <= step < 1000
    # restorable: as a policy, and as a training state by a resumed run
    config, params, _, metadata = checkpoints.load_policy_checkpoint(str(workdir))
    assert metadata["job"] == "train" and config.model_type == "llama"
    from launch import train
    result = train.run(toy_config(steps=step + 1), str(workdir))
    assert result["step"] == step + 1


@pytest.mark.parametrize("field,value,message", [
    ("advantage", "gae", "train.advantage"),
    ("loss_aggregation", "sum", "train.loss_aggregation"),
    ("eps_low", 1.5, "train.eps_low"),
    ("group_size", 1, "train.group_size"),
    ("keep_fraction", 0.0, "train.keep_fraction"),
    ("micro_batch_size", 0, "train.micro_batch_size"),
])
def test_invalid_train_values_fail_naming_the_field(field, value, message):
    from launch import train
    from launch.common import ConfigError
    config = toy_config()
    config.train[field] = value
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        train.validate(config)


def test_the_job_rejects_an_unknown_field_and_a_bad_value_clearly(tmp_path):
    for override, expected in [("--config.train.learning_rat=1e-3", "learning_rat"),
                               ("--config.train.filter=best", "config.train.filter")]:
        proc = subprocess.run([sys.executable, "-m", "launch.train", f"--config={CONFIG_FILE}",
                               f"--workdir={tmp_path}", override], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert expected in proc.stderr
        assert "Traceback" not in proc.stderr


def test_every_experiment_config_validates():
    from launch import train
    names = [n for n in os.listdir(os.path.join(ROOT, "configs"))
             if n.endswith(("_grpo.py", "_dapo.py"))]
    assert {"frozen_lake_grpo.py", "frozen_lake_dapo.py", "sokoban_grpo.py", "sokoban_dapo.py",
            "countdown_grpo.py", "countdown_dapo.py", "sudoku4_grpo.py",
            "sudoku4_dapo.py"} <= set(names)
    for name in names:
        config = config_flags.config_flags._LoadConfigModule(
            name, os.path.join(ROOT, "configs", name)).get_config()
        train.validate(config)
        if name.endswith("_dapo.py"):
            assert config.train.filter == "dynamic_sampling"
            assert config.train.loss_aggregation == "token-mean"
            assert config.train.eps_high > config.train.eps_low
