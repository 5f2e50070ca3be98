"""The environment protocol, checked on every registered environment."""

import re
import subprocess
import sys
from pathlib import Path

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


# ---------------------------------------------------------------------- the reset guard


def _type_name(name):
    return environments.env_class(name).__name__


def _an_action(name, opts):
    """A well-formed action of the environment (the oracle's, on a reset twin)."""
    twin = _make(name, opts)
    twin.reset(0)
    return twin.oracle_action()


#: Every state query of the protocol, as (method name, call).
STATE_QUERIES = [
    ("step", lambda env, action: env.step("anything")),
    ("render", lambda env, action: env.render()),
    ("prompt", lambda env, action: env.prompt()),
    ("canonical_state", lambda env, action: env.canonical_state()),
    ("state_signature", lambda env, action: env.state_signature()),
    ("oracle_action", lambda env, action: env.oracle_action()),
    ("verify", lambda env, action: env.verify(action)),
    ("turn_score", lambda env, action: env.turn_score(action)),
    ("random_action", lambda env, action: env.random_action(np.random.default_rng(0))),
    ("process_score", lambda env, action: env.process_score()),
    ("metrics", lambda env, action: env.metrics()),
]
#: Each environment's own state queries (methods, or properties when marked).
OWN_QUERIES = {
    "frozen_lake": [("distance", ()), ("position", None), ("desc", None)],
    "sokoban": [("solve", ()), ("optimal_length", ()), ("is_deadlocked", ()),
                ("boxes_on_target", None), ("solved", None)],
    "countdown": [],
    # Tic-Tac-Toe's action text and instructions carry the agent's mark, drawn at reset.
    "tictactoe": [("board", None), ("legal_actions", ()), ("instructions", ()),
                  ("parse_action", ("X(1,1)",)), ("format_action", ((1, 1),))],
    "sudoku": [("completion_rate", ())],
    "minesweeper": [("completion_rate", ()), ("mine_probabilities", ())],
}


def _call_own_query(env, attribute, args):
    return getattr(env, attribute) if args is None else getattr(env, attribute)(*args)


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_state_queries_before_reset_raise_env_not_reset_error(name, opts):
    action = _an_action(name, opts)
    env = _make(name, opts)
    cls = _type_name(name)
    for method, call in STATE_QUERIES:
        with pytest.raises(environments.EnvNotResetError,
                           match=rf"^{cls}: call reset\(seed\) before {method}\(\)$"):
            call(env, action)
    for attribute, args in OWN_QUERIES[name]:
        with pytest.raises(environments.EnvNotResetError, match=rf"^{cls}: .* {attribute}\(\)$"):
            _call_own_query(env, attribute, args)
    assert issubclass(environments.EnvNotResetError, RuntimeError)
    # A clone of an environment that was never reset is not reset either; reset makes both work.
    twin = env.clone()
    with pytest.raises(environments.EnvNotResetError):
        twin.render()
    assert env.reset(4) == twin.reset(4)
    for method, call in STATE_QUERIES:
        env.reset(4)
        call(env, env.oracle_action())
    for attribute, args in OWN_QUERIES[name]:
        _call_own_query(twin, attribute, args)


@pytest.mark.parametrize("name", environments.names())
def test_stateless_members_work_before_reset(name):
    """What reads no state needs no episode (Tic-Tac-Toe's action text excepted, above)."""
    env = environments.make(name)
    assert env.action_signature(None) == "<invalid>"
    assert env.clone().style == env.style
    if name != "tictactoe":
        assert env.instructions()
        action = _an_action(name, {})
        assert env.parse_action(env.answer_text(action)) == action
        assert env.action_signature(action) == env.format_action(action)


# ---------------------------------------------------------------------- seeds


BAD_SEEDS = [-1, -(2**40), 1.7, 2.0, float("nan"), True, False, None, "3", b"3", [3], (3,),
             np.float64(2.0), np.bool_(True), np.int64(-1)]


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_reset_rejects_seeds_that_are_not_non_negative_integers(name, opts):
    env = _make(name, opts)
    cls = _type_name(name)
    for seed in BAD_SEEDS:
        expected = rf"^{cls}\.reset: seed must be a non-negative integer, got "
        with pytest.raises(ValueError, match=expected + re.escape(repr(seed)) + "$"):
            env.reset(seed)
    with pytest.raises(environments.EnvNotResetError):  # a rejected seed starts no episode
        env.render()
    # Numpy integers are seeds like the Python int of the same value.
    assert env.reset(np.int64(5)) == env.reset(np.uint32(5)) == env.reset(5)
    assert env.seed == 5 and type(env.seed) is int
    # A rejected seed leaves the current episode untouched.
    if env.oracle_action() is not None:
        env.step(env.answer_text(env.oracle_action()))
    before = _snapshot(env)
    for seed in BAD_SEEDS:
        with pytest.raises(ValueError):
            env.reset(seed)
    assert _snapshot(env) == before


# ---------------------------------------------------------------------- verify after the end


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_verify_is_false_once_the_episode_is_over(name, opts):
    """However the episode ended (by the game, or on the step limit with the state unchanged),
    nothing verifies afterwards, not even the action the verifier accepted just before."""
    rng = np.random.default_rng(3)
    env = _make(name, opts)
    for seed in range(8):
        # Ended by malformed answers: the penalize-and-continue games run into the step limit
        # with the verified action still legal, the others end on the first one.
        env.reset(seed)
        action = env.oracle_action()
        assert env.verify(action)
        while not env.done:
            env.step("}{")
        assert not env.verify(action)
        # Ended by oracle play: every action verified on the way fails afterwards.
        env.reset(seed)
        verified = []
        while not env.done:
            verified += [a for a in (env.oracle_action(), env.random_action(rng)) if env.verify(a)]
            env.step(env.answer_text(env.oracle_action()))
        assert verified and not any(env.verify(a) for a in verified)
        assert env.oracle_action() is None


# ---------------------------------------------------------------------- the action contract


#: Values that are an action of no environment.
NON_ACTIONS = [None, True, False, np.bool_(True), 1.0, 1.5, float("nan"), -1, np.int64(-1), "1",
               "Up", "", b"\x01", [], [1, 2], {}, set(), object(), (), (1,), (1, 2, 3, 4, 5),
               (-1, 0), (True, 1), (1.0, 2.0), (0, -1, 1), (1, True, 2), (1, 2, 3.0),
               ("reveal", -1, 0), ("flag", 1.0, 2), ("reveal", True, 0)]
#: Per environment: values close to its actions that are not actions.
NEAR_ACTIONS = {
    "frozen_lake": [4, 99, np.int64(4), "Left", "left", 2**70],
    "sokoban": [4, 99, np.int64(4), "Up", "Right", 2**70],
    "countdown": ["1 + 2", ("+", 1), ("+", 1, 2, 3), ("**", 2, 3), ("+", 1, -2), ("+", 1, 2.0),
                  ["+", 1, 2], ("+", ("*", 1, True), 2), (1, "+", 2)],
    "tictactoe": [(1, 2, 3), (np.int64(-1), 0), "X(1,1)", [1, 1], ("X", 1, 1), (1, "1")],
    "sudoku": [(1, 2), (1, 2, 3, 4), "fill(1,1,1)", (1, 2, -3), [1, 1, 1], (1, "1", 1)],
    "minesweeper": [("Reveal", 0, 0), ("dig", 0, 0), ("reveal", 0), (0, 0), (0, 0, 0),
                    ("reveal", 0, 0, 0), "reveal(0,0)", ["reveal", 0, 0]],
}
#: Per environment: unusual values that are actions (numpy integers; cells off the board, which
#: the parser returns and the rules forbid).
UNUSUAL_ACTIONS = {
    "frozen_lake": [np.int64(2), np.uint8(0)],
    "sokoban": [np.int64(3), np.int32(0)],
    "countdown": [np.int64(7), ("+", np.int64(1), 2), 2**70],
    "tictactoe": [(np.int64(1), 2), (5, 7), (0, 3)],
    "sudoku": [(np.int64(1), 2, 3), (0, 1, 5), (1, 1, 10), (99, 99, 99)],
    "minesweeper": [("reveal", np.int64(0), 0), ("reveal", 9, 9), ("flag", 0, 5)],
}
#: Environments whose turn_score of malformed text is the reward a clone receives for it (the
#: base default; FrozenLake uses TSR's Eq. 10).
CLONE_TURN_SCORE = {"sokoban", "countdown", "tictactoe", "sudoku", "minesweeper"}


def _states(name, opts, seeds=4):
    """Environments in a few states along oracle play (reset included), never over."""
    for seed in range(seeds):
        env = _make(name, opts)
        env.reset(seed)
        for _ in range(2):
            if env.done:
                break
            yield env
            env.step(env.answer_text(env.oracle_action()))


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_values_that_are_not_actions_count_as_malformed(name, opts):
    cls = _type_name(name)
    for env in _states(name, opts):
        before = _snapshot(env)
        malformed_score = env.turn_score(None)
        for value in NON_ACTIONS + NEAR_ACTIONS[name]:
            assert env.verify(value) is False, value
            assert env.turn_score(value) == malformed_score, value
            assert env.action_signature(value) == "<invalid>", value
            for method in (env.format_action, env.answer_text):
                with pytest.raises(ValueError, match=rf"^{cls}\.format_action: "
                                                     rf"{re.escape(repr(value))} is not"):
                    method(value)
        assert _snapshot(env) == before


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_well_formed_actions_round_trip_and_off_board_ones_score_as_malformed(name, opts):
    rng = np.random.default_rng(4)
    for env in _states(name, opts):
        before = _snapshot(env)
        for action in [env.oracle_action(), env.random_action(rng), *UNUSUAL_ACTIONS[name]]:
            assert env.parse_action(env.answer_text(action, "chat")) == action
            assert env.parse_action(env.answer_text(action, "compact")) == action
            assert env.action_signature(action) == env.format_action(action)
            assert isinstance(env.verify(action), bool)
            score = env.turn_score(action)
            assert np.isfinite(score)
            if name in CLONE_TURN_SCORE:
                # the reward a clone receives for the action's text, for legal and illegal ones
                assert score == pytest.approx(env.clone().step(env.answer_text(action))[1])
        assert _snapshot(env) == before


@pytest.mark.parametrize("name,opts", [c for c in CONFIGS if c[0] in CLONE_TURN_SCORE],
                         ids=[i for c, i in zip(CONFIGS, IDS) if c[0] in CLONE_TURN_SCORE])
def test_turn_score_of_malformed_text_is_what_a_clone_receives(name, opts):
    """turn_score(None) follows the game's rules for malformed text (the format penalty, or the
    loss of the game where the rules say so), like an illegal action."""
    for env in _states(name, opts):
        assert env.turn_score(None) == env.clone().step("}{")[1]


def test_bool_and_negative_indices_are_not_moves():
    """Regression: True used to play action 1 and -1 the last action ("Right" at FrozenLake)."""
    env = environments.make("frozen_lake", desc=["SFF", "FFF", "FFG"])
    env.reset(0)
    assert env.verify(1) and env.verify(2)
    assert not env.verify(True) and not env.verify(np.int64(-2))
    assert env.turn_score(-1) == env.turn_score(None) < env.turn_score(2)
    assert env.turn_score(True) == env.turn_score(None) < env.turn_score(1)


# ---------------------------------------------------------------------- host-side only


def test_environments_never_import_jax():
    code = ("import sys, environments\n"
            "for name in environments.names():\n"
            "    environments.make(name).reset(0)\n"
            "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
