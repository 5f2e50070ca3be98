"""The composition layer: new parts registered from outside the library train through launch.train
with only config changes; the config reference is generated from the schema and current."""

import dataclasses
import os

import numpy as np
import pytest

from jaxtree.advantages import ADVANTAGES, group, sequence_to_tokens
from jaxtree.advantages.base import dense_groups
from jaxtree.config import ConfigError, Section, option, positive
from jaxtree.experiment import (REFERENCE_BEGIN, REFERENCE_END, SECTIONS, Experiment,
                                reference_markdown, set_path)
from jaxtree.rewards import REWARDS, Rewards
from jaxtree.rollout.strategies import STRATEGIES, RolloutStrategy
from jaxtree.rollout.tree_record import read_tree
from jaxtree.train.metrics import read_metrics
from toy_run import ROOT, one_layer_policy, run_module_jobs, toy_config

# ----------------------------------------------------------------------------- custom parts


@dataclasses.dataclass(frozen=True)
class ForkConfig(Section):
    fork_turn: int = option(1, "turns the root plays before it forks", check=positive())


class ForkAtTurn(RolloutStrategy):
    """One root episode per task plays `fork_turn` turns, then forks into the rest of the group:
    a two-level tree whose children share the root's first turns (copied cache rows)."""

    def __init__(self, settings: ForkConfig, context):
        self.settings = settings
        self.group_size = context.group_size
        self.engine = context.engine()   # recording the labels the experiment reads

    def sample(self, params, rng, tasks, step, *, first_group=0):
        self.engine.begin(params, rng)
        roots = [self.engine.add_episode(task, group_id=g) for g, task in enumerate(tasks)]
        for _ in range(self.settings.fork_turn):
            self.engine.play_turn()
        forked = 0
        for root in roots:
            if self.engine.episodes[root].slot is not None:  # still running
                forked += len(self.engine.fork(root, self.group_size - 1))
        self.engine.run()
        return self.engine.collect(), {"fork/children": forked}


@dataclasses.dataclass(frozen=True)
class ProgressConfig(Section):
    weight: float = option(0.5, "weight of the final process score in the outcome")


def progress_reward(settings: ProgressConfig):
    """turn += process score after the turn; outcome += weight x the last one."""
    def term(batch):
        scores = np.nan_to_num(batch.labels["process_score"], nan=0.0) * batch.played
        last = scores[np.arange(len(batch)), np.maximum(batch.num_turns - 1, 0)]
        return Rewards(scores.astype(np.float32), (settings.weight * last).astype(np.float32))
    return term


def centred_outcome(settings):
    """RLOO-style advantage of the summed outcome."""
    def fn(batch, rewards, valid):
        groups, count = dense_groups(batch.group_ids)
        return sequence_to_tokens(group.rloo_advantages(rewards.outcome, groups, count,
                                                        valid=valid), batch.action_mask)
    return fn


@pytest.fixture
def custom_parts():
    # the tree picture shows the branches' actions
    STRATEGIES.register("fork_at_turn", ForkConfig, reads=("action_signature",))(ForkAtTurn)
    REWARDS.register("progress", ProgressConfig, reads=("process_score",))(progress_reward)
    ADVANTAGES.register("centred_outcome")(centred_outcome)
    yield
    STRATEGIES.unregister("fork_at_turn")
    REWARDS.unregister("progress")
    ADVANTAGES.unregister("centred_outcome")


def test_registered_parts_train_through_the_launch_job_with_only_config_changes(custom_parts,
                                                                                 tmp_path):
    from jaxtree.train import jobs
    config = toy_config(steps=2, model__name=one_layer_policy(str(tmp_path / "model")))
    for path, value in {"rollout.strategy": "fork_at_turn", "rollout.fork_at_turn.fork_turn": 2,
                        "rollout.group_size": 3, "reward.terms": ("outcome", "progress"),
                        "reward.progress.weight": 0.25, "advantage.name": "centred_outcome",
                        "eval.every": 2}.items():
        set_path(config, path, value)
    result = jobs.train_job(config, str(tmp_path))
    assert result["step"] == 2
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records[1:]:
        # the custom strategy made the batch: 2 roots and their children
        assert record["rollout/episodes"] == 2 + record["fork/children"]
        assert record["train/skipped"] == 0 and np.isfinite(record["train/loss"])
    # the summed reward terms are what the trainer logs: env return + 0.25 x final score
    assert any(r["rollout/reward_mean"] != 0 for r in records[1:])
    # a tree rollout saves one group's tree at the evaluation step, and launch.show_tree draws it
    tree = read_tree(str(tmp_path), 2)
    root, *children = tree["branches"]
    assert root["parent_id"] == -1 and len(children) == 2
    assert all(c["parent_id"] == root["episode_id"] and c["fork_turn"] == 2 for c in children)
    assert all(c["actions"][:2] == root["actions"][:2] != ["", ""] for c in children)
    assert all(score is not None for b in tree["branches"] for score in b["scores"])
    with pytest.raises(FileNotFoundError, match=r"no tree saved for step 1 .*saved steps: \[2\]"):
        read_tree(str(tmp_path), 1)
    done, = run_module_jobs(("-m", "launch.show_tree", f"--workdir={tmp_path}", "--step=2"),
                            timeout=120)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "trees" / "step_2.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # a typo in the part's settings fails at launch, naming the field
    set_path(config, "rollout.fork_at_turn.fork_trun", 1)
    with pytest.raises(ConfigError, match=r"config\.rollout\.fork_at_turn\.fork_trun: unknown"):
        Experiment.from_config(config)


def test_a_part_name_that_is_not_registered_is_rejected_with_the_registered_names():
    config = toy_config()
    set_path(config, "advantage.name", "centred_outcome")
    with pytest.raises(ConfigError) as error:
        Experiment.from_config(config)
    message = str(error.value)
    assert message.startswith("config.advantage.name: 'centred_outcome' is not one of (")
    for name in ADVANTAGES.names():
        assert repr(name) in message


# ----------------------------------------------------------------------------- reference


def test_config_reference_is_generated_from_the_schema_and_current():
    with open(os.path.join(ROOT, "configs", "README.md")) as f:
        readme = f.read()
    assert REFERENCE_BEGIN in readme and REFERENCE_END in readme
    block = readme[readme.index(REFERENCE_BEGIN):readme.index(REFERENCE_END) + len(REFERENCE_END)]
    assert block + "\n" == reference_markdown(), \
        "configs/README.md is out of date: run python -m launch.config_reference"
    # every field of every section (registered parts' settings included) has a row
    for name in SECTIONS:
        assert f"### `{name}`" in block
    for path in ("rollout.latr.tau_abs", "rollout.sampling.top_p", "advantage.grpo_step.gamma",
                 "reward.step_validity.valid", "filter.top_std.keep_fraction", "loss.eps_high",
                 "optim.learning_rate", "eval.num_tasks", "checkpoint.keep", "mesh.fsdp"):
        assert f"| `{path}` |" in block


def test_config_reference_job_checks_the_readme():
    proc, = run_module_jobs(("-m", "launch.config_reference", "--check"), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
