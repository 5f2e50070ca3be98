"""LATR as a rollout strategy: hybrid schedules, trajectory batches from trees, validation; and
`launch.latr_sampling`, its sampling study, checked against the strategies' own batches (in this
file: it runs the kernel this file compiles)."""

import json
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import environments
from jaxtree import models
from jaxtree.rollout import RolloutConfig, conversation
from jaxtree.experiment import Experiment, sibling_config
from jaxtree.policy import Policy
from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.strategies import (STRATEGIES, LatrRolloutConfig, RolloutContext, eta_at,
                                        num_tree_slots, sample_independent, sample_latr)
from jaxtree.tasks import eval_seeds
from jaxtree.sampling.latr import FRESH, TREE
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.tokenizers import ByteTokenizer
from launch import latr_sampling
from test_latr import peaky_model
from toy_run import assert_one_line_error, run_module_jobs

REFERENCE_SCHEDULE = ((0, 1.0), (10, 0.75), (20, 0.5), (80, 0.25), (200, 0.0))


def test_eta_schedules_and_tree_slot_counts():
    assert [eta_at(s, schedule=REFERENCE_SCHEDULE) for s in (0, 9, 10, 19, 20, 79, 80, 199, 200,
                                                              5000)] == \
        [1.0, 1.0, 0.75, 0.75, 0.5, 0.5, 0.25, 0.25, 0.0, 0.0]
    assert eta_at(0, 1.0, 0.985) == 1.0
    assert eta_at(100, 1.0, 0.985) == pytest.approx(0.985 ** 100)
    # Eq. 9: round to the nearest integer
    assert [num_tree_slots(e, 8) for e in (1.0, 0.75, 0.5, 0.25, 0.0, 0.22, 0.19)] == \
        [8, 6, 4, 2, 0, 2, 2]


def test_latr_rollouts_become_a_consistent_trajectory_batch():
    config, params = peaky_model()
    tokenizer = ByteTokenizer()
    make_env = lambda: environments.make("countdown", style="compact")  # noqa: E731
    settings = LatrRolloutConfig(tau_abs=0.15, tau_rel=0.5, tau_ed=0.6, windows=(2, 4))
    context = RolloutContext(config, tokenizer, make_env, RolloutConfig(
        context_length=64, max_action_tokens=16, sampling=SamplingConfig(temperature=1.0)), 4,
        labels=("verified", "state_signature"))
    tasks = [11, 12, 13]
    batch, stats = sample_latr(context, settings, params, jax.random.key(0), tasks, 3)
    assert len(batch) == 12
    chex.assert_shape([batch.tokens, batch.action_mask, batch.behaviour_logprobs],
                      (12, batch.tokens.shape[1]))
    chex.assert_shape([batch.labels["verified"], batch.labels["state_signature"],
                       batch.node_ids], (12, 1))
    assert batch.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert batch.task_ids.tolist() == [t for t in tasks for _ in range(4)]
    assert stats["latr/tree_slots"] == 3 and stats["latr/branches_per_group"] > 0
    env = make_env()
    for i in range(len(batch)):
        env.reset(int(batch.task_ids[i]))
        prompt = conversation.first_turn_tokens(tokenizer, env)
        tokens = batch.tokens[i, :batch.lengths[i]]
        assert tokens[:len(prompt)].tolist() == prompt
        mask = batch.action_mask[i, :batch.lengths[i]]
        assert not mask[:len(prompt)].any() and mask[len(prompt):].all()
        # the reward is the environment's verdict on the decoded action
        action = tokens[len(prompt):].tolist()
        ended = action[-1] in (s[0] for s in tokenizer.assistant_stop_sequences)
        _, reward, _, info = env.step(conversation.action_text(tokenizer, action, ended))
        assert batch.outcome_reward[i] == pytest.approx(reward)
        assert batch.success[i] == info["success"]
        # the verifier label and signatures are recorded as for the slot engine's episodes
        assert batch.num_turns[i] == 1 and not np.isnan(batch.labels["verified"][i, 0])
        assert batch.labels["state_signature"][i, 0] is not None
        # behaviour log-probs are the policy's (teacher-forced, temperature 1)
        logp = jax.nn.log_softmax(models.forward(config, params, jnp.asarray(tokens[None]))[0],
                                  axis=-1)
        for t in np.flatnonzero(mask):
            assert batch.behaviour_logprobs[i, t] == pytest.approx(
                float(logp[t - 1, tokens[t]]), abs=1e-4)
        # tree metadata: a branch points at an episode of its own group
        if batch.parent_ids[i] >= 0:
            parent = int(batch.parent_ids[i])
            assert batch.group_ids[parent] == batch.group_ids[i]
            assert batch.infos[i]["latr_origin"] == TREE and batch.fork_turns[i] == 0
            assert batch.infos[i]["latr_birth"] >= 0
            assert batch.depth[i] == batch.depth[parent] + 1
        else:
            assert batch.depth[i] == 0
        if batch.infos[i]["latr_origin"] == FRESH:
            # a completion (even one continuing a copy of another sample) is not a tree branch
            assert batch.parent_ids[i] == -1 and batch.infos[i]["latr_birth"] == -1
    assert stats["latr/forked_rows"] == sum(info["latr_fork_position"] >= 0
                                            for info in batch.infos)


def test_latr_strategy_needs_a_single_turn_environment():
    from jaxtree.config import ConfigError
    from jaxtree.experiment import Experiment, rl_config, sibling_config
    from jaxtree.rollout.strategies import build_strategy
    from test_trainer import CONFIG_FILE
    config, _ = peaky_model()

    def build(name, **overrides):
        cfg = rl_config(sibling_config(CONFIG_FILE, name), "grpo",
                        {"rollout.strategy": "latr", **overrides})
        exp = Experiment.from_config(cfg)
        return build_strategy(exp.rollout, config, ByteTokenizer(), exp.env.factory())

    with pytest.raises(ConfigError, match=r"rollout\.strategy: 'latr' branches inside one"):
        build("frozen_lake_sft")
    assert isinstance(build("countdown_sft"), STRATEGIES.part("latr").build)
    with pytest.raises(ConfigError, match=r"rollout\.latr\.completion: 'copy' is not one of"):
        build("countdown_sft", **{"rollout.latr.completion": "copy"})


# ----------------------------------------------------------------------------- launch.latr_sampling

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY_TASKS, K, N = 3, 4, 16
# The kernel shapes and thresholds of the tests above (3 groups x 4 slots, 16 tokens): the
# compiled kernel is shared.
OVERRIDES = {"max_action_tokens": N}
LATR_OVERRIDES = {"tau_abs": 0.15, "tau_rel": 0.5, "tau_ed": 0.6, "windows": (2, 4)}


def _config():
    config = sibling_config(os.path.join(ROOT, "configs", "countdown_latr.py"), "countdown_latr")
    config.rollout.update(OVERRIDES)
    config.rollout.latr.update(LATR_OVERRIDES)
    return config


def _direct(batch) -> dict:
    """The table's batch metrics computed here from the rows: per group the distinct parsed
    answers (all, and those of well-formed answers), its exact repeats and whether any row
    succeeded; the share of malformed answers and of rollouts that used all N tokens."""
    groups = [np.flatnonzero(batch.group_ids == g) for g in np.unique(batch.group_ids)]
    generated = batch.action_mask.sum(axis=1)
    return {"distinct_answers": np.mean([len({batch.infos[i]["action"] for i in rows})
                                         for rows in groups]),
            "distinct_well_formed": np.mean([len({batch.infos[i]["action"] for i in rows
                                                  if batch.infos[i]["valid"]})
                                             for rows in groups]),
            "malformed_rate": np.mean([not info["valid"] for info in batch.infos]),
            "capped_rate": np.mean(generated == N),
            "duplicates_per_group": np.mean([
                len(rows) - len({tuple(batch.tokens[i][batch.action_mask[i]]) for i in rows})
                for rows in groups]),
            "pass@1": batch.success.mean(),
            "pass@k": np.mean([batch.success[rows].any() for rows in groups]),
            "tokens_per_group": generated.sum() / len(groups),
            "response_length": generated.mean()}


def test_sampling_study_reports_every_method_as_the_strategies_sample_it(tmp_path):
    model_config, params = peaky_model()
    policy = Policy(model_config, params, ByteTokenizer(), "peaky tiny")
    output = str(tmp_path / "latr_sampling.json")
    latr_sampling.run(_config(), tasks=STUDY_TASKS, k=K, seeds=(0, 1), eta=0.5, output=output,
                      policy=policy, machine={}, examples=1)
    with open(output) as f:
        result = json.load(f)

    assert result["tasks"] == eval_seeds(STUDY_TASKS) and result["k"] == K
    assert result["plain_forward_budget_per_group"] == K * (N - 1)
    methods = result["methods"]
    assert list(methods) == ["independent", "latr", "hybrid"]
    assert [methods[m]["tree_slots"] for m in methods] == [None, K, 2]  # round(0.5 · 4)
    for name, method in methods.items():
        assert set(method["seeds"]) == {"0", "1"}
        for seed in method["seeds"].values():
            assert {key for key, _ in latr_sampling.METRICS} <= set(seed)
            assert 1 <= seed["distinct_answers"] <= K
            assert seed["pass@k"] >= seed["pass@1"]
            assert 0 < seed["forwards_per_group"] <= K * (N - 1)
        assert all(method["summary"][key]["n"] == 2 for key, _ in latr_sampling.METRICS
                   if key != "saturation_length" or name != "independent")
    independent = methods["independent"]
    assert independent["events"] is None and independent["summary"]["saturation_length"]["n"] == 0
    assert all(s["branching_ratio"] == 0 and s["prunes_per_group"] == 0
               and s["saturation_length"] is None for s in independent["seeds"].values())
    for name in ("latr", "hybrid"):
        for seed in methods[name]["seeds"].values():
            for kind in ("branch_steps", "prune_steps"):
                events = seed["events"][kind]
                assert sum(events["counts"]) == events["logged"] <= events["total"]
            assert seed["events"]["branch_steps"]["total"] == \
                pytest.approx(seed["branches_per_group"] * STUDY_TASKS)
    assert methods["latr"]["summary"]["branches_per_group"]["mean"] > 0

    # The study split into one output per seed (--merge) joins back into the same table.
    halves = []
    for seed in ("0", "1"):
        half = json.loads(json.dumps(result))
        half["seeds"] = [int(seed)]
        for method in half["methods"].values():
            method["seeds"] = {seed: method["seeds"][seed]}
            method["summary"] = method["events"] = None  # recomputed by the merge
        halves.append(half)
    merged = latr_sampling.merge_results(halves, ["a.json", "b.json"])
    assert merged["seeds"] == [0, 1]
    for name, method in methods.items():
        assert merged["methods"][name]["summary"] == method["summary"], name
        assert merged["methods"][name]["events"] == method["events"], name
    with pytest.raises(ValueError, match="b.json: seed 0 is already"):
        latr_sampling.merge_results([halves[0], halves[0]], ["a.json", "b.json"])
    with pytest.raises(ValueError, match="b.json: k differs"):
        latr_sampling.merge_results([halves[0], {**halves[1], "k": K + 1}], ["a.json", "b.json"])

    # seed 0 again, straight from the strategies: the same batches give the job's numbers
    exp = Experiment.from_config(_config())
    context = RolloutContext(model_config, policy.tokenizer, exp.env.eval_factory(),
                             exp.rollout.engine(), K)
    latr_batch, stats = sample_latr(context, exp.rollout.part_settings("latr"), params,
                                    jax.random.key(0), eval_seeds(STUDY_TASKS), K)
    engine = SlotEngine(model_config, policy.tokenizer, exp.env.eval_factory(),
                        exp.rollout.engine())
    independent_batch = sample_independent(engine, params, jax.random.key(0),
                                           eval_seeds(STUDY_TASKS), K)
    for name, batch in (("latr", latr_batch), ("independent", independent_batch)):
        reported = methods[name]["seeds"]["0"]
        for key, value in _direct(batch).items():
            assert reported[key] == pytest.approx(value), (name, key)
        # --examples: the first group of seed 0 as text, as the environment read it
        (example,) = methods[name]["examples"]
        first = np.flatnonzero(batch.group_ids == batch.group_ids[0])
        assert example["task"] == eval_seeds(STUDY_TASKS)[0]
        assert [r["text"] for r in example["rollouts"]] == [
            policy.tokenizer.decode(batch.tokens[i][batch.action_mask[i]].tolist()) for i in first]
        actions = [batch.infos[i]["action"] for i in first]
        assert [r["answer"] for r in example["rollouts"]] == [None if a is None else str(a)
                                                              for a in actions]
    generated = independent_batch.action_mask.sum(axis=1)
    assert independent["seeds"]["0"]["forwards_per_group"] == \
        pytest.approx(np.maximum(generated - 1, 0).sum() / STUDY_TASKS)
    assert methods["latr"]["seeds"]["0"]["forwards_per_group"] == \
        pytest.approx(stats["latr/forwards"] / STUDY_TASKS)
    assert methods["latr"]["seeds"]["0"]["saturation_length"] == stats["latr/saturation_length"]

    bad_flag, = run_module_jobs(("-m", "launch.latr_sampling", "--methods=latr,beam"))
    assert_one_line_error(bad_flag, 2, "--methods=latr,beam", "independent, latr, hybrid")


def test_the_study_samples_in_calls_of_groups_per_call_tasks():
    """Six tasks in two calls of three (the kernel shape compiled above): one batch with unique
    group ids, equal to the two calls made directly with keys fold_in(key, call), and LATR's
    statistics over the concatenated kernel outputs."""
    model_config, params = peaky_model()
    exp = Experiment.from_config(_config())
    context = RolloutContext(model_config, ByteTokenizer(), exp.env.eval_factory(),
                             exp.rollout.engine(), K)
    settings = exp.rollout.part_settings("latr")
    tasks, key = eval_seeds(2 * STUDY_TASKS), jax.random.key(5)
    for method in latr_sampling.make_methods(["independent", "latr"], K, 0.5):
        sampler = latr_sampling.Sampler(method, context, settings)
        batch, stats, out = sampler(params, key, tasks, groups_per_call=STUDY_TASKS)
        first = sampler(params, jax.random.fold_in(key, 0), tasks[:STUDY_TASKS])
        second = sampler(params, jax.random.fold_in(key, 1), tasks[STUDY_TASKS:])
        assert len(batch) == 2 * STUDY_TASKS * K
        assert sorted(set(batch.group_ids.tolist())) == list(range(2 * STUDY_TASKS))
        np.testing.assert_array_equal(batch.episode_ids, np.arange(2 * STUDY_TASKS * K))
        for part, rows in ((first, slice(0, STUDY_TASKS * K)),
                           (second, slice(STUDY_TASKS * K, None))):
            width = part[0].tokens.shape[1]
            np.testing.assert_array_equal(batch.tokens[rows, :width], part[0].tokens)
            assert [i["action"] for i in batch.infos[rows]] == \
                [i["action"] for i in part[0].infos]
        if method.tree_slots is None:
            assert out is None and stats == {}
            continue
        np.testing.assert_array_equal(out.tokens, np.concatenate([first[2].tokens,
                                                                  second[2].tokens]))
        assert stats["latr/forwards"] == first[1]["latr/forwards"] + second[1]["latr/forwards"]
        assert stats["latr/branches_per_group"] == pytest.approx(
            (first[1]["latr/branches_per_group"] + second[1]["latr/branches_per_group"]) / 2)
