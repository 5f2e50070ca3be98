"""The scorer probe (does a process scorer rank oracle branches above random ones?) and the
Tic-Tac-Toe verifier-quality measurement, on hand-checked cases and against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import environments
from jaxtree.scorers.probe import (ORACLE, RANDOM, heuristic_scores, pairwise_auc,
                                          probe_branches, probe_report, unblended_judge)
from jaxtree.tokenizers import ByteTokenizer

TOK = ByteTokenizer()


def brute_force_auc(scores, labels):
    pairs = [(p, n) for p, n in itertools.product(range(len(scores)), repeat=2)
             if labels[p] == ORACLE and labels[n] == RANDOM]
    return sum(1.0 if scores[p] > scores[n] else 0.5 if scores[p] == scores[n] else 0.0
               for p, n in pairs) / len(pairs)


def test_pairwise_auc_matches_brute_force_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 12))
        labels = rng.integers(0, 2, n)
        labels[:2] = [ORACLE, RANDOM]
        scores = rng.integers(0, 4, n) / 3.0               # coarse: ties are common
        assert pairwise_auc(scores, labels) == pytest.approx(brute_force_auc(scores, labels))
    assert pairwise_auc(np.array([0.9, 0.1]), np.array([ORACLE, RANDOM])) == 1.0
    assert np.isnan(pairwise_auc(np.array([0.9]), np.array([ORACLE])))


def test_probe_branches_pair_oracle_and_random_prefixes_of_equal_length():
    make = lambda: environments.make("frozen_lake", style="compact")   # noqa: E731
    episodes, labels = probe_branches(make, TOK, range(1000, 1012), turns=2, seed=3)
    assert len(episodes) == len(labels) > 0 and len(episodes) % 2 == 0
    for oracle, random in zip(episodes[0::2], episodes[1::2]):
        assert oracle.task_id == random.task_id
        assert oracle.num_turns == random.num_turns == 2
        assert not oracle.finished and not random.finished
        # the oracle branch played the oracle's moves: replaying them from the task agrees
        env = make()
        env.reset(oracle.task_id)
        for turn in oracle.turns:
            assert turn.action_signature == env.action_signature(env.oracle_action())
            env.step(env.answer_text(env.oracle_action()))
    assert list(labels[0::2]) == [ORACLE] * (len(labels) // 2)
    report = probe_report(heuristic_scores(episodes), labels, heuristic_scores(episodes), 1.0)
    assert report["corr_heuristic"] == pytest.approx(1.0)
    assert report["seconds_per_branch"] == pytest.approx(1.0 / len(episodes))
    # FrozenLake's progress heuristic ranks the oracle's prefixes above random ones
    assert report["auc"] > 0.7 and report["mean_oracle"] > report["mean_random"]


def test_unblended_judge_inverts_eq8():
    rng = np.random.default_rng(1)
    judge, heuristic = rng.random(20), rng.random(20)
    blended = 0.7 * judge + 0.3 * heuristic
    np.testing.assert_allclose(unblended_judge(blended, heuristic, 0.7), judge, atol=1e-12)


def test_verifier_quality_labels():
    """Every state has several legal moves; the exact verifier accepts a superset of an MCTS
    verifier's optimal moves; labels of one (state, seed) are deterministic."""
    from launch.verifier_quality import accepted, sample_states
    states = sample_states(6, np.random.default_rng(0))
    assert len(states) == 6
    for state in states:
        legal = set(state.legal_actions())
        optimal = accepted(state, "minimax", 1)
        strong = accepted(state, "mcts", 300, seed=7)
        assert len(legal) > 1 and optimal and optimal <= legal and strong <= legal
        assert strong == accepted(state, "mcts", 300, seed=7)
