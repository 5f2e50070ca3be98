"""Tic-Tac-Toe against an MCTS or random opponent, with an exact minimax oracle and VPR's MCTS
verifier.

The game is VPR's environment for dynamic deduction (Yuan et al., 2026, §2.2 "Search-Based VPR",
§3.1, §3.4, App. H Listing 1). The paper plays it through OpenSpiel; this module reimplements the
game, a UCT searcher and an exact solver in plain Python so that the rules and every search
decision are visible here.

Rules
  * 3x3 grid, 0-indexed, (0,0) top-left and (2,2) bottom-right (Listing 1). X moves first; the
    players alternate placing their mark in an empty cell; three marks in a row, column or
    diagonal win; a full grid without a line is a draw.
  * The agent plays X (first mover) or O (second mover), `agent_mark`. The environment plays the
    other mark with its opponent, and every observation is the agent's turn: when the agent is O,
    the opponent's first move is made inside `reset()`, and each `step()` plays the agent's move
    followed at once by the opponent's reply unless the agent's move ended the game.
  * Reward: +1 on the step where the agent wins, -1 where it loses (the opponent completes a line,
    or the agent forfeits, below), 0 for a draw and for every move that does not end the game.
    `success` is True exactly when the agent won. `metrics()["return"]` is the game outcome so far
    (+1, -1, or 0 while undecided, drawn or truncated), the return VPR reports in Tables 1 and 5
    (optimum 0 against a perfect opponent); format penalties are not part of it.
  * Invalid responses (text that does not parse, the opponent's mark, an occupied or out-of-range
    cell): Listing 1 warns that "Responses that do not follow the format will result in immediate
    loss of the game", so by default (`invalid_action="lose"`) they end the episode with reward -1
    and the board unchanged. `invalid_action="penalize"` instead gives `format_penalty` and leaves
    the state unchanged, and the agent answers again.
  * `max_steps=9`: the agent never needs more than 5 moves (X makes at most five of the nine, O
    four), so with `invalid_action="lose"` the limit is never reached; with "penalize" it leaves
    room for 4 invalid answers as X (5 as O) before the episode is truncated with return 0.

Action text. The canonical text is the agent's mark and the 0-indexed cell, `X(1,2)` (row 1,
column 2), as in Listing 1. Parsing accepts the mark in either case, spaces around every token and
one pair of surrounding angle brackets (Listing 1's example answer is `<X(0,0)>`); the mark must be
the agent's own. Anything else ("X(1,2)!", "X(1 2)", "(1,2)", two moves) is malformed. A
well-formed move on an occupied or out-of-range cell parses but is illegal. Chat style asks for
`<answer>X(1,1)</answer>`, compact style for the bare `X(1,1)`. The parsed action is the tuple
(row, col) of non-negative ints; any other value is not an action (environments/base.py). Since the
text carries the agent's mark, which reset() draws, `parse_action`, `format_action`, `answer_text`
and `instructions` raise EnvNotResetError before the first reset, like the state queries.

Observations
  chat     "GAME STATE:", Listing 1's grid with row and column indices ('X', 'O', '.' empty;
           column indices aligned over the cells), then the legal actions as `X(r,c)`, or the
           result once the episode is over.
  compact  a header "you: X" and the three board rows, e.g. "you: O\\nX..\\n.O.\\n...".
  Instructions (chat) adapt Listing 1's rules, player information and response format to the
  agent's mark and to `invalid_action`; `system_prompt` is Listing 1's system prompt.

Solver. `minimax_value` is the exact game-theoretic value (+1 win, 0 draw, -1 loss) of a position
for the side to move, from a negamax over the whole game tree memoised per position (the 5478
reachable positions, filled on first use and shared by all instances). Positions are pairs of
9-bit masks (cell r*3+c is bit r*3+c): the marks of the side to move and of the other side.

MCTS. UCT (Kocsis & Szepesvári, 2006) with random playouts, the search of VPR §2.2 (the paper
runs OpenSpiel's; it states only N, so the details below are ours). One simulation descends
through fully expanded nodes by UCB1, Q + c·sqrt(ln N(parent) / N(child)) with c = sqrt(2), expands
one untried move, finishes the game with uniformly random moves and backs up +1/0/-1 from the view
of each node's mover. Untried moves are expanded in cell order and UCB ties go to the lowest cell,
so the playouts are the only randomness. Q(s, a) is the mean backed-up value of root child a. Plain
Python on one CPU core: about 0.3 ms per search at N=100, 3-4 ms at N=1000, 35-65 ms at N=10000.

Opponents (VPR §3.1: training against "a mixed population of MCTS and random opponents",
evaluation against "a fixed strong MCTS opponent")
  random  a uniformly random empty cell.
  mcts    UCT with `opponent_simulations` simulations; plays the most visited root move (the
          usual robust choice), ties to the lowest cell.
  mixed   each episode draws mcts with probability `mcts_fraction`, else random.
All opponent randomness (and the draws of "random" mark and "mixed" opponent at reset, in that
order) comes from self.rng, so a clone reproduces the opponent's replies.

Method queries
  oracle_action  oracle="minimax": a minimax-optimal move; among them the one that wins soonest
                 (or, when losing, loses latest), then the lowest cell in row-major order, so
                 demonstrations take immediate wins. oracle="mcts": the argmax of Q after
                 `oracle_simulations` simulations, lowest cell on ties.
  verify(a)      oracle="minimax": the value after `a` equals the best value (every optimal move is
                 valid, however fast it wins). oracle="mcts": VPR's A_V(s) = argmax_a Q_MCTS(s, a)
                 (ties valid). The oracle's search draws from a Generator seeded by (episode seed,
                 step index, position), never from self.rng: oracle_action and verify are
                 reproducible and side-effect free, and agree with each other. Results are cached
                 per (position, seed, step, N), so verifying several candidates costs one search.
  process_score  (minimax value for the agent + 1) / 2: 1 won, 0.5 drawn, 0 lost under perfect play
                 from here; once the episode is over, (return + 1) / 2.

canonical_state is the nine cells in row-major order ('X', 'O', '.') and the agent's mark, e.g.
"X...O....|X". The opponent type is not part of it: it is fixed by the seed within an episode.

Parameters (defaults and sources)
  agent_mark="random"      "X", "O" or "random" (each episode, X or O with probability 1/2): VPR
                           trains and evaluates as both first and second mover (§3.1, Table 1).
  opponent="mixed"         "mixed", "mcts" or "random" (§3.1; use "mcts" for evaluation).
  mcts_fraction=0.5        probability of the MCTS opponent in the mixture (not given by VPR).
  opponent_simulations=1000  simulations per opponent move (VPR gives no number).
  oracle="minimax"         "minimax" (exact: what MCTS approximates as N grows) or "mcts" (VPR's
                           verifier, to reproduce §3.1 and the oracle-quality ablation of §3.4).
  oracle_simulations=10000 VPR's default N (§3.1); the ablation of §3.4 uses 100, 1000, 10000.
  invalid_action="lose"    "lose" (Listing 1) or "penalize".
  max_steps=9, format_penalty=-0.1 (RAGEN/TSR's penalty, used only with "penalize"),
  style="chat".
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np

from environments.base import TextEnv, is_int_tuple

MARKS = ("X", "O")
#: The eight lines as 9-bit masks: rows, columns, diagonals.
_LINES = tuple(sum(1 << cell for cell in line) for line in (
    (0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)))
_FULL = (1 << 9) - 1
#: _HAS_LINE[marks]: whether the 9-bit mask `marks` contains a complete line.
_HAS_LINE = tuple(any(marks & line == line for line in _LINES) for marks in range(_FULL + 1))
#: _EMPTY_CELLS[occupied]: the empty cells, ascending, of a board whose occupied cells are the mask.
_EMPTY_CELLS = tuple(tuple(cell for cell in range(9) if not occupied >> cell & 1)
                     for occupied in range(_FULL + 1))
#: UCB1's exploration constant c.
_EXPLORATION = math.sqrt(2.0)

_ACTION = re.compile(r"([XO])\s*\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)", re.IGNORECASE)
_GRID_HEADER = "   0  1  2"

# ---------------------------------------------------------------------------------- exact solver


@functools.cache
def _score(mover: int, other: int) -> int:
    """Depth-aware negamax score for the side to move: 1 + (empty cells left when the game ends)
    if it wins under perfect play, minus that if it loses, 0 for a draw. Its sign is the
    game-theoretic value; its size prefers quick wins and slow losses (used only to break ties)."""
    empties = _EMPTY_CELLS[mover | other]
    if _HAS_LINE[other]:  # the previous move completed a line
        return -1 - len(empties)
    if not empties:
        return 0
    return max(-_score(other, mover | 1 << cell) for cell in empties)


def minimax_value(mover: int, other: int) -> int:
    """Game-theoretic value (+1 win, 0 draw, -1 loss) for the side to move, whose marks are
    `mover`, against `other` (9-bit masks)."""
    score = _score(mover, other)
    return (score > 0) - (score < 0)


def minimax_move_values(mover: int, other: int) -> dict[int, int]:
    """{cell: value for the side to move after playing there} for every empty cell."""
    return {cell: -minimax_value(other, mover | 1 << cell)
            for cell in _EMPTY_CELLS[mover | other]}


def minimax_move(mover: int, other: int) -> int:
    """A minimax-optimal cell: the quickest win (slowest loss), then the lowest cell."""
    return max(_EMPTY_CELLS[mover | other], key=lambda cell: -_score(other, mover | 1 << cell))


# ------------------------------------------------------------------------------------------ UCT


class _Node:
    """A UCT tree node. `total` sums the backed-up values for the player who moved into it;
    `mean` (Q) and `spread` (1 / sqrt(visits)) are kept up to date so that selection, which reads
    every child of every node on the path, does no division or square root per child."""

    __slots__ = ("cell", "mover", "other", "result", "untried", "children", "visits", "total",
                 "mean", "spread")

    def __init__(self, cell: int | None, mover: int, other: int):
        self.cell = cell  # the move that led here (None at the root)
        self.mover, self.other = mover, other
        occupied = mover | other
        # value of a finished game for the side to move: the previous move won, or a draw
        self.result = -1.0 if _HAS_LINE[other] else 0.0 if occupied == _FULL else None
        # reversed, so that pop() expands the lowest cell first
        self.untried = [] if self.result is not None else list(reversed(_EMPTY_CELLS[occupied]))
        self.children: list[_Node] = []
        self.visits = 0
        self.total = 0.0
        self.mean = 0.0
        self.spread = math.inf


def mcts_root_statistics(mover: int, other: int, simulations: int,
                         rng: np.random.Generator) -> dict[int, tuple[int, float]]:
    """Runs UCT from an unfinished position (side to move `mover`) and returns
    {cell: (visit count, Q)} for every root move tried, in cell order. Q is the mean playout value
    (+1 win, 0 draw, -1 loss) for the side to move. All moves are tried once `simulations` reaches
    their number. Draws 9 * simulations uniforms from `rng`."""
    # a playout from a node with k empty cells makes at most k <= 9 random moves
    draws = iter(rng.random(9 * simulations).tolist())
    root = _Node(None, mover, other)
    for _ in range(simulations):
        node, path = root, [root]
        while not node.untried and node.children:  # fully expanded and not finished
            node = _select(node)
            path.append(node)
        if node.untried:
            cell = node.untried.pop()
            child = _Node(cell, node.other, node.mover | 1 << cell)
            node.children.append(child)
            node = child
            path.append(node)
        value = node.result if node.result is not None else _playout(node.mover, node.other, draws)
        # `value` is for the side to move at `visited`; its total is for the parent's mover
        for visited in reversed(path):
            value = -value
            visited.visits += 1
            visited.total += value
            visited.mean = visited.total / visited.visits
            visited.spread = 1.0 / math.sqrt(visited.visits)
    return {child.cell: (child.visits, child.mean) for child in root.children}


def _select(node: _Node) -> _Node:
    """The child maximising UCB1, Q + c sqrt(ln N / n); the first (lowest cell) on ties."""
    scale = _EXPLORATION * math.sqrt(math.log(node.visits))
    best, best_ucb = None, -math.inf
    for child in node.children:
        ucb = child.mean + scale * child.spread
        if ucb > best_ucb:
            best, best_ucb = child, ucb
    return best


def _playout(mover: int, other: int, draws) -> float:
    """Plays uniformly random moves from an unfinished position to the end; returns the result
    (+1, 0, -1) for the side to move at the start."""
    sign = 1.0
    while True:
        empties = _EMPTY_CELLS[mover | other]
        if not empties:
            return 0.0
        mover |= 1 << empties[int(next(draws) * len(empties))]
        if _HAS_LINE[mover]:
            return sign
        mover, other, sign = other, mover, -sign


@functools.lru_cache(maxsize=1024)
def _oracle_q(mover: int, other: int, simulations: int, seed: int, step: int
              ) -> tuple[tuple[int, float], ...]:
    """The MCTS oracle's ((cell, Q), ...) for one position of one episode step: a pure function
    of its arguments (its own Generator), so verify() and oracle_action() agree and can share it."""
    rng = np.random.default_rng((seed, step, mover, other))
    return tuple((cell, q) for cell, (_, q) in
                 mcts_root_statistics(mover, other, simulations, rng).items())


# ---------------------------------------------------------------------------------- environment


class TicTacToe(TextEnv):
    """VPR's Tic-Tac-Toe as a text environment (rules and decisions in the module docstring)."""

    name = "tictactoe"
    action_spec = "a (row, col) tuple of two non-negative ints"
    system_prompt = ("You are an AI agent that makes optimal decisions to win in the game of "
                     "Tic-Tac-Toe.")  # Listing 1

    def __init__(self, *, style: str = "chat", max_steps: int = 9, format_penalty: float = -0.1,
                 agent_mark: str = "random", opponent: str = "mixed", mcts_fraction: float = 0.5,
                 opponent_simulations: int = 1000, oracle: str = "minimax",
                 oracle_simulations: int = 10000, invalid_action: str = "lose"):
        super().__init__(style=style, max_steps=max_steps, format_penalty=format_penalty)
        _check_choice("agent_mark", agent_mark, (*MARKS, "random"))
        _check_choice("opponent", opponent, ("mixed", "mcts", "random"))
        _check_choice("oracle", oracle, ("minimax", "mcts"))
        _check_choice("invalid_action", invalid_action, ("lose", "penalize"))
        if not (isinstance(mcts_fraction, (int, float)) and 0 <= mcts_fraction <= 1):
            raise ValueError(f"mcts_fraction={mcts_fraction!r} must be in [0, 1]")
        _check_simulations("opponent_simulations", opponent_simulations)
        _check_simulations("oracle_simulations", oracle_simulations)
        self.agent_mark_option = agent_mark
        self.opponent_option = opponent
        self.mcts_fraction = float(mcts_fraction)
        self.opponent_simulations = opponent_simulations
        self.oracle = oracle
        self.oracle_simulations = oracle_simulations
        self.invalid_action = invalid_action
        # The board, marks and opponent of an episode are set by reset() (through _start).

    def _start(self, agent_mark: str, opponent_kind: str) -> None:
        self.agent_mark = agent_mark
        self.opponent_mark = "O" if agent_mark == "X" else "X"
        self.opponent_kind = opponent_kind  # "mcts" or "random" for this episode
        self.agent_cells = 0  # 9-bit masks
        self.opponent_cells = 0
        self.outcome = 0  # +1 won, -1 lost, 0 otherwise

    # ------------------------------------------------------------------ the game

    def _reset_game(self, seed: int) -> None:
        del seed  # self.rng is already seeded with it
        agent_mark = self.agent_mark_option
        if agent_mark == "random":
            agent_mark = MARKS[int(self.rng.integers(2))]
        opponent_kind = self.opponent_option
        if opponent_kind == "mixed":
            opponent_kind = "mcts" if self.rng.random() < self.mcts_fraction else "random"
        self._start(agent_mark, opponent_kind)
        if agent_mark == "O":
            self._opponent_move()

    def _opponent_move(self) -> None:
        empties = _EMPTY_CELLS[self.agent_cells | self.opponent_cells]
        if self.opponent_kind == "random":
            cell = empties[int(self.rng.integers(len(empties)))]
        else:
            stats = mcts_root_statistics(self.opponent_cells, self.agent_cells,
                                         self.opponent_simulations, self.rng)
            cell = max(stats, key=lambda c: stats[c][0])  # most visited; lowest cell on ties
        self.opponent_cells |= 1 << cell

    def _parse(self, content: str) -> tuple[int, int] | None:
        if not self._ready:  # the agent's mark is drawn at reset
            raise self._not_reset("parse_action")
        if content.startswith("<") and content.endswith(">"):
            content = content[1:-1].strip()
        match = _ACTION.fullmatch(content)
        if match is None or match[1].upper() != self.agent_mark:
            return None
        return int(match[2]), int(match[3])

    def _is_action(self, action) -> bool:
        return is_int_tuple(action, 2)

    def _is_legal(self, action: tuple[int, int]) -> bool:
        row, col = action
        occupied = self.agent_cells | self.opponent_cells
        return 0 <= row < 3 and 0 <= col < 3 and not occupied >> (3 * row + col) & 1

    def _apply(self, action: tuple[int, int]) -> tuple[float, bool, bool]:
        row, col = action
        self.agent_cells |= 1 << (3 * row + col)
        if _HAS_LINE[self.agent_cells]:
            return self._finish(1)
        if self.agent_cells | self.opponent_cells == _FULL:
            return self._finish(0)
        self._opponent_move()
        if _HAS_LINE[self.opponent_cells]:
            return self._finish(-1)
        if self.agent_cells | self.opponent_cells == _FULL:
            return self._finish(0)
        return 0.0, False, False

    def _invalid_outcome(self, action) -> tuple[float, bool, bool]:
        if self.invalid_action == "penalize":
            return super()._invalid_outcome(action)
        return self._finish(-1)  # Listing 1: an invalid response loses the game

    def _finish(self, outcome: int) -> tuple[float, bool, bool]:
        self.outcome = outcome
        return float(outcome), True, outcome == 1

    def _metrics(self) -> dict:
        """The game return so far and who moved first (evaluations report returns per mover)."""
        return {"return": float(self.outcome), "first_mover": self.agent_mark == "X"}

    def _format_action(self, action: tuple[int, int]) -> str:
        if not self._ready:  # the text carries the agent's mark, drawn at reset
            raise self._not_reset("format_action")
        row, col = action
        return f"{self.agent_mark}({row},{col})"

    @property
    def board(self) -> str:
        """The nine cells in row-major order: 'X', 'O' or '.'."""
        if not self._ready:
            raise self._not_reset("board")
        return self._board()

    def _board(self) -> str:
        return "".join(self.agent_mark if self.agent_cells >> cell & 1
                       else self.opponent_mark if self.opponent_cells >> cell & 1 else "."
                       for cell in range(9))

    def _random_action(self, rng: np.random.Generator) -> tuple[int, int]:
        """A uniformly random empty cell (the episode must not be over)."""
        actions = self._legal_actions()
        return actions[int(rng.integers(len(actions)))]

    def legal_actions(self) -> list[tuple[int, int]]:
        """The empty cells as (row, column), row-major (empty once the episode is over)."""
        if not self._ready:
            raise self._not_reset("legal_actions")
        return self._legal_actions()

    def _legal_actions(self) -> list[tuple[int, int]]:
        if self.done:
            return []
        return [divmod(cell, 3) for cell in _EMPTY_CELLS[self.agent_cells | self.opponent_cells]]

    def _render(self, style: str | None) -> str:
        board = self._board()
        if self._style(style) == "compact":
            return "\n".join([f"you: {self.agent_mark}", board[0:3], board[3:6], board[6:9]])
        grid = "\n".join([_GRID_HEADER] + [f"{row}  " + "  ".join(board[3 * row:3 * row + 3])
                                           for row in range(3)])
        return f"GAME STATE:\n{grid}\n\n{self._status_line()}"

    def _status_line(self) -> str:
        if not self.done:
            actions = ", ".join(self._format_action(action) for action in self._legal_actions())
            return f"LEGAL ACTIONS: {actions}"
        if self.outcome == 1:
            return "GAME OVER: you won."
        if self.outcome == -1:
            return "GAME OVER: you lost."
        if self.agent_cells | self.opponent_cells == _FULL:
            return "GAME OVER: draw."
        return "GAME OVER: the step limit was reached."

    def instructions(self, style: str | None = None) -> str:
        if not self._ready:  # they name the agent's mark, drawn at reset
            raise self._not_reset("instructions")
        me, them = self.agent_mark, self.opponent_mark
        if self._style(style) == "compact":
            return f"Tic-tac-toe, three in a row wins. You play {me}. Move: {me}(row,col), 0-2."
        if self.invalid_action == "lose":
            invalid = ("Responses that do not follow the format or choose an illegal action "
                       "will result in immediate loss of the game.")
        else:
            invalid = ("Responses that do not follow the format or choose an illegal action are "
                       "penalized, and you will be asked again.")
        return (
            "GAME RULES:\n"
            "1. Tic-tac-toe is a two-player board game played on a three-by-three grid. The grid "
            "is 0-indexed, where (0,0) is the top-left corner and (2,2) is the bottom-right "
            "corner.\n"
            "2. Two players take turns placing their marks X and O in empty cells of the grid. "
            "X moves first.\n"
            "3. The player who first places three of their marks in a horizontal, vertical, or "
            "diagonal line wins.\n"
            "4. If all cells are filled and no player wins, the game ends in a draw.\n\n"
            "PLAYER INFORMATION:\n"
            f"1. Your mark is {me}. You are competing with another player controlling the mark "
            f"{them}.\n"
            "2. In each of your turns:\n"
            "  a. The game state demonstrates the current board with a three-line text grid, "
            "where 'X' and 'O' are the marks of the two players, and '.' represents empty "
            "cells.\n"
            "  b. You need to choose an action to place your mark in an empty cell, based on the "
            "given game state and the history of your decisions.\n"
            f"  c. All legal actions for the current turn are provided in the format "
            f"{me}({{row}},{{column}}), where {me} is your mark, and {{row}} and {{column}} are "
            "integers indicating the row and column of the cell to place your mark.\n\n"
            "RESPONSE INSTRUCTIONS:\n"
            "Always choose only one action from the legal actions and output "
            "<answer>{your chosen action}</answer> with no extra text after you finish the "
            f"thinking process. For example, <answer>{me}(1,1)</answer>. Strictly follow the "
            f"above format and keep your thinking process concise. {invalid}\n\n"
            "The game state is provided below. Please choose your action and strictly follow the "
            "given output format in the response instructions.")

    def _canonical_state(self) -> str:
        return f"{self._board()}|{self.agent_mark}"

    def _copy_state(self, other: "TicTacToe") -> None:
        """Nothing to copy: the board masks, marks and outcome are immutable ints and strings."""

    # ------------------------------------------------------------------ method queries

    def _oracle_action(self) -> tuple[int, int]:
        if self.oracle == "minimax":
            return divmod(minimax_move(self.agent_cells, self.opponent_cells), 3)
        q = self._oracle_q()
        best = max(value for _, value in q)
        return divmod(next(cell for cell, value in q if value == best), 3)

    def _verify(self, action: tuple[int, int]) -> bool:
        row, col = action
        cell = 3 * row + col
        if self.oracle == "minimax":
            values = minimax_move_values(self.agent_cells, self.opponent_cells)
            return values[cell] == max(values.values())
        q = dict(self._oracle_q())
        return q.get(cell) == max(q.values())

    def _oracle_q(self) -> tuple[tuple[int, float], ...]:
        return _oracle_q(self.agent_cells, self.opponent_cells, self.oracle_simulations,
                         self.seed, self.num_steps)

    def _process_score(self) -> float:
        if self.done:
            return (self.outcome + 1) / 2
        return (minimax_value(self.agent_cells, self.opponent_cells) + 1) / 2


def _check_choice(argument: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{argument}={value!r}: expected one of {choices}")


def _check_simulations(argument: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{argument}={value!r} must be a positive integer")
