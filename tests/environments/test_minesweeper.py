"""Minesweeper (environments/minesweeper.py): the exact posterior against brute-force enumeration of
every mine placement, the verifier and oracle on hand-checked boards, flood fill against a
reference region, first-reveal safety, losses, invalid-action modes and completion-rate accounting.
The generic protocol (clones, signatures, fuzzing) is covered by test_protocol.py."""

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import environments
from environments.minesweeper import Action, Minesweeper

# Board A: 3x3, mines at (0,0) and (1,1). Revealing (2,2) shows 1 (its neighbours (1,1), (1,2),
# (2,1) hold one mine), revealing (0,2) shows 1 (neighbours (0,1), (1,1), (1,2)); neither floods.
BOARD_A = {"rows": 3, "cols": 3, "mines": 2, "mine_cells": [(0, 0), (1, 1)]}
# Board B: 3x3, mines at (0,0) and (0,2). Revealing (2,1) (a 0) floods rows 1-2: "121" / "000".
BOARD_B = {"rows": 3, "cols": 3, "mines": 2, "mine_cells": [(0, 0), (0, 2)]}


def board(env):
    """The visible board as row strings, read from the compact rendering (header line dropped)."""
    return env.render("compact").split("\n")[1:]


def neighbours(r, c, rows, cols):
    return [(r + dr, c + dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1)
            if (dr or dc) and 0 <= r + dr < rows and 0 <= c + dc < cols]


def numbers_of(mine_cells, rows, cols):
    mines = set(mine_cells)
    return [[sum(n in mines for n in neighbours(r, c, rows, cols)) for c in range(cols)]
            for r in range(rows)]


@functools.lru_cache(maxsize=None)
def all_layouts(rows, cols, mines):
    """Every placement of the mines (itertools.combinations) as a bool matrix [layout, cell], and
    the number every cell would show in each layout."""
    n = rows * cols
    layouts = np.zeros((math.comb(n, mines), n), dtype=bool)
    for i, combo in enumerate(itertools.combinations(range(n), mines)):
        layouts[i, list(combo)] = True
    adjacency = np.zeros((n, n), dtype=np.int64)
    for r, c in itertools.product(range(rows), range(cols)):
        for nr, nc in neighbours(r, c, rows, cols):
            adjacency[r * cols + c, nr * cols + nc] = 1
    return layouts, layouts.astype(np.int64) @ adjacency


def brute_force_posterior(rows, cols, mines, visible):
    """Eq. 3 by brute force: the fraction of the placements consistent with every revealed number
    (revealed cells safe, numbers equal) and with a revealed mine ('*') that put a mine on each
    cell. Flags are ignored."""
    layouts, numbers = all_layouts(rows, cols, mines)
    consistent = np.ones(len(layouts), dtype=bool)
    for r, row in enumerate(visible):
        for c, char in enumerate(row):
            if char.isdigit():
                cell = r * cols + c
                consistent &= ~layouts[:, cell] & (numbers[:, cell] == int(char))
            elif char == "*":
                consistent &= layouts[:, r * cols + c]
    return layouts[consistent].mean(axis=0).reshape(rows, cols)


def assert_posterior_is_exact(env):
    expected = brute_force_posterior(env.rows, env.cols, env.mines, board(env))
    np.testing.assert_allclose(env.mine_probabilities(), expected, rtol=0, atol=1e-12)


def hidden_cells(env, chars=".F"):
    return [(r, c) for r, row in enumerate(board(env)) for c, ch in enumerate(row) if ch in chars]


# ---------------------------------------------------------------------- the posterior (Eq. 3)

@pytest.mark.parametrize("rows,cols,mines,episodes",
                         [(4, 4, 3, 30), (5, 5, 5, 12), (3, 5, 4, 20), (2, 6, 3, 20)])
def test_posterior_matches_brute_force_along_random_safe_play(rows, cols, mines, episodes):
    """Random layouts, random safe reveals and random flag toggles (which must not matter)."""
    rng = np.random.default_rng(rows * 100 + cols * 10 + mines)
    for episode in range(episodes):
        layout = [divmod(int(i), cols) for i in rng.choice(rows * cols, mines, replace=False)]
        env = Minesweeper(rows=rows, cols=cols, mines=mines, mine_cells=layout)
        env.reset(episode)
        assert_posterior_is_exact(env)
        while not env.done:
            safe = [cell for cell in hidden_cells(env, ".") if cell not in layout]
            if rng.random() < 0.3 or not safe:
                hidden = hidden_cells(env)
                r, c = hidden[rng.integers(len(hidden))]
                _, _, _, info = env.step(f"flag({r},{c})")
            else:
                r, c = safe[rng.integers(len(safe))]
                _, _, _, info = env.step(f"reveal({r},{c})")
            assert info["valid"]
            if not info["truncated"]:
                assert_posterior_is_exact(env)


def test_posterior_matches_brute_force_along_oracle_play_with_first_reveal_safe():
    """Default random boards (mines placed after the first reveal), played by the oracle until
    it wins or must guess wrong: the posterior conditions on the observation only."""
    env = environments.make("minesweeper")
    for seed in range(12):
        env.reset(seed)
        while True:
            assert_posterior_is_exact(env)
            if env.done:
                break
            env.step(env.answer_text(env.oracle_action()))


def test_posterior_with_two_independent_frontier_components():
    # (0,0) and (4,4) each show 1: one mine among {(0,1),(1,0),(1,1)}, one among
    # {(3,3),(3,4),(4,3)}; the other 17 unrevealed cells share the remaining 3 mines.
    env = Minesweeper(mine_cells=[(1, 1), (3, 3), (0, 4), (4, 0), (2, 2)])
    env.reset(0)
    env.step("reveal(0,0)")
    env.step("reveal(4,4)")
    assert board(env) == ["1....", ".....", ".....", ".....", "....1"]
    expected = np.full((5, 5), 3 / 17)
    for r, c in [(0, 1), (1, 0), (1, 1), (3, 3), (3, 4), (4, 3)]:
        expected[r, c] = 1 / 3
    expected[0, 0] = expected[4, 4] = 0.0
    np.testing.assert_allclose(env.mine_probabilities(), expected, atol=1e-12)
    assert_posterior_is_exact(env)
    assert env.verify(Action("reveal", 2, 2)) and not env.verify(Action("reveal", 0, 1))


@pytest.mark.parametrize("options", [{}, {"rows": 4, "cols": 4, "mines": 3},
                                     {"first_reveal_safe": False}, BOARD_A])
def test_posterior_without_frontier_is_uniform(options):
    env = Minesweeper(**options)
    env.reset(1)
    env.step("flag(0,0)")  # flags carry no information
    expected = env.mines / (env.rows * env.cols)
    np.testing.assert_allclose(env.mine_probabilities(), expected, atol=1e-15)
    assert_posterior_is_exact(env)


def test_mine_probabilities_returns_a_copy():
    env = Minesweeper(**BOARD_A)
    env.reset(0)
    env.mine_probabilities()[:] = 7.0
    assert env.mine_probabilities()[0, 0] == pytest.approx(2 / 9)


# ---------------------------------------------------------------------- verifier and oracle

def test_verify_minimum_positive_risk_on_board_a():
    env = Minesweeper(**BOARD_A)
    env.reset(0)
    env.step("reveal(2,2)")
    # One mine among the 3 frontier cells (1/3 each), one among the 5 others (1/5 each).
    frontier, others = [(1, 1), (1, 2), (2, 1)], [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0)]
    probabilities = env.mine_probabilities()
    assert all(probabilities[cell] == pytest.approx(1 / 3) for cell in frontier)
    assert all(probabilities[cell] == pytest.approx(1 / 5) for cell in others)
    assert all(env.verify(Action("reveal", *cell)) for cell in others)
    assert not any(env.verify(Action("reveal", *cell)) for cell in frontier)
    assert not any(env.verify(Action("flag", *cell)) for cell in frontier + others)
    assert not env.verify(Action("reveal", 2, 2))  # already revealed
    assert env.oracle_action() == Action("reveal", 0, 0)  # first minimum in row-major order

    env.step("reveal(0,2)")
    # Frontier {(0,1),(1,1),(1,2),(2,1)}: solutions {(1,1)}, {(1,2)} (1 mine, 3 ways each to put
    # the other mine on (0,0), (1,0), (2,0)) and {(0,1),(2,1)} (2 mines, 1 way): 7 layouts.
    expected = np.array([[2 / 7, 1 / 7, 0], [2 / 7, 3 / 7, 3 / 7], [2 / 7, 1 / 7, 0]])
    np.testing.assert_allclose(env.mine_probabilities(), expected, atol=1e-12)
    valid = {(r, c) for r, c in itertools.product(range(3), range(3))
             if env.verify(Action("reveal", r, c))}
    assert valid == {(0, 1), (2, 1)}
    assert env.oracle_action() == Action("reveal", 0, 1)

    env.step("flag(0,1)")  # a flagged cell cannot be revealed; the other minimum remains
    assert not env.verify(Action("reveal", 0, 1))
    assert env.verify(Action("reveal", 2, 1))
    assert env.oracle_action() == Action("reveal", 2, 1)


def test_verify_flags_and_certain_cells_on_board_b():
    env = Minesweeper(**BOARD_B)
    env.reset(0)
    env.step("reveal(2,1)")
    assert board(env) == ["...", "121", "000"]
    np.testing.assert_allclose(env.mine_probabilities()[0], [1, 0, 1], atol=1e-12)
    assert env.verify(Action("flag", 0, 0)) and env.verify(Action("flag", 0, 2))
    assert not env.verify(Action("flag", 0, 1))
    assert not env.verify(Action("flag", 1, 1))  # revealed
    assert env.verify(Action("reveal", 0, 1))
    assert not env.verify(Action("reveal", 0, 0))
    env.step("flag(0,0)")
    assert not env.verify(Action("flag", 0, 0))  # removing a flag is never oracle-valid
    assert env.oracle_action() == Action("reveal", 0, 1)
    assert env.verify(None) is False


def test_oracle_removes_a_misplaced_flag_that_blocks_the_only_safe_cell():
    env = Minesweeper(**BOARD_B)
    env.reset(0)
    env.step("reveal(2,1)")
    env.step("flag(0,1)")  # the only safe cell left; every unflagged cell is now a mine
    assert env.oracle_action() == Action("flag", 0, 1)
    env.step(env.answer_text(env.oracle_action()))
    _, reward, done, info = env.step(env.answer_text(env.oracle_action()))
    assert (reward, done, info["success"]) == (1.0, True, True)


def test_oracle_and_verify_after_the_episode_ends():
    env = Minesweeper(**BOARD_A)
    env.reset(0)
    env.step("reveal(1,1)")
    assert env.oracle_action() is None
    assert not any(env.verify(Action(kind, r, c)) for kind in ("reveal", "flag")
                   for r, c in itertools.product(range(3), range(3)))


# ---------------------------------------------------------------------- dynamics

@settings(max_examples=60, deadline=None)
@given(layout=st.sets(st.tuples(st.integers(0, 5), st.integers(0, 4)), min_size=1, max_size=6),
       pick=st.integers(0, 10**6))
def test_flood_fill_reveals_the_zero_region_and_its_border(layout, pick):
    rows, cols = 6, 5
    numbers = numbers_of(layout, rows, cols)
    zeros = [(r, c) for r in range(rows) for c in range(cols)
             if (r, c) not in layout and numbers[r][c] == 0]
    if not zeros:
        return
    start = zeros[pick % len(zeros)]
    region, frontier = {start}, [start]  # the 8-connected zero cells reachable from start
    while frontier:
        cell = frontier.pop()
        for n in neighbours(*cell, rows, cols):
            if numbers[n[0]][n[1]] == 0 and n not in layout and n not in region:
                region.add(n)
                frontier.append(n)
    expected = region | {n for cell in region for n in neighbours(*cell, rows, cols)}

    env = Minesweeper(rows=rows, cols=cols, mines=len(layout), mine_cells=sorted(layout))
    env.reset(0)
    env.step(f"reveal({start[0]},{start[1]})")
    shown = {(r, c) for r, row in enumerate(board(env)) for c, ch in enumerate(row) if ch.isdigit()}
    assert shown == expected
    assert all(board(env)[r][c] == str(numbers[r][c]) for r, c in shown)
    safe_cells = rows * cols - len(layout)
    assert env.metrics()["completion_rate"] == pytest.approx(len(expected) / safe_cells)


def test_flood_fill_leaves_flagged_cells_alone():
    env = Minesweeper(**BOARD_B)
    env.reset(0)
    env.step("flag(2,2)")  # a safe 0 next to the revealed 0 at (2,1)
    env.step("reveal(2,1)")
    assert board(env) == ["...", "121", "00F"]
    assert env.mine_probabilities()[2, 2] == 0.0


def test_first_reveal_is_never_a_mine():
    env = environments.make("minesweeper")
    for seed in range(300):
        env.reset(seed)
        r, c = np.random.default_rng(seed).integers(5, size=2)
        _, reward, done, info = env.step(f"reveal({r},{c})")
        assert info["valid"] and board(env)[r][c].isdigit()
        assert not done or info["success"]
        assert env.process_score() > 0


def test_first_reveal_safe_layout_is_uniform_over_the_other_cells():
    """After a first reveal at the corner (0,0), the 5 mines are uniform over the other 24 cells, so
    its number j (mines among its 3 neighbours) is hypergeometric: C(3,j) C(21,5-j) / C(24,5)."""
    env = environments.make("minesweeper")
    samples = 4000
    counts = np.zeros(4)
    for seed in range(samples):
        env.reset(seed)
        env.step("reveal(0,0)")
        counts[int(board(env)[0][0])] += 1
    expected = [math.comb(3, j) * math.comb(21, 5 - j) / math.comb(24, 5) for j in range(4)]
    np.testing.assert_allclose(counts / samples, expected, atol=0.035)


def test_mines_placed_at_reset_can_be_hit_first():
    env = environments.make("minesweeper", first_reveal_safe=False)
    losses = 0
    for seed in range(300):
        env.reset(seed)
        _, _, done, info = env.step("reveal(2,2)")
        losses += done and not info["success"]
    assert 0.12 < losses / 300 < 0.28  # 5 mines among 25 cells: 1/5


def test_same_seed_and_actions_give_the_same_board():
    a, b = environments.make("minesweeper"), environments.make("minesweeper")
    for seed in range(20):
        a.reset(seed)
        b.reset(seed)
        for text in ["reveal(3,1)", "flag(0,0)", "reveal(4,4)"]:
            assert a.step(text) == b.step(text)


def test_revealing_a_mine_loses():
    env = Minesweeper(**BOARD_A)
    env.reset(0)
    env.step("reveal(2,2)")
    _, reward, done, info = env.step("<answer><reveal(1,1)></answer>")
    assert (reward, done, info["valid"], info["success"]) == (0.0, True, True, False)
    assert board(env) == ["...", ".*.", "..1"]
    assert env.render().endswith("1  .  *  .\n2  .  .  1")
    assert env.process_score() == 0.0
    assert info["completion_rate"] == pytest.approx(1 / 7) and not info["solved"]
    # The posterior conditions on the revealed mine: (1,1) is certain, so (1,2) and (2,1) are safe.
    probabilities = env.mine_probabilities()
    assert probabilities[1, 1] == 1.0 and probabilities[1, 2] == probabilities[2, 1] == 0.0
    np.testing.assert_allclose(probabilities[0, 0], 1 / 5)


def test_completion_rate_accounting_and_success():
    env = Minesweeper(**BOARD_B)
    env.reset(0)
    assert env.metrics() == {"completion_rate": 0.0, "solved": False}
    _, reward, done, info = env.step("reveal(2,1)")
    assert (reward, done) == (0.0, False)
    assert info["completion_rate"] == pytest.approx(6 / 7) == env.process_score()
    _, _, _, info = env.step("flag(0,0)")  # flags do not count
    assert info["completion_rate"] == pytest.approx(6 / 7)
    _, reward, done, info = env.step("reveal(0,1)")
    assert (reward, done, info["success"], info["solved"]) == (1.0, True, True, True)
    assert info["completion_rate"] == 1.0 == env.process_score()


def test_flag_toggles():
    env = Minesweeper(**BOARD_A)
    env.reset(0)
    env.step("flag(0,1)")
    assert board(env)[0] == ".F."
    env.step("FLAG(0,1)")
    assert board(env)[0] == "..."


# ---------------------------------------------------------------------- invalid actions

ILLEGAL_AFTER_REVEAL_2_2_AND_FLAG_0_0 = [
    "reveal(2,2)", "flag(2,2)", "reveal(0,0)", "reveal(3,0)", "flag(0,3)", "reveal(10,10)"]
MALFORMED = ["", "hello", "reveal(0,0)!", "reveal 0 0", "reveal(0,0,1)", "open(0,0)",
             "reveal(-1,0)", "<reveal(0,0)", "reveal(0,0)>", "reveal(0.0,1)", "flag(1)",
             "reveal(0,0) flag(1,1)", "<answer>up</answer>"]


def _board_a_with_a_reveal_and_a_flag(**options):
    env = Minesweeper(**BOARD_A, **options)
    env.reset(0)
    env.step("reveal(2,2)")
    env.step("flag(0,0)")
    return env


@pytest.mark.parametrize("text", ILLEGAL_AFTER_REVEAL_2_2_AND_FLAG_0_0 + MALFORMED)
def test_invalid_text_loses_by_default(text):
    env = _board_a_with_a_reveal_and_a_flag()
    before = board(env)
    _, reward, done, info = env.step(text)
    assert (reward, done, info["valid"], info["success"]) == (0.0, True, False, False)
    assert board(env) == before
    assert env.process_score() == pytest.approx(1 / 7)  # no mine was revealed


@pytest.mark.parametrize("text", ILLEGAL_AFTER_REVEAL_2_2_AND_FLAG_0_0 + MALFORMED)
def test_invalid_text_is_penalized_when_asked(text):
    env = _board_a_with_a_reveal_and_a_flag(invalid_action="penalize", format_penalty=-0.25)
    before = env.canonical_state()
    _, reward, done, info = env.step(text)
    assert (reward, done, info["valid"], info["num_invalid"]) == (-0.25, False, False, 1)
    assert env.canonical_state() == before
    _, _, _, info = env.step("reveal(0,2)")
    assert info["valid"]


@pytest.mark.parametrize("text,action", [
    ("reveal(0,0)", Action("reveal", 0, 0)),
    ("<reveal(0,0)>", Action("reveal", 0, 0)),
    ("<answer><reveal(1,2)></answer>", Action("reveal", 1, 2)),
    ("<answer>flag(4,3)</answer>", Action("flag", 4, 3)),
    ("  Reveal( 3 , 4 ) ", Action("reveal", 3, 4)),
    ("< FLAG(0,1) >", Action("flag", 0, 1)),
    ("thinking...<answer> reveal(2,2) </answer>", Action("reveal", 2, 2)),
])
def test_parse_accepts_listing_3_variants(text, action):
    env = Minesweeper()
    assert env.parse_action(text) == action


@pytest.mark.parametrize("text", MALFORMED)
def test_parse_rejects_malformed_text(text):
    assert Minesweeper().parse_action(text) is None


def test_canonical_action_text():
    env = Minesweeper(style="chat")
    assert env.format_action(Action("reveal", 3, 1)) == "reveal(3,1)"
    assert env.answer_text(Action("flag", 0, 4)) == "<answer>flag(0,4)</answer>"
    assert env.answer_text(Action("flag", 0, 4), "compact") == "flag(0,4)"


def test_step_limit_truncates():
    env = Minesweeper(**BOARD_A, max_steps=3)
    env.reset(0)
    env.step("flag(0,0)")
    env.step("flag(0,0)")
    _, reward, done, info = env.step("flag(0,0)")
    assert (reward, done, info["truncated"], info["success"]) == (0.0, True, True, False)


# ---------------------------------------------------------------------- options and text

def test_defaults_follow_vpr():
    env = environments.make("minesweeper")
    assert (env.rows, env.cols, env.mines, env.max_steps) == (5, 5, 5, 25)
    assert (env.first_reveal_safe, env.invalid_action, env.format_penalty) == (True, "lose", -0.1)
    assert Minesweeper(rows=3, cols=4, mines=2).max_steps == 12


@pytest.mark.parametrize("options,argument", [
    ({"rows": 0}, "rows"), ({"cols": -2}, "cols"), ({"rows": 2.5}, "rows"), ({"mines": 0}, "mines"),
    ({"mines": 24}, "mines"), ({"rows": 2, "cols": 2, "mines": 3}, "mines"),
    ({"invalid_action": "ignore"}, "invalid_action"),
    ({"mine_cells": [(0, 0)]}, "mine_cells"),
    ({"mine_cells": [(0, 0)] * 5}, "mine_cells"),
    ({"mine_cells": [(0, 0), (1, 1), (2, 2), (3, 3), (5, 0)]}, "mine_cells"),
    ({"mine_cells": [0, 1, 2, 3, 4]}, "mine_cells"),
    ({"max_steps": 0}, "max_steps"), ({"style": "verbose"}, "style"),
])
def test_bad_options_name_the_argument(options, argument):
    with pytest.raises(ValueError, match=argument):
        environments.make("minesweeper", **options)
    Minesweeper(mines=23)  # the largest allowed count on 5x5


def test_mine_cells_fix_the_layout_whatever_the_seed():
    env = Minesweeper(**BOARD_B)
    for seed in range(5):
        env.reset(seed)
        env.step("reveal(2,1)")
        assert board(env) == ["...", "121", "000"]


def test_render_and_canonical_state():
    env = Minesweeper(**BOARD_B)
    env.reset(0)
    env.step("flag(0,0)")
    env.step("reveal(2,1)")
    assert env.render("chat") == "GAME STATE:\n   0  1  2\n0  F  .  .\n1  1  2  1\n2  0  0  0"
    assert env.render("compact") == "3x3 2 mines\nF..\n121\n000"
    assert env.canonical_state() == "F../121/000"


def test_instructions_describe_the_configured_game():
    env = Minesweeper(rows=4, cols=6, mines=3)
    text = env.instructions("chat")
    assert "4x6 grid" in text and "exactly 3 hidden mines" in text and "(3,5)" in text
    assert "<answer>reveal(0,0)</answer>" in text and "immediate loss" in text
    assert "penalized" in Minesweeper(invalid_action="penalize").instructions()
    assert env.system_prompt == ("You are an AI agent that makes optimal decisions to solve the "
                                 "game of Minesweeper.")
    compact = env.instructions("compact")
    assert "4x6" in compact and "3 mines" in compact and "reveal(r,c)" in compact
