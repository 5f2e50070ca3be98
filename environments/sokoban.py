"""Sokoban: push every box onto a target in a walled warehouse.

The puzzle of Weber et al. (2018) as played by TSR (App. D.1), whose setup follows RAGEN (App. E).
Levels, moves and rewards are those of gym-sokoban (mpSchrader/gym-sokoban), which RAGEN wraps.

Rules
  * The room is a grid of walls and floor, surrounded by walls. Some floor cells are targets; there
    are as many boxes as targets, and one player.
  * Each turn the player moves one cell Up, Down, Left or Right. Moving into a box pushes it one
    cell further in the same direction, if that cell is floor without a box. Boxes are never
    pulled, and only one box moves at a time.
  * Walking into a wall, or pushing a box into a wall or another box, is a legal move that changes
    nothing but still costs the step penalty (gym-sokoban's semantics). Only text that does not
    parse is invalid.
  * Rewards (TSR App. D.1, the constants of gym-sokoban): -0.1 per action; +1 when the number of
    boxes on targets goes up, -1 when it goes down; +10 when every box is on a target, which ends
    the episode with success. As in gym-sokoban the +1/-1 come from the change in the count, so
    pushing a box from one target straight onto another gives neither, and the winning push earns
    -0.1 + 1 + 10 = 10.9.
  * The episode is truncated after `max_steps` actions (TSR App. E: at most 10 actions per
    episode).

Action text. The canonical text is "Up", "Down", "Left" or "Right". Parsing accepts exactly one of
these words in any case, with surrounding whitespace; anything else ("upward", "up left", "Up!",
RAGEN's multi-action "Right || Up") is malformed and costs `format_penalty` with the state
unchanged. One action per step: TSR's turns of up to 5 actions are sequences of such steps for the
agent loop to split. Chat style asks for `<answer>Left</answer>`, compact style for the bare word.

Levels. `reset(seed)` generates a level from `self.rng` by reverse play, as gym-sokoban does:
  1. topology: a random walk of int(1.7 * (rows + cols)) steps inside the room that changes
     direction with probability 0.35 and carves one of gym-sokoban's five 3x3 floor masks around
     each position; the outer ring is then walled (gym-sokoban's `room_topology_generation`);
  2. placement: the player, then `num_boxes` targets, on distinct random floor cells, with a box on
     every target (gym-sokoban's `place_boxes_and_player`);
  3. reverse play: `search_depth` random reverse moves. Each picks a direction and, with
     probability 1/2, a pull: the player steps into the adjacent cell if it is floor without a box,
     and a pull also drags the box behind the player into the cell the player left. A blocked move
     does nothing. Every reverse move is the inverse of a legal forward move, so the level is
     solvable by construction;
  4. acceptance: the level is kept when at least one box ended off its target (the puzzle is not
     already solved) and the exact solver below finds a solution of at most `max_steps` actions,
     so every episode can be won within its budget; otherwise everything is redrawn, at most
     MAX_GENERATION_ATTEMPTS times (then RuntimeError: the options admit no such level).
  Differences from gym-sokoban: its reverse play is a depth-first search over reverse moves with a
  depth budget of 300 (RAGEN exposes it as `search_depth`) that keeps the state scoring highest on
  box displacement times box swaps and requires every box off its target; we take a random
  reverse walk instead, accept any unsolved state, and add the solution-length check. With the
  default single box the two acceptance rules coincide.
A fixed level can be given instead through `level`: rows in the compact symbols below (a list of
strings, or one string with a row per line). It must be rectangular, walled all around, have exactly
one player, as many boxes as targets (at least one), and not be solved already; it need not be
solvable. `size`, `num_boxes` and `search_depth` are then unused and every seed plays that level.

Observations
  chat     RAGEN's symbols, cells separated by spaces, then the boxes on targets and a legend:
           # wall, _ floor, O target, X box, √ box on target, P player, S player on target.
  compact  one byte per cell, rows on separate lines: # wall, . floor, T target, B box,
           * box on target, P player, + player on target.

Solver. `solve()` is an exact breadth-first search over states (player cell, set of box cells),
trying actions in the order Up, Down, Left, Right, so it returns a shortest action sequence (the
same one for the same state) or None when no sequence solves the level. Blocked moves are skipped
(they never shorten a solution). Pushing a box onto a dead square (below) is pruned, which keeps the
search exact: no box ever leaves such a square towards a target. Results are memoised per level by
state: a found solution of length L also gives the solutions of the L states along it (every suffix
of a shortest solution is shortest), and a search that exhausts the reachable states without a
solution marks all of them unsolvable. The memo is a fact table about the level, independent of the
episode's history, so the original environment and all its clones share it and any of them may add
to it: sharing changes costs, never results. A new level (reset) gets a new memo.

Deadlocks. A dead square is a non-target floor cell from which a box alone can never be pushed onto
any target, even if the player could stand anywhere: computed once per level by pulling a box back
from every target (a pull from b to b + d needs floor at b + d and b + 2d). This is the classic
"simple deadlock" test; it covers a non-target corner between two walls and a cell along a wall
whose line holds no target between the corners that close it, plus dead-end pockets. The state is
deadlocked when some box is on a dead square. The test is sound (a deadlocked state is unsolvable)
but not complete (boxes blocking each other are not detected).

Method queries
  oracle_action  the first action of the solver's shortest solution. In an unsolvable state there is
                 none, and the oracle returns "Up" (the first action) so callers always get a legal
                 action. None once the episode is over.
  verify(a)      the action starts some shortest solution: optimal length of the next state ==
                 optimal length of the current state - 1 (blocked moves therefore never verify).
                 False in unsolvable states and once the episode is over.
  process_score  1 when solved; 0 when deadlocked; otherwise
                 0.5 * (fraction of boxes on targets) + 0.5 * (1 - D / D0), clipped to [0, 1],
                 where D is the sum over boxes of the Manhattan distance to the nearest target and
                 D0 that sum at reset (D0 >= 1, since a level never starts solved).
  turn_score(a)  the base class's: the reward a clone receives for `a` (TSR scores Sokoban turns by
                 the environment reward, §3.1 and App. D.2).
  metrics        {"boxes_on_target": k}.
  canonical_state  "P<row>,<col>|B<row>,<col>;..." with the boxes sorted (walls and targets are
                 fixed within an episode).

Parameters (defaults and sources)
  size=6            side of the square room, border walls included (RAGEN's SimpleSokoban is 6x6);
                    a (rows, cols) pair gives a rectangular room.
  num_boxes=1       boxes (and targets): RAGEN's SimpleSokoban.
  search_depth=300  random reverse moves per draw; the value of RAGEN's `search_depth` (its
                    SokobanEnvConfig default, which SimpleSokoban keeps). There it is the depth
                    budget of the reverse search rather than a walk length, but it plays the same
                    role, and a long walk mixes the box well: over seeds
                    0-1999 the optimal solution lengths 1..10 occur 11, 18, 14, 14, 15, 11, 8, 4,
                    3, 2 % of the time (mean 4.2), against 27 % one-move levels (mean 2.8) with 30
                    moves, and fewer draws are rejected (1.4 per level against 2.7; ~2 ms a reset).
  max_steps=10      TSR App. E: at most 10 actions per episode.
  format_penalty=-0.1  RAGEN/TSR's penalty for a malformed answer.
  level=None        a fixed level (see Levels) instead of generated ones.
  style="chat"      "chat" or "compact" (see environments/base.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from environments.base import TextEnv, is_int

#: Canonical action texts; an action is its index here.
ACTIONS = ("Up", "Down", "Left", "Right")
_ACTION_INDEX = {word.lower(): index for index, word in enumerate(ACTIONS)}
#: (row, column) offset of each action's move.
_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))

# Rewards: TSR App. D.1, gym-sokoban's constants.
STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVED_REWARD = 10.0

# Room topology generation: gym-sokoban's `room_topology_generation` and its default walk length.
_WALK_STEPS_PER_SIDE = 1.7
_CHANGE_DIRECTION_PROB = 0.35
_FLOOR_MASKS = (
    ((0, 0, 0), (1, 1, 1), (0, 0, 0)),
    ((0, 1, 0), (0, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (1, 1, 0)),
    ((0, 0, 0), (0, 1, 1), (0, 1, 0)),
)
#: Draws before reset gives up on options that admit no level (e.g. far too many boxes).
MAX_GENERATION_ATTEMPTS = 1000

# Symbols, by (is target, what is on the cell).
_COMPACT_SYMBOLS = {(False, None): ".", (True, None): "T", (False, "box"): "B", (True, "box"): "*",
                    (False, "player"): "P", (True, "player"): "+"}
_COMPACT_WALL = "#"
_CHAT_SYMBOLS = {(False, None): "_", (True, None): "O", (False, "box"): "X", (True, "box"): "√",
                 (False, "player"): "P", (True, "player"): "S"}
_CHAT_WALL = "#"
_CHAT_LEGEND = ("Legend: # wall, _ floor, O target, X box, √ box on target, P player, "
                "S player on target.")

State = tuple[int, frozenset[int]]  # (player cell, box cells); cells are row * cols + col


@dataclass(frozen=True)
class Layout:
    """The fixed part of a level (walls, targets) and what is derived from it; read-only, so
    clones share it. Cells are flat indices row * cols + col; the border is all wall, so a move
    from a floor cell never leaves the grid."""

    rows: int
    cols: int
    walls: tuple[bool, ...]
    targets: frozenset[int]
    offsets: tuple[int, ...]  # flat offset of each action
    dead: frozenset[int]  # dead squares (module docstring, Deadlocks)
    target_distance: tuple[int, ...]  # Manhattan distance from each cell to the nearest target

    def move(self, player: int, boxes: frozenset[int], action: int
             ) -> tuple[int, frozenset[int], int | None]:
        """(player, boxes, cell the pushed box landed on or None) after `action`; a blocked move
        returns the same state."""
        offset = self.offsets[action]
        ahead = player + offset
        if self.walls[ahead]:
            return player, boxes, None
        if ahead not in boxes:
            return ahead, boxes, None
        beyond = ahead + offset
        if self.walls[beyond] or beyond in boxes:
            return player, boxes, None
        return ahead, (boxes - {ahead}) | {beyond}, beyond

    def position(self, cell: int) -> tuple[int, int]:
        return divmod(cell, self.cols)


def make_layout(rows: int, cols: int, walls: Sequence[bool], targets: frozenset[int]) -> Layout:
    """A Layout with its dead squares and target distances precomputed."""
    walls = tuple(bool(w) for w in walls)
    offsets = tuple(d_row * cols + d_col for d_row, d_col in _MOVES)
    target_positions = [divmod(t, cols) for t in targets]
    target_distance = tuple(
        min(abs(row - t_row) + abs(col - t_col) for t_row, t_col in target_positions)
        for row in range(rows) for col in range(cols))
    return Layout(rows=rows, cols=cols, walls=walls, targets=frozenset(targets), offsets=offsets,
                  dead=_dead_squares(walls, targets, offsets), target_distance=target_distance)


def _dead_squares(walls: tuple[bool, ...], targets: frozenset[int], offsets: tuple[int, ...]
                  ) -> frozenset[int]:
    """Floor cells from which a lone box can reach no target, the player standing anywhere.

    A box can be pushed from b to b + d iff b - d and b + d are floor; in reverse, pulled from b to
    b + d iff b + d and b + 2d are floor. Cells reached by pulls from the targets are live."""
    live = set(targets)
    stack = list(targets)
    while stack:
        box = stack.pop()
        for offset in offsets:
            pulled_to = box + offset
            if (pulled_to not in live and not walls[pulled_to]
                    and not walls[pulled_to + offset]):
                live.add(pulled_to)
                stack.append(pulled_to)
    return frozenset(cell for cell, wall in enumerate(walls) if not wall and cell not in live)


class Solver:
    """Exact breadth-first solver for one Layout, memoised by state (module docstring, Solver)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        #: state -> a shortest solution (tuple of actions) or None when the state is unsolvable.
        self._memo: dict[State, tuple[int, ...] | None] = {}

    def solve(self, state: State, max_length: int | None = None) -> tuple[int, ...] | None:
        """A shortest action sequence from `state` to all boxes on targets; None when there is none
        (of at most `max_length` actions, when given)."""
        if state not in self._memo:
            self._search(state, max_length)
        if state not in self._memo:  # the search stopped at max_length without a solution
            return None
        plan = self._memo[state]
        if plan is None or (max_length is not None and len(plan) > max_length):
            return None
        return plan

    def _search(self, start: State, max_length: int | None) -> None:
        """Layered breadth-first search from `start`; records what it proves in the memo."""
        layout = self.layout
        if start[1] <= layout.targets:
            self._memo[start] = ()
            return
        if start[1] & layout.dead:
            self._memo[start] = None
            return
        parents: dict[State, tuple[State, int] | None] = {start: None}
        frontier = [start]
        depth = 0
        while frontier:
            if max_length is not None and depth == max_length:
                return  # nothing proven beyond the solutions found (none)
            depth += 1
            next_frontier = []
            for state in frontier:
                player, boxes = state
                for action in range(len(ACTIONS)):
                    new_player, new_boxes, pushed_to = layout.move(player, boxes, action)
                    child = (new_player, new_boxes)
                    # Skip states already seen (a blocked move returns its own state), pushes
                    # onto dead squares and states the memo knows to be unsolvable.
                    if (child in parents or (pushed_to is not None and pushed_to in layout.dead)
                            or self._memo.get(child, ()) is None):
                        continue
                    parents[child] = (state, action)
                    if pushed_to is not None and new_boxes <= layout.targets:
                        self._record_solution(child, parents)
                        return
                    next_frontier.append(child)
            frontier = next_frontier
        for state in parents:  # exhausted: every state reachable from an unsolvable one is too
            self._memo[state] = None

    def _record_solution(self, goal: State, parents: dict) -> None:
        """Memoises the solution of every state on the path from the search's start to `goal`."""
        states, actions = [goal], []
        while parents[states[-1]] is not None:
            previous, action = parents[states[-1]]
            states.append(previous)
            actions.append(action)
        actions.reverse()
        for k, state in enumerate(reversed(states)):
            self._memo.setdefault(state, tuple(actions[k:]))


# ---------------------------------------------------------------------- level generation


def generate_level(rng: np.random.Generator, rows: int, cols: int, num_boxes: int,
                   search_depth: int, max_length: int) -> tuple[Layout, Solver, State]:
    """A level solvable in at most `max_length` actions, by reverse play (module docstring,
    Levels), with its Solver (whose memo already holds the initial state's solution)."""
    for _ in range(MAX_GENERATION_ATTEMPTS):
        walls = _carve_room(rng, rows, cols)
        floor = [cell for cell, wall in enumerate(walls) if not wall]
        if len(floor) < num_boxes + 1:
            continue
        chosen = rng.choice(len(floor), size=num_boxes + 1, replace=False)
        player = floor[chosen[0]]
        targets = frozenset(floor[i] for i in chosen[1:])
        layout = make_layout(rows, cols, walls, targets)
        state = _reverse_play(rng, layout, (player, targets), search_depth)
        if state[1] == targets:
            continue
        solver = Solver(layout)
        if solver.solve(state, max_length) is not None:
            return layout, solver, state
    raise RuntimeError(f"no level with rows={rows}, cols={cols}, num_boxes={num_boxes}, "
                       f"search_depth={search_depth} was solvable within max_steps={max_length} "
                       f"in {MAX_GENERATION_ATTEMPTS} draws")


def _carve_room(rng: np.random.Generator, rows: int, cols: int) -> list[bool]:
    """gym-sokoban's room topology: floor carved by masks along a random walk, walled border."""
    floor = np.zeros((rows, cols), dtype=bool)
    direction = _MOVES[rng.integers(len(_MOVES))]
    row, col = int(rng.integers(1, rows - 1)), int(rng.integers(1, cols - 1))
    for _ in range(int(_WALK_STEPS_PER_SIDE * (rows + cols))):
        if rng.random() < _CHANGE_DIRECTION_PROB:
            direction = _MOVES[rng.integers(len(_MOVES))]
        row = min(max(row + direction[0], 1), rows - 2)
        col = min(max(col + direction[1], 1), cols - 2)
        mask = np.array(_FLOOR_MASKS[rng.integers(len(_FLOOR_MASKS))], dtype=bool)
        # The 3x3 mask is centred on (row, col); it may reach the border, which is walled below.
        floor[row - 1:row + 2, col - 1:col + 2] |= mask
    floor[[0, -1], :] = False
    floor[:, [0, -1]] = False
    return (~floor).ravel().tolist()


def _reverse_play(rng: np.random.Generator, layout: Layout, state: State, moves: int) -> State:
    """`moves` random reverse moves (steps or pulls) from `state`."""
    player, boxes = state
    for _ in range(moves):
        offset = layout.offsets[rng.integers(len(ACTIONS))]
        pull = rng.random() < 0.5
        ahead, behind = player + offset, player - offset
        if layout.walls[ahead] or ahead in boxes:
            continue
        if pull and behind in boxes:
            boxes = (boxes - {behind}) | {player}
        player = ahead
    return player, boxes


def parse_level(level: str | Sequence[str]) -> tuple[Layout, State]:
    """The Layout and initial state of a hand-written level in compact symbols (validated)."""
    lines = level.splitlines() if isinstance(level, str) else level
    if not isinstance(lines, Sequence) or not lines or not all(isinstance(r, str) for r in lines):
        raise ValueError(f"level={level!r}: expected a list of row strings")
    rows, cols = len(lines), len(lines[0])
    if rows < 3 or cols < 3 or any(len(line) != cols for line in lines):
        raise ValueError(f"level={level!r}: rows must all have the same length, at least 3x3")
    symbols = "".join(lines)
    known = set(_COMPACT_SYMBOLS.values()) | {_COMPACT_WALL}
    if not set(symbols) <= known:
        raise ValueError(f"level={level!r}: unknown symbols {sorted(set(symbols) - known)}; "
                         f"expected {''.join(sorted(known))}")
    border = lines[0] + lines[-1] + "".join(line[0] + line[-1] for line in lines)
    if set(border) != {_COMPACT_WALL}:
        raise ValueError(f"level={level!r}: the outer ring must be all walls '#'")
    players = [c for c, s in enumerate(symbols) if s in "P+"]
    boxes = frozenset(c for c, s in enumerate(symbols) if s in "B*")
    targets = frozenset(c for c, s in enumerate(symbols) if s in "T*+")
    if len(players) != 1:
        raise ValueError(f"level={level!r}: expected exactly one player (P or +)")
    if not boxes or len(boxes) != len(targets):
        raise ValueError(f"level={level!r}: expected as many boxes (B, *) as targets (T, *, +), "
                         "at least one")
    if boxes == targets:
        raise ValueError(f"level={level!r}: every box is already on a target")
    layout = make_layout(rows, cols, [s == _COMPACT_WALL for s in symbols], targets)
    return layout, (players[0], boxes)


def _room_shape(size) -> tuple[int, int]:
    """(rows, cols) from `size`: an int or a (rows, cols) pair, each at least 3."""
    shape = (size, size) if not isinstance(size, (tuple, list)) else tuple(size)
    if (len(shape) != 2 or any(isinstance(n, bool) or not isinstance(n, (int, np.integer))
                               for n in shape) or min(shape) < 3):
        raise ValueError(f"size={size!r}: expected an integer or a (rows, cols) pair, each >= 3")
    return int(shape[0]), int(shape[1])


class Sokoban(TextEnv):
    """gym-sokoban's Sokoban as a text environment (rules and decisions in the module docstring)."""

    name = "sokoban"
    action_spec = "an int 0-3 (Up, Down, Left, Right)"
    system_prompt = ("You are a careful puzzle solver playing Sokoban. Think about where each box "
                     "must go and avoid pushing boxes into corners, then give exactly one move in "
                     "<answer></answer> tags.")

    def __init__(self, *, style: str = "chat", max_steps: int = 10, format_penalty: float = -0.1,
                 size: int | tuple[int, int] = 6, num_boxes: int = 1, search_depth: int = 300,
                 level: str | Sequence[str] | None = None):
        super().__init__(style=style, max_steps=max_steps, format_penalty=format_penalty)
        self.rows, self.cols = _room_shape(size)
        for option, value in (("num_boxes", num_boxes), ("search_depth", search_depth)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{option}={value!r} must be a positive integer")
        if (self.rows - 2) * (self.cols - 2) < num_boxes + 1:
            raise ValueError(f"size={size!r} has no room for num_boxes={num_boxes} and the player")
        self.num_boxes = int(num_boxes)
        self.search_depth = int(search_depth)
        self._fixed_level = None if level is None else parse_level(level)
        self.layout: Layout | None = None
        self._solver: Solver | None = None
        self.player = 0
        self.boxes: frozenset[int] = frozenset()
        self._initial_distance = 1  # D0 of the process score

    # ------------------------------------------------------------------ the game

    def _reset_game(self, seed: int) -> None:
        del seed  # self.rng is already seeded with it
        if self._fixed_level is not None:
            self.layout, (self.player, self.boxes) = self._fixed_level
            self._solver = Solver(self.layout)  # a new memo per episode (module docstring)
        else:
            self.layout, self._solver, (self.player, self.boxes) = generate_level(
                self.rng, self.rows, self.cols, self.num_boxes, self.search_depth, self.max_steps)
        self._initial_distance = self._box_distance()

    def _parse(self, content: str) -> int | None:
        return _ACTION_INDEX.get(content.lower())

    def _is_action(self, action) -> bool:
        return is_int(action) and 0 <= action < len(ACTIONS)

    def _is_legal(self, action: int) -> bool:
        return True  # blocked moves are legal no-ops

    def _apply(self, action: int) -> tuple[float, bool, bool]:
        on_before = self._boxes_on_target()
        self.player, self.boxes, _ = self.layout.move(self.player, self.boxes, action)
        on_after = self._boxes_on_target()
        reward = STEP_PENALTY
        if on_after > on_before:
            reward += BOX_ON_TARGET_REWARD
        elif on_after < on_before:
            reward += BOX_OFF_TARGET_PENALTY
        solved = self.boxes <= self.layout.targets
        if solved:
            reward += SOLVED_REWARD
        return reward, solved, solved

    def _format_action(self, action: int) -> str:
        return ACTIONS[action]

    def _random_action(self, rng: np.random.Generator) -> int:
        """One of the four moves, uniformly (every move is legal)."""
        return int(rng.integers(len(ACTIONS)))

    def _render(self, style: str | None) -> str:
        if self._style(style) == "compact":
            return self._grid(_COMPACT_SYMBOLS, _COMPACT_WALL, "")
        return (f"{self._grid(_CHAT_SYMBOLS, _CHAT_WALL, ' ')}\n"
                f"Boxes on target: {self._boxes_on_target()}/{len(self.boxes)}\n{_CHAT_LEGEND}")

    def _grid(self, symbols: dict, wall: str, separator: str) -> str:
        layout = self.layout
        cells = []
        for cell, is_wall in enumerate(layout.walls):
            content = ("player" if cell == self.player else "box" if cell in self.boxes else None)
            cells.append(wall if is_wall else symbols[cell in layout.targets, content])
        return "\n".join(separator.join(cells[start:start + layout.cols])
                         for start in range(0, len(cells), layout.cols))

    def instructions(self, style: str | None = None) -> str:
        if self._style(style) == "compact":
            return "Sokoban: push every box B onto a target T. Moves: Up Down Left Right."
        return ("You are solving the Sokoban puzzle. You are the player and you need to push all "
                "boxes onto targets. Each turn you move one square Up, Down, Left or Right. When "
                "you are right next to a box, moving towards it pushes it one square in the same "
                "direction. You can push only one box at a time, you cannot push a box into a "
                "wall or another box, and you cannot pull a box, so a box pushed into a corner is "
                "stuck for good. Moving into a wall, or pushing a box that cannot move, changes "
                "nothing but still uses the move. Rewards: -0.1 per move, +1 for pushing a box "
                "onto a target, -1 for pushing a box off a target, +10 when every box is on a "
                f"target, which solves the puzzle. You have at most {self.max_steps} moves. Give "
                "exactly one move per turn inside answer tags, for example <answer>Left</answer>.")

    def _canonical_state(self) -> str:
        position = self.layout.position
        boxes = ";".join("%d,%d" % position(box) for box in sorted(self.boxes))
        return "P%d,%d|B%s" % (*position(self.player), boxes)

    def _copy_state(self, other: "Sokoban") -> None:
        """Nothing to copy: the player (an int) and the boxes (a frozenset) are immutable, the
        Layout is read-only, and the solver memo is shared on purpose (module docstring)."""

    # ------------------------------------------------------------------ queries

    @property
    def boxes_on_target(self) -> int:
        if not self._ready:
            raise self._not_reset("boxes_on_target")
        return self._boxes_on_target()

    def _boxes_on_target(self) -> int:
        return len(self.boxes & self.layout.targets)

    @property
    def solved(self) -> bool:
        if not self._ready:
            raise self._not_reset("solved")
        return self.boxes <= self.layout.targets

    def is_deadlocked(self) -> bool:
        """Some box is on a dead square (module docstring, Deadlocks)."""
        if not self._ready:
            raise self._not_reset("is_deadlocked")
        return not self.boxes.isdisjoint(self.layout.dead)

    def solve(self) -> list[int] | None:
        """A shortest action sequence from the current state (empty once solved), or None when the
        level can no longer be solved."""
        if not self._ready:
            raise self._not_reset("solve")
        plan = self._solver.solve((self.player, self.boxes))
        return None if plan is None else list(plan)

    def optimal_length(self) -> int | None:
        """Actions in a shortest solution from the current state; None when unsolvable."""
        if not self._ready:
            raise self._not_reset("optimal_length")
        plan = self._solver.solve((self.player, self.boxes))
        return None if plan is None else len(plan)

    def _oracle_action(self) -> int:
        plan = self._solver.solve((self.player, self.boxes))
        if plan is None:
            return 0  # unsolvable: "Up", still a legal move (module docstring)
        return plan[0]  # never empty: a solved state has ended the episode

    def _verify(self, action: int) -> bool:
        plan = self._solver.solve((self.player, self.boxes))
        if plan is None:
            return False
        player, boxes, _ = self.layout.move(self.player, self.boxes, action)
        after = self._solver.solve((player, boxes))
        return after is not None and len(after) == len(plan) - 1

    def _process_score(self) -> float:
        if self.boxes <= self.layout.targets:
            return 1.0
        if not self.boxes.isdisjoint(self.layout.dead):  # deadlocked
            return 0.0
        on_target = self._boxes_on_target() / len(self.boxes)
        closer = 1.0 - self._box_distance() / self._initial_distance
        return min(1.0, max(0.0, 0.5 * on_target + 0.5 * closer))

    def _box_distance(self) -> int:
        """Sum over boxes of the Manhattan distance to the nearest target."""
        return sum(self.layout.target_distance[box] for box in self.boxes)

    def _metrics(self) -> dict:
        return {"boxes_on_target": self._boxes_on_target()}
