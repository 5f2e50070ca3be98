"""The RL trainer end to end at toy size: exact resume, config validation, plots (signals:
test_job_faults.py)."""

import os
import types

import chex
import jax
import numpy as np
import pytest
from ml_collections import config_flags

from jaxtree.experiment import Experiment, rl_config, set_path, sibling_config
from jaxtree.policy import load_policy
from jaxtree import checkpoints
from jaxtree.rollout.stats import TIMING_METRICS
from jaxtree.train.metrics import read_metrics
from toy_run import CONFIG_FILE, ROOT, one_layer_policy, toy_config


def _final_params(workdir):
    from jaxtree.checkpoints import load_policy_checkpoint
    return load_policy_checkpoint(workdir)[1]


def _deterministic(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in TIMING_METRICS}
            for r in records]


def test_four_steps_equal_two_then_resume_then_two_bitwise_and_another_seed_differs(tmp_path):
    """Determinism and exact resume: a run of 4 steps, and a run of the same seed stopped after
    2 steps then resumed, give identical metrics (timings aside) and parameters; another seed
    gives another run. The sampler/trainer agreement is checked on steps 1 and 3 only
    (`train.agreement_every` 2), in the resumed run as in the straight one."""
    from jaxtree.train import jobs
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    model = one_layer_policy(str(tmp_path / "model"))  # nothing here depends on the depth
    # Checkpoints at the end and when stopped only: the resume is what is tested.
    config = toy_config(checkpoint__every=4, model__name=model, train__agreement_every=2)
    first = jobs.train_job(config, straight)
    assert first["step"] == 4 and not first["preempted"]

    partial = jobs.train_job(config, resumed, stop_after=2)
    assert partial["step"] == 2 and partial["preempted"]
    assert checkpoints.TrainCheckpointer(resumed).latest_step() == 2
    rest = jobs.train_job(config, resumed)
    assert rest["step"] == 4

    a, b = _final_params(straight), _final_params(resumed)
    chex.assert_trees_all_equal(a, b)
    records = read_metrics(straight)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    assert _deterministic(records) == _deterministic(read_metrics(resumed))
    other_seed = str(tmp_path / "seed1")
    jobs.train_job(toy_config(steps=1, train__seed=1, checkpoint__every=4, model__name=model),
                   other_seed)
    assert _deterministic(read_metrics(other_seed))[1] != _deterministic(records)[1]
    # the run did learn something: parameters moved, and every step made one optimizer update
    initial = jax.tree_util.tree_leaves(load_policy(model).params)
    assert any(not np.array_equal(x, y) for x, y in zip(initial, jax.tree_util.tree_leaves(a)))
    assert all(r["train/skipped"] == 0 for r in records[1:])
    assert ["update/logprob_gap_max" in r for r in records[1:]] == [True, False, True, False]
    assert max(records[1]["update/logprob_gap_max"], records[3]["update/logprob_gap_max"]) < 1e-4
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


@pytest.mark.parametrize("path,value,message", [
    ("advantage.name", "gae", "config.advantage.name: 'gae' is not one of ("),
    ("loss.aggregation", "sum", "config.loss.aggregation: 'sum' is not one of ("),
    ("loss.eps_low", 1.5, "config.loss.eps_low: 1.5 is not in [0, 1)"),
    ("rollout.group_size", 1, "config.rollout.group_size: 1 is not >= 2"),
    ("filter.top_std.keep_fraction", 0.0, "config.filter.top_std.keep_fraction: 0.0 is not in (0, 1]"),
    ("train.micro_batch_size", 0, "config.train.micro_batch_size: 0 is not positive"),
    ("advantage.grpo.epsilon", 0.0, "config.advantage.grpo.epsilon: 0.0 is not positive"),
    ("rollout.latr.tau_abs", 2.0, "config.rollout.latr.tau_abs: 2.0 is not in [0, 1]"),
    ("rollout.sampling.top_p", 0.0, "config.rollout.sampling.top_p: 0.0 is not in (0, 1]"),
    ("optim.schedule", "linear", "config.optim.schedule: 'linear' is not one of ('constant', 'cosine')"),
    ("optim.warmup_steps", 10_000, "config.optim.warmup_steps: 10000 is not in [0, 4]"),
    ("reward.terms", ("outcome", "bonus"), "config.reward.terms: ('outcome', 'bonus') is not all one of ("),
    ("mesh.data", 0, "config.mesh.data: 0 is not -1 or positive"),
    ("eval.every", -1, "config.eval.every: -1 is not positive"),
    ("train.agreement_every", -1, "config.train.agreement_every: -1 is not in [0, inf)"),
    ("checkpoint.keep", 0, "config.checkpoint.keep: 0 is not positive"),
    ("env.name", "chess", "config.env.name: 'chess' is not one of ("),
    ("env.options", {"size": -3}, "config.env.options: {'size': -3} does not build frozen_lake"),
    ("sft.epsilon", 1.5, "config.sft.epsilon: 1.5 is not in [0, 1]"),
    ("model.dtype", "float16", "config.model.dtype: 'float16' is not one of ("),
    ("loss.kl_coeff", 0.1, "config.loss.kl_coeff: unknown field (given 0.1); known fields: aggregation, "),
    ("train.kl_coef", 0.1, "config.train.kl_coef: moved to config.loss.kl_coef"),
    ("latr", {"tau_abs": 0.3}, "config.latr: moved to config.rollout.latr"),
])
def test_each_invalid_config_value_fails_naming_the_field(path, value, message):
    from jaxtree.train import jobs
    from jaxtree.config import ConfigError
    config = toy_config()
    set_path(config, path, value)
    with pytest.raises(ConfigError) as error:
        jobs.check_experiment(Experiment.from_config(config))
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("override,expected", [
    ("--config.train.learning_rat=1e-3", "config.train.learning_rat: unknown field"),
    ("--config.train.kl_coef=0.1", "config.train.kl_coef moved to config.loss.kl_coef"),
    ("--config.latr.tau_abs=0.3", "config.latr.tau_abs moved to config.rollout.latr.tau_abs"),
    ("--config.rollout.sampling.top_q=1", "config.rollout.sampling.top_q: unknown field"),
])
def test_a_bad_override_is_named_by_its_config_path(override, expected):
    """The flag parser's message for an override that names no field (the job's path, below)."""
    from launch.common import _override_error
    message = {"learning_rat": "'learning_rat'", "kl_coef": "kl_coef", "tau_abs": "latr",
               "top_q": "'top_q' Did you mean \"top_p\"?"}
    key = override.split("=")[0].split(".")[-1]
    assert _override_error(["launch.train", override], message[key]).startswith(expected)


def test_every_experiment_config_validates():
    from jaxtree.train import jobs
    names = [n for n in os.listdir(os.path.join(ROOT, "configs")) if n.endswith(".py")]
    assert {"frozen_lake_grpo.py", "frozen_lake_dapo.py", "sokoban_grpo.py", "sokoban_dapo.py",
            "countdown_grpo.py", "countdown_dapo.py", "sudoku4_grpo.py", "sudoku4_dapo.py",
            "countdown_latr.py", "frozen_lake_sft.py"} <= set(names)
    for name in names:
        config = config_flags.config_flags._LoadConfigModule(
            name, os.path.join(ROOT, "configs", name)).get_config()
        if "prm" in config:   # launch.train_prm's config: the experiment and its `prm` section
            from jaxtree.train.jobs import read_prm_config
            exp, _ = read_prm_config(config)
        else:
            exp = Experiment.from_config(config)
        jobs.check_experiment(exp)
        if name.endswith("_dapo.py"):
            assert exp.filter.name == "dynamic_sampling"
            assert exp.loss.aggregation == "token-mean"
            assert exp.loss.eps_high > exp.loss.eps_low


def test_a_process_reuses_the_updater_it_built_for_a_configuration(tmp_path):
    """Two runs of one configuration in a process share one Updater (its jitted programs, so
    they are traced and compiled once); any setting its programs depend on gives another, and
    a LoRA updater (which holds its placed base) is never shared."""
    import dataclasses

    from jaxtree.train.pipeline import build_updater
    model = one_layer_policy(str(tmp_path / "model"))
    exp = Experiment.from_config(toy_config(model__name=model))
    policy = load_policy(model)
    first = build_updater(exp, policy, 4)
    assert build_updater(exp, load_policy(model), 4) is first   # another load, same shapes
    assert build_updater(Experiment.from_config(toy_config(model__name=model)), policy, 4) is first
    # a run's length matters to a decaying learning rate only
    assert build_updater(Experiment.from_config(toy_config(model__name=model, steps=7)), policy,
                         4) is first
    others = [(Experiment.from_config(toy_config(model__name=model, **setting)), policy, 4)
              for setting in ({"loss__kl_coef": 0.5}, {"optim__learning_rate": 0.1},
                              {"train__micro_batch_size": 1}, {"model__remat": True},
                              {"model__cpu_library_fusions": False})]
    others.append((exp, load_policy("tiny"), 4))                       # another architecture
    # seq-sum's constant: max_action_tokens x the environment's turn limit when max_turns is 0
    no_turn_limit = Experiment.from_config(toy_config(model__name=model, rollout__max_turns=0))
    others.append((no_turn_limit, policy, 5))
    assert build_updater(no_turn_limit, policy, 4) is not build_updater(*others[-1])
    for other in others:
        assert build_updater(*other) is not first
        assert build_updater(exp, policy, 4) is first  # still kept beside the others
    cosine = [Experiment.from_config(toy_config(model__name=model, steps=steps,
                                                optim__schedule="cosine")) for steps in (4, 7)]
    assert build_updater(cosine[0], policy, 4) is build_updater(cosine[0], policy, 4)
    assert build_updater(cosine[1], policy, 4) is not build_updater(cosine[0], policy, 4)
    lora = dataclasses.replace(policy, lora=dataclasses.replace(exp.model.lora, rank=2))
    assert build_updater(exp, lora, 4) is not build_updater(exp, lora, 4)


def test_old_flat_train_fields_keep_working_in_rl_config():
    config = rl_config(sibling_config(CONFIG_FILE, "frozen_lake_sft"), "grpo",
                       strategy="independent", kl_coef=0.05, keep_fraction=0.5, steps=7)
    assert config.loss.kl_coef == 0.05 and config.filter.top_std.keep_fraction == 0.5
    assert config.rollout.strategy == "independent" and config.train.steps == 7
    with pytest.raises(ValueError, match="unknown field 'kl_coeff'"):
        rl_config(sibling_config(CONFIG_FILE, "frozen_lake_sft"), "grpo", kl_coeff=0.05)


def _synthetic_batch(rewards_by_group, turns=3, width=16):
    """A TrajectoryBatch with the given outcome rewards, one group per inner list."""
    from jaxtree.rollout.trajectory import DONE, EpisodeRecord, TurnRecord, assemble
    records, episode = [], 0
    valid = [True, False, True][:turns]
    for g, rewards in enumerate(rewards_by_group):
        for r in rewards:
            mask = np.zeros(width, bool)
            mask[4:7] = mask[10:13] = True
            turn_index = np.repeat(np.arange(turns), -(-width // turns))[:width].astype(np.int32)
            records.append(EpisodeRecord(
                tokens=np.arange(width, dtype=np.int32), action_mask=mask,
                logprobs=np.where(mask, -1.0, 0.0).astype(np.float32), turn_index=turn_index,
                turns=[TurnRecord(reward=float(r) if t == turns - 1 else 0.0, valid=valid[t],
                                  node_id=episode * turns + t)
                       for t in range(turns)],
                success=r > 0, end_reason=DONE, context_full=False, task_id=1000 + g,
                group_id=g, episode_id=episode, parent_id=-1, fork_turn=-1, depth=0, info={}))
            episode += 1
    return assemble(records, pad_id=0)


class _FakeSampler:
    def __init__(self):
        self.drawn = []

    def draw(self, count):
        start = len(self.drawn)
        self.drawn += list(range(start, start + count))
        return self.drawn[start:]


class _ScriptedStrategy:
    """Returns the next scripted round of rewards and records the tasks it was given."""

    def __init__(self, rounds):
        self.rounds = iter(rounds)
        self.calls = []

    def sample(self, params, rng, tasks, step):
        self.calls.append(list(tasks))
        return _synthetic_batch(next(self.rounds)), {"scripted/rounds": len(self.calls)}


def _bare_trainer(strategy, **overrides):
    """A Trainer with only the parts the rollout stage needs (no model, no updater)."""
    from jaxtree.advantages import build_filter
    from jaxtree.rewards import build_rewards
    from jaxtree.train.trainer import Trainer
    exp = Experiment.from_config(toy_config(**overrides))
    trainer = Trainer.__new__(Trainer)
    trainer.exp = exp
    trainer.pipeline = types.SimpleNamespace(strategy=strategy, rewards=build_rewards(exp.reward),
                                             filter=build_filter(exp.filter))
    trainer.policy = type("P", (), {"tokenizer": type("T", (), {"pad_id": 0})()})()
    trainer.updater = types.SimpleNamespace(sampling_params=lambda params: params)
    return trainer


def test_dapo_dynamic_sampling_drops_uniform_groups_and_refills_from_fresh_tasks():
    strategy = _ScriptedStrategy([
        [[1, 1], [0, 1], [0, 0]],        # round 0: only group 1 has a learning signal
        [[1, 0], [0, 0], [1, 0]],        # round 1: groups 0 and 2 do
    ])
    trainer = _bare_trainer(strategy, filter__name="dynamic_sampling", rollout__groups_per_step=3,
                            rollout__group_size=2, filter__dynamic_sampling__max_rounds=4)
    batch, rewards, metrics = trainer.rollout(None, step=1, sampler=_FakeSampler())
    assert strategy.calls == [[0, 1, 2], [3, 4, 5]]  # the refill round draws fresh tasks
    assert metrics["rollout/sampling_rounds"] == 2 and metrics["rollout/episodes"] == 12
    assert metrics["scripted/rounds"] == 1.5  # the strategy's metrics, averaged over rounds
    # kept: round 0 group 1, then round 1 groups 0 and 2 (ids offset by 3), 3 groups x 2 rollouts
    assert sorted(set(batch.group_ids.tolist())) == [1, 3, 5]
    assert len(batch) == 6 and len(rewards.outcome) == 6
    np.testing.assert_array_equal(rewards.outcome, batch.outcome_reward)
    for g in set(batch.group_ids.tolist()):
        group_rewards = batch.outcome_reward[batch.group_ids == g]
        assert group_rewards.max() > group_rewards.min()
    assert len(set(batch.episode_ids.tolist())) == 6
    assert len(set(batch.node_ids.ravel().tolist())) == 6 * 3  # renumbered across rounds


def test_instance_filter_keeps_the_highest_std_groups():
    strategy = _ScriptedStrategy([[[1, 1], [0, 1], [0, 0], [1, 0.5]]])
    trainer = _bare_trainer(strategy, filter__name="top_std", rollout__groups_per_step=4,
                            rollout__group_size=2, filter__top_std__keep_fraction=0.5)
    batch, _, metrics = trainer.rollout(None, step=1, sampler=_FakeSampler())
    assert sorted(set(batch.group_ids.tolist())) == [1, 3]      # std 0.5 and 0.25
    assert metrics["rollout/kept_groups"] == 2


@pytest.mark.parametrize("advantage", ["grpo", "drgrpo", "rloo", "grpo_step"])
def test_advantages_put_each_rollouts_advantage_on_its_action_tokens(advantage):
    from jaxtree.advantages import build_advantage
    from jaxtree.rewards import build_rewards
    exp = Experiment.from_config(toy_config(
        advantage__name=advantage, advantage__grpo_step__gamma=0.5,
        reward__terms=("outcome", "step_validity"), reward__step_validity__valid=0.1,
        reward__step_validity__invalid=0.2))
    batch = _synthetic_batch([[1, 0, 0], [0.5, 0.5, 1]])
    rewards = build_rewards(exp.reward)(batch)
    out = build_advantage(exp.advantage)(batch, rewards)
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
        if advantage != "grpo_step":
            np.testing.assert_allclose(out[i][batch.action_mask[i]], expected, atol=1e-5)
            continue
        # per turn: GRPO outcome advantage + discounted step rewards (+0.1 valid, -0.2 invalid)
        grpo = (r - group.mean()) / (group.std(ddof=1) + 1e-6)
        step = [0.1, -0.2, 0.1]
        for t in np.flatnonzero(batch.action_mask[i]):
            k = batch.turn_index[i, t]
            ret = sum(0.5 ** (j - k) * step[j] for j in range(k, 3))
            assert out[i, t] == pytest.approx(grpo + ret, abs=1e-5)


def test_masked_trajectories_leave_the_group_statistics():
    """advantage.mask_context_full: an episode cut by a full context gets 0 and the others are
    normalised without it."""
    from jaxtree.advantages import build_advantage
    from jaxtree.rewards import build_rewards
    batch = _synthetic_batch([[1, 0, 0, 1]])
    batch.context_full[3] = True
    for mask in (False, True):
        exp = Experiment.from_config(toy_config(advantage__mask_context_full=mask))
        out = build_advantage(exp.advantage)(batch, build_rewards(exp.reward)(batch))
        rows = [0, 1, 2] if mask else [0, 1, 2, 3]
        group = batch.outcome_reward[rows]
        for i in range(4):
            expected = 0.0 if i not in rows else \
                (batch.outcome_reward[i] - group.mean()) / (group.std(ddof=1) + 1e-6)
            np.testing.assert_allclose(out[i][batch.action_mask[i]], expected, atol=1e-5)


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


def test_the_initial_evaluation_is_shared_by_runs_from_the_same_parameters(tmp_path):
    """Step 0 reads an earlier run's evaluation of the same parameters with the same settings
    (its metrics and transcripts) instead of evaluating again; other parameters, another
    evaluation setting or an unreadable record evaluate anew."""
    from jaxtree.evaluation import EvalResult, Transcript
    from jaxtree.models import get_preset
    from jaxtree.train.shared_eval import SharedEvaluations

    class CountingEvaluator:
        def __init__(self):
            self.calls = 0

        def __call__(self, params):
            self.calls += 1
            value = float(np.asarray(params["w"]).sum()) + self.calls  # a new result each call
            return EvalResult({"success_rate": value, "episodes": 7}, [Transcript(
                3, 0, True, 1.0, 2, "done", "prompt", [{"action": "a", "reply": None}])])

    shared = SharedEvaluations(str(tmp_path / "sft" / "initial_evals"))

    def run(workdir, params, **overrides):
        trainer = _bare_trainer(None, **overrides)
        trainer.pipeline.evaluator = evaluator
        trainer.policy.config = get_preset("tiny")
        trainer.workdir, trainer.shared_evaluations = str(tmp_path / workdir), shared
        return trainer.initial_evaluation({"w": params})

    evaluator = CountingEvaluator()
    params = np.arange(6, dtype=np.float32)
    first = run("a", params)
    assert evaluator.calls == 1 and first == {"eval/success_rate": 16.0, "eval/episodes": 7}
    assert isinstance(first["eval/episodes"], int)
    # another run (another training seed, another strategy) from the same parameters reads it
    again = run("b", params.copy(), train__seed=5, loss__kl_coef=0.5)
    assert again == first and isinstance(again["eval/episodes"], int)
    assert evaluator.calls == 1
    assert (tmp_path / "b" / "transcripts" / "step_0.txt").read_text() == \
        (tmp_path / "a" / "transcripts" / "step_0.txt").read_text()
    # what the evaluation reads differs: evaluated again
    moved = params.copy()
    moved[0] = np.nextafter(moved[0], 1)
    assert run("c", moved) != first and evaluator.calls == 2
    assert run("d", params, eval__seed=1) != first and evaluator.calls == 3
    assert run("e", params, rollout__max_action_tokens=5) != first and evaluator.calls == 4
    records = sorted(os.listdir(shared.directory))
    assert len(records) == 4 and all(name.endswith(".json") for name in records)
    # a torn record is evaluated and written again
    path = os.path.join(shared.directory, records[0])
    with open(path, "r+") as f:
        f.truncate(10)
    reruns = [run(name, p, **o) for name, p, o in [("f", params, {}), ("g", moved, {}),
                                                   ("h", params, {"eval__seed": 1}),
                                                   ("i", params,
                                                    {"rollout__max_action_tokens": 5})]]
    assert evaluator.calls == 5 and len(os.listdir(shared.directory)) == 4
    assert sum(result["eval/success_rate"] == 20.0 for result in reruns) == 1


def test_an_initial_evaluation_that_cannot_be_kept_still_counts(tmp_path, capsys):
    """A warm start the run cannot write to (read-only, shared from elsewhere): the run's own
    evaluation is its step-0 result, and the reason it was not kept is reported."""
    from jaxtree.evaluation import EvalResult
    from jaxtree.models import get_preset
    from jaxtree.train.shared_eval import SharedEvaluations
    blocker = tmp_path / "sft"
    blocker.write_text("a file where the warm start's directory would be")
    trainer = _bare_trainer(None)
    trainer.pipeline.evaluator = lambda params: EvalResult({"success_rate": 0.5}, [])
    trainer.policy.config = get_preset("tiny")
    trainer.workdir = str(tmp_path / "run")
    trainer.shared_evaluations = SharedEvaluations(str(blocker / "initial_evals"))
    assert trainer.initial_evaluation({"w": np.zeros(2, np.float32)}) == {"eval/success_rate": 0.5}
    assert "could not keep the evaluation for later runs" in capsys.readouterr().err
