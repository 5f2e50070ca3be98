"""GiGPO advantages against a plain-Python transcription of verl-agent's algorithm, and a
hand-worked case."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from jaxtree.advantages import AdvantageStage, build_advantage, gigpo
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import DONE, EpisodeRecord, TurnRecord, assemble

ATOL = 1e-5
RANDOM_CASES = 30
SHAPE = (8, 4)   # (N, K), one shape: one compilation per normalisation mode
STATES = ("a", "b", "c")


def make_batch(anchors, group_ids, success=None):
    """One rollout per entry of `anchors` (the anchor state of each turn); one observation and
    two action tokens per turn."""
    records = []
    for i, turns in enumerate(anchors):
        mask = np.tile([False, True, True], len(turns))
        records.append(EpisodeRecord(
            tokens=np.arange(3 * len(turns), dtype=np.int32) + 1, action_mask=mask,
            logprobs=np.zeros(3 * len(turns), np.float32),
            turn_index=np.repeat(np.arange(len(turns)), 3).astype(np.int32),
            turns=[TurnRecord(reward=0.0, valid=True, node_id=-1, labels={"verified": 1.0, "process_score": 0.5, "state_signature": f"{t}|{s}", "action_signature": "x", "anchor_state": s}) for t, s in enumerate(turns)],
            success=bool(success[i]) if success is not None else False, end_reason=DONE,
            context_full=False, task_id=int(group_ids[i]), group_id=int(group_ids[i]),
            episode_id=i, parent_id=-1, fork_turn=-1, depth=0, info={}))
    return assemble(records, pad_id=0)


def ref_gigpo(batch, rewards, valid, gamma, weight, normalize_std, epsilon):
    """verl-agent's GiGPO: episode scores and step returns normalised by group (ddof=1 std,
    std 1 for a one-member group), A = A^E + w A^S; loops and dicts only."""
    n, k = batch.labels["anchor_state"].shape

    def normalise(scores: dict):
        by_key: dict = {}
        for (key, _), value in scores.items():
            by_key.setdefault(key, []).append(value)
        out = {}
        for (key, member), value in scores.items():
            values = by_key[key]
            if len(values) == 1:
                out[(key, member)] = 0.0   # (value - its own mean) / 1
                continue
            mean = sum(values) / len(values)
            std = statistics.stdev(values)
            out[(key, member)] = (value - mean) / (std + epsilon) if normalize_std \
                else value - mean
        return out

    rows = [i for i in range(n) if valid[i]]
    episode = normalise({(int(batch.group_ids[i]), i):
                         float(rewards.outcome[i]) + sum(float(rewards.turn[i][t])
                                                         for t in range(batch.num_turns[i]))
                         for i in rows})
    step_scores = {}
    for i in rows:
        length = int(batch.num_turns[i])
        r = [float(rewards.turn[i][t]) for t in range(length)]
        r[-1] += float(rewards.outcome[i])
        running = 0.0
        for t in reversed(range(length)):
            running = r[t] + gamma * running
            step_scores[((int(batch.group_ids[i]), batch.labels["anchor_state"][i][t]), (i, t))] = running
    step = normalise(step_scores)
    out = np.zeros((n, k))
    for (key, (i, t)), value in step.items():
        out[i, t] = episode[(int(batch.group_ids[i]), i)] + weight * value
    return out


def test_matches_transcription_on_random_batches():
    rng = np.random.default_rng(0)
    n, k = SHAPE
    for case in range(RANDOM_CASES):
        lengths = rng.integers(1, k + 1, n)
        lengths[0] = k   # every batch K turns wide: one compilation
        anchors = [[str(rng.choice(STATES)) for _ in range(m)] for m in lengths]
        groups = rng.integers(0, 3, n)
        batch = make_batch(anchors, groups)
        turn = np.where(batch.played, rng.choice([0.0, 0.005, -0.005, 0.3], (n, k)), 0.0)
        rewards = Rewards(turn.astype(np.float32),
                          rng.choice([0.0, 1.0, -0.1], n).astype(np.float32))
        valid = rng.random(n) > 0.15
        settings = gigpo.GigpoConfig(gamma=float(rng.choice([0.95, 1.0, 0.5])),
                                     step_weight=float(rng.choice([1.0, 0.5])),
                                     normalize_std=bool(case % 2))
        got = gigpo.gigpo_turn_advantages(batch, rewards, valid, settings)
        want = ref_gigpo(batch, rewards, valid, settings.gamma, settings.step_weight,
                         settings.normalize_std, settings.epsilon)
        np.testing.assert_allclose(np.asarray(got), want, atol=ATOL, rtol=1e-4,
                                   err_msg=f"case {case}")


def test_hand_worked_group_and_token_broadcast():
    # One group, two rollouts: both start in "s"; rollout 0 goes to "t" and wins (outcome 1),
    # rollout 1 goes to "u" and loses. gamma = 0.5, no step rewards, mean_norm (no std).
    batch = make_batch([["s", "t"], ["s", "u"]], [0, 0])
    rewards = Rewards(np.zeros((2, 2), np.float32), np.array([1.0, 0.0], np.float32))
    settings = gigpo.GigpoConfig(gamma=0.5, step_weight=1.0, normalize_std=False)
    got = np.asarray(gigpo.gigpo_turn_advantages(batch, rewards, np.ones(2, bool), settings))
    # Episode: +0.5 / -0.5. Step group "s": returns 0.5 and 0 -> +0.25 / -0.25; "t" and "u"
    # are singletons -> 0.
    np.testing.assert_allclose(got, [[0.75, 0.5], [-0.75, -0.5]], atol=ATOL)
    # Through the registry, by config only: each turn's advantage on its two action tokens.
    stage = AdvantageStage.from_config(
        {"name": "gigpo", "gigpo": {"gamma": 0.5, "normalize_std": False}}, "advantage")
    tokens = build_advantage(stage)(batch, rewards)
    np.testing.assert_allclose(tokens[0, :6], [0, 0.75, 0.75, 0, 0.5, 0.5], atol=ATOL)
    np.testing.assert_allclose(tokens[1, :6], [0, -0.75, -0.75, 0, -0.5, -0.5], atol=ATOL)


def test_step_group_metrics_count_shared_anchors():
    batch = make_batch([["s", "t"], ["s", "u"], ["v"]], [0, 0, 1])
    metrics = gigpo.step_group_metrics(gigpo.anchor_ids(batch), np.ones(3, bool))
    assert metrics["gigpo/step_groups"] == 4.0          # (0,s) (0,t) (0,u) (1,v)
    assert math.isclose(metrics["gigpo/shared_step_fraction"], 2 / 5)


def test_missing_anchor_is_an_error():
    batch = make_batch([["s"]], [0])
    batch.labels["anchor_state"][0, 0] = None
    with pytest.raises(ValueError, match="no anchor state"):
        gigpo.anchor_ids(batch)
