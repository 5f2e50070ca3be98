"""Sudoku (VPR §2.2, §3.1, Listing 2): puzzles checked by an independent plain backtracking counter,
hand-checked rules, rendering, parsing and the CR/SR accounting."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import environments
from environments.sudoku import Sudoku, count_solutions

SEEDS_9 = range(40)
SEEDS_4 = range(200)


# ---------------------------------------------------------------------------- reference solver


def box_cells(r, c, size):
    b = math.isqrt(size)
    r0, c0 = r - r % b, c - c % b
    return [(i, j) for i in range(r0, r0 + b) for j in range(c0, c0 + b)]


def fits(grid, r, c, d):
    """Plain rule check: d is not yet in row r, column c or the box of (r, c)."""
    size = len(grid)
    return (all(grid[r][j] != d for j in range(size))
            and all(grid[i][c] != d for i in range(size))
            and all(grid[i][j] != d for i, j in box_cells(r, c, size)))


def brute_solutions(puzzle, limit=2):
    """Up to `limit` solutions by plain backtracking on the first empty cell, digits 1..size."""
    grid = [list(row) for row in puzzle]
    size = len(grid)
    solutions = []

    def search():
        for r in range(size):
            for c in range(size):
                if grid[r][c] == 0:
                    for d in range(1, size + 1):
                        if fits(grid, r, c, d):
                            grid[r][c] = d
                            search()
                            grid[r][c] = 0
                            if len(solutions) >= limit:
                                return
                    return
        solutions.append([row[:] for row in grid])

    search()
    return solutions


def is_valid_solution(grid):
    size = len(grid)
    digits = set(range(1, size + 1))
    b = math.isqrt(size)
    rows = all(set(row) == digits for row in grid)
    cols = all({grid[r][c] for r in range(size)} == digits for c in range(size))
    boxes = all({grid[i][j] for i, j in box_cells(r, c, size)} == digits
                for r in range(0, size, b) for c in range(0, size, b))
    return rows and cols and boxes


def board(env):
    return env.grid.tolist()


def reference_solution(env):
    solutions = brute_solutions(board(env))
    assert len(solutions) == 1
    return solutions[0]


def empty_cells(env):
    return [(r, c) for r, row in enumerate(board(env)) for c, d in enumerate(row) if d == 0]


def filled_cells(env):
    return [(r, c) for r, row in enumerate(board(env)) for c, d in enumerate(row) if d != 0]


def make(**kwargs):
    return environments.make("sudoku", **kwargs)


# ---------------------------------------------------------------------------- reference sanity


def test_reference_counts_all_4x4_grids():
    """There are exactly 288 complete 4x4 Sudoku grids (known result)."""
    assert len(brute_solutions([[0] * 4 for _ in range(4)], limit=1000)) == 288


# ---------------------------------------------------------------------------- options


def test_defaults():
    env = make()
    assert (env.size, env.box, env.blanks, env.max_steps) == (9, 3, 40, 80)
    assert env.format_penalty == -0.1
    env = make(size=4)
    assert (env.size, env.box, env.blanks, env.max_steps) == (4, 2, 8, 16)
    assert make(size=9, blanks=30).max_steps == 60
    assert make(blanks=30, max_steps=7).max_steps == 7
    assert Sudoku.system_prompt == ("You are an AI agent that makes optimal decisions to solve the "
                                    "Sudoku puzzle.")


@pytest.mark.parametrize("kwargs, argument", [
    ({"size": 5}, "size"), ({"size": 16}, "size"), ({"size": "9"}, "size"),
    ({"blanks": 0}, "blanks"), ({"blanks": 81}, "blanks"), ({"blanks": 56}, "blanks"),
    ({"size": 4, "blanks": 13}, "blanks"), ({"blanks": 4.0}, "blanks"),
    ({"blanks": True}, "blanks"),
    ({"max_steps": 0}, "max_steps"), ({"style": "plain"}, "style"), ({"colour": 1}, "colour"),
])
def test_bad_options_name_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        make(**kwargs)


# ---------------------------------------------------------------------------- generation


@pytest.mark.parametrize("size, blanks, seeds", [
    (9, 40, SEEDS_9), (4, 8, SEEDS_4), (4, 12, range(20)), (9, 55, range(3))])
def test_puzzles_are_uniquely_solvable(size, blanks, seeds):
    for seed in seeds:
        env = make(size=size, blanks=blanks)
        env.reset(seed)
        puzzle = board(env)
        assert sum(row.count(0) for row in puzzle) == blanks
        assert np.array_equal(env.givens, env.grid != 0)
        solution = reference_solution(env)
        assert is_valid_solution(solution)
        assert env.solution.tolist() == solution
        assert all(d == 0 or d == solution[r][c]
                   for r, row in enumerate(puzzle) for c, d in enumerate(row))


def test_seed_determines_the_puzzle():
    a, b = make(), make()
    assert a.reset(3) == b.reset(3)
    assert a.reset(4) != b.reset(3)
    assert len({make(size=4).reset(seed) for seed in range(30)}) > 20


@settings(deadline=None, max_examples=60)
@given(seed=st.integers(0, 2**32 - 1), holes=st.sets(st.integers(0, 15), max_size=16))
def test_solution_counter_matches_brute_force(seed, holes):
    """The environment's counter (used for uniqueness) agrees with plain backtracking on 4x4 grids
    with any set of cells emptied, unique or not."""
    env = make(size=4, blanks=1)
    env.reset(seed)
    flat = env.solution.ravel().tolist()
    puzzle = [0 if i in holes else d for i, d in enumerate(flat)]
    expected = len(brute_solutions([puzzle[r * 4:r * 4 + 4] for r in range(4)], limit=2))
    assert count_solutions(puzzle, 4, limit=2) == expected


def test_counter_rejects_clashing_givens():
    assert count_solutions([1, 1] + [0] * 14, 4) == 0


# ---------------------------------------------------------------------------- rendering


LISTING_2_ROWS = ["4..95.2.1", "...36....", ".6..84953", ".98.75..2", "....931.4",
                  "37.62..89", ".3.24.8..", "..6.1..25", "...53841."]

LISTING_2_STATE = """```
GAME STATE:
  C1 C2 C3 | C4 C5 C6 | C7 C8 C9
R1  4 . . | 9 5 . | 2 . 1
R2  . . . | 3 6 . | . . .
R3  . 6 . | . 8 4 | 9 5 3
-----
R4  . 9 8 | . 7 5 | . . 2
R5  . . . | . 9 3 | 1 . 4
R6  3 7 . | 6 2 . | . 8 9
-----
R7  . 3 . | 2 4 . | 8 . .
R8  . . 6 | . 1 . | . 2 5
R9  . . . | 5 3 8 | 4 1 .
```"""


def set_board(env, rows):
    digits = [[0 if ch == "." else int(ch) for ch in row] for row in rows]
    env.grid = np.array(digits, dtype=np.int8)


def test_chat_render_reproduces_listing_2():
    env = make()
    env.reset(0)
    set_board(env, LISTING_2_ROWS)
    assert env.render() == LISTING_2_STATE
    assert env.render("compact") == "\n".join(LISTING_2_ROWS)
    assert env.canonical_state() == "/".join(LISTING_2_ROWS)


def test_4x4_render():
    env = make(size=4)
    env.reset(0)
    set_board(env, ["1.3.", "..12", "2...", ".1.3"])
    assert env.render("chat") == ("```\nGAME STATE:\n"
                                  "  C1 C2 | C3 C4\n"
                                  "R1  1 . | 3 .\n"
                                  "R2  . . | 1 2\n"
                                  "-----\n"
                                  "R3  2 . | . .\n"
                                  "R4  . 1 | . 3\n```")
    assert env.render("compact") == "1.3.\n..12\n2...\n.1.3"
    assert env.canonical_state() == "1.3./..12/2.../.1.3"


def test_instructions():
    env = make()
    env.reset(0)
    chat = env.instructions()
    assert chat.startswith("GAME RULES:\n\n1. Sudoku is played on a 9x9 grid.")
    assert "Each of the nine 3x3 subgrids" in chat
    assert "`<answer>fill(1,1,5)</answer>`" in chat
    assert env.prompt() == f"{chat}\n\n{env.render()}"
    small = make(size=4, style="compact")
    small.reset(0)
    assert "\n" not in small.instructions()
    assert "fill(row,col,digit)" in small.instructions()
    assert "1-4" in small.instructions()
    assert "four 2x2 subgrids" in small.instructions("chat")
    assert "fill(1,1,4)" in small.instructions("chat")  # the example digit stays in range


# ---------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text", [
    "fill(2,3,4)", "<answer>fill(2,3,4)</answer>", "<answer><fill(2,3,4)></answer>",
    "<fill(2,3,4)>",
    "FILL(2,3,4)", "Fill( 2 , 3 , 4 )", "  fill (2,3,4)  ", "<answer> < fill(2, 3, 4) > </answer>",
    "thinking... <answer>fill(9,9,9)</answer> <answer>fill(2,3,4)</answer>", "fill(02,3,4)",
])
def test_parse_tolerates_format(text):
    assert make().parse_action(text) == (2, 3, 4)


@pytest.mark.parametrize("text", [
    "fill(1,1)", "fill(1,1,5,2)", "fill 1 1 5", "fill(1 1 5)", "fill(1;1;5)", "fill[1,1,5]",
    "fill(-1,1,5)", "fill(+1,1,5)", "fill(1.0,1,5)", "fill(a,1,5)", "fill(1,1,5)!", "fill(1,1,5).",
    "<fill(1,1,5)", "fill(1,1,5)>", "fil(1,1,5)", "put(1,1,5)", "fill(1,1,5) fill(1,2,5)",
    "(1,1,5)", "", "<answer></answer>", "fill(١,1,5)",
])
def test_parse_rejects_malformed(text):
    assert make().parse_action(text) is None


@pytest.mark.parametrize("text, action", [
    ("fill(1,1,10)", (1, 1, 10)), ("fill(0,1,5)", (0, 1, 5)), ("fill(1,10,5)", (1, 10, 5)),
    ("fill(1,1,0)", (1, 1, 0)),
])
def test_out_of_range_parses_but_is_illegal(text, action):
    env = make()
    env.reset(0)
    assert env.parse_action(text) == action
    before = env.canonical_state()
    _, reward, done, info = env.step(text)
    assert (reward, done, info["valid"], info["action"]) == (-0.1, False, False, text)
    assert env.canonical_state() == before
    assert not env.verify(action)


def test_format_action_round_trips():
    env = make()
    assert env.format_action((3, 7, 2)) == "fill(3,7,2)"
    assert env.parse_action(env.answer_text((3, 7, 2))) == (3, 7, 2)
    assert env.answer_text((3, 7, 2)) == "<answer>fill(3,7,2)</answer>"
    assert make(style="compact").answer_text((3, 7, 2)) == "fill(3,7,2)"


# ---------------------------------------------------------------------------- rules and verifier


def test_verify_is_agreement_with_the_unique_solution():
    """Every candidate action of a state, against the brute-force solution."""
    for size, seed in [(9, 5), (4, 1), (4, 2)]:
        env = make(size=size)
        env.reset(seed)
        solution = reference_solution(env)
        empty = set(empty_cells(env))
        for r in range(size):
            for c in range(size):
                for d in range(1, size + 1):
                    expected = (r, c) in empty and solution[r][c] == d
                    assert env.verify((r + 1, c + 1, d)) == expected
    assert not env.verify(None)
    assert not env.verify((1, 2))


def test_overwriting_a_given_is_illegal():
    env = make()
    env.reset(7)
    r, c = filled_cells(env)[0]
    given_digit = env.grid[r, c]
    for digit in range(1, 10):
        text = f"<answer>fill({r + 1},{c + 1},{digit})</answer>"
        assert not env.verify((r + 1, c + 1, digit))
        _, reward, done, info = env.step(text)
        assert (reward, done, info["valid"]) == (-0.1, False, False)
    assert env.grid[r, c] == given_digit
    assert env.num_invalid == 9


def test_overwriting_an_own_fill_is_illegal():
    env = make()
    env.reset(8)
    solution = reference_solution(env)
    r, c = empty_cells(env)[0]
    wrong = solution[r][c] % 9 + 1
    _, reward, done, info = env.step(f"fill({r + 1},{c + 1},{wrong})")
    assert (reward, done, info["valid"]) == (0.0, False, True)  # legal though not verified
    before = env.canonical_state()
    for digit in (solution[r][c], wrong):
        assert not env.verify((r + 1, c + 1, digit))
        _, reward, done, info = env.step(f"fill({r + 1},{c + 1},{digit})")
        assert (reward, done, info["valid"]) == (-0.1, False, False)
    assert env.canonical_state() == before


def test_a_digit_that_clashes_in_its_row_is_legal():
    env = make(size=4)
    env.reset(0)
    r, c = empty_cells(env)[0]
    row_digit = next(d for d in board(env)[r] if d)  # already in row r
    assert not env.verify((r + 1, c + 1, row_digit))
    _, reward, _, info = env.step(f"fill({r + 1},{c + 1},{row_digit})")
    assert (reward, info["valid"]) == (0.0, True)
    assert env.grid[r, c] == row_digit


def test_malformed_text_keeps_the_game_going():
    env = make()
    env.reset(0)
    before = env.canonical_state()
    obs, reward, done, info = env.step("I think the answer is 5")
    assert (reward, done, info["valid"], info["action"]) == (-0.1, False, False, None)
    assert env.canonical_state() == before and obs == env.render()


# ---------------------------------------------------------------------------- CR, SR, process score


def test_completion_accounting():
    """Correct fills raise CR; one wrong fill zeroes the process score and makes SR impossible."""
    env = make(size=4, blanks=8)
    env.reset(11)
    solution = reference_solution(env)
    cells = empty_cells(env)
    assert env.metrics() == {"completion_rate": 0.0, "solved": False}
    assert env.process_score() == 0.0
    for k, (r, c) in enumerate(cells[:5], start=1):
        _, reward, done, info = env.step(f"fill({r + 1},{c + 1},{solution[r][c]})")
        assert (reward, done, info["valid"], info["success"]) == (0.0, False, True, False)
        assert info["completion_rate"] == k / 8 and info["solved"] is False
        assert env.process_score() == k / 8
    r, c = cells[5]
    wrong = solution[r][c] % 4 + 1
    _, reward, done, info = env.step(f"fill({r + 1},{c + 1},{wrong})")
    assert info["completion_rate"] == 5 / 8 and env.process_score() == 0.0
    for r, c in cells[6:]:
        _, reward, done, info = env.step(f"fill({r + 1},{c + 1},{solution[r][c]})")
    assert done and not info["truncated"]
    assert (reward, info["success"], info["solved"]) == (0.0, False, False)
    assert info["completion_rate"] == 7 / 8
    assert env.process_score() == 0.0
    assert env.oracle_action() is None


def test_all_correct_fills_succeed_with_reward_one():
    env = make(size=4)
    env.reset(12)
    solution = reference_solution(env)
    cells = empty_cells(env)
    rewards = [env.step(f"<answer>fill({r + 1},{c + 1},{solution[r][c]})</answer>")[1]
               for r, c in reversed(cells)]  # any order works
    assert rewards == [0.0] * 7 + [1.0]
    assert env.done and env.success
    assert env.metrics() == {"completion_rate": 1.0, "solved": True}
    assert env.process_score() == 1.0
    _, reward, done, info = env.step("fill(1,1,1)")
    assert (reward, done, info["valid"]) == (0.0, True, False)


def test_episode_truncates_at_max_steps():
    env = make(size=4, blanks=8, max_steps=3)
    env.reset(0)
    for _ in range(2):
        assert not env.step("nonsense")[2]
    _, _, done, info = env.step("nonsense")
    assert done and info["truncated"] and not info["success"]


# ---------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("size, seeds", [(9, SEEDS_9), (4, SEEDS_4)])
def test_oracle_solves_every_seed(size, seeds):
    for seed in seeds:
        env = make(size=size)
        env.reset(seed)
        solution = reference_solution(env)
        r, c = empty_cells(env)[0]  # row-major order
        assert env.oracle_action() == (r + 1, c + 1, solution[r][c])
        steps = 0
        while not env.done:
            action = env.oracle_action()
            assert env.verify(action)
            _, reward, done, info = env.step(env.answer_text(action))
            steps += 1
        assert steps == env.blanks
        assert info["success"] and reward == 1.0 and env.total_reward == 1.0
        assert env.grid.tolist() == solution


def test_clone_shares_only_read_only_data():
    env = make()
    env.reset(0)
    child = env.clone()
    child.step(child.answer_text(child.oracle_action()))
    assert env.canonical_state() != child.canonical_state()
    assert child.grid is not env.grid
    assert not env.solution.flags.writeable and not env.givens.flags.writeable
