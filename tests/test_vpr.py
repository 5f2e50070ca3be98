"""VPR: the verifier reward term and the turn-level advantages, against plain-Python
transcriptions of the paper's equations and hand-worked cases."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from jaxtree.advantages import AdvantageStage, build_advantage, turns_to_tokens
# Importing these two modules registers the "vpr" advantage and the "verifier" reward term.
from jaxtree.advantages.vpr import (DEFAULT_DELTA, vpr_state_group_advantages,
                                    vpr_turn_advantages)
from jaxtree.config import ConfigError
from jaxtree.rewards import RewardStage, build_rewards
from jaxtree.rewards.verifier import VerifierConfig, verifier_turn_rewards
from jaxtree.rollout.trajectory import DONE, NO_PARENT, EpisodeRecord, TurnRecord, assemble

ATOL = 1e-5
RTOL = 1e-5
DELTAS = (DEFAULT_DELTA, 1e-3)
# Reward alphabets: the binary verifier, with a 1.5 outcome bonus on a last turn, and with the
# released code's -1 for invalid actions. Their stds are never close to delta.
ALPHABETS = ((0.0, 1.0), (0.0, 1.0, 1.5), (-1.0, 0.0, 1.0))
OBSERVATION_TOKENS = 2  # per turn, in the hand-built batches
ACTION_TOKENS = 3

turn_jit = jax.jit(vpr_turn_advantages)
state_group_jit = jax.jit(vpr_state_group_advantages)


# ---------------------------------------------------------------------------------------------
# Plain-Python transcriptions (lists and loops)

def mean_std(values):
    """(mean, population std) as in Eq. 4: sigma = sqrt(1/|I| sum (r - mu)^2)."""
    mu = math.fsum(values) / len(values)
    return mu, math.sqrt(math.fsum((v - mu) ** 2 for v in values) / len(values))


def ref_turn(rewards, active, delta, min_active=4):
    """VPR Eq. 4 over I_t = the rows active at turn t, with Appendix F's fallback to the mean and
    std of all active (i, t) when |I_t| < min_active."""
    n, k = len(rewards), len(rewards[0])
    pairs = [rewards[i][t] for i in range(n) for t in range(k) if active[i][t]]
    out = [[0.0] * k for _ in range(n)]
    for t in range(k):
        rows = [i for i in range(n) if active[i][t]]
        if not rows:
            continue
        if len(rows) >= min_active:
            mu, sigma = mean_std([rewards[i][t] for i in rows])
        else:
            mu, sigma = mean_std(pairs)
        for i in rows:
            out[i][t] = (rewards[i][t] - mu) / (sigma + delta)
    return out


def ref_state_group(rewards, groups, active, counted, delta):
    """The released code's state_group whitening: (r - mean_g) / (std_g + delta) over the counted
    members of each group; 0 for groups of one member or with std <= delta."""
    n, k = len(rewards), len(rewards[0])
    members = {}
    for i in range(n):
        for t in range(k):
            if active[i][t] and counted[i][t]:
                members.setdefault(groups[i][t], []).append(rewards[i][t])
    out = [[0.0] * k for _ in range(n)]
    for i in range(n):
        for t in range(k):
            values = members.get(groups[i][t], []) if active[i][t] else []
            if len(values) < 2:
                continue
            mu, sigma = mean_std(values)
            if sigma > delta:
                out[i][t] = (rewards[i][t] - mu) / (sigma + delta)
    return out


def random_turns(rng, n, k):
    """(rewards float32[N, K] with NaN past each row's last turn, active bool[N, K],
    num_turns, valid): ragged turn counts (0 included) and invalid rows."""
    alphabet = ALPHABETS[rng.integers(len(ALPHABETS))]
    rewards = rng.choice(alphabet, size=(n, k)).astype(np.float32)
    num_turns = rng.integers(0, k + 1, size=n)
    valid = rng.random(n) < 0.8
    played = np.arange(k)[None, :] < num_turns[:, None]
    rewards[~played] = np.nan
    return rewards, played & valid[:, None], num_turns, valid


def close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected, np.float64),
                               rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# Turn-level normalization (Eq. 4 + Appendix F)

@pytest.mark.parametrize("seed", range(24))
def test_turn_advantages_match_the_paper_on_random_batches(seed):
    rng = np.random.default_rng(seed)
    # Two shapes only (one compilation each); 9 rows with ragged turns gives turns with >= 4
    # and < 4 active rows, 3 rows always falls back to the global statistics.
    n, k = ((9, 5), (3, 5))[seed % 2]
    rewards, active, _, _ = random_turns(rng, n, k)
    delta = DELTAS[seed % 3 == 0]
    expected = ref_turn(rewards.tolist(), active.tolist(), delta)
    close(turn_jit(rewards, active, delta, 4), expected)
    assert not np.isnan(np.asarray(turn_jit(rewards, active, delta, 4))).any()


def test_turn_advantages_hand_worked():
    # Four trajectories of 3, 2, 2 and 1 turns; NaN past each one's last turn.
    rewards = np.array([[1, 0, 1],
                        [0, 0, np.nan],
                        [1, 1, np.nan],
                        [1, np.nan, np.nan]], np.float32)
    active = ~np.isnan(rewards)
    # Turn 0: |I_0| = 4, r = 1, 0, 1, 1: mu = 0.75, sigma = sqrt(0.1875) = 0.4330127;
    #   A = 0.25 / 0.4330127 = 0.5773503 and -0.75 / 0.4330127 = -1.7320508.
    # Turns 1 and 2 have 3 and 1 active rows (< 4): the global statistics of the 8 active
    #   (i, t), five 1s and three 0s: mu = 0.625, sigma = sqrt(0.625 * 0.375) = 0.4841229;
    #   A(1) = 0.375 / 0.4841229 = 0.7745967, A(0) = -0.625 / 0.4841229 = -1.2909944.
    expected = [[0.5773503, -1.2909944, 0.7745967],
                [-1.7320508, -1.2909944, 0.0],
                [0.5773503, 0.7745967, 0.0],
                [0.5773503, 0.0, 0.0]]
    close(vpr_turn_advantages(rewards, active), expected)
    # With min_active = 3, turn 1 (r = 0, 0, 1) uses its own statistics:
    #   mu = 1/3, sigma = sqrt(2/9) = 0.4714045; A = -0.7071068 and 1.4142136.
    expected[0][1] = expected[1][1] = -0.7071068
    expected[2][1] = 1.4142136
    close(vpr_turn_advantages(rewards, active, min_active=3), expected)


def test_equal_rewards_give_zero_advantages_per_turn_and_in_the_fallback():
    for value in (0.0, 1.0, 0.1, -1.0):  # 0.1 is not exact in float32: the shift keeps it 0
        rewards = np.full((6, 4), value, np.float32)
        rewards[4:, 2:] = np.nan  # turns 2 and 3 have 4 active rows, then fewer in a variant
        active = ~np.isnan(rewards)
        np.testing.assert_array_equal(np.asarray(vpr_turn_advantages(rewards, active)), 0.0)
        np.testing.assert_array_equal(
            np.asarray(vpr_turn_advantages(rewards, active, min_active=6)), 0.0)


def test_invalid_trajectories_are_not_in_the_statistics_and_get_zero():
    rewards = np.array([[1], [0], [0], [0], [1]], np.float32)
    active = np.array([[True], [True], [True], [True], [False]])
    # I_0 = rows 0-3: r = 1, 0, 0, 0: mu = 0.25, sigma = 0.4330127; row 4 (invalid) gets 0.
    close(vpr_turn_advantages(rewards, active),
          [[1.7320508], [-0.5773503], [-0.5773503], [-0.5773503], [0.0]])


def test_no_active_entry_gives_zeros():
    rewards = np.full((3, 2), np.nan, np.float32)
    np.testing.assert_array_equal(
        np.asarray(vpr_turn_advantages(rewards, np.zeros((3, 2), bool))), 0.0)


def test_turn_advantages_compile_once_for_a_fixed_shape():
    traces = []

    def traced(rewards, active, delta, min_active):
        traces.append(rewards.shape)
        return vpr_turn_advantages(rewards, active, delta, min_active)

    compiled = jax.jit(traced)
    rng = np.random.default_rng(0)
    for delta, min_active in ((1e-8, 4), (1e-3, 2), (0.5, 7)):
        rewards, active, _, _ = random_turns(rng, 8, 6)
        close(compiled(rewards, active, delta, min_active),
              ref_turn(rewards.tolist(), active.tolist(), delta, min_active))
    assert len(traces) == 1


# ---------------------------------------------------------------------------------------------
# State groups (the released code's variant)

@pytest.mark.parametrize("seed", range(16))
def test_state_group_advantages_match_the_reference_on_random_batches(seed):
    rng = np.random.default_rng(100 + seed)
    n, k = 8, 4
    rewards, active, _, _ = random_turns(rng, n, k)
    # Few ids so that groups of 1, 2 and more members (equal rewards included) all occur; ids
    # off the active entries are garbage on purpose.
    groups = rng.integers(0, 6, size=(n, k)).astype(np.int32)
    groups[~active] = rng.integers(-5, 100, size=int((~active).sum()))
    counted = active & (rng.random((n, k)) < 0.85) if seed % 2 else active
    delta = DELTAS[seed % 3 == 0]
    expected = ref_state_group(rewards.tolist(), groups.tolist(), active.tolist(),
                               counted.tolist(), delta)
    close(state_group_jit(rewards, groups, active, delta, counted), expected)


def test_state_group_advantages_hand_worked():
    # Group 0: four candidates from one state, r = 1, 0, 0, 0: mu = 0.25, sigma = 0.4330127;
    #   A = 1.7320508 and -0.5773503.
    # Group 1: one candidate: no baseline, 0. Group 2: r = 1, 1: std 0 <= delta, 0.
    # Group 3: r = 1, 0 with the 1 repeated in a row that is not counted (a shared tree node):
    #   mu = 0.5, sigma = 0.5; A = 1 (both copies) and -1.
    rewards = np.array([[1, 0, 1, 1, 1],
                        [0, 0, 1, 1, 0]], np.float32)
    groups = np.array([[0, 0, 1, 2, 3],
                       [0, 0, 2, 3, 3]], np.int32)
    active = np.ones((2, 5), bool)
    counted = np.array([[1, 1, 1, 1, 1],
                        [1, 1, 1, 0, 1]], bool)
    expected = [[1.7320508, -0.5773503, 0.0, 0.0, 1.0],
                [-0.5773503, -0.5773503, 0.0, 1.0, -1.0]]
    close(vpr_state_group_advantages(rewards, groups, active, counted=counted), expected)
    # Counting the repeated 1 as well changes group 3 to r = 1, 1, 0: mu = 2/3,
    #   sigma = sqrt(2/9) = 0.4714045; A = 0.7071068 and -1.4142136.
    expected[0][4] = expected[1][3] = 0.7071068
    expected[1][4] = -1.4142136
    close(vpr_state_group_advantages(rewards, groups, active), expected)


def test_state_group_advantages_compile_once_for_a_fixed_shape():
    traces = []

    def traced(rewards, groups, active, delta):
        traces.append(rewards.shape)
        return vpr_state_group_advantages(rewards, groups, active, delta)

    compiled = jax.jit(traced)
    rng = np.random.default_rng(1)
    for delta in (1e-8, 1e-2):
        rewards, active, _, _ = random_turns(rng, 6, 3)
        groups = rng.integers(0, 4, size=(6, 3)).astype(np.int32)
        close(compiled(rewards, groups, active, delta),
              ref_state_group(rewards.tolist(), groups.tolist(), active.tolist(),
                              active.tolist(), delta))
    assert len(traces) == 1


# ---------------------------------------------------------------------------------------------
# Batches built from episode records

def episode(turns, *, success=False, group=0, episode_id=0, context_full=False):
    """An EpisodeRecord of `turns` = [(verified, valid, state signature, node id), ...], each
    turn OBSERVATION_TOKENS observation tokens then ACTION_TOKENS action tokens."""
    per_turn = OBSERVATION_TOKENS + ACTION_TOKENS
    length = per_turn * len(turns)
    action_mask = np.tile([False] * OBSERVATION_TOKENS + [True] * ACTION_TOKENS, len(turns))
    return EpisodeRecord(
        tokens=np.arange(length, dtype=np.int32) % 7 + 1, action_mask=action_mask,
        logprobs=np.zeros(length, np.float32),
        turn_index=np.repeat(np.arange(len(turns), dtype=np.int32), per_turn),
        turns=[TurnRecord(reward=0.0, valid=valid, node_id=node, labels={"verified": float(verified), "process_score": 0.5, "state_signature": signature, "action_signature": f"a{node}"})
               for verified, valid, signature, node in turns],
        success=success, end_reason=DONE, context_full=context_full, task_id=group,
        group_id=group, episode_id=episode_id, parent_id=NO_PARENT, fork_turn=NO_PARENT,
        depth=0, info={})


def test_verifier_term_reads_the_verdicts_with_the_papers_defaults():
    batch = assemble([
        episode([(1, True, "0", 0), (0, True, "1", 1), (1, True, "2", 2)], success=True),
        episode([(0, False, "0", 3), (1, True, "1", 4)], episode_id=1),  # an unparseable action
        episode([(0, True, "0", 5)], episode_id=2),
    ], pad_id=0)
    assert np.isnan(batch.labels["verified"][1, 2])  # NaN past the last turn reaches the term
    rewards = build_rewards(RewardStage(terms=("verifier",)))(batch)
    # Paper: r_t = V(s_t, a_t) in {0, 1}; the invalid action has V = 0; no outcome bonus.
    np.testing.assert_array_equal(rewards.turn, [[1, 0, 1], [0, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(rewards.outcome, 0.0)
    assert rewards.turn.dtype == np.float32 and rewards.outcome.dtype == np.float32
    # The released code's options: -1 for the invalid action, a bonus on the solved last turn.
    stage = RewardStage.from_config({"terms": ("verifier",), "verifier": {
        "invalid_reward": -1.0, "outcome_bonus": 0.5}}, "reward")
    np.testing.assert_array_equal(build_rewards(stage)(batch).turn,
                                  [[1, 0, 1.5], [-1, 1, 0], [0, 0, 0]])


def test_verifier_term_rejects_a_missing_verdict_and_bad_settings():
    batch = assemble([episode([(1, True, "0", 0), (0, True, "1", 1)])], pad_id=0)
    batch.labels["verified"][0, 1] = np.nan
    with pytest.raises(ValueError, match="NaN on a played turn of row 0"):
        verifier_turn_rewards(batch)
    with pytest.raises(ConfigError, match="invalid_reward"):
        VerifierConfig(invalid_reward=0.5)
    with pytest.raises(ConfigError, match="outcome_bonus"):
        VerifierConfig(outcome_bonus=-1.0)


def ragged_batch():
    """Six episodes of two task groups, 1-4 turns, the third cut by a full context."""
    shapes = [(4, True), (3, False), (4, False), (2, False), (1, True), (4, False)]
    rng = np.random.default_rng(7)
    records = []
    for e, (turns, success) in enumerate(shapes):
        records.append(episode(
            [(int(rng.integers(2)), bool(rng.random() < 0.9), f"{t}|s{rng.integers(2)}",
              10 * e + t) for t in range(turns)],
            success=success, group=e % 2, episode_id=e, context_full=e == 2))
    return assemble(records, pad_id=0)


def test_registered_vpr_matches_the_paper_on_tokens():
    batch = ragged_batch()
    rewards = build_rewards(RewardStage(terms=("verifier",)))(batch)
    advantages = build_advantage(AdvantageStage(name="vpr"))(batch, rewards)
    assert advantages.shape == batch.tokens.shape and advantages.dtype == np.float32
    active = batch.played
    expected = ref_turn(rewards.turn.tolist(), active.tolist(), DEFAULT_DELTA)
    close(advantages, turns_to_tokens(np.asarray(expected, np.float32), batch.turn_index,
                                      batch.action_mask))
    # gamma = 0: each turn's tokens carry that turn's own normalized reward, observation tokens 0.
    first_action = OBSERVATION_TOKENS
    close(advantages[:, first_action], np.asarray(expected)[:, 0])
    np.testing.assert_array_equal(advantages[~batch.action_mask], 0.0)
    # Episodes cut by a full context leave I_t and get 0 under mask_context_full.
    masked = build_advantage(AdvantageStage(name="vpr", mask_context_full=True))(batch, rewards)
    kept = active & ~batch.context_full[:, None]
    expected = ref_turn(rewards.turn.tolist(), kept.tolist(), DEFAULT_DELTA)
    close(masked, turns_to_tokens(np.asarray(expected, np.float32), batch.turn_index,
                                  batch.action_mask))
    np.testing.assert_array_equal(masked[2], 0.0)


def test_registered_vpr_state_groups_share_states_within_a_task_group():
    # Task group 0: three rollouts from the same first state "0|start"; the third is a fork of
    # the first that shares its first turn (node 0) and branches at turn 1 from state "1|a".
    # Task group 1 starts from the same signature but is a different task: its own group.
    batch = assemble([
        episode([(1, True, "0|start", 0), (1, True, "1|a", 1)], group=0, episode_id=0),
        episode([(0, True, "0|start", 2), (0, True, "1|b", 3)], group=0, episode_id=1),
        episode([(1, True, "0|start", 0), (0, True, "1|a", 4)], group=0, episode_id=2),
        episode([(0, True, "0|start", 5)], group=1, episode_id=3),
        episode([(0, True, "0|start", 6)], group=1, episode_id=4),
    ], pad_id=0)
    rewards = build_rewards(RewardStage(terms=("verifier",)))(batch)
    stage = AdvantageStage.from_config({"name": "vpr", "vpr": {"grouping": "state_group"}},
                                       "advantage")
    per_token = build_advantage(stage)(batch, rewards)
    # Turn 0 of group 0: nodes 0 and 2 (node 0 counted once): r = 1, 0, mu = 0.5, sigma = 0.5:
    #   A = +1 (both rows of node 0) and -1. Turn 1, state "1|a": r = 1, 0: A = +1, -1.
    # State "1|b" has one candidate and group 1's state two equal rewards: 0.
    expected = np.array([[1, 1], [-1, 0], [1, -1], [0, 0], [0, 0]], np.float32)
    close(per_token, turns_to_tokens(expected, batch.turn_index, batch.action_mask))


def test_vpr_settings_are_checked():
    with pytest.raises(ConfigError, match=r"advantage\.vpr\.grouping"):
        AdvantageStage.from_config({"name": "vpr", "vpr": {"grouping": "task"}}, "advantage")
    with pytest.raises(ConfigError, match=r"advantage\.vpr\.delta"):
        AdvantageStage.from_config({"name": "vpr", "vpr": {"delta": 0.0}}, "advantage")
    with pytest.raises(ConfigError, match=r"advantage\.vpr\.min_active"):
        AdvantageStage.from_config({"name": "vpr", "vpr": {"min_active": 0}}, "advantage")
