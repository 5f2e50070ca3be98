"""Tic-Tac-Toe: exact values and verifier against a plain negamax, the MCTS oracle on forced
positions, opponents, invalid actions, rewards and rendering."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import environments
from environments import tictactoe
from environments.tictactoe import (TicTacToe, mcts_root_statistics, minimax_move_values,
                                    minimax_value)

# ------------------------------------------------------------------ independent reference

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def winner(board):
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def other_mark(mark):
    return "O" if mark == "X" else "X"


def to_move(board):
    return "X" if board.count("X") == board.count("O") else "O"


def ref_value(board, player):
    """Plain recursive negamax over the full game tree (no memo): +1/0/-1 for `player` to move."""
    found = winner(board)
    if found is not None:
        return 1 if found == player else -1
    if "." not in board:
        return 0
    best = -1
    for cell in range(9):
        if board[cell] == ".":
            board[cell] = player
            best = max(best, -ref_value(board, other_mark(player)))
            board[cell] = "."
            if best == 1:  # nothing beats a win
                break
    return best


def ref_move_values(board, player):
    """{cell: value for `player` after playing there}."""
    values = {}
    for cell in range(9):
        if board[cell] == ".":
            board[cell] = player
            values[cell] = -ref_value(board, other_mark(player))
            board[cell] = "."
    return values


def masks(board, player):
    """(mover, other) 9-bit masks of the module's API, `player` to move."""
    mover = sum(1 << cell for cell in range(9) if board[cell] == player)
    other = sum(1 << cell for cell in range(9) if board[cell] == other_mark(player))
    return mover, other


def play_out(order, plies):
    """The board after playing the cells of `order` in turn (X first) for `plies` moves or until
    someone wins."""
    board = ["."] * 9
    for cell in order[:plies]:
        if winner(board) is not None:
            break
        board[cell] = to_move(board)
    return board


def set_board(env, board):
    """Puts an env (agent to move, agent X) on a hand-written board."""
    assert env.agent_mark == "X" and to_move(board) == "X"
    env.agent_cells, env.opponent_cells = masks(board, "X")


def make(**kwargs):
    return TicTacToe(**{"style": "compact", **kwargs})


# ------------------------------------------------------------------ exact solver


def test_empty_board_is_a_draw():
    assert ref_value(["."] * 9, "X") == 0
    assert minimax_value(0, 0) == 0


@settings(deadline=None, max_examples=200)
@given(st.permutations(range(9)), st.integers(1, 9))  # the empty board: the test above
def test_minimax_value_matches_plain_negamax(order, plies):
    board = play_out(order, plies)
    player = to_move(board)
    assert minimax_value(*masks(board, player)) == ref_value(board, player)
    if winner(board) is None and "." in board:
        assert minimax_move_values(*masks(board, player)) == ref_move_values(board, player)


def hand_env(board, **kwargs):
    env = make(agent_mark="X", opponent="random", **kwargs)
    env.reset(0)
    set_board(env, list(board))
    return env


def test_minimax_oracle_takes_the_immediate_win_and_verify_accepts_slower_wins():
    # X: (0,0), (1,1); O: (0,1), (0,2). X wins at once at (2,2); (1,0) makes three threats.
    env = hand_env("XOO.X....")
    assert env.oracle_action() == (2, 2)
    assert env.verify((2, 2)) and env.verify((1, 0))
    values = ref_move_values(list("XOO.X...."), "X")
    for cell, value in values.items():
        assert env.verify(divmod(cell, 3)) == (value == 1)


def test_minimax_oracle_blocks():
    # O threatens (1,0)-(1,1)-(1,2); X has no win: the only non-losing move is (1,2).
    env = hand_env("X..OO...X")
    assert env.oracle_action() == (1, 2)
    assert [cell for cell in range(9) if env.verify(divmod(cell, 3))] == [5]


def random_agent_episodes(seeds, **kwargs):
    """Yields the env at every agent turn of games in which the agent plays uniformly random legal
    moves (drawn from a generator of the test, not from the env's)."""
    for seed in seeds:
        env = make(**kwargs)
        env.reset(seed)
        moves = np.random.default_rng(1000 + seed)
        while not env.done:
            yield env
            legal = env.legal_actions()
            env.step(env.format_action(legal[moves.integers(len(legal))]))


def test_verify_and_oracle_match_brute_force_over_played_games():
    checked = 0
    for env in random_agent_episodes(range(12), opponent="random"):
        board = list(env.board)
        values = ref_move_values(board, env.agent_mark)
        best = max(values.values())
        for cell in range(9):
            assert env.verify(divmod(cell, 3)) == (values.get(cell) == best)
        row, col = env.oracle_action()
        assert values[3 * row + col] == best
        assert env.process_score() == (ref_value(board, env.agent_mark) + 1) / 2
        assert not env.verify((3, 0)) and not env.verify(None)
        checked += 1
    assert checked > 30


def test_process_score_at_the_end_is_the_return():
    for seed in range(20):
        env = make(opponent="random")
        env.reset(seed)
        while not env.done:
            text = "pass" if seed % 5 == 0 else env.format_action(env.legal_actions()[0])
            _, _, _, info = env.step(text)
        assert env.process_score() == (info["return"] + 1) / 2
        assert env.oracle_action() is None and not env.verify((0, 0))


# ------------------------------------------------------------------ MCTS


def forced_positions(count):
    """Reachable positions with at least four empty cells whose only minimax-optimal move is an
    immediate win or the block of the opponent's immediate threat (found by the reference)."""
    found = []
    rng = np.random.default_rng(7)
    while len(found) < count:
        board = play_out(list(rng.permutation(9)), int(rng.integers(3, 6)))
        player = to_move(board)
        if winner(board) is not None:
            continue
        values = ref_move_values(board, player)
        optimal = [cell for cell, value in values.items() if value == max(values.values())]
        if len(optimal) != 1:
            continue
        cell = optimal[0]
        wins = board.copy()
        wins[cell] = player
        blocks = board.copy()
        blocks[cell] = other_mark(player)
        if winner(wins) == player or winner(blocks) == other_mark(player):
            found.append((board, player, cell))
    return found


def test_mcts_finds_the_unique_winning_or_blocking_move():
    positions = forced_positions(10)
    assert len({tuple(board) for board, _, _ in positions}) == 10
    for index, (board, player, cell) in enumerate(positions):
        stats = mcts_root_statistics(*masks(board, player), 5000, np.random.default_rng(index))
        assert set(stats) == {c for c in range(9) if board[c] == "."}
        best = max(q for _, q in stats.values())
        assert [c for c, (_, q) in stats.items() if q == best] == [cell], (board, stats)
        assert sum(visits for visits, _ in stats.values()) == 5000


def test_mcts_q_of_an_immediate_win_is_one():
    stats = mcts_root_statistics(*masks(list("XX.OO...."), "X"), 200, np.random.default_rng(0))
    assert stats[2][1] == 1.0


def test_mcts_oracle_is_reproducible_and_leaves_the_rng_alone():
    env = make(agent_mark="X", opponent="random", oracle="mcts", oracle_simulations=300)
    env.reset(3)
    env.step(env.format_action(env.oracle_action()))
    state = env.rng.bit_generator.state
    action = env.oracle_action()
    verified = [env.verify(a) for a in env.legal_actions()]
    assert env.verify(action)
    tictactoe._oracle_q.cache_clear()  # recompute from scratch
    assert env.clone().oracle_action() == action
    assert [env.verify(a) for a in env.legal_actions()] == verified
    assert env.rng.bit_generator.state == state


@pytest.mark.parametrize("board, cell", [("XX.OO....", 2), ("X..OO...X", 5)])
def test_mcts_oracle_verifies_the_forced_move(board, cell):
    # hand-checked: X wins at (0,2) (any other move lets O win or only draws); X must block (1,2)
    values = ref_move_values(list(board), "X")
    assert [c for c, value in values.items() if value == max(values.values())] == [cell]
    env = hand_env(board, oracle="mcts", oracle_simulations=2000)
    assert env.oracle_action() == divmod(cell, 3)
    assert [c for c in range(9) if env.verify(divmod(c, 3))] == [cell]


# ------------------------------------------------------------------ opponents and turn order


@pytest.mark.parametrize("opponent", ["random", "mcts"])
def test_opponent_only_plays_legal_moves(opponent):
    for seed in range(8):
        env = make(opponent=opponent, opponent_simulations=50)
        env.reset(seed)
        moves = np.random.default_rng(seed)
        while not env.done:
            before = env.board
            legal = env.legal_actions()
            row, col = legal[moves.integers(len(legal))]
            env.step(env.format_action((row, col)))
            after = env.board
            changed = [cell for cell in range(9) if before[cell] != after[cell]]
            assert all(before[cell] == "." for cell in changed)
            assert after[3 * row + col] == env.agent_mark
            replies = [cell for cell in changed if after[cell] == env.opponent_mark]
            game_over_by_agent = winner(after) == env.agent_mark or (
                "." not in after and len(changed) == 1)
            assert len(replies) == (0 if game_over_by_agent else 1)


def test_agent_as_o_sees_the_opponents_first_move():
    for seed in range(5):
        env = make(agent_mark="O", opponent="random")
        obs = env.reset(seed)
        lines = obs.splitlines()
        assert lines[0] == "you: O"
        grid = "".join(lines[1:])
        assert grid.count("X") == 1 and grid.count("O") == 0 and grid.count(".") == 8
        assert len(env.legal_actions()) == 8
        chat = env.render("chat")
        assert "O(" in chat and "X(" not in chat.split("LEGAL ACTIONS:")[1]


def test_agent_as_x_starts_on_an_empty_board():
    env = make(agent_mark="X")
    assert env.reset(0) == "you: X\n...\n...\n..."


def test_random_mark_and_mixed_opponent_draw_both_kinds():
    marks, kinds = set(), set()
    for seed in range(40):
        env = make(opponent_simulations=20)
        env.reset(seed)
        marks.add(env.agent_mark)
        kinds.add(env.opponent_kind)
    assert marks == {"X", "O"} and kinds == {"mcts", "random"}
    for fraction, kind in ((0.0, "random"), (1.0, "mcts")):
        env = make(mcts_fraction=fraction, opponent_simulations=20)
        for seed in range(10):
            env.reset(seed)
            assert env.opponent_kind == kind


def test_same_seed_same_episode():
    def episode(seed):
        env = make(opponent_simulations=100)
        observations = [env.reset(seed)]
        while not env.done:
            observations.append(env.step(env.format_action(env.legal_actions()[-1]))[0])
        return observations
    assert episode(11) == episode(11)


# ------------------------------------------------------------------ rewards and invalid actions


def test_minimax_oracle_never_loses():
    for opponent, seeds in (("random", range(150)), ("mcts", range(16))):
        for mark in ("X", "O"):
            for seed in seeds:
                env = make(agent_mark=mark, opponent=opponent)  # MCTS: 1000 simulations
                env.reset(seed)
                while not env.done:
                    _, reward, _, info = env.step(env.answer_text(env.oracle_action()))
                    assert info["valid"]
                assert info["return"] >= 0 and reward == info["return"]


def test_returns_and_success():
    returns = set()
    for seed in range(60):
        env = make(opponent="random")
        env.reset(seed)
        moves = np.random.default_rng(seed)
        rewards = []
        while not env.done:
            legal = env.legal_actions()
            _, reward, _, info = env.step(env.format_action(legal[moves.integers(len(legal))]))
            rewards.append(reward)
        assert rewards[:-1] == [0.0] * (len(rewards) - 1)
        assert rewards[-1] in (-1.0, 0.0, 1.0) and info["return"] == rewards[-1]
        assert info["success"] == (rewards[-1] == 1.0) and not info["truncated"]
        assert len(rewards) <= 5
        returns.add(rewards[-1])
    assert returns == {-1.0, 0.0, 1.0}


def test_win_reward_on_a_hand_board():
    env = hand_env("XX.OO....")
    obs, reward, done, info = env.step("<answer>X(0,2)</answer>")
    assert (reward, done, info["success"], info["return"]) == (1.0, True, True, 1.0)
    assert obs == "you: X\nXXX\nOO.\n..."


INVALID_TEXTS = ["hello", "X(0,0)", "X(3,1)", "O(2,2)", "X(2,2) X(2,1)", ""]


@pytest.mark.parametrize("text", INVALID_TEXTS)
def test_invalid_action_loses_by_default(text):
    env = hand_env("X...O....")
    before = env.board
    _, reward, done, info = env.step(text)
    assert (reward, done, info["valid"], info["success"], info["return"]) == (-1.0, True, False,
                                                                               False, -1.0)
    assert env.board == before and env.process_score() == 0.0


@pytest.mark.parametrize("text", INVALID_TEXTS)
def test_invalid_action_penalized(text):
    env = hand_env("X...O....", invalid_action="penalize", format_penalty=-0.25)
    before = env.board
    _, reward, done, info = env.step(text)
    assert (reward, done, info["valid"], info["return"]) == (-0.25, False, False, 0.0)
    assert env.board == before
    _, _, _, info = env.step("X(2,2)")
    assert info["valid"] and env.board[8] == "X"


def test_penalize_truncates_at_max_steps():
    env = make(agent_mark="X", opponent="random", invalid_action="penalize")
    env.reset(0)
    for _ in range(9):
        _, _, done, info = env.step("pass")
    assert done and info["truncated"] and info["return"] == 0.0
    assert env.process_score() == 0.5 and env.total_reward == pytest.approx(-0.9)


# ------------------------------------------------------------------ text


@pytest.mark.parametrize("text", ["X(1,2)", "x(1,2)", "<X(1,2)>", " X ( 1 , 2 ) ", "< x(1, 2) >",
                                  "<answer>X(1,2)</answer>", "think <answer><X(1,2)></answer>"])
def test_parse_accepts(text):
    env = make(agent_mark="X")
    env.reset(0)
    assert env.parse_action(text) == (1, 2)


@pytest.mark.parametrize("text", ["X(1,2)!", "X(1 2)", "(1,2)", "X1,2", "O(1,2)", "X(1,2)>",
                                  "<X(1,2)", "X(-1,2)", "X(1,2,3)", "XX(1,2)", "X(1.0,2)"])
def test_parse_rejects(text):
    env = make(agent_mark="X")
    env.reset(0)
    assert env.parse_action(text) is None


def test_chat_render_and_instructions_follow_listing_1():
    env = TicTacToe(agent_mark="X")
    env.reset(0)
    assert env.render() == ("GAME STATE:\n"
                            "   0  1  2\n"
                            "0  .  .  .\n"
                            "1  .  .  .\n"
                            "2  .  .  .\n\n"
                            "LEGAL ACTIONS: X(0,0), X(0,1), X(0,2), X(1,0), X(1,1), X(1,2), "
                            "X(2,0), X(2,1), X(2,2)")
    prompt = env.prompt()
    assert "Your mark is X. You are competing with another player controlling the mark O." in prompt
    assert "<answer>X(1,1)</answer>" in prompt and "immediate loss of the game" in prompt
    assert env.system_prompt == ("You are an AI agent that makes optimal decisions to win in the "
                                 "game of Tic-Tac-Toe.")
    assert env.answer_text((0, 1)) == "<answer>X(0,1)</answer>"
    env.step("nonsense")
    assert env.render().endswith("GAME OVER: you lost.")


def test_canonical_state():
    env = hand_env("X...O....")
    assert env.canonical_state() == "X...O....|X"
    assert env.state_signature() == "0|X...O....|X"


def test_registry_and_option_validation():
    assert isinstance(environments.make("tictactoe"), TicTacToe)
    for argument, value in [("agent_mark", "Z"), ("opponent", "minimax"), ("oracle", "mc"),
                            ("invalid_action", "ignore"), ("mcts_fraction", 1.5),
                            ("opponent_simulations", 0), ("oracle_simulations", 2.5),
                            ("style", "verbose")]:
        with pytest.raises(ValueError, match=argument):
            TicTacToe(**{argument: value})
