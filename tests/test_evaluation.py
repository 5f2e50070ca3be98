"""Evaluation metrics against brute force and hand-checked episodes."""

import itertools
import json

import numpy as np
import pytest

import environments
from jaxtree import evaluation
from jaxtree.evaluation import EpisodeSummary, EvalConfig
from jaxtree.rollout import RolloutConfig
from jaxtree.tasks import EVAL_SEED_BASE, eval_seeds, train_seeds
from jaxtree.tokenizers import ByteTokenizer


@pytest.mark.parametrize("n,c,k", [(n, c, k) for n in range(1, 7) for c in range(n + 1)
                                   for k in range(1, n + 1)])
def test_pass_at_k_equals_subset_enumeration(n, c, k):
    """pass@k = the fraction of size-k subsets of the n samples holding at least one success."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    expected = sum(any(s) for s in subsets) / len(subsets)
    assert evaluation.pass_at_k(n, c, k) == pytest.approx(expected)


def frozen_lake():
    return environments.make("frozen_lake", style="compact")


def test_metrics_of_hand_made_episodes():
    episodes = [
        EpisodeSummary(1, True, 3, 0, {"completion_rate": 1.0}, response_tokens=9),
        EpisodeSummary(1, False, 5, 2, {"completion_rate": 0.5}, response_tokens=20),
        EpisodeSummary(2, False, 4, 1, {"completion_rate": 0.25}, response_tokens=11),
        EpisodeSummary(2, False, 4, 0, {"completion_rate": 0.25}, response_tokens=12),
    ]
    m = evaluation.metrics(episodes, k=2)
    assert m["episodes"] == 4 and isinstance(m["episodes"], int)
    assert m["success_rate"] == 0.25
    assert m["pass@1"] == pytest.approx((0.5 + 0.0) / 2)
    assert m["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert m["mean_turns"] == 4.0
    assert m["invalid_rate"] == pytest.approx(3 / 16)
    assert m["response_tokens"] == pytest.approx(52 / 16)
    assert m["completion_rate"] == pytest.approx(0.5)


def test_tictactoe_returns_and_verified_rates_are_split_by_mover():
    episodes = [EpisodeSummary(0, True, 3, 0, {"return": 1.0, "first_mover": True},
                               num_verified=3),
                EpisodeSummary(1, False, 4, 0, {"return": 0.0, "first_mover": True},
                               num_verified=1),
                EpisodeSummary(2, False, 3, 0, {"return": -1.0, "first_mover": False},
                               num_verified=2)]
    m = evaluation.metrics(episodes, k=1)
    assert m["return_first_mover"] == 0.5 and m["return_second_mover"] == -1.0
    assert m["verified_rate"] == pytest.approx(6 / 10)
    assert m["verified_rate_first_mover"] == pytest.approx(4 / 7)
    assert m["verified_rate_second_mover"] == pytest.approx(2 / 3)
    assert "response_tokens" not in m and "first_mover" not in m
    # Without the verifier's counts (any episode), no verified rate is made up.
    episodes[1].num_verified = None
    m = evaluation.metrics(episodes, k=1)
    assert not any(key.startswith("verified_rate") for key in m)


def test_reference_rows():
    tasks = eval_seeds(30)
    oracle = evaluation.metrics(evaluation.play_reference(frozen_lake, tasks, "oracle", 2), k=2)
    random = evaluation.metrics(evaluation.play_reference(frozen_lake, tasks, "random", 2), k=2)
    assert oracle["success_rate"] == 1.0 and oracle["invalid_rate"] == 0.0
    assert random["success_rate"] < 0.3 and random["invalid_rate"] == 0.0
    # The oracle's moves are the ones its verifier accepts; random legal moves often are not.
    assert oracle["verified_rate"] == 1.0 and random["verified_rate"] < 0.8
    with pytest.raises(ValueError, match="policy"):
        evaluation.play_reference(frozen_lake, tasks, "greedy", 1)


def test_training_and_evaluation_seeds_are_disjoint():
    drawn = train_seeds(np.random.default_rng(0), 10_000)
    assert max(drawn) < EVAL_SEED_BASE <= min(eval_seeds(5))
    assert eval_seeds(3) == [EVAL_SEED_BASE, EVAL_SEED_BASE + 1, EVAL_SEED_BASE + 2]


def test_evaluate_returns_transcripts_of_its_episodes(tiny, tmp_path):
    """The transcripts are the first sample of each task, then the second ones; replaying their
    actions in a fresh environment gives exactly their replies, return and outcome."""
    config, params = tiny
    # tests/test_rollout.py's engine shapes (compilations shared through the XLA cache)
    engine = evaluation.evaluation_engine(config, ByteTokenizer(), frozen_lake, RolloutConfig(
        num_slots=16, context_length=256, max_action_tokens=6), EvalConfig())
    assert engine.labeler.names == evaluation.EVAL_LABELS  # what the metrics read, only
    result = evaluation.evaluate(engine, params,
                                 EvalConfig(num_tasks=2, samples_per_task=2, transcripts=3))
    assert result.metrics["episodes"] == 4
    first, second = eval_seeds(2)
    assert [(t.task_id, t.sample) for t in result.transcripts] == [(first, 0), (second, 0),
                                                                   (first, 1)]
    for t in result.transcripts:
        env = frozen_lake()
        env.reset(t.task_id)
        assert env.prompt() in t.prompt
        assert t.num_turns == len(t.turns) > 0
        total = 0.0
        for number, turn in enumerate(t.turns, 1):
            observation, reward, done, _ = env.step(turn["action"])
            total += reward
            # the reply to the last action ends the episode and is not in its tokens
            assert turn["reply"] == (observation if number < t.num_turns else None)
        assert total == pytest.approx(t.episode_return) and env.success == t.success
        assert t.end_reason == ("done" if done else "truncated")

    jsonl, txt = evaluation.write_transcripts(str(tmp_path / "transcripts"), "step_3",
                                              result.transcripts)
    assert jsonl.endswith("step_3.jsonl") and txt.endswith("step_3.txt")
    with open(jsonl) as f:
        records = [json.loads(line) for line in f]
    assert [r["task_id"] for r in records] == [first, second, first]
    assert records[0]["turns"] == result.transcripts[0].turns
    with open(txt) as f:
        text = f.read()
    assert text.count("=== task ") == 3 and f"=== task {second} sample 0" in text
    assert "--- prompt\nFrozenLake" in text
    assert evaluation.evaluate(engine, params, EvalConfig(
        num_tasks=1, samples_per_task=1, transcripts=0)).transcripts == []

    # verified_rate: the share of the episode's actions that env.verify accepted as they were
    # played, recounted here by replaying the one episode's transcript.
    one = evaluation.evaluate(engine, params, EvalConfig(num_tasks=1, samples_per_task=1,
                                                         transcripts=1))
    (t,) = one.transcripts
    env = frozen_lake()
    env.reset(t.task_id)
    verified = 0
    for turn in t.turns:
        verified += env.verify(env.parse_action(turn["action"]))
        env.step(turn["action"])
    assert one.metrics["verified_rate"] == pytest.approx(verified / t.num_turns)
