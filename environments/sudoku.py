"""Sudoku: fill a uniquely solvable grid one cell at a time (VPR's constraint-based environment).

Source: VPR (Verifiable Process Rewards for Agentic Reasoning), §2.2 "Constraint-Based VPR", §3.1
(training environments) and Appendix H, Listing 2 (prompt and board format).

Rules
-----
The board is a `size` x `size` grid split into `box` x `box` boxes (box = sqrt(size)); every row,
column and box of the solution holds each digit 1..size exactly once. A puzzle is a complete valid
grid G* with `blanks` cells emptied such that G* is the *only* completion (§3.1: "uniquely-solvable
puzzles"). Each turn the agent fills one empty cell with a digit; a filled cell can never be
changed. The episode ends when no empty cell remains (success iff the grid equals G*) or after
`max_steps` turns.

Decisions the paper leaves open (documented here, tested in tests/environments/test_sudoku.py):
  * Overwriting. Listing 2 forbids overwriting pre-filled cells; we also forbid overwriting a cell
    the agent filled itself. Each action therefore fills exactly one empty cell, so a wrong digit
    makes the puzzle unsolvable for the rest of the episode, matching §3.1 ("each action fills one
    cell and a single invalid assignment can make the remaining trajectory unsolvable").
  * Legality is purely positional: a fill is legal when row, column and digit are in range and the
    cell is empty. A digit that contradicts G* (even one that repeats a digit in its row) is legal;
    judging it is the verifier's job, and it costs the outcome reward.
  * Illegal or malformed text (overwrite, out of range, unparsable) returns `format_penalty`, leaves
    the state unchanged, and the episode goes on (the protocol default of environments/base.py).
  * `max_steps` defaults to 2 * blanks (the paper gives no turn limit): enough for every blank plus
    as many invalid turns again.
  * Generation (the paper uses GEM's generator, not described): a random complete grid by randomised
    backtracking, then cells removed in random order, each removal kept only if the puzzle still has
    exactly one solution; a fresh grid is drawn if the pass ends before `blanks` removals. Every
    removal kept preserves uniqueness, so the puzzle is uniquely solvable by construction.

Actions
-------
Listing 2's `fill(row,col,digit)`, 1-indexed as in the rendered board (R1..R9, C1..C9). The parsed
action is the tuple (row, col, digit) in those same 1-indexed coordinates. Canonical text:
`fill(r,c,d)`; chat style wraps it as `<answer>fill(1,1,5)</answer>`, compact style answers with the
bare text. Parsing tolerates case, whitespace and Listing 2's optional angle brackets
(`<answer><fill(1,1,5)></answer>`, `FILL( 1 , 1 , 5 )`), and rejects anything else: a missing or
extra argument, a sign, other separators (`fill 1 1 5`), trailing text. Non-negative decimal
integers parse; out-of-range values (`fill(0,1,5)`, `fill(1,1,10)`) parse but are illegal.
Any value other than a tuple of three non-negative ints is not an action (environments/base.py).

Rewards
-------
  * 1.0 on the step that fills the last empty cell when the grid then equals G* (VPR's outcome
    reward); 0.0 for every other legal fill, including a last fill that leaves a wrong grid;
  * `format_penalty` (default -0.1, as in RAGEN/TSR) for illegal or malformed text.
VPR's dense process reward r_t = 1[G*[i, j] = d] (§2.2) is `verify(action)`, not part of step().

Method queries
--------------
  * verify(action): the cell is empty and d == G*[r, c] (§2.2's V(s_t, a_t)); False once the
    episode is over (the grid is full or the step limit was reached);
  * oracle_action(): the first empty cell in row-major order with its solution digit;
  * process_score(): 0 once any filled digit disagrees with G* (the puzzle can no longer be
    solved), else the completion rate;
  * metrics(): `completion_rate` (CR, §3.1: blanks holding their correct digit / blanks) and
    `solved` (SR for the episode: the grid equals G*).

Parameters (constructor, keyword-only)
--------------------------------------
  size           9 (3x3 boxes, §3.1) or 4 (2x2 boxes, for the tiny model); default 9.
  blanks         cells to empty; default 40 for size 9 (§3.1) and 8 (half the grid) for size 4.
                 At most MAX_BLANKS[size]: 12 for size 4 (a 4x4 puzzle needs at least 4 givens to be
                 unique) and 55 for size 9 (the random removal pass rarely gets further, so larger
                 values would make generation slow or endless).
  style          "chat" (Listing 2) or "compact" (one line of instructions, digit rows).
  max_steps      default 2 * blanks (see above).
  format_penalty default -0.1.

Observation
-----------
Chat style reproduces Listing 2: a fenced "GAME STATE:" block with the column header
`  C1 C2 C3 | C4 C5 C6 | C7 C8 C9`, rows `R1  4 . . | 9 5 . | 2 . 1` and a `-----` line between
bands of boxes ('.' is an empty cell). Compact style: one line per row of digits and '.', no
labels or separators. canonical_state() is the rows of the compact rendering joined by '/'.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from dataclasses import dataclass

import numpy as np

from environments.base import TextEnv, is_int_tuple

SIZES = (4, 9)
DEFAULT_BLANKS = {9: 40, 4: 8}
MAX_BLANKS = {9: 55, 4: 12}

SYSTEM_PROMPT = "You are an AI agent that makes optimal decisions to solve the Sudoku puzzle."

_ACTION = re.compile(
    r"(?P<open><\s*)?fill\s*\(\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\)(?P<close>\s*>)?",
    re.IGNORECASE | re.ASCII)

_NUMBER_WORDS = {4: "four", 9: "nine"}


# ---------------------------------------------------------------------------- exact solver


@dataclass(frozen=True)
class _Layout:
    """Cell geometry of a size x size board, flattened row-major (shared, read-only)."""
    size: int
    box: int
    row_of: tuple[int, ...]
    col_of: tuple[int, ...]
    box_of: tuple[int, ...]
    full: int  # candidate bitmask with every digit: bit d-1 stands for digit d


@functools.lru_cache(maxsize=None)
def _layout(size: int) -> _Layout:
    box = math.isqrt(size)
    cells = range(size * size)
    return _Layout(size=size, box=box,
                   row_of=tuple(i // size for i in cells),
                   col_of=tuple(i % size for i in cells),
                   box_of=tuple((i // size) // box * box + (i % size) // box for i in cells),
                   full=(1 << size) - 1)


def _search(grid: list[int], empties: list[int], rows: list[int], cols: list[int],
            boxes: list[int], layout: _Layout, limit: int, rng: np.random.Generator | None) -> int:
    """Counts the completions of `grid` (0 = empty; `empties` its empty cells, rows/cols/boxes the
    bitmasks of digits used), stopping as soon as `limit` are found.

    Branches on the most constrained empty cell (fewest candidates), which makes forced cells cost
    one step each. Candidates are tried in increasing order, or shuffled by `rng` when given. On
    reaching `limit` it returns at once, leaving the last completion found written into `grid`;
    otherwise `grid` and the masks are restored.
    """
    if not empties:
        return 1
    best_k, best_mask, best_count = -1, 0, layout.size + 1
    for k, cell in enumerate(empties):
        mask = layout.full & ~(rows[layout.row_of[cell]] | cols[layout.col_of[cell]]
                               | boxes[layout.box_of[cell]])
        count = mask.bit_count()
        if count < best_count:
            best_k, best_mask, best_count = k, mask, count
            if count <= 1:  # a dead end or a forced cell: no better choice exists
                break
    if best_count == 0:
        return 0
    cell = empties[best_k]
    rest = empties[:best_k] + empties[best_k + 1:]
    r, c, b = layout.row_of[cell], layout.col_of[cell], layout.box_of[cell]
    digits = [d for d in range(1, layout.size + 1) if best_mask >> (d - 1) & 1]
    if rng is not None:
        rng.shuffle(digits)
    found = 0
    for d in digits:
        bit = 1 << (d - 1)
        grid[cell] = d
        rows[r] |= bit
        cols[c] |= bit
        boxes[b] |= bit
        found += _search(grid, rest, rows, cols, boxes, layout, limit - found, rng)
        if found >= limit:
            return found
        rows[r] ^= bit
        cols[c] ^= bit
        boxes[b] ^= bit
    grid[cell] = 0
    return found


def _complete(grid: list[int], layout: _Layout, limit: int,
              rng: np.random.Generator | None = None) -> int:
    """Number of completions of `grid` (flat, 0 = empty), capped at `limit`; see `_search`."""
    rows, cols, boxes = [0] * layout.size, [0] * layout.size, [0] * layout.size
    empties = []
    for cell, d in enumerate(grid):
        if d == 0:
            empties.append(cell)
            continue
        bit = 1 << (d - 1)
        r, c, b = layout.row_of[cell], layout.col_of[cell], layout.box_of[cell]
        if (rows[r] | cols[c] | boxes[b]) & bit:
            return 0  # the givens already clash
        rows[r] |= bit
        cols[c] |= bit
        boxes[b] |= bit
    return _search(grid, empties, rows, cols, boxes, layout, limit, rng)


def count_solutions(grid: list[int], size: int, limit: int = 2) -> int:
    """Number of solutions of a puzzle (flat row-major list, 0 = empty), counted up to `limit`."""
    return _complete(list(grid), _layout(size), limit)


def random_solution(size: int, rng: np.random.Generator) -> list[int]:
    """A random complete valid grid (flat row-major list): the first completion of the empty grid
    found by the search with candidates shuffled by `rng`."""
    grid = [0] * (size * size)
    _complete(grid, _layout(size), 1, rng)
    return grid


def generate_puzzle(size: int, blanks: int,
                    rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """(puzzle, solution) as flat row-major lists: a uniquely solvable puzzle with `blanks` empty
    cells (0) and its solution.

    Removing a cell can only add solutions, so one pass over the cells in random order, keeping
    each removal that leaves the solution unique, is a complete greedy attempt; a pass that stops
    short of `blanks` starts over from a new grid.
    """
    while True:
        solution = random_solution(size, rng)
        puzzle = list(solution)
        removed = 0
        for cell in rng.permutation(size * size).tolist():
            puzzle[cell] = 0
            if count_solutions(puzzle, size, limit=2) == 1:
                removed += 1
                if removed == blanks:
                    return puzzle, solution
            else:
                puzzle[cell] = solution[cell]


# ---------------------------------------------------------------------------- environment


class Sudoku(TextEnv):
    """VPR's Sudoku: fill the blanks of a uniquely solvable grid, one `fill(r,c,d)` per turn."""

    name = "sudoku"
    action_spec = "a (row, col, digit) tuple of three non-negative ints"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, *, size: int = 9, blanks: int | None = None, style: str = "chat",
                 max_steps: int | None = None, format_penalty: float = -0.1):
        if size not in SIZES:
            raise ValueError(f"size={size!r}: expected one of {SIZES}")
        if blanks is None:
            blanks = DEFAULT_BLANKS[size]
        if (not isinstance(blanks, numbers.Integral) or isinstance(blanks, bool)
                or not 1 <= blanks <= MAX_BLANKS[size]):
            raise ValueError(f"blanks={blanks!r}: expected an integer in [1, {MAX_BLANKS[size]}] "
                             f"for size={size}")
        if max_steps is None:
            max_steps = 2 * int(blanks)
        super().__init__(style=style, max_steps=max_steps, format_penalty=format_penalty)
        self.size = int(size)
        self.box = math.isqrt(self.size)
        self.blanks = int(blanks)
        # grid is the mutable state; solution and givens are read-only per episode (shared by
        # clones, replaced, never modified, by reset).
        self.grid = np.zeros((self.size, self.size), dtype=np.int8)
        self.solution = self._read_only(self.grid)
        self.givens = self._read_only(self.grid != 0)

    @staticmethod
    def _read_only(array: np.ndarray) -> np.ndarray:
        array = array.copy()
        array.flags.writeable = False
        return array

    # ------------------------------------------------------------------ game hooks

    def _reset_game(self, seed: int) -> None:
        del seed  # self.rng is already seeded with it
        puzzle, solution = generate_puzzle(self.size, self.blanks, self.rng)
        shape = (self.size, self.size)
        self.grid = np.array(puzzle, dtype=np.int8).reshape(shape)
        self.solution = self._read_only(np.array(solution, dtype=np.int8).reshape(shape))
        self.givens = self._read_only(self.grid != 0)

    def _parse(self, content: str) -> tuple[int, int, int] | None:
        match = _ACTION.fullmatch(content)
        if match is None or (match["open"] is None) != (match["close"] is None):
            return None
        return int(match[2]), int(match[3]), int(match[4])

    def _random_action(self, rng: np.random.Generator) -> tuple[int, int, int]:
        """A uniformly random legal fill: an empty cell and any digit (the episode must not be
        over)."""
        empty = np.argwhere(self.grid == 0)
        row, col = empty[int(rng.integers(len(empty)))]
        return int(row) + 1, int(col) + 1, int(rng.integers(1, self.size + 1))

    def _is_action(self, action) -> bool:
        return is_int_tuple(action, 3)

    def _is_legal(self, action: tuple[int, int, int]) -> bool:
        row, col, _ = action
        in_range = all(1 <= v <= self.size for v in action)
        return in_range and self.grid[row - 1, col - 1] == 0

    def _apply(self, action: tuple[int, int, int]) -> tuple[float, bool, bool]:
        row, col, digit = action
        self.grid[row - 1, col - 1] = digit
        if (self.grid == 0).any():
            return 0.0, False, False
        success = bool(np.array_equal(self.grid, self.solution))
        return (1.0 if success else 0.0), True, success

    def _format_action(self, action: tuple[int, int, int]) -> str:
        row, col, digit = action
        return f"fill({row},{col},{digit})"

    def _canonical_state(self) -> str:
        return "/".join(self._digit_rows())

    def _copy_state(self, other: "Sudoku") -> None:
        other.grid = self.grid.copy()

    # ------------------------------------------------------------------ text

    def _digit_rows(self) -> list[str]:
        return ["".join(str(d) if d else "." for d in row) for row in self.grid.tolist()]

    def _chat_board(self) -> str:
        """Listing 2's board: a column header, labelled rows, '|' between boxes and '-----' between
        bands of boxes."""
        bands = [range(start, start + self.box) for start in range(0, self.size, self.box)]
        lines = ["  " + " | ".join(" ".join(f"C{c + 1}" for c in band) for band in bands)]
        for r, row in enumerate(self.grid.tolist()):
            if r and r % self.box == 0:
                lines.append("-----")
            cells = " | ".join(" ".join(str(row[c]) if row[c] else "." for c in band)
                               for band in bands)
            lines.append(f"R{r + 1}  {cells}")
        return "\n".join(lines)

    def _render(self, style: str | None) -> str:
        if self._style(style) == "compact":
            return "\n".join(self._digit_rows())
        return f"```\nGAME STATE:\n{self._chat_board()}\n```"

    def instructions(self, style: str | None = None) -> str:
        n, b = self.size, self.box
        if self._style(style) == "compact":
            return (f"Sudoku {n}x{n}: replace each '.' so every row, column and {b}x{b} box holds "
                    f"1-{n} once. Answer fill(row,col,digit), 1-indexed.")
        example = min(5, n)
        return f"""GAME RULES:

1. Sudoku is played on a {n}x{n} grid. Rows and columns are 1-indexed (1 to {n}).
2. The goal is to fill the empty cells with digits from 1 to {n}.
3. Each row must contain all digits from 1 to {n} without repetition.
4. Each column must contain all digits from 1 to {n} without repetition.
5. Each of the {_NUMBER_WORDS[n]} {b}x{b} subgrids must contain all digits from 1 to {n} \
without repetition.
6. You cannot overwrite filled cells: neither the pre-filled cells nor the cells you have filled.

PLAYER INFORMATION:

1. The current board state is displayed as a text grid.
 - '.' represents an empty cell.
 - Numbers represent filled cells.
 - Rows are labeled R1, R2... and Columns C1, C2...
2. In each turn, you choose an action to fill an empty cell with a number.
3. Actions have the format `fill({{row}},{{col}},{{digit}})`.

RESPONSE INSTRUCTIONS:

Always choose strictly one action and output `<answer>{{your chosen action}}</answer>` with no \
extra text after you finish the thinking process. For example, to fill row 1, column 1 with \
number {example}, output `<answer>fill(1,1,{example})</answer>`. Strictly follow the above format. \
Responses that do not follow the format will result in penalties.

The game state is provided below. Please choose your action and strictly follow the given \
output format in the response instructions."""

    # ------------------------------------------------------------------ method queries

    def _oracle_action(self) -> tuple[int, int, int] | None:
        empty = np.flatnonzero(self.grid == 0)
        if empty.size == 0:
            return None
        row, col = divmod(int(empty[0]), self.size)
        return row + 1, col + 1, int(self.solution[row, col])

    def _verify(self, action: tuple[int, int, int]) -> bool:
        """VPR §2.2: V(s, (i, j, d)) = 1[G*[i, j] = d] for an empty cell (i, j) (the base class
        answers False for an illegal action and once the episode is over)."""
        row, col, digit = action
        return bool(self.solution[row - 1, col - 1] == digit)

    def completion_rate(self) -> float:
        """CR: blanks that hold their solution digit, over all blanks."""
        if not self._ready:
            raise self._not_reset("completion_rate")
        return self._completion_rate()

    def _completion_rate(self) -> float:
        correct = np.count_nonzero((self.grid == self.solution) & ~self.givens)
        return correct / self.blanks

    def _process_score(self) -> float:
        if ((self.grid != 0) & (self.grid != self.solution)).any():
            return 0.0
        return self._completion_rate()

    def _metrics(self) -> dict:
        return {"completion_rate": self._completion_rate(),
                "solved": bool(np.array_equal(self.grid, self.solution))}
