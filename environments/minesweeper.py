"""Minesweeper: reveal every safe cell without revealing a mine (VPR's posterior-based environment).

Source: VPR (Verifiable Process Rewards for Agentic Reasoning), §2.2 "Posterior-Based VPR" (Eq. 3),
§3.1 (training environments: a 5x5 grid with 5 mines, success rate SR and completion rate CR) and
Appendix H, Listing 3 (prompt and board format).

Rules
-----
A `rows` x `cols` grid hides exactly `mines` mines. Each turn the agent either reveals a cell or
toggles a flag on one. Revealing a mine loses at once. Revealing a safe cell shows its number: the
count of mines among its (up to) 8 neighbours, diagonals included (Listing 3, rule 4). A revealed 0
also reveals its neighbours, recursively (standard Minesweeper flood fill), so the revealed region
of a 0 is its connected region of zeros plus that region's border of numbers. The game is won when
every safe cell is revealed. Flags are the agent's notes: they carry no information, never end the
game, and only protect a cell from being revealed.

Decisions the paper leaves open (tested in tests/environments/test_minesweeper.py):
  * First reveal. With `first_reveal_safe=True` (default; standard Minesweeper) the mines are
    placed right after the first reveal, drawn from self.rng uniformly among the cells other than
    the revealed one, so the first reveal is never a mine. With `first_reveal_safe=False` they are
    drawn uniformly among all cells at reset.
    Either way Eq. 3 stays the exact posterior: before the first reveal nothing is observed and
    every placement is equally likely, so each cell holds a mine with probability mines/cells;
    after the first reveal at x the placement is uniform over the layouts that avoid x, and every
    layout consistent with the observation avoids x (x is shown safe), so conditioning on the
    observation leaves it uniform over exactly the consistent layouts, Omega(s_t).
    GEM's Minesweeper, which VPR used (App. F), also places the mines after the first reveal but
    keeps the revealed cell's whole neighbourhood free, so its first reveal always shows 0; GEM
    also wins only once every mine is flagged, whereas we follow Listing 3's goal (reveal every
    safe cell).
  * Flood fill skips flagged cells: a flag next to a revealed 0 stays flagged and unrevealed (as in
    standard Minesweeper), and the agent must unflag and reveal it itself.
  * Illegal actions: revealing a revealed or flagged cell, flagging a revealed cell, or any cell
    outside the grid. Flags are unlimited (a flag count above `mines` is the agent's mistake).
  * Malformed or illegal text: Listing 3 says "Responses that do not follow the format will result
    in immediate loss of the game", so by default (`invalid_action="lose"`) it ends the episode
    with reward 0 and no success; `invalid_action="penalize"` instead gives `format_penalty` and
    leaves the state unchanged (the protocol default of environments/base.py).
  * `max_steps` defaults to rows * cols (25; the paper gives no limit): enough to act once on every
    cell, while a winning game needs at most the rows * cols - mines safe reveals (20), so the
    limit leaves room for flags and still ends games that stall by toggling flags.
  * `mine_cells` fixes the layout of every episode (hand-built boards for tests and demos); the
    seed then changes nothing, and `first_reveal_safe` has no effect (a first reveal on one of
    those mines loses). The posterior still treats the layout as unknown and uniform: Eq. 3 is
    defined by the observation alone.

Actions
-------
`reveal(r,c)` and `flag(r,c)`, 0-indexed (row, column), (0,0) top-left (Listing 3). The parsed
action is `Action(kind, row, col)` with kind "reveal" or "flag". Canonical text: `reveal(r,c)` /
`flag(r,c)`; chat style wraps it as `<answer>reveal(0,0)</answer>`, compact style answers with the
bare text. Parsing tolerates case, whitespace and Listing 3's optional angle brackets
(`<answer><reveal(0,0)></answer>`, `FLAG( 1 , 2 )`), and rejects anything else: other verbs, a
missing or extra argument, a sign, unbalanced brackets, trailing text. Out-of-range coordinates
parse but are illegal. A plain tuple ("reveal", r, c) is the same action; any value other than a
3-tuple of a lower-case kind and two non-negative ints is not an action (environments/base.py).

Rewards
-------
  * 1.0 on the step that reveals the last safe cell (VPR's outcome reward), 0.0 on every other
    legal action, including the reveal of a mine (which ends the episode);
  * malformed or illegal text: 0.0 and the episode ends ("lose"), or `format_penalty` ("penalize").
VPR's dense process reward (§2.2) is `verify(action)`, not part of step().

Posterior and method queries
----------------------------
  * mine_probabilities(): Eq. 3, P(mine at (i,j) | s_t) = |{w in Omega(s_t): (i,j) a mine}| /
    |Omega(s_t)|, for every cell, computed exactly (integer counts, one final division) by
    enumerating the frontier component by component (see `mine_posterior`). Revealed cells get 0
    (they are safe in every consistent layout) and a revealed mine gets 1. Flags are ignored.
    Computed once per state and cached; flag toggles keep the cache, and clones share it read-only
    (a state's posterior never changes). The enumeration is exponential only in the number of
    classes of interchangeable cells in one component: about 0.1 ms per state on 5x5 boards.
  * verify(action) (§2.2's V(s_t, a_t), ties valid, tolerance 1e-9): reveal(r,c) is valid iff the
    cell is unrevealed, unflagged and has the minimum posterior among the unrevealed unflagged
    cells (risk-minimising even when that minimum is positive); flag(r,c) is valid iff the cell is
    unrevealed, currently unflagged (placing, not removing, a flag) and has posterior 1.
  * oracle_action(): reveal the first unrevealed unflagged cell in row-major order whose posterior
    is the minimum (within 1e-9). It never places flags, since flags do not change the outcome. The
    one exception: when a flagged cell is strictly safer than every unflagged one (or no unflagged
    cell remains), an earlier mis-flag blocks the safest reveal, and the oracle removes that flag
    (`flag(r,c)` on the first such cell) rather than reveal a riskier cell. This never happens
    along the oracle's own play, which places no flags; note that verify(), as §2.2 defines it,
    does not count a flag removal as valid.
  * process_score(): 0 once a mine has been revealed, else the completion rate.
  * metrics(): `completion_rate` (CR, §3.1: revealed safe cells / safe cells) and `solved` (SR for
    the episode: every safe cell revealed).
  * random_action(rng): a uniformly random legal action (reveal or flag).

Parameters (constructor, keyword-only)
--------------------------------------
  rows, cols         grid size; default 5 x 5 (§3.1, Listing 3).
  mines              default 5 (§3.1); 1 <= mines < rows * cols - 1, so at least two safe cells.
  first_reveal_safe  default True (see above).
  invalid_action     "lose" (default, Listing 3) or "penalize".
  mine_cells         None (random layouts, default) or `mines` distinct (row, col) pairs.
  style              "chat" (Listing 3) or "compact".
  max_steps          default rows * cols (see above).
  format_penalty     default -0.1 (used by invalid_action="penalize").

Observation
-----------
Chat style adapts Listing 3: "GAME STATE:" and the grid with column indices on top and row indices
on the left ('.' unrevealed, 'F' flagged, a digit for a revealed cell, '*' the revealed mine after
a loss), e.g. for a fresh 3x3 board

       0  1  2
    0  .  .  .
    1  .  .  .
    2  .  .  .

Compact style: a header line "5x5 5 mines" and one line of cell characters per row, no indices.
canonical_state() is the compact rows joined by '/': the agent's information state. The hidden
layout is not part of it, so two positions the agent cannot tell apart (equal boards at equal
depth, as RTMC compares them) share a signature.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Iterable, NamedTuple

import numpy as np

from environments.base import TextEnv, is_int

REVEAL, FLAG = "reveal", "flag"
INVALID_ACTIONS = ("lose", "penalize")
#: Tolerance of the verifier's and oracle's comparisons of posteriors: each posterior is one
#: correctly rounded division of exact integers, so equal probabilities agree to ~1e-16 while
#: distinct ones on the boards played here differ by far more than 1e-9.
TOLERANCE = 1e-9

_ACTION = re.compile(r"(reveal|flag)\s*\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)", re.IGNORECASE | re.ASCII)
_OFFSETS = tuple((dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0))


class Action(NamedTuple):
    kind: str  # REVEAL or FLAG
    row: int
    col: int


@functools.lru_cache(maxsize=None)
def neighbour_table(rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """For each cell (flat row-major index), the flat indices of its up to 8 neighbours."""
    return tuple(
        tuple((r + dr) * cols + c + dc for dr, dc in _OFFSETS
              if 0 <= r + dr < rows and 0 <= c + dc < cols)
        for r in range(rows) for c in range(cols))


# ---------------------------------------------------------------------- the exact posterior (Eq. 3)

class _Component(NamedTuple):
    """The frontier configurations of one connected group of constrained cells, by mine count k:
    ways[k] configurations satisfy all its constraints, and cell_mines[k][j] of them put a mine on
    cells[j]."""
    cells: list[int]
    ways: list[int]
    cell_mines: list[list[int]]


def mine_posterior(shown: dict[int, int], unknown: list[int], known_mines: set[int], mines: int,
                   neighbours: tuple[tuple[int, ...], ...]) -> dict[int, float]:
    """Eq. 3's P(mine | observation) for every unknown cell, exactly.

    `shown` maps each revealed cell to its number, `unknown` lists the cells whose content is not
    observed, `known_mines` are observed mines (the exploded one after a loss) and `mines` is the
    total mine count; cells are flat indices into `neighbours`.

    Every layout consistent with the observation puts `shown[c]` mines around each revealed c. The
    unknown cells next to a revealed number (the frontier) split into components linked through
    shared numbers; the components' constraints are independent, so each is enumerated on its own
    (counting, for every mine count k, its solutions and each cell's mines in them). The remaining
    unknown cells are unconstrained: a combination of component solutions with K mines in total
    extends to C(#unconstrained, mines - K) layouts, which weights it. Counting is in integers, so
    the only rounding is the final division.
    """
    unknown_set = set(unknown)
    remaining = mines - len(known_mines)
    constraints = []
    for cell, number in shown.items():
        cells = [n for n in neighbours[cell] if n in unknown_set]
        if cells:
            target = number - sum(n in known_mines for n in neighbours[cell])
            constraints.append((target, cells))
    components = [_enumerate(cells, group, remaining) for cells, group in _split(constraints)]
    frontier = {cell for component in components for cell in component.cells}
    free = [cell for cell in unknown if cell not in frontier]

    def extensions(k: int) -> int:
        """Layouts of the unconstrained cells completing frontier solutions with k mines."""
        return math.comb(len(free), remaining - k) if 0 <= remaining - k <= len(free) else 0

    totals = _convolve_all([c.ways for c in components])
    layouts = sum(n * extensions(k) for k, n in enumerate(totals))  # |Omega(s_t)|
    posterior = {}
    for i, component in enumerate(components):
        others = _convolve_all([c.ways for j, c in enumerate(components) if j != i])
        # weight[k]: layouts extending one solution of this component that has k mines.
        weight = [sum(n * extensions(k + m) for m, n in enumerate(others))
                  for k in range(len(component.ways))]
        for j, cell in enumerate(component.cells):
            hits = sum(per_cell[j] * w for per_cell, w in zip(component.cell_mines, weight))
            posterior[cell] = hits / layouts
    if free:
        # By symmetry the unconstrained cells share the expected number of mines among them.
        free_mines = sum(n * extensions(k) * (remaining - k) for k, n in enumerate(totals))
        for cell in free:
            posterior[cell] = free_mines / (len(free) * layouts)
    return posterior


def _split(constraints: list[tuple[int, list[int]]]):
    """Groups the constraints into components (cells linked through shared constraints); yields
    (cells, constraints) per component, cells in first-appearance order so that constraints
    close early during enumeration."""
    parent: dict[int, int] = {}

    def root(cell: int) -> int:
        while parent[cell] != cell:
            parent[cell] = parent[parent[cell]]
            cell = parent[cell]
        return cell

    for _, cells in constraints:
        for cell in cells:
            parent.setdefault(cell, cell)
        for cell in cells[1:]:
            parent[root(cell)] = root(cells[0])
    groups: dict[int, list] = {}
    for constraint in constraints:
        groups.setdefault(root(constraint[1][0]), []).append(constraint)
    for group in groups.values():
        yield list(dict.fromkeys(cell for _, cells in group for cell in cells)), group


def _enumerate(cells: list[int], constraints: list[tuple[int, list[int]]],
               max_mines: int) -> _Component:
    """Counts the mine assignments of `cells` satisfying every constraint, by number of mines.

    Cells that belong to exactly the same constraints are interchangeable, so the search chooses
    how many mines each such class holds (m of its s cells, C(s, m) assignments) instead of which
    cells: depth-first over the classes, pruning as soon as a constraint can no longer be met. In
    the C(s, m) assignments of a class each of its cells holds a mine in C(s - 1, m - 1) = C(s, m)
    * m / s of them, which keeps the per-cell counts exact integers.
    """
    signature: dict[int, list[int]] = {cell: [] for cell in cells}
    for index, (_, members) in enumerate(constraints):
        for cell in members:
            signature[cell].append(index)
    classes: dict[tuple[int, ...], list[int]] = {}
    for cell in cells:
        classes.setdefault(tuple(signature[cell]), []).append(cell)
    class_constraints, class_cells = list(classes), list(classes.values())
    need = [target for target, _ in constraints]  # mines still to place per constraint
    left = [len(members) for _, members in constraints]  # cells still unassigned per constraint
    num_k = min(len(cells), max_mines) + 1
    ways = [0] * num_k
    class_mines = [[0] * len(class_cells) for _ in range(num_k)]  # [k][class]: mines per cell
    chosen = [0] * len(class_cells)  # mines placed in each class on the current branch

    def place(i: int, k: int, count: int) -> None:
        if i == len(class_cells):
            ways[k] += count
            for j, (mines, members) in enumerate(zip(chosen, class_cells)):
                class_mines[k][j] += count * mines // len(members)
            return
        size, members = len(class_cells[i]), class_constraints[i]
        for mines in range(min(size, max_mines - k) + 1):
            if all(0 <= need[c] - mines <= left[c] - size for c in members):
                for c in members:
                    need[c] -= mines
                    left[c] -= size
                chosen[i] = mines
                place(i + 1, k + mines, count * math.comb(size, mines))
                for c in members:
                    need[c] += mines
                    left[c] += size

    place(0, 0, 1)
    cell_mines = [[row[j] for j, members in enumerate(class_cells) for _ in members]
                  for row in class_mines]
    return _Component([cell for members in class_cells for cell in members], ways, cell_mines)


def _convolve_all(polynomials: list[list[int]]) -> list[int]:
    """Counts by total mine count of independent choices, one from each list (indexed by k)."""
    total = [1]
    for poly in polynomials:
        product = [0] * (len(total) + len(poly) - 1)
        for i, a in enumerate(total):
            if a:
                for j, b in enumerate(poly):
                    product[i + j] += a * b
        total = product
    return total


# ---------------------------------------------------------------------- the environment

# Listing 3's user prompt, adapted: the configured size and mine count, the flood-fill and
# first-reveal rules, the turn limit, the canonical action text without angle brackets (which are
# still accepted) and the configured treatment of invalid responses.
_CHAT_INSTRUCTIONS = (
    "GAME RULES:\n\n"
    "1. Minesweeper is played on a {rows}x{cols} grid of cells. The grid contains exactly {mines} "
    "hidden mines. The grid is 0-indexed, where (0,0) is the top-left corner and "
    "({last_row},{last_col}) is the bottom-right corner.\n"
    "2. The goal is to reveal all cells that do not contain mines without revealing any mine.\n"
    "3. If you reveal a mine, you lose the game immediately.{first_reveal}\n"
    "4. If you reveal a safe cell, it will show a number indicating how many mines are adjacent to "
    "it (neighbors include diagonals). Revealing a cell with no adjacent mines also reveals its "
    "unflagged neighbors automatically.\n"
    "5. You can also place a flag on a cell if you suspect it contains a mine, or remove a flag if "
    "you change your mind.\n\n"
    "PLAYER INFORMATION:\n\n"
    "1. The current board state is displayed as a text grid with column indices on top and row "
    "indices on the left, where:\n"
    " - '.' represents an unrevealed cell.\n"
    " - 'F' represents a flagged cell.\n"
    " - A number (0-8) represents a revealed safe cell with that many adjacent mines.\n"
    "2. In each turn, you must choose an action to either reveal a cell or flag/unflag a cell. You "
    "have at most {max_steps} turns.\n"
    "3. Actions are written in the format `reveal({{row}},{{col}})` or `flag({{row}},{{col}})`. "
    "The 'flag' command acts as a toggle: play it on an unflagged cell to place a flag, or on a "
    "flagged cell to remove it. You cannot reveal a flagged cell or flag a revealed cell.\n\n"
    "RESPONSE INSTRUCTIONS:\n\n"
    "Always choose strictly one action and output `<answer>{{your chosen action}}</answer>` with "
    "no extra text after you finish the thinking process. For example, to reveal the cell at row "
    "0, column 0, output `<answer>reveal(0,0)</answer>`. To flag (or unflag) the cell at row "
    "{flag_row}, column {flag_col}, output `<answer>flag({flag_row},{flag_col})</answer>`. "
    "Strictly follow the above format. Responses that do not follow the format, or that play an "
    "illegal action, {consequence}.\n\n"
    "The game state is provided below. Please choose your action and strictly follow the given "
    "output format in the response instructions.")

_COMPACT_INSTRUCTIONS = (
    "Minesweeper: reveal every safe cell of the {rows}x{cols} grid ({mines} mines) without "
    "revealing a mine. '.' hidden, 'F' flag, digit = adjacent mines. Answer reveal(r,c) or "
    "flag(r,c), 0-indexed.")


class Minesweeper(TextEnv):
    """VPR's Minesweeper; the module docstring documents the rules and every decision."""

    name = "minesweeper"
    action_spec = ("an Action(kind, row, col) tuple: kind 'reveal' or 'flag', row and col "
                   "non-negative ints")
    system_prompt = ("You are an AI agent that makes optimal decisions to solve the game of "
                     "Minesweeper.")  # Listing 3

    def __init__(self, *, rows: int = 5, cols: int = 5, mines: int = 5,
                 first_reveal_safe: bool = True, invalid_action: str = "lose",
                 mine_cells: Iterable[tuple[int, int]] | None = None, style: str = "chat",
                 max_steps: int | None = None, format_penalty: float = -0.1):
        rows, cols = _positive_int("rows", rows), _positive_int("cols", cols)
        mines = _positive_int("mines", mines)
        if mines >= rows * cols - 1:
            raise ValueError(f"mines={mines} must be below rows * cols - 1 = {rows * cols - 1}")
        if invalid_action not in INVALID_ACTIONS:
            raise ValueError(
                f"invalid_action={invalid_action!r}: expected one of {INVALID_ACTIONS}")
        super().__init__(style=style, max_steps=rows * cols if max_steps is None else max_steps,
                         format_penalty=format_penalty)
        self.rows, self.cols, self.mines = rows, cols, mines
        self.first_reveal_safe = bool(first_reveal_safe)
        self.invalid_action = invalid_action
        self.mine_cells = None if mine_cells is None else _validate_layout(mine_cells, rows, cols,
                                                                           mines)
        self._neighbours = neighbour_table(rows, cols)
        self._num_safe = rows * cols - mines

    # ------------------------------------------------------------------ game

    def _reset_game(self, seed: int) -> None:
        del seed  # the layout comes from self.rng, already seeded
        shape = (self.rows, self.cols)
        self._revealed = np.zeros(shape, dtype=bool)
        self._flagged = np.zeros(shape, dtype=bool)
        self._num_revealed = 0
        self._exploded: tuple[int, int] | None = None
        self._posterior: np.ndarray | None = None  # cache, read-only, shared by clones
        # Read-only once set (shared by clones): the layout and each cell's number.
        self._mine: np.ndarray | None = None
        self._counts: np.ndarray | None = None
        if self.mine_cells is not None:
            self._set_layout(np.array([r * self.cols + c for r, c in self.mine_cells]))
        elif not self.first_reveal_safe:
            self._place_mines(avoid=None)

    def _place_mines(self, avoid: tuple[int, int] | None) -> None:
        """Draws the layout uniformly among the cells other than `avoid`."""
        cells = np.arange(self.rows * self.cols)
        if avoid is not None:
            cells = np.delete(cells, avoid[0] * self.cols + avoid[1])
        self._set_layout(self.rng.choice(cells, size=self.mines, replace=False))

    def _set_layout(self, flat_mines: np.ndarray) -> None:
        mine = np.zeros(self.rows * self.cols, dtype=bool)
        mine[flat_mines] = True
        mine = mine.reshape(self.rows, self.cols)
        padded = np.pad(mine, 1).astype(np.int8)
        counts = sum(padded[1 + dr:1 + dr + self.rows, 1 + dc:1 + dc + self.cols]
                     for dr, dc in _OFFSETS)
        mine.setflags(write=False)
        counts.setflags(write=False)
        self._mine, self._counts = mine, counts

    def _parse(self, content: str) -> Action | None:
        if content.startswith("<") and content.endswith(">"):
            content = content[1:-1].strip()
        match = _ACTION.fullmatch(content)
        if match is None:
            return None
        return Action(match.group(1).lower(), int(match.group(2)), int(match.group(3)))

    def _is_action(self, action) -> bool:
        return (isinstance(action, tuple) and len(action) == 3 and isinstance(action[0], str)
                and action[0] in (REVEAL, FLAG) and is_int(action[1]) and action[1] >= 0
                and is_int(action[2]) and action[2] >= 0)

    def _is_legal(self, action: Action) -> bool:
        kind, r, c = action
        if not (0 <= r < self.rows and 0 <= c < self.cols) or self._revealed[r, c]:
            return False
        return kind == FLAG or (kind == REVEAL and not self._flagged[r, c])

    def _apply(self, action: Action) -> tuple[float, bool, bool]:
        kind, r, c = action
        if kind == FLAG:
            self._flagged[r, c] = not self._flagged[r, c]
            return 0.0, False, False  # flags carry no information: the posterior cache stays valid
        if self._mine is None:
            self._place_mines(avoid=(r, c))
        self._posterior = None
        if self._mine[r, c]:
            self._exploded = (r, c)
            return 0.0, True, False
        self._flood_reveal(r, c)
        solved = self._num_revealed == self._num_safe
        return (1.0 if solved else 0.0), solved, solved

    def _flood_reveal(self, r: int, c: int) -> None:
        """Reveals (r, c) and, through every revealed 0, its unflagged neighbours."""
        revealed, flagged = self._revealed.ravel(), self._flagged.ravel()  # views
        counts = self._counts.ravel()
        start = r * self.cols + c
        revealed[start] = True
        self._num_revealed += 1
        stack = [start]
        while stack:
            cell = stack.pop()
            if counts[cell]:
                continue
            for neighbour in self._neighbours[cell]:
                if not revealed[neighbour] and not flagged[neighbour]:
                    revealed[neighbour] = True
                    self._num_revealed += 1
                    stack.append(neighbour)

    def _invalid_outcome(self, action) -> tuple[float, bool, bool]:
        if self.invalid_action == "lose":
            return 0.0, True, False
        return super()._invalid_outcome(action)

    def _format_action(self, action: Action) -> str:
        kind, r, c = action
        return f"{kind}({r},{c})"

    def _random_action(self, rng: np.random.Generator) -> Action:
        """A uniformly random legal action (the episode must not be over)."""
        actions = [Action(REVEAL, r, c) for r, c in np.argwhere(~self._revealed & ~self._flagged)]
        actions += [Action(FLAG, r, c) for r, c in np.argwhere(~self._revealed)]
        kind, r, c = actions[rng.integers(len(actions))]
        return Action(kind, int(r), int(c))

    def _copy_state(self, other: "Minesweeper") -> None:
        # The layout, the numbers and the posterior cache are read-only and stay shared.
        other._revealed = self._revealed.copy()
        other._flagged = self._flagged.copy()

    # ------------------------------------------------------------------ observation

    def _cell_chars(self) -> list[list[str]]:
        revealed, flagged = self._revealed.tolist(), self._flagged.tolist()
        counts = self._counts.tolist() if self._counts is not None else None
        chars = [[str(counts[r][c]) if revealed[r][c] else "F" if flagged[r][c] else "."
                  for c in range(self.cols)] for r in range(self.rows)]
        if self._exploded is not None:
            chars[self._exploded[0]][self._exploded[1]] = "*"
        return chars

    def _render(self, style: str | None) -> str:
        chars = self._cell_chars()
        if self._style(style) == "compact":
            rows = "\n".join("".join(row) for row in chars)
            return f"{self.rows}x{self.cols} {self.mines} mines\n{rows}"
        label = len(str(self.rows - 1))
        width = len(str(self.cols - 1)) + 2
        header = " " * label + "".join(f"{c:>{width}}" for c in range(self.cols))
        lines = [f"{r:>{label}}" + "".join(f"{ch:>{width}}" for ch in row)
                 for r, row in enumerate(chars)]
        return "GAME STATE:\n" + "\n".join([header, *lines])

    def instructions(self, style: str | None = None) -> str:
        rows, cols, mines = self.rows, self.cols, self.mines
        if self._style(style) == "compact":
            return _COMPACT_INSTRUCTIONS.format(rows=rows, cols=cols, mines=mines)
        first_safe = self.first_reveal_safe and self.mine_cells is None
        return _CHAT_INSTRUCTIONS.format(
            rows=rows, cols=cols, mines=mines, last_row=rows - 1, last_col=cols - 1,
            first_reveal=" Your first reveal is never a mine." if first_safe else "",
            max_steps=self.max_steps,
            # Listing 3's flag example, moved inside the grid on boards too small for it.
            flag_row=min(1, rows - 1), flag_col=min(2, cols - 1),
            consequence=("will result in immediate loss of the game"
                         if self.invalid_action == "lose" else "will be penalized"))

    def _canonical_state(self) -> str:
        return "/".join("".join(row) for row in self._cell_chars())

    # ------------------------------------------------------------------ posterior and queries

    def mine_probabilities(self) -> np.ndarray:
        """Eq. 3's posterior mine probability of every cell, a float array [rows, cols]: 0 for
        revealed cells, 1 for a revealed mine; flags are ignored. A fresh copy of the cache."""
        if not self._ready:
            raise self._not_reset("mine_probabilities")
        return self._posterior_grid().copy()

    def _posterior_grid(self) -> np.ndarray:
        if self._posterior is None:
            self._posterior = self._compute_posterior()
        return self._posterior

    def _compute_posterior(self) -> np.ndarray:
        revealed = self._revealed.ravel()
        known_mines = set() if self._exploded is None else {
            self._exploded[0] * self.cols + self._exploded[1]}
        counts = self._counts.ravel() if self._counts is not None else None
        shown = {int(cell): int(counts[cell]) for cell in np.flatnonzero(revealed)}
        unknown = [cell for cell in range(self.rows * self.cols)
                   if not revealed[cell] and cell not in known_mines]
        grid = np.zeros(self.rows * self.cols)
        for cell, probability in mine_posterior(shown, unknown, known_mines, self.mines,
                                                self._neighbours).items():
            grid[cell] = probability
        grid[list(known_mines)] = 1.0
        grid = grid.reshape(self.rows, self.cols)
        grid.setflags(write=False)
        return grid

    def _verify(self, action: Action) -> bool:
        kind, r, c = action
        posterior = self._posterior_grid()
        if kind == REVEAL:
            candidates = ~self._revealed & ~self._flagged
            return bool(posterior[r, c] <= posterior[candidates].min() + TOLERANCE)
        return bool(not self._flagged[r, c] and posterior[r, c] >= 1.0 - TOLERANCE)

    def _oracle_action(self) -> Action:
        posterior = self._posterior_grid()
        open_cells = ~self._revealed & ~self._flagged
        safest_open = posterior[open_cells].min() if open_cells.any() else math.inf
        if self._flagged.any():
            safest_flagged = posterior[self._flagged].min()
            if safest_flagged < safest_open - TOLERANCE:  # an earlier mis-flag blocks the way
                return Action(FLAG, *_first(self._flagged & (posterior <= safest_flagged)))
        return Action(REVEAL, *_first(open_cells & (posterior <= safest_open + TOLERANCE)))

    def completion_rate(self) -> float:
        """CR: the fraction of safe cells revealed."""
        if not self._ready:
            raise self._not_reset("completion_rate")
        return self._num_revealed / self._num_safe

    def _process_score(self) -> float:
        return 0.0 if self._exploded is not None else self._num_revealed / self._num_safe

    def _metrics(self) -> dict:
        return {"completion_rate": self._num_revealed / self._num_safe,
                "solved": self._num_revealed == self._num_safe}


def _first(mask: np.ndarray) -> tuple[int, int]:
    """The first True cell of a boolean grid in row-major order."""
    r, c = np.unravel_index(int(np.argmax(mask)), mask.shape)
    return int(r), int(c)


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _validate_layout(mine_cells, rows: int, cols: int, mines: int) -> tuple[tuple[int, int], ...]:
    try:
        cells = tuple((int(r), int(c)) for r, c in mine_cells)
    except (TypeError, ValueError) as e:
        raise ValueError(f"mine_cells={mine_cells!r} must be (row, col) pairs") from e
    if any(not (0 <= r < rows and 0 <= c < cols) for r, c in cells):
        raise ValueError(f"mine_cells={mine_cells!r} has a cell outside the {rows}x{cols} grid")
    if len(set(cells)) != len(cells) or len(cells) != mines:
        raise ValueError(f"mine_cells={mine_cells!r} must hold mines={mines} distinct cells")
    return tuple(sorted(cells))
