"""Advantages and group filters against slow plain-Python references and hand-worked cases."""

from __future__ import annotations

import math
import statistics

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxtree.advantages import (discounted_returns, dynamic_sampling_keep, grpo_advantages,
                                rloo_advantages, select_groups, sequence_to_tokens,
                                step_reward_advantages, top_std_groups_keep, turns_to_tokens)

ATOL = 1e-5
EPS = 1e-6
SETTINGS = settings(max_examples=40, deadline=None)

# Reward alphabets: one with many ties (success / failure / format penalty), one finer grid.
# Grid values are exact in float32 and at least 1/8 apart, so no group has a std so small that
# float32 rounding against the 1e-6 epsilon would decide the result.
TIES = (0.0, 1.0, -0.1)
GRID = tuple(k / 8 for k in range(-16, 17))

grpo_jit = jax.jit(grpo_advantages, static_argnames=("num_groups", "normalize_std", "epsilon"))
rloo_jit = jax.jit(rloo_advantages, static_argnames=("num_groups",))
returns_jit = jax.jit(discounted_returns)
step_jit = jax.jit(step_reward_advantages, static_argnames=("num_groups", "normalize_std"))


# ---------------------------------------------------------------------------------------------
# Plain-Python references: loops over rows and groups, `statistics` for the moments.

def members(group_ids, valid):
    """{group id: [row, ...]} over the valid rows, in row order."""
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        if valid[i]:
            groups.setdefault(int(g), []).append(i)
    return groups


def ref_grpo(rewards, group_ids, valid, normalize_std=True, epsilon=EPS):
    out = [0.0] * len(rewards)
    for rows in members(group_ids, valid).values():
        if len(rows) < 2:
            continue
        values = [float(rewards[i]) for i in rows]
        mean = statistics.mean(values)
        std = statistics.stdev(values)  # sample std, ddof=1
        for i in rows:
            centred = float(rewards[i]) - mean
            out[i] = centred / (std + epsilon) if normalize_std else centred
    return out


def ref_rloo(rewards, group_ids, valid):
    out = [0.0] * len(rewards)
    for rows in members(group_ids, valid).values():
        if len(rows) < 2:
            continue
        for i in rows:
            others = [float(rewards[j]) for j in rows if j != i]
            out[i] = float(rewards[i]) - statistics.mean(others)
    return out


def ref_returns(turn_rewards, num_turns, gamma):
    n, k = len(turn_rewards), len(turn_rewards[0])
    out = [[0.0] * k for _ in range(n)]
    for i in range(n):
        for t in range(int(num_turns[i])):
            out[i][t] = math.fsum(gamma ** (s - t) * float(turn_rewards[i][s])
                                  for s in range(t, int(num_turns[i])))
    return out


def ref_step_reward(outcome, step_rewards, num_turns, group_ids, gamma, normalize_std):
    trajectory = ref_grpo(outcome, group_ids, [True] * len(outcome), normalize_std)
    returns = ref_returns(step_rewards, num_turns, gamma)
    out = []
    for i, row in enumerate(returns):
        out.append([trajectory[i] + g if t < num_turns[i] else 0.0 for t, g in enumerate(row)])
    return out


def ref_dynamic_sampling(rewards, group_ids, atol=1e-6):
    groups = members(group_ids, [True] * len(rewards))
    kept = set()
    for g, rows in groups.items():
        values = [float(rewards[i]) for i in rows]
        if len(values) >= 2 and max(values) - min(values) > atol:
            kept.add(g)
    return [int(g) in kept for g in group_ids]


def ref_top_std(rewards, group_ids, keep_fraction):
    groups = members(group_ids, [True] * len(rewards))
    std = {g: statistics.pstdev([float(rewards[i]) for i in rows]) for g, rows in groups.items()}
    ranked = sorted(groups, key=lambda g: (-std[g], g))
    kept = set(ranked[:max(1, round(keep_fraction * len(groups)))])
    return [int(g) in kept for g in group_ids]


def ref_select(keep, group_ids, wanted):
    order = []
    for i, g in enumerate(group_ids):
        if keep[i] and g not in order:
            order.append(g)
    chosen = order[:wanted]
    return [i for i, g in enumerate(group_ids) if keep[i] and g in chosen]


# ---------------------------------------------------------------------------------------------
# Random batches. Sizes come from small sets so that jit compiles a handful of shapes, not one
# per example; ids drawn per row give random group sizes, singletons, empty ids, shuffled rows.

@st.composite
def grouped_batches(draw, sizes=(5, 12), group_counts=(1, 4)):
    n = draw(st.sampled_from(sizes))
    num_groups = draw(st.sampled_from(group_counts))
    ids = draw(st.lists(st.integers(0, num_groups - 1), min_size=n, max_size=n))
    alphabet = draw(st.sampled_from([TIES, GRID]))
    rewards = draw(st.lists(st.sampled_from(alphabet), min_size=n, max_size=n))
    valid = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return (np.asarray(rewards, np.float32), np.asarray(ids, np.int32), num_groups,
            np.asarray(valid, bool))


@st.composite
def turn_batches(draw):
    n = draw(st.sampled_from([1, 5]))
    k = draw(st.sampled_from([1, 3, 6]))
    # Entries past num_turns are drawn non-zero too: they must be ignored.
    rewards = draw(st.lists(st.lists(st.sampled_from(GRID + TIES), min_size=k, max_size=k),
                            min_size=n, max_size=n))
    num_turns = draw(st.lists(st.integers(0, k), min_size=n, max_size=n))
    gamma = draw(st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
    return np.asarray(rewards, np.float32), np.asarray(num_turns, np.int32), gamma


# ---------------------------------------------------------------------------------------------
# GRPO / Dr.GRPO / RLOO

@SETTINGS
@given(grouped_batches(), st.booleans(), st.booleans())
def test_grpo_matches_reference(batch, normalize_std, use_valid):
    rewards, ids, num_groups, valid = batch
    if not use_valid:
        valid = np.ones_like(valid)
    got = grpo_jit(rewards, ids, num_groups=num_groups, normalize_std=normalize_std,
                   valid=valid if use_valid else None)
    want = ref_grpo(rewards, ids, valid, normalize_std)
    np.testing.assert_allclose(np.asarray(got), want, atol=ATOL, rtol=0)


@SETTINGS
@given(grouped_batches(), st.booleans())
def test_rloo_matches_reference(batch, use_valid):
    rewards, ids, num_groups, valid = batch
    if not use_valid:
        valid = np.ones_like(valid)
    got = rloo_jit(rewards, ids, num_groups=num_groups, valid=valid if use_valid else None)
    np.testing.assert_allclose(np.asarray(got), ref_rloo(rewards, ids, valid), atol=ATOL, rtol=0)


def test_grpo_hand_worked():
    # Group 0 = [1, 0, 0, 1]: mean 0.5, sample variance 4 * 0.25 / 3 = 1/3, std 0.57735;
    # A = ±0.5 / 0.57735 = ±0.866025 (population std would give ±1).
    # Group 1 = [2] alone: no baseline, 0.
    # Group 2 = [3, 1, 7 (invalid)]: over [3, 1] mean 2, std sqrt(2) = 1.41421, A = ±0.707107;
    # the invalid row gets 0 and does not move the mean (with it: mean 11/3).
    rewards = np.array([1, 0, 0, 1, 2, 3, 1, 7], np.float32)
    ids = np.array([0, 0, 0, 0, 1, 2, 2, 2], np.int32)
    valid = np.array([1, 1, 1, 1, 1, 1, 1, 0], bool)
    got = grpo_advantages(rewards, ids, 3, valid=valid)
    a, b = 0.5 / math.sqrt(1 / 3), 1 / math.sqrt(2)
    np.testing.assert_allclose(got, [a, -a, -a, a, 0, b, -b, 0], atol=ATOL)


def test_dr_grpo_differs_from_grpo_only_by_the_std():
    # Group [1, 0, 0, 1]: Dr.GRPO keeps r - mean = ±0.5; GRPO divides it by std 0.57735.
    # Group [4, 0]: Dr.GRPO ±2; GRPO ±2 / 2.828427 = ±0.707107 (same as any two-member group).
    rewards = np.array([1, 0, 0, 1, 4, 0], np.float32)
    ids = np.array([0, 0, 0, 0, 1, 1], np.int32)
    dr = grpo_advantages(rewards, ids, 2, normalize_std=False)
    grpo = grpo_advantages(rewards, ids, 2)
    np.testing.assert_allclose(dr, [0.5, -0.5, -0.5, 0.5, 2, -2], atol=ATOL)
    r = 1 / math.sqrt(2)
    np.testing.assert_allclose(grpo, [0.866025, -0.866025, -0.866025, 0.866025, r, -r], atol=ATOL)


def test_grpo_identical_rewards_give_exactly_zero():
    # Three -0.1 rewards: their float32 mean is not exactly -0.1, and a 1e-9 error divided by
    # epsilon = 1e-6 would be a spurious advantage of ~1e-3. Every advantage must be exactly 0.
    rewards = np.array([-0.1, -0.1, -0.1, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3], np.float32)
    ids = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1], np.int32)
    assert np.all(np.asarray(grpo_advantages(rewards, ids, 2)) == 0.0)
    assert np.all(np.asarray(rloo_advantages(rewards, ids, 2)) == 0.0)


def test_rloo_hand_worked():
    # [1, 0, 0, 1]: for r = 1 the others average 1/3, A = 2/3; for r = 0 they average 2/3,
    # A = -2/3. [5 (invalid), 2, 4]: over [2, 4], A = 2 - 4 = -2 and 4 - 2 = 2; invalid 0.
    # Group 2 = [9] alone: 0.
    rewards = np.array([1, 0, 0, 1, 5, 2, 4, 9], np.float32)
    ids = np.array([0, 0, 0, 0, 1, 1, 1, 2], np.int32)
    valid = np.array([1, 1, 1, 1, 0, 1, 1, 1], bool)
    got = rloo_advantages(rewards, ids, 3, valid=valid)
    np.testing.assert_allclose(got, [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, -2, 2, 0], atol=ATOL)


def test_jit_with_static_num_groups_matches_eager():
    rng = np.random.default_rng(0)
    rewards = rng.choice(np.array(TIES, np.float32), size=24)
    ids = rng.integers(0, 5, size=24).astype(np.int32)
    valid = rng.random(24) < 0.8
    for fn, jitted, kwargs in [(grpo_advantages, grpo_jit, {"valid": valid}),
                               (grpo_advantages, grpo_jit, {"normalize_std": False}),
                               (rloo_advantages, rloo_jit, {"valid": valid})]:
        eager = fn(rewards, ids, 5, **kwargs)
        np.testing.assert_allclose(jitted(rewards, ids, num_groups=5, **kwargs), eager, atol=1e-7)
    # num_groups fixes array shapes: a traced value is rejected rather than silently mis-sized.
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(grpo_advantages)(rewards, ids, 5)


def test_group_shape_validation():
    with pytest.raises(ValueError, match="group_ids"):
        grpo_advantages(np.zeros(4, np.float32), np.zeros(3, np.int32), 1)
    with pytest.raises(ValueError, match="valid"):
        rloo_advantages(np.zeros(4, np.float32), np.zeros(4, np.int32), 1, valid=np.ones(5, bool))
    with pytest.raises(ValueError, match="rewards"):
        grpo_advantages(np.zeros((2, 2), np.float32), np.zeros(4, np.int32), 1)


# ---------------------------------------------------------------------------------------------
# Discounted returns and GRPO + Step Reward

@SETTINGS
@given(turn_batches())
def test_discounted_returns_matches_reference(batch):
    rewards, num_turns, gamma = batch
    got = returns_jit(rewards, num_turns, gamma)
    np.testing.assert_allclose(np.asarray(got), ref_returns(rewards, num_turns, gamma),
                               atol=ATOL, rtol=0)


def test_discounted_returns_hand_worked_and_ignores_tail():
    # Row 0, 3 turns of [1, 2, 3] and a stray 100 past the end, gamma 0.5:
    # G2 = 3, G1 = 2 + 0.5 * 3 = 3.5, G0 = 1 + 0.5 * 3.5 = 2.75, G3 = 0 (the 100 is ignored).
    # Row 1, 0 turns: all zero whatever the rewards. Row 2, all 4 turns of 1: 1.875, 1.75, 1.5, 1.
    rewards = np.array([[1, 2, 3, 100], [5, 5, 5, 5], [1, 1, 1, 1]], np.float32)
    got = discounted_returns(rewards, np.array([3, 0, 4], np.int32), 0.5)
    np.testing.assert_allclose(got, [[2.75, 3.5, 3, 0], [0, 0, 0, 0], [1.875, 1.75, 1.5, 1]],
                               atol=ATOL)


@SETTINGS
@given(grouped_batches(), st.sampled_from([0.5, 0.99, 1.0]), st.booleans(), st.data())
def test_step_reward_advantages_matches_reference(batch, gamma, normalize_std, data):
    outcome, ids, num_groups, _ = batch
    k = 3  # turn counts vary per row below; other K are covered by the returns test
    n = outcome.shape[0]
    step = np.asarray(data.draw(st.lists(st.lists(st.sampled_from((0.005, -0.005, 0.05, 0.0)),
                                                  min_size=k, max_size=k), min_size=n, max_size=n)),
                      np.float32)
    num_turns = np.asarray(data.draw(st.lists(st.integers(0, k), min_size=n, max_size=n)), np.int32)
    got = step_jit(outcome, step, num_turns, ids, num_groups=num_groups, gamma=gamma,
                   normalize_std=normalize_std)
    want = ref_step_reward(outcome, step, num_turns, ids, gamma, normalize_std)
    np.testing.assert_allclose(np.asarray(got), want, atol=ATOL, rtol=0)


def test_step_reward_hand_worked():
    # Outcomes [1, 0] in one group: GRPO ±0.707107. Step rewards with gamma 0.5:
    # row 0, 2 turns [0.05, 0.005]: returns [0.05 + 0.0025, 0.005] = [0.0525, 0.005];
    # row 1, 3 turns [-0.005, 0, 0.05]: returns [-0.005 + 0.0125, 0.025, 0.05] = [0.0075, ...].
    # Turns past num_turns are 0, not the trajectory advantage.
    outcome = np.array([1, 0], np.float32)
    step = np.array([[0.05, 0.005, 0.05], [-0.005, 0.0, 0.05]], np.float32)
    got = step_reward_advantages(outcome, step, np.array([2, 3], np.int32),
                                 np.array([0, 0], np.int32), 1, gamma=0.5)
    r = 1 / math.sqrt(2)
    np.testing.assert_allclose(got, [[r + 0.0525, r + 0.005, 0],
                                     [-r + 0.0075, -r + 0.025, -r + 0.05]], atol=ATOL)


# ---------------------------------------------------------------------------------------------
# Token broadcast

@SETTINGS
@given(st.sampled_from([1, 3]), st.sampled_from([1, 10]), st.sampled_from([1, 4]), st.data())
def test_broadcast_matches_reference(n, t, k, data):
    seq_adv = np.asarray(data.draw(st.lists(st.sampled_from(GRID), min_size=n, max_size=n)),
                         np.float32)
    turn_adv = np.asarray(data.draw(st.lists(st.lists(st.sampled_from(GRID), min_size=k,
                                                      max_size=k), min_size=n, max_size=n)),
                          np.float32)
    mask = np.asarray(data.draw(st.lists(st.lists(st.booleans(), min_size=t, max_size=t),
                                         min_size=n, max_size=n)), bool)
    # Padding (-1) may even sit under a True mask: it must still give 0.
    turn_index = np.asarray(data.draw(st.lists(st.lists(st.integers(-1, k - 1), min_size=t,
                                                        max_size=t), min_size=n, max_size=n)),
                            np.int32)
    got_seq = np.asarray(jax.jit(sequence_to_tokens)(seq_adv, mask))
    got_turn = np.asarray(jax.jit(turns_to_tokens)(turn_adv, turn_index, mask))
    want_seq = [[float(seq_adv[i]) if mask[i][j] else 0.0 for j in range(t)] for i in range(n)]
    want_turn = [[float(turn_adv[i][turn_index[i][j]]) if mask[i][j] and turn_index[i][j] >= 0
                  else 0.0 for j in range(t)] for i in range(n)]
    np.testing.assert_array_equal(got_seq, want_seq)
    np.testing.assert_array_equal(got_turn, want_turn)


def test_broadcast_hand_worked():
    # Row 0: prompt, turn-0 action (2 tokens), observation, turn-1 action (1 token), padding.
    # Row 1: prompt, turn-0 action (1 token), padding.
    mask = np.array([[0, 1, 1, 0, 1, 0], [0, 1, 0, 0, 0, 0]], bool)
    turn_index = np.array([[0, 0, 0, 1, 1, -1], [0, 0, -1, -1, -1, -1]], np.int32)
    seq = sequence_to_tokens(np.array([0.5, -2.0], np.float32), mask)
    np.testing.assert_array_equal(seq, [[0, 0.5, 0.5, 0, 0.5, 0], [0, -2, 0, 0, 0, 0]])
    # Per-turn advantages [[3, 7], [-1, 9]]: row 0 gets 3 on turn-0 action tokens, 7 on turn 1;
    # padding's -1 must not wrap around to the last turn (7 or 9).
    per_turn = turns_to_tokens(np.array([[3, 7], [-1, 9]], np.float32), turn_index, mask)
    np.testing.assert_array_equal(per_turn, [[0, 3, 3, 0, 7, 0], [0, -1, 0, 0, 0, 0]])


def test_broadcast_shape_validation():
    with pytest.raises(ValueError, match="action_mask"):
        sequence_to_tokens(np.zeros(3, np.float32), np.zeros((2, 4), bool))
    with pytest.raises(ValueError, match="turn_index"):
        turns_to_tokens(np.zeros((2, 3), np.float32), np.zeros((3, 4), np.int32),
                        np.zeros((3, 4), bool))
    with pytest.raises(ValueError, match="action_mask"):
        turns_to_tokens(np.zeros((2, 3), np.float32), np.zeros((2, 4), np.int32),
                        np.zeros((2, 5), bool))


# ---------------------------------------------------------------------------------------------
# Host-side filters

@st.composite
def sparse_id_batches(draw):
    """Grouped rewards whose ids are arbitrary (non-contiguous, possibly negative) integers."""
    batch = grouped_batches(sizes=(1, 2, 5, 9, 16), group_counts=(1, 3, 8))
    rewards, ids, num_groups, _ = draw(batch)
    labels = draw(st.lists(st.integers(-50, 50), min_size=num_groups, max_size=num_groups,
                           unique=True))
    return rewards, np.asarray([labels[g] for g in ids], np.int64)


@SETTINGS
@given(sparse_id_batches())
def test_dynamic_sampling_matches_reference(batch):
    rewards, ids = batch
    got = dynamic_sampling_keep(rewards, ids)
    assert got.dtype == np.bool_
    assert got.tolist() == ref_dynamic_sampling(rewards, ids)


@SETTINGS
@given(sparse_id_batches(), st.sampled_from([0.1, 0.25, 0.5, 0.75, 1.0]))
def test_top_std_matches_reference(batch, keep_fraction):
    rewards, ids = batch
    got = top_std_groups_keep(rewards, ids, keep_fraction)
    assert got.tolist() == ref_top_std(rewards, ids, keep_fraction)


@SETTINGS
@given(sparse_id_batches(), st.integers(0, 9), st.data())
def test_select_groups_matches_reference(batch, wanted, data):
    rewards, ids = batch
    keep = dynamic_sampling_keep(rewards, ids) if data.draw(st.booleans()) else \
        np.asarray(data.draw(st.lists(st.booleans(), min_size=len(ids), max_size=len(ids))), bool)
    got = select_groups(keep, ids, wanted)
    assert got.tolist() == ref_select(keep.tolist(), ids.tolist(), wanted)


def test_dynamic_sampling_hand_worked():
    # Group 4 = [1, 1]: identical, dropped. Group 2 = [0, 1]: kept. Group 9 = [1]: single,
    # dropped. Group 3 = [0.5, 0.5 + 1e-7]: spread 1e-7 <= atol, dropped; with atol 1e-8 kept.
    rewards = np.array([1, 0, 1, 1, 1, 0.5, 0.5 + 1e-7])
    ids = np.array([4, 2, 4, 2, 9, 3, 3])
    assert dynamic_sampling_keep(rewards, ids).tolist() == [0, 1, 0, 1, 0, 0, 0]
    assert dynamic_sampling_keep(rewards, ids, atol=1e-8).tolist() == [0, 1, 0, 1, 0, 1, 1]


def test_top_std_hand_worked_and_tie_break():
    # Groups 7 = [0, 1] and 3 = [1, 0] (std 0.5 each), 5 = [0, 0] (std 0), 8 = [0, 0.5]
    # (std 0.25). keep_fraction 0.25 of 4 groups = 1 group: 7 and 3 tie, the lower id 3 wins
    # even though group 7 appears first. 0.5 -> 2 groups: 3 and 7. 0.75 -> 3: and then 8.
    rewards = np.array([0, 1, 0, 0, 1, 0, 0, 0.5])
    ids = np.array([7, 7, 5, 5, 3, 3, 8, 8])
    assert top_std_groups_keep(rewards, ids, 0.25).tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
    assert top_std_groups_keep(rewards, ids, 0.5).tolist() == [1, 1, 0, 0, 1, 1, 0, 0]
    assert top_std_groups_keep(rewards, ids, 0.75).tolist() == [1, 1, 0, 0, 1, 1, 1, 1]
    # A tiny fraction still keeps one group: max(1, round(0.01 * 4)) = 1.
    assert top_std_groups_keep(rewards, ids, 0.01).sum() == 2


def test_top_std_ties_across_group_sizes():
    # {1, 1, 1, -0.1, -0.1, -0.1} and {1, 1, -0.1, -0.1} have the same population std (0.55)
    # exactly, but float64 sums give the first 0.550000000745058 and the second
    # 0.5500000007450581: the tie must go to the lower id (group 0), not to rounding noise.
    rewards = np.array([1, 1, 1, -0.1, -0.1, -0.1, 1, 1, -0.1, -0.1], np.float32)
    ids = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    assert top_std_groups_keep(rewards, ids, 0.5).tolist() == [1] * 6 + [0] * 4
    # The same groups with the rows in reverse order (other summation orders): still group 0.
    assert top_std_groups_keep(rewards[::-1], ids[::-1], 0.5).tolist() == [0] * 4 + [1] * 6


def test_top_std_groups_of_equal_inexact_rewards_have_zero_std():
    # [0.1, 0.1, 0.1] (0.1 is not exactly representable) and [5, 5] both have std 0: the tie goes
    # to the lower id, whichever group that is and in whichever row order.
    for first, second in [([0.1] * 3, [5.0] * 2), ([5.0] * 2, [0.1] * 3),
                          ([0.3] * 7, [0.7] * 3), ([1 / 3] * 5, [2.0])]:
        rewards = np.array(first + second)
        ids = np.array([0] * len(first) + [1] * len(second))
        keep = top_std_groups_keep(rewards, ids, 0.5)
        assert keep.tolist() == [True] * len(first) + [False] * len(second)
        assert top_std_groups_keep(rewards[::-1], ids[::-1], 0.5)[::-1].tolist() == keep.tolist()


def test_grpo_epsilon_must_be_positive():
    rewards, ids = np.array([1.0, 1.0, 0.0]), np.array([0, 0, 0])
    with pytest.raises(ValueError, match="epsilon=0.0 must be positive"):
        grpo_advantages(rewards, ids, 1, epsilon=0.0)
    # Dr.GRPO divides by nothing: epsilon is irrelevant there
    assert np.all(np.isfinite(grpo_advantages(rewards, ids, 1, epsilon=0.0, normalize_std=False)))


def test_select_groups_hand_worked():
    # Kept groups in order of first appearance: 6 (row 1), 2 (row 2), 8 (row 5); group 4 is
    # not kept. One group wanted -> rows of 6 (not of 2, the smallest id): [1, 3]. Two wanted ->
    # rows of 6 and 2: [1, 2, 3, 4]. Ten wanted -> all kept rows.
    keep = np.array([0, 1, 1, 1, 1, 1, 1], bool)
    ids = np.array([4, 6, 2, 6, 2, 8, 8])
    assert select_groups(keep, ids, 1).tolist() == [1, 3]
    assert select_groups(keep, ids, 2).tolist() == [1, 2, 3, 4]
    assert select_groups(keep, ids, 10).tolist() == [1, 2, 3, 4, 5, 6]
    assert select_groups(keep, ids, 0).tolist() == []


def test_filter_errors_name_the_argument():
    rewards, ids = np.zeros(4), np.zeros(4, np.int64)
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"keep_fraction must be in \(0, 1\]"):
            top_std_groups_keep(rewards, ids, bad)
    with pytest.raises(ValueError, match="keep_fraction"):
        top_std_groups_keep(rewards, ids, "0.5")
    with pytest.raises(ValueError, match="group_ids"):
        dynamic_sampling_keep(rewards, np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="rewards must be 1-D"):
        top_std_groups_keep(np.zeros((2, 2)), ids, 0.5)
    with pytest.raises(ValueError, match="keep must be a boolean"):
        select_groups(np.ones(4, np.int64), ids, 1)
    with pytest.raises(ValueError, match="group_ids"):
        select_groups(np.ones(4, bool), np.zeros((4, 1)), 1)
    with pytest.raises(ValueError, match="num_groups_wanted"):
        select_groups(np.ones(4, bool), ids, -1)
