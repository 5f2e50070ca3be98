"""ARPO-style entropy-guided branching (PATR's baseline): the branching draw and the whole rollout
on a scripted policy against a plain-Python transcription of ARPO's rollout loop (the tree the slot
engine grows on the tiny model: tests/test_patr.py, which shares its engine)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import environments
from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment, default_config, set_path
from jaxtree.rollout.strategies.arpo import ArpoConfig, fork_count, reply_entropy, sample_arpo
from jaxtree.tokenizers import ByteTokenizer
from test_patr import MOVES, ScriptedEngine, scripted_move

TOK = ByteTokenizer()
MOVE_PROBS = dict(zip(MOVES, (0.1, 0.4, 0.4, 0.1)))   # test_patr's scripted policy
VOCAB = 256


def test_reply_entropy_sums_the_first_tokens_surprisal_over_log_v():
    logprobs = np.log(np.array([0.5, 0.25, 1.0, 0.125], np.float32))
    assert reply_entropy(logprobs, 2, 16) == pytest.approx((math.log(2) + math.log(4)) / math.log(16))
    assert reply_entropy(logprobs, 20, 16) == pytest.approx(
        (math.log(2) + math.log(4) + math.log(8)) / math.log(16))
    assert reply_entropy(None, 20, 16) == 0.0 and reply_entropy(logprobs[:0], 20, 16) == 0.0


def test_fork_probability_is_tau_plus_w_delta_clipped():
    """ARPO's draw u - w dH <= tau forks with probability clip(tau + w dH, 0, 1); one draw per
    child, at most branch_factor - 1 and the room left."""
    settings = ArpoConfig(branch_factor=3, branch_probability=0.5, entropy_weight=0.4)
    rng = np.random.default_rng(0)
    for delta, expected in [(0.0, 0.5), (0.5, 0.7), (-0.5, 0.3), (2.0, 1.0), (-2.0, 0.0)]:
        forks = [fork_count(delta, settings, 5, rng)[0] for _ in range(3000)]
        assert np.mean(forks) == pytest.approx(2 * expected, abs=0.06), delta
    count, draws = fork_count(0.0, settings, 1, np.random.default_rng(1))
    assert len(draws) == 1 and count == int(draws[0] <= 0.5)
    assert fork_count(0.0, settings, 0, rng) == (0, [])


# ----------------------------------------------------------------------------- scripted policy


class ScriptedArpoEngine(ScriptedEngine):
    """test_patr's scripted engine, with each action's log-probs as the engine reports them: the
    move's scripted probability on its first token, certain format tokens after it."""

    def _logprobs(self, episode):
        move = scripted_move(episode.episode_id, episode.num_turns)
        return np.array([math.log(MOVE_PROBS[move]), 0.0, 0.0], np.float32)


def reference_arpo(task, m, n, beam, tau, w, k, slots, rng):
    """ARPO's rollout loop in plain Python (its released code, turns for tool calls) over the
    scripted policy: returns {branch id: (parent, fork turn, moves)}. Ids count up in creation
    order; children inherit their root's initial entropy."""
    env_of, moves, origin, h_init, h_last = {}, {}, {}, {}, {}

    def new_branch(parent=None):
        b = len(env_of)
        if parent is None:
            env = environments.make("frozen_lake", style="compact")
            env.reset(task)
            env_of[b], moves[b], origin[b] = env, [], (-1, -1)
        else:
            env_of[b], moves[b] = env_of[parent].clone(), list(moves[parent])
            origin[b], h_init[b] = (parent, len(moves[parent])), h_init[parent]
        return b

    active = [new_branch() for _ in range(m)]
    used = m
    while active:
        for b in list(active):
            move = scripted_move(b, len(moves[b]))
            h = -math.log(MOVE_PROBS[move]) / math.log(VOCAB)
            _, _, done, _ = env_of[b].step(move)
            moves[b].append(move)
            h_init.setdefault(b, h)
            h_last[b] = h
            if done or len(moves[b]) >= 10:
                active.remove(b)
        for b in sorted(active):
            delta = h_last[b] - h_init[b]
            wanted = 0
            for _ in range(min(beam - 1, n - used)):
                u = rng.random()
                if min(1.0, max(0.0, u - w * delta)) <= tau:
                    wanted += 1
            for _ in range(min(wanted, slots - len(active))):
                active.append(new_branch(b))
                used += 1
        if not active and used < n:                    # refill: a new rollout from the prompt
            active.append(new_branch())
            used += 1
    return {b: (origin[b][0], origin[b][1], moves[b]) for b in env_of}


@pytest.mark.parametrize("task,slots", [(5, 12), (11, 5), (23, 8)])
def test_arpo_on_a_scripted_policy_grows_the_tree_its_rollout_loop_describes(task, slots):
    settings = ArpoConfig(initial_branches=3, max_branches=9, branch_factor=2,
                          branch_probability=0.3, entropy_weight=2.0, entropy_tokens=20)
    key = jax.random.key(0)
    batch, metrics = sample_arpo(ScriptedArpoEngine(num_slots=slots), None, key, [task],
                                 settings, VOCAB)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    want = reference_arpo(task, 3, 9, 2, 0.3, 2.0, 20, slots, rng)
    got = {int(batch.episode_ids[i]): (
        int(batch.parent_ids[i]), int(batch.fork_turns[i]),
        [str(a).capitalize() for a in batch.labels["action_signature"][i, :batch.num_turns[i]]])
        for i in range(len(batch))}
    assert got == want
    assert len(batch) == 9 and metrics["arpo/branches"] == 9   # the budget is always filled


def test_the_scripted_cases_fork_refill_and_refuse():
    settings = ArpoConfig(initial_branches=3, max_branches=9, branch_factor=2,
                          branch_probability=0.3, entropy_weight=2.0)
    runs = [sample_arpo(ScriptedArpoEngine(num_slots=slots), None, jax.random.key(0), [task],
                        settings, VOCAB)[1] for task, slots in [(5, 12), (11, 5), (23, 8)]]
    for name in ("arpo/forks", "arpo/refills", "arpo/refused"):
        assert sum(m[name] for m in runs) > 0, name


def test_bad_settings_fail_at_launch_naming_the_field():
    from jaxtree.train.pipeline import check_experiment
    config = default_config()
    set_path(config, "rollout.strategy", "arpo")
    set_path(config, "rollout.arpo.max_branches", 4)
    with pytest.raises(ConfigError, match=r"rollout\.arpo\.max_branches: 4 is below"):
        Experiment.from_config(config)
    set_path(config, "rollout.arpo", {"initial_branches": 4, "max_branches": 8,
                                      "branch_probability": 1.5})
    with pytest.raises(ConfigError, match=r"rollout\.arpo\.branch_probability"):
        Experiment.from_config(config)
    set_path(config, "rollout.arpo.branch_probability", 0.5)
    set_path(config, "rollout.num_slots", 16)
    with pytest.raises(ConfigError, match=r"rollout\.num_slots: 16 is too few for "
                       r"rollout\.strategy='arpo': it needs at least 32"):
        check_experiment(Experiment.from_config(config))
