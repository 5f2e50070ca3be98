"""The environment protocol, checked on every registered environment."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import environments

# (name, options): every environment with its defaults, plus the variants with other dynamics.
CONFIGS = [
    ("frozen_lake", {}),
    ("frozen_lake", {"slippery": True}),
    ("sokoban", {}),
    ("countdown", {}),
    ("tictactoe", {}),
    ("sudoku", {}),
    ("sudoku", {"size": 4}),
    ("minesweeper", {}),
]
IDS = [f"{name}{'-' + '-'.join(f'{k}={v}' for k, v in opts.items()) if opts else ''}"
       for name, opts in CONFIGS]
# Environments whose default treatment of a malformed answer is the format penalty with the state
# left unchanged (the others end the episode, as their papers' rules say).
PENALIZE_AND_CONTINUE = {"frozen_lake", "sokoban", "sudoku"}
GARBAGE = ["", "   ", "<answer></answer>", "hello", "<answer>42</answer>", "}{", "\x00\xff",
           "<answer>" * 3]


def _make(name, opts, **extra):
    return environments.make(name, **opts, **extra)


def _random_texts(env, rng, n):
    """A mix of random legal actions, oracle actions and garbage, as model texts."""
    texts = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.5:
            texts.append(env.answer_text(env.random_action(rng)))
        elif roll < 0.8 and env.oracle_action() is not None:
            texts.append(env.answer_text(env.oracle_action()))
        else:
            texts.append(GARBAGE[rng.integers(len(GARBAGE))])
    return texts


def _snapshot(env):
    return env.render(), env.state_signature(), env.done, env.num_steps, env.total_reward


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_reset_is_a_function_of_the_seed(name, opts):
    env = _make(name, opts)
    first = [env.reset(seed) for seed in range(12)]
    again = [env.reset(seed) for seed in range(12)]
    assert first == again
    if name != "minesweeper":  # a fresh minesweeper board looks the same for every seed
        assert len(set(first)) > 6


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_clone_replays_identically_and_independently(name, opts):
    rng = np.random.default_rng(0)
    for seed in range(15):
        env = _make(name, opts)
        env.reset(seed)
        for text in _random_texts(env, rng, int(rng.integers(0, 3))):
            if not env.done:
                env.step(text)
        twin = env.clone()
        assert _snapshot(twin) == _snapshot(env)
        while not env.done:
            text = _random_texts(env, rng, 1)[0]
            assert env.step(text) == twin.step(text)
            assert _snapshot(twin) == _snapshot(env)

        # Independence: driving the clone never changes the original, and vice versa.
        env.reset(seed)
        before = _snapshot(env)
        child = env.clone()
        while not child.done:
            child.step(_random_texts(child, rng, 1)[0])
        assert _snapshot(env) == before
        child_after = _snapshot(child)
        if env.oracle_action() is not None:
            env.step(env.answer_text(env.oracle_action()))
        assert _snapshot(child) == child_after


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_state_signatures_never_repeat_within_an_episode(name, opts):
    rng = np.random.default_rng(1)
    env = _make(name, opts)
    for seed in range(40):
        env.reset(seed)
        seen = [env.state_signature()]
        while not env.done:
            env.step(_random_texts(env, rng, 1)[0])
            seen.append(env.state_signature())
        assert len(seen) == len(set(seen))


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=60) | st.sampled_from(GARBAGE), seed=st.integers(0, 50))
def test_step_never_raises_on_arbitrary_text(name, opts, text, seed):
    env = _make(name, opts)
    env.reset(seed)
    before = env.render()
    observation, reward, done, info = env.step(text)
    assert isinstance(observation, str) and isinstance(done, bool) and np.isfinite(reward)
    assert {"valid", "success", "truncated", "action"} <= set(info)
    if env.parse_action(text) is None:
        assert info["valid"] is False and info["action"] is None
        if name in PENALIZE_AND_CONTINUE:
            assert reward == env.format_penalty
            assert observation == before


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_queries_are_consistent_along_oracle_play(name, opts):
    """Along oracle play the oracle action is verified, scores stay in [0, 1], and no query
    changes the state."""
    env = _make(name, opts)
    for seed in range(10):
        env.reset(seed)
        while not env.done:
            before = _snapshot(env)
            action = env.oracle_action()
            score = env.process_score()
            assert 0.0 <= score <= 1.0
            assert env.verify(action)
            assert np.isfinite(env.turn_score(action))
            assert env.action_signature(action) == env.format_action(action)
            assert env.parse_action(env.answer_text(action, "chat")) == action
            assert env.parse_action(env.answer_text(action, "compact")) == action
            assert _snapshot(env) == before
            env.step(env.answer_text(action))
        assert 0.0 <= env.process_score() <= 1.0


def _oracle_success_rate(name, opts, seeds=200):
    env = _make(name, opts)
    successes, returns = 0, []
    for seed in range(seeds):
        env.reset(seed)
        info = {}
        while not env.done:
            _, _, _, info = env.step(env.answer_text(env.oracle_action()))
        successes += bool(info["success"])
        returns.append(env.total_reward)
    return successes / seeds, np.asarray(returns)


@pytest.mark.parametrize("name,opts", [c for c in CONFIGS if c[0] in
                                       ("frozen_lake", "sokoban", "countdown", "sudoku")
                                       and not c[1].get("slippery")],
                         ids=lambda v: str(v))
def test_oracle_solves_every_seed_of_deterministic_games(name, opts):
    rate, _ = _oracle_success_rate(name, opts)
    assert rate == 1.0


def test_oracle_never_loses_at_tictactoe():
    rate, returns = _oracle_success_rate("tictactoe", {})
    assert returns.min() >= 0  # minimax play never loses, whatever the opponent
    assert rate > 0  # and wins against the random opponents that blunder


@pytest.mark.parametrize("name,opts", [("frozen_lake", {"slippery": True}),
                                       ("minesweeper", {})], ids=lambda v: str(v))
def test_oracle_on_games_of_chance_beats_a_random_policy(name, opts):
    """Where luck decides (slippery ice, forced guesses) the oracle cannot always win; it must
    still do far better than random legal play."""
    oracle_rate, _ = _oracle_success_rate(name, opts)
    env, rng, wins = _make(name, opts), np.random.default_rng(2), 0
    for seed in range(200):
        env.reset(seed)
        info = {}
        while not env.done:
            _, _, _, info = env.step(env.answer_text(env.random_action(rng)))
        wins += bool(info["success"])
    assert oracle_rate > 2 * wins / 200


@pytest.mark.parametrize("name", environments.names())
def test_prompt_styles(name):
    chat, compact = environments.make(name, style="chat"), environments.make(name, style="compact")
    chat.reset(3)
    compact.reset(3)
    assert isinstance(chat.system_prompt, str) and chat.system_prompt
    assert "<answer>" in chat.prompt()
    assert len(compact.prompt()) < len(chat.prompt())
    assert chat.prompt("compact") == compact.prompt()


def test_make_names_bad_options():
    with pytest.raises(ValueError, match="bogus"):
        environments.make("sudoku", bogus=1)
    with pytest.raises(ValueError, match="unknown environment"):
        environments.make("chess")
    with pytest.raises(ValueError, match="style"):
        environments.make("frozen_lake", style="verbose")
