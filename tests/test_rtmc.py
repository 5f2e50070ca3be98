"""RTMC statistics-table advantages against a plain-Python transcription of the paper (§3) and
hand-worked rollout trees."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

# Importing `rtmc` registers the "rtmc" advantage function.
from jaxtree.advantages import AdvantageStage, build_advantage, rtmc
from jaxtree.config import ConfigError, config_fields
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import DONE, EpisodeRecord, TurnRecord, assemble

ATOL = 1e-5
RTOL = 1e-5
RANDOM_CASES = 40
RANDOM_SHAPES = ((6, 1), (6, 4), (9, 4))  # (N, K): few shapes, so few compilations
STATE_ALPHABET = 4    # few state strings: shared states, singletons and repeats within a rollout
ACTION_ALPHABET = 2
REWARD_GRID = (0.0, 0.005, -0.005, 0.05, 0.25)
OBSERVATION_TOKENS = 1
ACTION_TOKENS = 2


# ---------------------------------------------------------------------------------------------
# Batches built from (state signature, action signature) lists.

def make_batch(rollouts, group_ids, success, context_full=None):
    """A TrajectoryBatch with one rollout per entry of `rollouts` (a list of (state, action)
    signature pairs per turn); each turn is one observation token then two action tokens."""
    records = []
    for i, turns in enumerate(rollouts):
        per_turn = OBSERVATION_TOKENS + ACTION_TOKENS
        length = per_turn * len(turns)
        mask = np.tile([False] * OBSERVATION_TOKENS + [True] * ACTION_TOKENS, len(turns))
        records.append(EpisodeRecord(
            tokens=np.arange(length, dtype=np.int32) + 1, action_mask=mask.astype(bool),
            logprobs=np.where(mask, -1.0, 0.0).astype(np.float32),
            turn_index=np.repeat(np.arange(len(turns)), per_turn).astype(np.int32),
            turns=[TurnRecord(reward=0.0, valid=True, node_id=-1, labels={"verified": 1.0, "process_score": 0.5, "state_signature": s, "action_signature": a})
                   for s, a in turns],
            success=bool(success[i]), end_reason=DONE,
            context_full=bool(context_full[i]) if context_full is not None else False,
            task_id=int(group_ids[i]), group_id=int(group_ids[i]), episode_id=i, parent_id=-1,
            fork_turn=-1, depth=0, info={}))
    return assemble(records, pad_id=0)


# ---------------------------------------------------------------------------------------------
# Plain-Python transcription of RTMC §3 (Algorithm 1, Eqs. 5-11): dicts keyed by the signature
# strings, loops over groups, rollouts and turns.

def ref_rtmc(batch, rewards, valid, gamma, n_prior, normalize_std, drop_uniform):
    n, k = batch.labels["state_signature"].shape
    out = [[0.0] * k for _ in range(n)]
    groups: dict[int, list[int]] = {}
    for i in range(n):
        if valid[i]:
            groups.setdefault(int(batch.group_ids[i]), []).append(i)
    for rows in groups.values():
        wins = [bool(batch.success[i]) for i in rows]
        if drop_uniform and (all(wins) or not any(wins)):
            continue
        prior = sum(wins) / len(rows)  # V_prior: the group success rate
        count: dict[tuple[str, str], int] = {}
        total: dict[tuple[str, str], float] = {}
        visits = []
        for i in rows:  # Phase 1: build the table, first visits only
            length = int(batch.num_turns[i])
            r = [float(rewards.turn[i][t]) + (float(rewards.outcome[i]) if t == length - 1
                                               else 0.0) for t in range(length)]
            seen = set()
            for t in range(length):
                s, a = batch.labels["state_signature"][i][t], batch.labels["action_signature"][i][t]
                if s in seen:
                    continue
                seen.add(s)
                g = math.fsum(gamma ** (j - t) * r[j] for j in range(t, length))
                count[(s, a)] = count.get((s, a), 0) + 1
                total[(s, a)] = total.get((s, a), 0.0) + g
                visits.append((i, t, s, a))
        q = {key: total[key] / count[key] for key in count}                 # Eq. 7
        for i, t, s, a in visits:                                            # Phase 2
            n_s = sum(c for (s2, _), c in count.items() if s2 == s)
            v = sum(c * q[(s2, a2)] for (s2, a2), c in count.items() if s2 == s) / n_s  # Eq. 8
            v_smoothed = (n_s * v + n_prior * prior) / (n_s + n_prior)      # Eq. 11
            out[i][t] = q[(s, a)] - v_smoothed                               # Eq. 9
        if normalize_std and len(visits) >= 2:  # Algorithm 1 line 21, sample std
            std = statistics.stdev([out[i][t] for i, t, _, _ in visits])
            for i, t, _, _ in visits:
                out[i][t] /= std + rtmc.STD_EPSILON
    return out


def random_case(rng, n, k):
    """(batch, rewards, valid): random groups of ragged rollouts, some sharing a prefix with an
    earlier rollout of their group (a tree), garbage turn rewards past each last turn."""
    num_groups = int(rng.integers(1, 4))
    group_ids = rng.integers(0, num_groups, n) * 7 + 3  # sparse ids: renumbered densely
    num_turns = rng.integers(0, k + 1, n)
    num_turns[rng.integers(n)] = k
    rollouts = []
    for i in range(n):
        turns = []
        siblings = [j for j in range(i) if group_ids[j] == group_ids[i]]
        if siblings and rng.random() < 0.6:
            j = int(rng.choice(siblings))
            turns = list(rollouts[j][:int(rng.integers(0, len(rollouts[j]) + 1))])
        turns = turns[:num_turns[i]]
        while len(turns) < num_turns[i]:
            turns.append((f"s{rng.integers(STATE_ALPHABET)}", f"a{rng.integers(ACTION_ALPHABET)}"))
        rollouts.append(turns)
    success = rng.random(n) < 0.5
    for g in np.unique(group_ids):  # some groups uniform on purpose
        mode = rng.integers(3)
        if mode < 2:
            success[group_ids == g] = bool(mode)
    batch = make_batch(rollouts, group_ids, success)
    assert batch.labels["state_signature"].shape == (n, k)
    turn = rng.choice(REWARD_GRID, (n, k)).astype(np.float32)
    outcome = (success + rng.choice([0.0, -0.1], n)).astype(np.float32)
    valid = rng.random(n) > 0.15
    return batch, Rewards(turn, outcome), valid


def test_matches_reference_on_random_batches():
    rng = np.random.default_rng(0)
    for case in range(RANDOM_CASES):
        n, k = RANDOM_SHAPES[case % len(RANDOM_SHAPES)]
        batch, rewards, valid = random_case(rng, n, k)
        settings = rtmc.RtmcConfig(gamma=float(rng.choice([0.99, 0.5, 1.0])),
                                   n_prior=float(rng.choice([0.0, 2.0, 0.5])),
                                   normalize_std=bool(rng.integers(2)),
                                   drop_uniform_groups=bool(rng.integers(2)))
        got = rtmc.rtmc_turn_advantages(batch, rewards, valid, settings)
        want = ref_rtmc(batch, rewards, valid, settings.gamma, settings.n_prior,
                        settings.normalize_std, settings.drop_uniform_groups)
        np.testing.assert_allclose(np.asarray(got), want, atol=ATOL, rtol=RTOL,
                                   err_msg=f"case {case}: {settings}")


# ---------------------------------------------------------------------------------------------
# A hand-built two-rollout tree.
#
#   R1 (success, R = 1):  root --view--> root|view --finish--> end
#   R2 (failure, R = 0):  root --view--> root|view --edit--> root|view|edit --revert-->
#                         root|view (again: a repeated visit) --finish--> end
# Turn rewards 0, gamma = 0.9, n_prior = 2, group success rate V_prior = 1/2.
#   Returns: R1 G = [0.9, 1]; R2 G = [0, 0, 0, 0].
#   (root, view):   N = 2, Q = (0.9 + 0) / 2 = 0.45; N(root) = 2, V = 0.45,
#                   V' = (2 * 0.45 + 2 * 0.5) / 4 = 0.475, A = -0.025 (both rollouts).
#   (root|view, finish) Q = 1, (root|view, edit) Q = 0; N(root|view) = 2 (R2's second visit
#                   does not count), V = 0.5, V' = (1 + 1) / 4 = 0.5, A = +0.5 and -0.5.
#   (root|view|edit, revert): N = 1, Q = V = 0, V' = (0 + 1) / 3, A = -1/3.
#   R2 turn 3 (repeated visit of root|view): no table entry, A = 0. Without first-visit
#   enforcement (root|view, finish) would be N = 2, Q = 0.5.

TREE = [[("root", "view"), ("root|view", "finish")],
        [("root", "view"), ("root|view", "edit"), ("root|view|edit", "revert"),
         ("root|view", "finish")]]


def tree_batch(success=(True, False), context_full=None):
    batch = make_batch(TREE, [5, 5], success, context_full)
    rewards = Rewards(np.zeros(batch.turn_rewards.shape, np.float32),
                      np.asarray(success, np.float32))
    return batch, rewards


def test_signature_ids_enforce_first_visit():
    batch, _ = tree_batch()
    state_ids, action_ids = rtmc.signature_ids(batch)
    no = rtmc.NO_KEY
    np.testing.assert_array_equal(state_ids, [[0, 1, no, no], [0, 1, 2, no]])
    np.testing.assert_array_equal(action_ids, [[0, 1, no, no], [0, 2, 3, no]])
    # The same strings in another group are other keys.
    other = make_batch(TREE, [5, 6], (True, False))
    state_ids, _ = rtmc.signature_ids(other)
    np.testing.assert_array_equal(state_ids, [[0, 1, no, no], [2, 3, 4, no]])


def test_hand_built_tree():
    batch, rewards = tree_batch()
    valid = np.ones(2, bool)
    got = rtmc.rtmc_turn_advantages(batch, rewards, valid, rtmc.RtmcConfig(gamma=0.9))
    np.testing.assert_allclose(got, [[-0.025, 0.5, 0, 0], [-0.025, -0.5, -1 / 3, 0]],
                               atol=1e-6)


def test_hand_built_tree_without_prior_and_std_normalised():
    # n_prior = 0: a state with one action has Q = V, so (root, view) and (root|view|edit,
    # revert) get 0 and only the branch at root|view is credited, +-0.5. The std is over the
    # five table entries [0, 0.5, 0, -0.5, 0] (the repeated visit is not one): mean 0, sample
    # variance 0.5 / 4 = 0.125, so +-0.5 becomes +-0.5 / (0.353553 + 1e-6) = +-1.414210.
    batch, rewards = tree_batch()
    valid = np.ones(2, bool)
    plain = rtmc.rtmc_turn_advantages(batch, rewards, valid,
                                      rtmc.RtmcConfig(gamma=0.9, n_prior=0.0))
    np.testing.assert_allclose(plain, [[0, 0.5, 0, 0], [0, -0.5, 0, 0]], atol=1e-6)
    normalised = rtmc.rtmc_turn_advantages(
        batch, rewards, valid, rtmc.RtmcConfig(gamma=0.9, n_prior=0.0, normalize_std=True))
    b = 0.5 / (math.sqrt(0.125) + rtmc.STD_EPSILON)
    np.testing.assert_allclose(normalised, [[0, b, 0, 0], [0, -b, 0, 0]], atol=1e-6)


def test_uniform_groups_are_dropped():
    # Both rollouts succeed (R = 1): R1 G = [0.9, 1], R2 G = [0.729, 0.81, 0.9, 1]. Dropped by
    # default; kept, (root|view, finish) vs (root|view, edit) is 1 vs 0.81.
    batch, rewards = tree_batch(success=(True, True))
    valid = np.ones(2, bool)
    dropped = rtmc.rtmc_turn_advantages(batch, rewards, valid, rtmc.RtmcConfig(gamma=0.9))
    np.testing.assert_array_equal(dropped, np.zeros((2, 4)))
    kept = rtmc.rtmc_turn_advantages(batch, rewards, valid,
                                     rtmc.RtmcConfig(gamma=0.9, drop_uniform_groups=False))
    np.testing.assert_allclose(kept, ref_rtmc(batch, rewards, valid, 0.9, 2.0, False, False),
                               atol=ATOL)
    assert kept[0, 1] > 0 > kept[1, 1]


def test_table_metrics_of_the_tree():
    # States root (2 rollouts), root|view (2), root|view|edit (1); four (s, a) entries; one
    # repeated visit. Percentiles of [1, 2, 2]: p50 = 2, p90 = 2.
    batch, _ = tree_batch()
    state_ids, action_ids = rtmc.signature_ids(batch)
    metrics = rtmc.table_metrics(state_ids, action_ids, np.ones(2, bool), batch.num_turns)
    assert metrics == {"rtmc/pairs": 4.0, "rtmc/states": 3.0,
                       "rtmc/shared_state_fraction": pytest.approx(2 / 3),
                       "rtmc/repeated_visits": 1.0, "rtmc/cluster_size_p50": 2.0,
                       "rtmc/cluster_size_p90": 2.0}
    # R2 left out: R1 alone, every state visited once.
    alone = rtmc.table_metrics(state_ids, action_ids, np.array([True, False]), batch.num_turns)
    assert alone["rtmc/states"] == 2 and alone["rtmc/shared_state_fraction"] == 0
    assert alone["rtmc/repeated_visits"] == 0 and alone["rtmc/cluster_size_p90"] == 1


def test_uniform_group_fraction_counts_the_groups_the_filter_zeroes():
    # Groups: 7 mixed; 3 all-failure; 5 all-success once its failed row is invalid; 9 has no
    # valid row (not counted); 4 has one valid row (uniform, as the table treats it).
    success = np.array([1, 0, 0, 0, 1, 0, 1, 1], bool)
    group_ids = np.array([7, 7, 3, 3, 5, 5, 9, 4])
    valid = np.array([1, 1, 1, 1, 1, 0, 0, 1], bool)
    assert rtmc.uniform_group_fraction(success, group_ids, valid) == pytest.approx(3 / 4)
    assert rtmc.uniform_group_fraction(success, group_ids, np.ones(8, bool)) == pytest.approx(
        3 / 5)
    assert rtmc.uniform_group_fraction(success, group_ids, np.zeros(8, bool)) == 0.0
    # The fraction is the share of groups whose rows the filter sets to 0.
    for outcome in ((True, False), (False, False), (True, True)):
        batch, rewards = tree_batch(success=outcome)
        zeroed = not np.any(build_advantage(AdvantageStage(name="rtmc"))(batch, rewards))
        assert rtmc.uniform_group_fraction(batch.success, batch.group_ids,
                                           np.ones(2, bool)) == float(zeroed)


def test_played_turn_without_signature_is_an_error():
    batch, _ = tree_batch()
    batch.labels["state_signature"][1, 2] = None
    with pytest.raises(ValueError, match="row 1 turn 2"):
        rtmc.signature_ids(batch)


# ---------------------------------------------------------------------------------------------
# Compilation and the registered advantage function.

def test_jitted_table_compiles_once_per_shape():
    rng = np.random.default_rng(1)
    n, k = 5, 3  # a shape no other test uses
    before = rtmc._table_advantages_jit._cache_size()
    for gamma, n_prior, normalize, drop in ((0.99, 2.0, False, True), (0.5, 0.0, True, False)):
        batch, rewards, valid = random_case(rng, n, k)
        settings = rtmc.RtmcConfig(gamma=gamma, n_prior=n_prior, normalize_std=normalize,
                                   drop_uniform_groups=drop)
        got = rtmc.rtmc_turn_advantages(batch, rewards, valid, settings)
        np.testing.assert_allclose(
            got, ref_rtmc(batch, rewards, valid, gamma, n_prior, normalize, drop),
            atol=ATOL, rtol=RTOL)
        assert rtmc._table_advantages_jit._cache_size() == before + 1


def test_registered_rtmc_puts_turn_advantages_on_action_tokens():
    batch, rewards = tree_batch()
    out = np.asarray(build_advantage(AdvantageStage(name="rtmc"))(batch, rewards))
    assert out.shape == batch.tokens.shape and out.dtype == np.float32
    assert np.all(out[~batch.action_mask] == 0)
    # Paper defaults: gamma = 0.99, n_prior = 2, no std normalisation.
    per_turn = ref_rtmc(batch, rewards, np.ones(2, bool), 0.99, 2.0, False, True)
    for i in range(len(batch)):
        for t in np.flatnonzero(batch.action_mask[i]):
            assert out[i, t] == pytest.approx(per_turn[i][batch.turn_index[i, t]], abs=ATOL)


def test_registered_rtmc_reads_its_settings_and_honours_valid():
    # advantage.mask_context_full leaves R2 out: R1 alone is a uniform group, dropped; with
    # drop_uniform_groups off, R1's states are all singletons and n_prior = 0 gives Q = V.
    batch, rewards = tree_batch(context_full=(False, True))
    stage = AdvantageStage.from_config(
        {"name": "rtmc", "mask_context_full": True,
         "rtmc": {"gamma": 0.9, "n_prior": 0.0, "drop_uniform_groups": False}}, "advantage")
    assert stage.part_settings("rtmc") == rtmc.RtmcConfig(gamma=0.9, n_prior=0.0,
                                                          drop_uniform_groups=False)
    np.testing.assert_array_equal(build_advantage(stage)(batch, rewards), 0.0)
    # Unmasked with the same settings: the hand-worked values of the tree without prior.
    stage = AdvantageStage.from_config(
        {"name": "rtmc", "rtmc": {"gamma": 0.9, "n_prior": 0.0}}, "advantage")
    out = np.asarray(build_advantage(stage)(batch, rewards))
    second_turn = batch.action_mask & (batch.turn_index == 1)
    np.testing.assert_allclose(out[0][second_turn[0]], 0.5, atol=1e-6)
    np.testing.assert_allclose(out[1][second_turn[1]], -0.5, atol=1e-6)
    assert np.all(out[~second_turn] == 0)


@pytest.mark.parametrize("field,value", [("n_prior", -1.0), ("gamma", 0.0), ("gamma", 1.5)])
def test_config_rejects_out_of_range_settings(field, value):
    with pytest.raises(ConfigError, match=f"advantage.rtmc.{field}"):
        AdvantageStage.from_config({"name": "rtmc", "rtmc": {field: value}}, "advantage")


def test_config_options_cite_the_paper():
    for f in config_fields(rtmc.RtmcConfig):
        assert "RTMC §" in f.metadata["doc"], f.name
