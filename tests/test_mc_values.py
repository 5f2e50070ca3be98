"""MC-PR: Monte-Carlo state values from forked continuations, and their process reward; RTMC's
validation bonus; the config-only reachability of the process-credit parts."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import environments
from jaxtree.experiment import Experiment, default_config, set_path
from jaxtree.rewards import RewardStage, build_rewards
from jaxtree.rewards.mc_process import mc_process_rewards
from jaxtree.rollout import RolloutConfig, SlotEngine
from jaxtree.rollout.strategies.mc_values import sample_with_values
from jaxtree.rollout.trajectory import DONE, EpisodeRecord, TurnRecord, assemble
from jaxtree.sampling import SamplingConfig
from jaxtree.tokenizers import ByteTokenizer
from jaxtree.train.pipeline import check_labels

TOK = ByteTokenizer()


def make_batch(turn_values, outcomes, validation=None):
    """Rollouts whose turn t carries mc_value turn_values[i][t] and reward 0 except the last,
    which carries the outcome (so outcome_reward is the outcome)."""
    records = []
    for i, values in enumerate(turn_values):
        turns = [TurnRecord(reward=outcomes[i] if t == len(values) - 1 else 0.0, valid=True,
                            node_id=-1, labels={
                                "validation": bool(validation[i][t]) if validation else False,
                                "mc_value": v})
                 for t, v in enumerate(values)]
        n = 2 * len(values)
        records.append(EpisodeRecord(
            tokens=np.arange(n, dtype=np.int32) + 1, action_mask=np.tile([False, True], len(values)),
            logprobs=np.zeros(n, np.float32),
            turn_index=np.repeat(np.arange(len(values)), 2).astype(np.int32), turns=turns,
            success=outcomes[i] > 0, end_reason=DONE, context_full=False, task_id=0, group_id=0,
            episode_id=i, parent_id=-1, fork_turn=-1, depth=0, info={}))
    return assemble(records, pad_id=0)


def test_process_reward_is_the_temporal_difference_of_values_ending_in_the_return():
    batch = make_batch([[0.25, 0.5, 0.75], [0.5]], [1.0, -1.0])
    # row 0: 0.5-0.25, 0.75-0.5, 1-0.75; row 1: -1-0.5; 0 past the last turn
    np.testing.assert_allclose(mc_process_rewards(batch), [[0.25, 0.25, 0.25], [-1.5, 0, 0]])
    # the rewards telescope to return - V(s_0)
    np.testing.assert_allclose(mc_process_rewards(batch).sum(1), [0.75, -1.5])


def test_process_reward_without_values_says_which_strategy_to_use():
    batch = make_batch([[0.25, float("nan")]], [1.0])
    with pytest.raises(ValueError, match="turn 1 of row 0.*mc_values"):
        mc_process_rewards(batch)


def test_validation_bonus_rewards_reported_validations_only():
    batch = make_batch([[0.0, 0.0, 0.0], [0.0]], [1.0, 0.0],
                       validation=[[False, True, False], [True]])
    stage = RewardStage.from_config({"terms": ("validation_bonus",),
                                     "validation_bonus": {"beta": 0.05}}, "reward")
    rewards = build_rewards(stage)(batch)
    np.testing.assert_allclose(rewards.turn, [[0, 0.05, 0], [0.05, 0, 0]])
    np.testing.assert_allclose(rewards.outcome, [0, 0])


@pytest.fixture(scope="module")
def greedy_engine(tiny):
    config, _ = tiny
    # The shapes of tests/test_rollout.py's engine (shared compilations), greedy sampling.
    return SlotEngine(config, TOK, lambda: environments.make("frozen_lake", style="compact"),
                      RolloutConfig(num_slots=16, context_length=256, max_action_tokens=6,
                                    max_turns=3, sampling=SamplingConfig(temperature=0.0)))


def test_greedy_continuations_reproduce_the_episode_so_each_value_is_its_return(tiny,
                                                                                greedy_engine):
    """With greedy sampling and a deterministic lake, a continuation forked at s_t replays the
    episode's own future exactly if, and only if, the fork copied the cache, the history and the
    environment faithfully: every V(s_t) must equal the episode's own return."""
    _, params = tiny
    m = 3
    batch, metrics = sample_with_values(greedy_engine, params, jax.random.key(0), [3, 7],
                                        group_size=2, continuations=m)
    assert len(batch) == 4 and set(batch.group_ids) == {0, 1}
    played = batch.played
    assert metrics["mc/continuations"] == m * played.sum()
    assert metrics["mc/main_steps"] == played.sum()
    values = batch.labels["mc_value"]
    assert np.isfinite(values[played]).all() and np.isnan(values[~played]).all()
    np.testing.assert_allclose(values, np.where(played, batch.outcome_reward[:, None], np.nan),
                               atol=1e-6)
    np.testing.assert_allclose(mc_process_rewards(batch), 0.0, atol=1e-6)
    # the continuations are dropped from the batch and the engine holds nothing afterwards
    assert not greedy_engine.records and not greedy_engine.slots and not greedy_engine.held


def test_too_few_slots_for_the_continuations_is_a_clear_error(tiny, greedy_engine):
    _, params = tiny
    with pytest.raises(ValueError, match="num_slots=16 is too small"):
        sample_with_values(greedy_engine, params, jax.random.key(0), [1, 2, 3, 4], 4, 2)


@pytest.mark.parametrize("overrides", [
    {"reward.terms": ("verifier",), "advantage.name": "vpr"},
    {"reward.terms": ("verifier",), "advantage.name": "vpr",
     "advantage.vpr.grouping": "state_group"},
    {"rollout.strategy": "mc_values", "rollout.mc_values.continuations": 4,
     "reward.terms": ("mc_process",), "advantage.name": "vpr"},
    {"reward.terms": ("outcome", "step_validity", "validation_bonus"), "advantage.name": "rtmc",
     "advantage.rtmc.n_prior": 0.0, "rollout.signature": "state"},
    {"reward.terms": ("outcome", "step_validity"), "advantage.name": "gigpo",
     "advantage.gigpo.step_weight": 0.5},
    {"rollout.strategy": "latr", "reward.terms": ("verifier",), "advantage.name": "vpr"},
])
def test_each_part_is_reachable_by_config_only(overrides):
    config = default_config()
    for path, value in overrides.items():
        set_path(config, path, value)
    exp = Experiment.from_config(config)
    check_labels(exp)   # every label the parts read has a producer
    assert exp.advantage.name == overrides["advantage.name"]
    assert exp.reward.terms == overrides["reward.terms"]


@pytest.mark.parametrize("name", ["state", "history"])
def test_the_configured_signature_function_names_each_recorded_state(tiny, name):
    from jaxtree.rollout.strategies import sample_independent
    config, params = tiny
    from jaxtree.rollout.labels import TurnLabeler
    from jaxtree.rollout.signatures import signature_function
    labeler = TurnLabeler(("state_signature", "anchor_state", "action_signature"),
                          signature_function(name))
    engine = SlotEngine(config, TOK, lambda: environments.make("frozen_lake", style="compact"),
                        RolloutConfig(num_slots=16, context_length=256, max_action_tokens=6,
                                      max_turns=3, signature=name,
                                      sampling=SamplingConfig(temperature=0.0)), labeler)
    batch = sample_independent(engine, params, jax.random.key(0), [3], 2)
    for i in range(len(batch)):
        for t in range(batch.num_turns[i]):
            want = (batch.labels["anchor_state"][i, t] if name == "state"
                    else "|".join(batch.labels["action_signature"][i, :t]))
            assert batch.labels["state_signature"][i, t] == want


def _label_agreement_by_hand(rewards, verified, valid, num_turns):
    """jaxtree.rewards.mc_process.label_agreement transcribed as loops over episodes and turns."""
    kinds = {"verified": [], "legal, not verified": [], "illegal": []}
    for i, n in enumerate(num_turns):
        for t in range(n):
            kind = ("verified" if verified[i][t] > 0.5 else
                    "legal, not verified" if valid[i][t] else "illegal")
            kinds[kind].append(float(rewards[i][t]))

    def auc(first, second):
        if not first or not second:
            return float("nan")
        wins = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in first for y in second)
        return wins / (len(first) * len(second))

    rest = kinds["legal, not verified"] + kinds["illegal"]
    return kinds, {"verified vs rest": auc(kinds["verified"], rest),
                   "legal vs illegal": auc(kinds["legal, not verified"], kinds["illegal"]),
                   "verified vs legal unverified": auc(kinds["verified"],
                                                       kinds["legal, not verified"])}


def test_mc_label_agreement_hand_checked_and_against_loops():
    from jaxtree.rewards.mc_process import label_agreement
    rewards = np.array([[0.1, -0.1, 0.0, 0.0], [0.2, 0.0, 0.0, 5.0]])   # 5.0: not played
    verified = np.array([[1, 0, 0, 0], [0, 0, 0, 1]], float)
    valid = np.array([[1, 1, 0, 0], [1, 0, 0, 1]], bool)
    played = np.arange(4)[None, :] < np.array([3, 2])[:, None]
    out = label_agreement(rewards, verified, valid, played)
    assert out["moves"] == 5 and out["positive"] == pytest.approx(0.4)
    assert [out["kinds"][k]["count"] for k in ("verified", "legal, not verified", "illegal")] \
        == [1, 2, 2]
    assert out["kinds"]["legal, not verified"]["mean"] == pytest.approx(0.05)
    assert out["kinds"]["illegal"]["positive"] == 0.0 == out["kinds"]["illegal"]["negative"]
    assert out["auc"] == pytest.approx({"verified vs rest": 0.75, "legal vs illegal": 0.5,
                                        "verified vs legal unverified": 0.5})

    rng = np.random.default_rng(0)
    for _ in range(50):
        n, k = int(rng.integers(1, 6)), int(rng.integers(1, 7))
        num_turns = rng.integers(0, k + 1, n)
        rewards = rng.integers(-2, 3, (n, k)) / 10.0          # coarse: ties are common
        valid = rng.random((n, k)) < 0.6
        verified = (valid & (rng.random((n, k)) < 0.5)).astype(float)
        played = np.arange(k)[None, :] < num_turns[:, None]
        out = label_agreement(rewards, verified, valid, played)
        kinds, aucs = _label_agreement_by_hand(rewards, verified, valid, num_turns)
        assert out["moves"] == int(num_turns.sum())
        for name, values in kinds.items():
            assert out["kinds"][name]["count"] == len(values)
            if values:
                assert out["kinds"][name]["mean"] == pytest.approx(np.mean(values))
        for name, value in aucs.items():
            assert out["auc"][name] == pytest.approx(value, nan_ok=True)
