"""The slot engine: recorded data against teacher forcing and replays, forks, packing, overflow."""

import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import environments
from jaxtree import models
from jaxtree.rollout import RolloutConfig, SlotEngine
from jaxtree.rollout.strategies import sample_independent
from jaxtree.rollout import DONE, PRUNED, TRUNCATED, conversation
from jaxtree.rollout.labels import TurnLabeler, environment_labels
from jaxtree.rollout.signatures import signature_function
from jaxtree.sampling import SamplingConfig
from jaxtree.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
SAMPLING = SamplingConfig(temperature=1.0)
# The engine shapes of this file (every distinct one compiles its own programs): 16 slots (the
# shared batch, as in test_patr.py and the MC-PR benchmark), 4 slots (fewer slots than
# episodes, and context overflow) and 32 slots (two row buckets), the last on 2x2 lakes only
# (their prompts and observations are narrower than a 4x4 lake's: other programs) and with the
# `one_layer` model.
ENGINE = RolloutConfig(num_slots=16, context_length=256, max_action_tokens=6, sampling=SAMPLING)
FEW_SLOTS = RolloutConfig(num_slots=4, context_length=256, max_action_tokens=6, sampling=SAMPLING)
WIDE = RolloutConfig(num_slots=32, context_length=256, max_action_tokens=6, sampling=SAMPLING)


@pytest.fixture(scope="module")
def one_layer():
    """(config, params): the tiny preset with one decoder block instead of four, random init,
    for the 32-slot engine: its checks (row buckets, windows) do not depend on the model's
    depth, and its programs compile about three times faster. The 16- and 4-slot engines keep
    the tiny preset, whose programs other test files share through the compilation cache."""
    config = models.get_preset("tiny").replace(num_layers=1)
    return config, models.init_params(config, jax.random.key(0))


def frozen_lake(**options):
    return lambda: environments.make("frozen_lake", style="compact", **options)


@functools.partial(jax.jit, static_argnums=0)
def _next_token_logprobs(config, params, tokens):
    """log p(tokens[t] | tokens[<t]) for t >= 1 from one full forward (tokens int32[T])."""
    logp = jax.nn.log_softmax(models.forward(config, params, tokens[None])[0, :-1], axis=-1)
    return jnp.take_along_axis(logp, tokens[1:, None], axis=-1)[:, 0]


def teacher_forced_logprobs(config, params, tokens, length):
    """log p(token_t | tokens_<t) from one full forward over the final sequence, right-padded to
    the engines' context (padding never changes earlier positions), so every call has one
    shape."""
    padded = np.zeros(ENGINE.context_length, np.int32)
    padded[:length] = tokens[:length]
    return np.asarray(_next_token_logprobs(config, params, jnp.asarray(padded)))[:length - 1]


def expected_framing(batch, i, make_env):
    """Rebuilds episode i's token sequence from scratch: replay its own generated actions in a fresh
    environment and frame every observation the way the engine must (never re-rendered)."""
    env = make_env()
    env.reset(int(batch.task_ids[i]))
    tokens = batch.tokens[i, :batch.lengths[i]]
    mask = batch.action_mask[i, :batch.lengths[i]]
    expected = conversation.first_turn_tokens(TOK, env)
    position = len(expected)
    for turn in range(batch.num_turns[i]):
        start = position
        while position < len(tokens) and mask[position]:
            position += 1
        action = tokens[start:position].tolist()
        expected += action
        ended = bool(action) and action[-1] in (TOK.end_of_turn_id, TOK.eos_id)
        observation, _, done, _ = env.step(conversation.action_text(TOK, action, ended))
        if turn + 1 < batch.num_turns[i]:
            expected += conversation.next_turn_tokens(TOK, observation, close_turn=not ended)
            position = len(expected)
    return expected


@pytest.fixture(scope="module")
def batch_and_engine(tiny):
    config, params = tiny
    engine = SlotEngine(config, TOK, frozen_lake(), ENGINE)
    batch = sample_independent(engine, params, jax.random.key(0), task_ids=[0, 1, 2, 3],
                               group_size=3)
    return batch, engine


def test_behaviour_logprobs_equal_teacher_forcing(tiny, batch_and_engine):
    config, params = tiny
    batch, _ = batch_and_engine
    assert len(batch) == 12 and batch.action_mask.any()
    for i in range(len(batch)):
        n = batch.lengths[i]
        ref = teacher_forced_logprobs(config, params, batch.tokens[i], n)
        mask = batch.action_mask[i, 1:n]
        np.testing.assert_allclose(batch.behaviour_logprobs[i, 1:n][mask], ref[mask], atol=1e-4)
        assert np.all(batch.behaviour_logprobs[i][~batch.action_mask[i]] == 0)


def test_action_mask_covers_exactly_the_generated_tokens(batch_and_engine):
    batch, engine = batch_and_engine
    for i in range(len(batch)):
        n = batch.lengths[i]
        expected = expected_framing(batch, i, frozen_lake())
        assert batch.tokens[i, :n].tolist() == expected
        # Every maximal run of generated tokens is one turn's action.
        runs = [list(g) for k, g in itertools.groupby(batch.action_mask[i, :n]) if k]
        assert len(runs) == batch.num_turns[i]
        assert batch.action_mask[i].sum() == batch.response_lengths[i]
        turn_of_actions = batch.turn_index[i, :n][batch.action_mask[i, :n]]
        assert np.all(np.diff(turn_of_actions) >= 0)
        assert np.all(batch.turn_index[i, n:] == -1)
    assert engine.stats.generated_tokens == batch.action_mask.sum()


def test_a_finished_session_holds_no_cache_and_the_next_begins_afresh(tiny, batch_and_engine):
    """After the last episode is collected the engine keeps no KV cache or parameters on
    device; the next session allocates its own and plays the same episodes from the same key."""
    config, params = tiny
    batch, engine = batch_and_engine
    assert engine.state is None and engine.params is None
    again = sample_independent(engine, params, jax.random.key(0), task_ids=[0, 1, 2, 3],
                               group_size=3)
    assert engine.state is None
    np.testing.assert_array_equal(again.tokens, batch.tokens)


class _LakeWithSubprocess(environments.env_class("frozen_lake")):
    """FrozenLake whose every step reports 0.25 s spent in a subprocess (as mini-SWE's test runs
    report theirs)."""

    def step(self, text):
        observation, reward, done, info = super().step(text)
        return observation, reward, done, {**info, "subprocess_seconds": 0.25}


def test_engine_sums_the_environments_subprocess_seconds(tiny):
    config, params = tiny
    engine = SlotEngine(config, TOK, lambda: _LakeWithSubprocess(style="compact"), ENGINE)
    batch = sample_independent(engine, params, jax.random.key(0), task_ids=[0, 1], group_size=2)
    stats = engine.stats
    assert stats.env_steps == batch.num_turns.sum() > 0
    assert stats.subprocess_seconds == pytest.approx(0.25 * stats.env_steps)
    total = stats.host_seconds + stats.device_seconds
    assert stats.metrics() == pytest.approx({
        "rollout/host_share": stats.host_seconds / total,
        "rollout/env_share": stats.env_seconds / total,
        "rollout/subprocess_share": stats.subprocess_seconds / total})


def test_episodes_do_not_depend_on_their_slot(tiny, batch_and_engine):
    """With 4 slots for 12 episodes (constant refilling and packing) every episode is identical
    to the run with a slot each: randomness is keyed by (episode, turn), not by slot."""
    config, params = tiny
    batch, _ = batch_and_engine
    engine = SlotEngine(config, TOK, frozen_lake(), FEW_SLOTS)
    packed = sample_independent(engine, params, jax.random.key(0), task_ids=[0, 1, 2, 3],
                                group_size=3)
    np.testing.assert_array_equal(packed.episode_ids, batch.episode_ids)
    np.testing.assert_array_equal(packed.tokens, batch.tokens)
    np.testing.assert_array_equal(packed.action_mask, batch.action_mask)
    np.testing.assert_allclose(packed.behaviour_logprobs, batch.behaviour_logprobs, atol=1e-5)
    assert max(engine.stats.rows_per_turn) <= 4


def test_finished_episodes_stop_consuming_decode_work(one_layer):
    config, params = one_layer
    limits = itertools.cycle([2, 5])
    engine = SlotEngine(config, TOK, lambda: environments.make(
        "frozen_lake", style="compact", size=2, max_steps=next(limits)), WIDE)
    batch = sample_independent(engine, params, jax.random.key(1), task_ids=range(32),
                               group_size=1)
    assert sorted(batch.num_turns.tolist()) == [2] * 16 + [5] * 16
    # 32 live episodes use a 32-row bucket, the last 16 use 16 rows.
    assert engine.stats.rows_per_turn == [32, 32, 16, 16, 16]
    assert engine.stats.slot_turns == sum(engine.stats.rows_per_turn) < 5 * 32


def test_held_episodes_sit_outside_the_turn_window(one_layer):
    """Held episodes in the leading slots (a lookahead's candidates, MC-PR's waiting episodes)
    cost no rows: the turn's window starts past them, their slots stay untouched, and the
    playing copies sample exactly what they sample when everyone plays."""
    config, params = one_layer

    def copies_after_one_turn(hold: bool):
        engine = SlotEngine(config, TOK, frozen_lake(size=2), WIDE)
        engine.begin(params, jax.random.key(3))
        parents = [engine.add_episode(task_id=t) for t in range(16)]
        engine.play_turn()
        copies = [engine.fork(p, 1)[0] for p in parents]
        held_rows = jax.device_get(engine.state.tokens[:16])
        held_lengths = [engine.episodes[p].length for p in parents]
        engine.held = set(parents) if hold else set()
        engine.play_turn()
        if hold:
            assert engine.stats.rows_per_turn[-1] == 16
            np.testing.assert_array_equal(jax.device_get(engine.state.tokens[:16]), held_rows)
            assert [engine.episodes[p].length for p in parents] == held_lengths
            assert all(engine.episodes[p].num_turns == 1 for p in parents)
        else:
            assert engine.stats.rows_per_turn[-1] == 32
        tokens = jax.device_get(engine.state.tokens)
        return [(tuple(tokens[engine.episodes[c].slot, :engine.episodes[c].length]),
                 engine.episodes[c].turns[-1].action_logprobs) for c in copies]

    held, everyone = copies_after_one_turn(True), copies_after_one_turn(False)
    assert len({tokens for tokens, _ in held}) > 1   # the copies sampled different actions
    for (tokens, logprobs), (tokens_all, logprobs_all) in zip(held, everyone):
        assert tokens == tokens_all
        np.testing.assert_allclose(logprobs, logprobs_all, atol=1e-5)


def test_fork_continues_from_the_parent_state(tiny):
    config, params = tiny
    engine = SlotEngine(config, TOK, frozen_lake(slippery=True), ENGINE)
    engine.begin(params, jax.random.key(2))
    parent = engine.add_episode(task_id=7)
    engine.play_turn()
    engine.play_turn()
    before = engine.episodes[parent]
    prefix = before.length
    children = engine.fork(parent, 2)
    for c in children:
        child = engine.episodes[c]
        assert child.parent_id == parent and child.fork_turn == 2
        assert child.env is not before.env
        assert child.env.render() == before.env.render()
        assert child.turns == before.turns and child.depth == before.depth + 1
    engine.run()
    batch = engine.collect()
    rows = {eid: i for i, eid in enumerate(batch.episode_ids)}
    p = rows[parent]
    for c in children:
        i = rows[c]
        assert batch.parent_ids[i] == parent and batch.fork_turns[i] == 2
        assert batch.depth[i] == 1 and batch.depth[p] == 0
        np.testing.assert_array_equal(batch.tokens[i, :prefix], batch.tokens[p, :prefix])
        # tree nodes: the two turns before the fork are the parent's, later ones the child's own
        np.testing.assert_array_equal(batch.node_ids[i, :2], batch.node_ids[p, :2])
        later = batch.node_ids[i, 2:batch.num_turns[i]]
        assert not set(later.tolist()) & set(batch.node_ids[p].tolist())
        np.testing.assert_array_equal(batch.parent_nodes[i, 1:batch.num_turns[i]],
                                      batch.node_ids[i, :batch.num_turns[i] - 1])
        # Continuing from the copied cache gives the logits of a replay from scratch.
        ref = teacher_forced_logprobs(config, params, batch.tokens[i], batch.lengths[i])
        mask = batch.action_mask[i, 1:batch.lengths[i]]
        np.testing.assert_allclose(batch.behaviour_logprobs[i, 1:batch.lengths[i]][mask],
                                   ref[mask], atol=1e-4)
    # Children sample independently of each other after the fork.
    assert not np.array_equal(batch.tokens[rows[children[0]]], batch.tokens[rows[children[1]]])


def test_fork_needs_free_slots_and_a_live_parent(tiny):
    config, params = tiny
    engine = SlotEngine(config, TOK, frozen_lake(), FEW_SLOTS)
    engine.begin(params, jax.random.key(3))
    a = engine.add_episode(0)
    for task in range(1, FEW_SLOTS.num_slots):  # every slot taken
        engine.add_episode(task)
    engine.play_turn()
    with pytest.raises(ValueError, match="free slots"):
        engine.fork(a, 1)
    engine.stop(a)
    with pytest.raises(ValueError, match="not live"):
        engine.fork(a, 1)
    engine.run()
    batch = engine.collect()
    assert batch.end_reason[list(batch.episode_ids).index(a)] == PRUNED


def test_context_overflow_ends_the_episode_truncated(tiny):
    """On the 4-slot engine (256 positions): a 4x4 lake's prompt is 81 tokens and each turn adds
    an action and a 23-token observation, so episodes fill the context before the turn limit."""
    config, params = tiny
    context = FEW_SLOTS.context_length
    engine = SlotEngine(config, TOK, frozen_lake(), FEW_SLOTS)
    batch = sample_independent(engine, params, jax.random.key(4), task_ids=[0, 1], group_size=2)
    assert np.all(batch.truncated) and np.all(batch.context_full)
    assert all(info.get("context_full") for info in batch.infos)
    assert np.all(batch.num_turns < 10) and np.all(batch.lengths <= context)
    # A prompt longer than the whole context ends before the first action (a 14x14 lake's
    # prompt is 271 tokens).
    engine = SlotEngine(config, TOK, frozen_lake(size=14, max_steps=26), FEW_SLOTS)
    batch = sample_independent(engine, params, jax.random.key(5), task_ids=[0], group_size=1)
    assert batch.num_turns[0] == 0 and batch.truncated[0] and batch.lengths[0] == 0
    # Episodes that fill their context at different turns (5x5 lakes' observations are longer):
    # the ones that overflow leave while the others play on, and each is recorded once.
    sizes = itertools.cycle([4, 5])
    engine = SlotEngine(config, TOK, lambda: environments.make(
        "frozen_lake", style="compact", size=next(sizes)), FEW_SLOTS)
    batch = sample_independent(engine, params, jax.random.key(4), task_ids=[0, 1], group_size=2)
    assert len(batch) == 4 and sorted(batch.episode_ids) == [0, 1, 2, 3]
    assert np.all(batch.context_full) and len(set(batch.num_turns.tolist())) > 1


def test_every_turn_is_labelled_as_a_replay_labels_it(tiny):
    """Every environment label of every turn (verifier, turn score, process score, signatures,
    anchor, validation) and its reward equal what a fresh environment replaying the episode's
    actions reports."""
    config, params = tiny
    make_env = frozen_lake(slippery=True)
    labeler = TurnLabeler(environment_labels(), signature_function("env"))
    engine = SlotEngine(config, TOK, make_env, FEW_SLOTS, labeler)
    batch = sample_independent(engine, params, jax.random.key(6), task_ids=[0, 1], group_size=2)
    turns = (len(batch), int(batch.num_turns.max()))
    chex.assert_shape([batch.turn_rewards, batch.turn_valid, batch.node_ids, batch.parent_nodes,
                       *batch.labels.values()], turns)
    assert set(batch.labels) == set(environment_labels())
    chex.assert_shape([batch.end_reason, batch.depth, batch.context_full], (len(batch),))
    labelled = 0
    for i in range(len(batch)):
        env = make_env()
        env.reset(int(batch.task_ids[i]))
        tokens, mask = batch.tokens[i], batch.action_mask[i]
        for t in range(batch.num_turns[i]):
            action = tokens[mask & (batch.turn_index[i] == t)].tolist()
            ended = bool(action) and action[-1] == TOK.end_of_turn_id
            text = conversation.action_text(TOK, action, ended)
            parsed = env.parse_action(text)
            assert batch.labels["state_signature"][i, t] == env.state_signature()
            assert batch.labels["action_signature"][i, t] == env.action_signature(parsed)
            assert batch.labels["verified"][i, t] == float(env.verify(parsed))
            assert batch.labels["anchor_state"][i, t] == env.canonical_state()
            assert batch.labels["turn_score"][i, t] == np.float32(env.turn_score(parsed))
            _, reward, _, info = env.step(text)
            assert batch.labels["validation"][i, t] == bool(info.get("validation", False))
            assert batch.turn_rewards[i, t] == np.float32(reward)
            assert batch.turn_valid[i, t] == info["valid"]
            assert batch.labels["process_score"][i, t] == np.float32(env.process_score())
            labelled += 1
        k = batch.num_turns[i]
        assert np.all(np.isnan(batch.labels["process_score"][i, k:]))
        assert all(s is None for s in batch.labels["state_signature"][i, k:])
        assert batch.end_reason[i] in (DONE, TRUNCATED)
    assert labelled >= 4


def test_rollout_config_validation():
    with pytest.raises(ValueError, match="num_slots"):
        RolloutConfig(num_slots=0)
    with pytest.raises(ValueError, match="max_action_tokens"):
        RolloutConfig(context_length=16, max_action_tokens=16)
