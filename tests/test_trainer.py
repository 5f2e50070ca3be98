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
from jaxtree.policy import load_policy
from jaxtree.train import checkpoints
from jaxtree.train.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_FILE = os.path.join(ROOT, "configs", "frozen_lake_grpo.py")

# Toy run: the random tiny model, 2 lakes x 2 rollouts of at most 3 turns per step. The entropy
# bonus gives every step a non-zero gradient even when all rewards in a group are equal.
TOY = {
    "model.name": "tiny", "rollout.num_slots": 8, "rollout.context_length": 256,
    "rollout.max_turns": 3, "rollout.max_action_tokens": 4, "train.init": "model",
    "train.groups_per_step": 2, "train.group_size": 2, "train.micro_batch_size": 2,
    "train.entropy_coef": 0.01, "train.learning_rate": 1e-3, "train.eval_num_tasks": 2,
    "train.eval_samples_per_task": 1, "train.eval_every": 2, "train.save_every": 1,
    "train.tensorboard": False,
}
TOY_OVERRIDES = [f"--config.{key}={value}" for key, value in TOY.items()]


def toy_config(steps=4, **train):
    config = rl_config(sibling_config(CONFIG_FILE, "frozen_lake_sft"), "grpo")
    for key, value in TOY.items():
        section, field = key.split(".")
        config[section][field] = value
    config.train.steps = steps
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
    initial = jax.tree_util.tree_leaves(load_policy("tiny").params)
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


def _synthetic_batch(rewards_by_group, turns=3, width=16, group_offset=0):
    """A TrajectoryBatch with the given outcome rewards, one group per inner list."""
    from jaxtree.rollout.trajectory import EpisodeRecord, assemble
    records, episode = [], 0
    for g, rewards in enumerate(rewards_by_group):
        for r in rewards:
            mask = np.zeros(width, bool)
            mask[4:7] = mask[10:13] = True
            turn_index = np.repeat(np.arange(turns), -(-width // turns))[:width].astype(np.int32)
            records.append(EpisodeRecord(
                tokens=np.arange(width, dtype=np.int32), action_mask=mask,
                logprobs=np.where(mask, -1.0, 0.0).astype(np.float32), turn_index=turn_index,
                rewards=[0.0] * (turns - 1) + [float(r)], valid=[True, False, True][:turns],
                verified=[np.nan] * turns, success=r > 0, truncated=False, num_invalid=1,
                task_id=1000 + g + group_offset, group_id=g, episode_id=episode, parent_id=-1,
                fork_turn=-1, info={}))
            episode += 1
    return assemble(records, pad_id=0)


class _FakeSampler:
    def __init__(self):
        self.drawn = []

    def draw(self, count):
        start = len(self.drawn)
        self.drawn += list(range(start, start + count))
        return self.drawn[start:]


def _bare_trainer(**train):
    from jaxtree.train.trainer import Trainer
    trainer = Trainer.__new__(Trainer)
    trainer.t = toy_config(**train).train
    trainer.engine = None
    trainer.policy = type("P", (), {"tokenizer": type("T", (), {"pad_id": 0})()})()
    return trainer


def test_dapo_dynamic_sampling_drops_uniform_groups_and_refills_from_fresh_tasks(monkeypatch):
    from jaxtree.train import trainer as trainer_lib
    rounds = iter([
        [[1, 1], [0, 1], [0, 0]],        # round 0: only group 1 has a learning signal
        [[1, 0], [0, 0], [1, 0]],        # round 1: groups 0 and 2 do
    ])
    calls = []

    def fake_sample(engine, params, rng, tasks, group_size):
        calls.append(list(tasks))
        return _synthetic_batch(next(rounds))
    monkeypatch.setattr(trainer_lib, "sample_independent", fake_sample)
    trainer = _bare_trainer(filter="dynamic_sampling", groups_per_step=3, group_size=2,
                            max_sampling_rounds=4)
    batch, metrics = trainer.rollout(None, step=1, sampler=_FakeSampler())
    assert calls == [[0, 1, 2], [3, 4, 5]]  # the refill round draws fresh tasks
    assert metrics["rollout/sampling_rounds"] == 2 and metrics["rollout/episodes"] == 12
    # kept: round 0 group 1, then round 1 groups 0 and 2 (ids offset by 3), 3 groups x 2 rollouts
    assert sorted(set(batch.group_ids.tolist())) == [1, 3, 5]
    assert len(batch) == 6
    for g in set(batch.group_ids.tolist()):
        rewards = batch.outcome_reward[batch.group_ids == g]
        assert rewards.max() > rewards.min()
    assert len(set(batch.episode_ids.tolist())) == 6


def test_instance_filter_keeps_the_highest_std_groups(monkeypatch):
    from jaxtree.train import trainer as trainer_lib
    monkeypatch.setattr(trainer_lib, "sample_independent",
                        lambda *a: _synthetic_batch([[1, 1], [0, 1], [0, 0], [1, 0.5]]))
    trainer = _bare_trainer(filter="top_std", groups_per_step=4, group_size=2, keep_fraction=0.5)
    batch, metrics = trainer.rollout(None, step=1, sampler=_FakeSampler())
    assert sorted(set(batch.group_ids.tolist())) == [1, 3]      # std 0.5 and 0.25
    assert metrics["rollout/kept_groups"] == 2


@pytest.mark.parametrize("advantage", ["grpo", "drgrpo", "rloo", "step_reward"])
def test_token_advantages_put_each_rollouts_advantage_on_its_action_tokens(advantage):
    trainer = _bare_trainer(advantage=advantage, gamma=0.5, step_reward_valid=0.1,
                            step_reward_invalid=0.2)
    batch = _synthetic_batch([[1, 0, 0], [0.5, 0.5, 1]])
    out = trainer.token_advantages(batch)
    assert out.shape == batch.tokens.shape
    assert np.all(out[~batch.action_mask] == 0)
    groups = [batch.outcome_reward[:3], batch.outcome_reward[3:]]
    for i in range(len(batch)):
        group = groups[i // 3]
        r = batch.outcome_reward[i]
        if advantage == "grpo":
            expected = (r - group.mean()) / (group.std(ddof=1) + 1e-6)
        elif advantage == "drgrpo":
            expected = r - group.mean()
        elif advantage == "rloo":
            expected = r - (group.sum() - r) / (len(group) - 1)
        if advantage != "step_reward":
            np.testing.assert_allclose(out[i][batch.action_mask[i]], expected, atol=1e-5)
            continue
        # per turn: GRPO outcome advantage + discounted step rewards (+0.1 valid, -0.2 invalid)
        grpo = (r - group.mean()) / (group.std(ddof=1) + 1e-6)
        step = [0.1, -0.2, 0.1]
        for t in np.flatnonzero(batch.action_mask[i]):
            k = batch.turn_index[i, t]
            ret = sum(0.5 ** (j - k) * step[j] for j in range(k, 3))
            assert out[i, t] == pytest.approx(grpo + ret, abs=1e-5)


def test_metric_names_become_valid_tensorboard_tags(tmp_path):
    from jaxtree.train.metrics import MetricsWriter, tensorboard_tag
    assert tensorboard_tag("rollout/pass@8") == "rollout/pass_at_8"
    assert tensorboard_tag("train/grad_norm") == "train/grad_norm"
    assert tensorboard_tag("latr/a b") == "latr/a_b"
    writer = MetricsWriter(str(tmp_path), tensorboard=True)
    writer.write(1, {"rollout/pass@8": 0.5, "train/loss": 1.0})
    writer.close()
    # the JSON log keeps the metric's own name
    assert read_metrics(str(tmp_path)) == [{"step": 1, "rollout/pass@8": 0.5, "train/loss": 1.0}]
    assert _tensorboard_scalar_tags(tmp_path / "tensorboard") == {"rollout/pass_at_8",
                                                                   "train/loss"}


def _tensorboard_scalar_tags(directory) -> set:
    """Scalar tags in TensorBoard event files (TFRecord framing: u64 length, u32 CRC, the
    serialized Event, u32 CRC)."""
    import struct

    from tensorboardX.proto import event_pb2
    tags = set()
    for path in directory.iterdir():
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            tags.update(value.tag for value in event.summary.value)
            offset += 12 + length + 4
    return tags
