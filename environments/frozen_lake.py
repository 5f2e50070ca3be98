"""FrozenLake: walk across a frozen lake to the goal without falling into a hole.

The game is gymnasium's FrozenLake-v1 (Brockman et al., 2016), the environment of TSR (App. D.1)
and, through rLLM, of PATR (§5.1). Maps come from gymnasium's `generate_random_map` and the dynamics
from the transition table `P` of gymnasium's `FrozenLakeEnv`, so the rules are gymnasium's own.

Rules
  * The lake is a grid of tiles: S start, F frozen, H hole, G goal. Generated maps are
    `size` x `size`, with S in the top-left and G in the bottom-right corner (gymnasium's
    generator; rLLM's variant also randomises S and G, which we do not); every other tile is frozen
    with probability `frozen_prob`.
  * Each turn the agent moves one tile: Left, Down, Right or Up (gymnasium's action indices 0-3).
    Moving into the edge of the lake is a legal move that leaves the agent where it is.
  * Stepping onto G ends the episode with reward +1 (success); stepping into a hole ends it with
    reward 0 (failure); every other move gives 0. TSR App. D.1 and gymnasium agree.
  * `slippery=True`: the agent moves in the intended direction with probability 1/3 and slides to
    each perpendicular direction with probability 1/3 (gymnasium's `success_rate=1/3`; TSR D.1:
    "succeeds with probability 1/3 and deviates perpendicularly with probability 2/3"). The slide
    is drawn from `self.rng`, so a clone reproduces it; deterministic moves draw nothing.
  * The episode is truncated after `max_steps` turns.

Maps. `reset(seed)` draws gymnasium generator seeds from `self.rng` until the map's shortest safe
path from S to G (breadth-first search with holes blocked) is at most `max_steps` moves long, so the
seed determines the map and a deterministic lake is always solvable in time (gymnasium's generator
already guarantees that some path exists). Very low `frozen_prob` makes generation slow, as it does
for gymnasium's generator. A fixed map can be given instead through `desc` (a list of row strings,
as gymnasium's `desc`); it must be rectangular, use only S/F/H/G, hold exactly one S and one G, and
have a safe path of at most `max_steps` moves; `size` and `frozen_prob` are then unused.

Action text. The canonical text is the capitalised word "Left", "Down", "Right" or "Up". Parsing
accepts exactly one of these words, in any case and with surrounding whitespace; anything else
("upward", "up left", "Up!", "2") is malformed and costs `format_penalty` with the state unchanged.
Chat style asks for the word inside answer tags, `<answer>Up</answer>`; compact style for the bare
word.

Observations
  chat     rLLM/RAGEN-style grid, one row per line, tiles separated by spaces, then a legend:
           P you, _ frozen ice (the start tile included), O hole, G goal, X you in a hole,
           √ you on the goal.
  compact  the bare grid rows with one byte per tile, e.g. "P..H\\n.H..\\n...H\\nH..G":
           P you, . frozen ice (start included), H hole, G goal, X you in a hole, W you on the goal.

Distances. `distance(cell)` is the number of moves on a shortest safe path from `cell` to G (holes
blocked), computed once per map by a reverse breadth-first search from G. It is None for holes and
for cells from which G cannot be reached (None rather than infinity, so that callers must handle it
explicitly). The agent's cell always has a distance unless the agent is in a hole: it starts in G's
connected component and moves only to adjacent tiles.

Method queries
  oracle_action  an action whose intended move decreases the distance by one (a shortest safe
                 path). Ties go to the action with the lowest probability of ending in a hole
                 (always zero on a deterministic lake), then to gymnasium's order Left, Down,
                 Right, Up. The intended move is taken as the plan even on a slippery lake,
                 where no policy does well in 10 turns: over seeds 0-199 of the default 4x4
                 slippery lake this oracle succeeds 8.5% of the time, the finite-horizon optimal
                 policy 11%, uniformly random moves 1%.
  verify(a)      VPR verifier: the intended next cell of `a` is at distance d(s) - 1.
  process_score  PATR's FrozenLake heuristic (§4.2, §5.1, App. A: "accumulated step rewards with a
                 normalized BFS shortest-path distance to the goal, where holes are treated as
                 blocked cells"): clip(R + 1 - d(s) / D, 0, 1), where R is the reward accumulated so
                 far and D the largest finite distance on the map, so d(s) / D is in [0, 1]. It is
                 1 on the goal and 0 in a hole. Before the goal R holds only format penalties, so
                 malformed answers lower the score.
  turn_score(a)  TSR Eq. 10: S(s, a) = -Manhattan(s', G) - λ·1[s' is a hole], s' the next cell:
                 on a slippery lake the cell the move actually reaches, o_t (TSR scores the
                 action "along with its outcome o_t"): the slip is drawn from a copy of the lake's
                 generator, so it is the slip the next step(a) takes; `turn_score="expected"`
                 scores its expectation under gymnasium's transition probabilities instead.
                 Malformed text (a = None, or any value that is not an action 0-3, see
                 environments/base.py) leaves the agent in place and costs the format penalty:
                 -Manhattan(s, G) + format_penalty, ranked below staying in place by a legal move.

Parameters (defaults and sources)
  size=4             side of generated maps: the 4x4 lake of gymnasium and RAGEN.
  frozen_prob=0.8    probability that a generated tile is frozen: gymnasium's default `p`.
  slippery=False     deterministic by default; True gives TSR's stochastic FrozenLake (App. D.1).
  hole_penalty=10.0  TSR's λ (Eq. 10 only requires λ > 0 and gives no value). Any two cells one
                     move can lead to from the same tile (the tile or a neighbour) differ in
                     Manhattan distance to G by at most 2, so λ > 2 ranks every move into a hole
                     below every safe move on a deterministic lake; on a slippery one hole
                     probabilities differ by multiples of 1/3 while expected distances still differ
                     by at most 2, so λ > 6 is needed. 10 satisfies both.
  max_steps=10       PATR §5.1: at most 10 turns on FrozenLake (TSR trains with 5).
  turn_score="realized"  TSR Eq. 10 on the outcome that happened ("realized") or its expectation
                     over slips ("expected"); the same on a deterministic lake.
  format_penalty=-0.1  RAGEN/TSR's penalty for a malformed answer.
  desc=None          a fixed map (see Maps) instead of generated ones.
  style="chat"       "chat" or "compact" (see environments/base.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv, generate_random_map

from environments.base import TextEnv, copy_generator, is_int

#: Canonical action texts, indexed by gymnasium's action index.
ACTIONS = ("Left", "Down", "Right", "Up")
TURN_SCORES = ("realized", "expected")
_ACTION_INDEX = {word.lower(): index for index, word in enumerate(ACTIONS)}
#: (row, column) offset of each action's intended move.
_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))
_TILES = frozenset("SFHG")
#: Probability of moving in the intended direction on slippery ice (TSR D.1; gymnasium's default).
SLIPPERY_SUCCESS_RATE = 1.0 / 3.0
#: Exclusive bound of the generator seeds drawn from self.rng for gymnasium's map generator.
_MAP_SEED_BOUND = 2**31

_CHAT_TILES = {"S": "_", "F": "_", "H": "O", "G": "G"}
_CHAT_PLAYER = {"S": "P", "F": "P", "H": "X", "G": "√"}
_CHAT_LEGEND = "Legend: P you, _ frozen ice, O hole, G goal, X you in a hole, √ you on the goal."
_COMPACT_TILES = {"S": ".", "F": ".", "H": "H", "G": "G"}
_COMPACT_PLAYER = {"S": "P", "F": "P", "H": "X", "G": "W"}


@dataclass(frozen=True)
class Lake:
    """One map and everything derived from it; read-only, so clones share it.

    Cells are gymnasium's state indices, row * ncol + column.
    """

    desc: tuple[str, ...]
    nrow: int
    ncol: int
    tiles: str  # the tile letters in row-major order, tiles[cell]
    start: int
    goal: int
    #: gymnasium's `P`: transitions[cell][action] = [(probability, next cell, reward, terminated)].
    transitions: dict
    distance: tuple[int | None, ...]  # shortest safe path length to the goal (None: unreachable)
    max_distance: int  # the largest finite distance (D of the process score), at least 1
    expected_manhattan: tuple[tuple[float, ...], ...]  # [cell][action]: E Manhattan(s', goal)
    hole_probability: tuple[tuple[float, ...], ...]  # [cell][action]: P(s' is a hole)
    shortest_moves: tuple[tuple[int, ...], ...]  # [cell]: actions verify() accepts, oracle first


def _draw_outcome(outcomes: list, rng: np.random.Generator) -> int:
    """Index of one of gymnasium's (probability, next, reward, terminated) outcomes, drawn by
    probability with one uniform of `rng`."""
    u = rng.random()
    for index, (probability, *_) in enumerate(outcomes):
        u -= probability
        if u < 0:
            return index
    return len(outcomes) - 1  # u was within rounding of 1


def _build_lake(desc: Sequence[str], slippery: bool) -> Lake:
    """The Lake of a (valid) map: gymnasium's transition table plus the precomputed queries."""
    desc = tuple(desc)
    nrow, ncol = len(desc), len(desc[0])
    tiles = "".join(desc)
    goal = tiles.index("G")
    # Rows as lists of characters: gymnasium reads one-column maps given as strings as 1-D.
    transitions = FrozenLakeEnv(desc=[list(row) for row in desc], is_slippery=slippery,
                                success_rate=SLIPPERY_SUCCESS_RATE).P
    distance = _distances_to_goal(tiles, nrow, ncol, goal)
    cells = range(nrow * ncol)
    expected_manhattan = tuple(
        tuple(sum(p * _manhattan(nxt, goal, ncol) for p, nxt, _, _ in transitions[cell][action])
              for action in range(len(ACTIONS))) for cell in cells)
    hole_probability = tuple(
        tuple(sum(p for p, nxt, _, _ in transitions[cell][action] if tiles[nxt] == "H")
              for action in range(len(ACTIONS))) for cell in cells)
    shortest_moves = tuple(
        _shortest_moves(cell, distance, hole_probability[cell], nrow, ncol) for cell in cells)
    # D is at least 1 on every accepted map (S is reachable); `or 1` only keeps the division safe
    # on a hand-written map whose goal is cut off, which the constructor rejects right after.
    max_distance = max(d for d in distance if d is not None) or 1
    return Lake(desc=desc, nrow=nrow, ncol=ncol, tiles=tiles, start=tiles.index("S"), goal=goal,
                transitions=transitions, distance=distance, max_distance=max_distance,
                expected_manhattan=expected_manhattan, hole_probability=hole_probability,
                shortest_moves=shortest_moves)


def _intended_cell(cell: int, action: int, nrow: int, ncol: int) -> int:
    """The cell an action aims at: one step in its direction, clamped at the edge (gymnasium)."""
    row, col = divmod(cell, ncol)
    d_row, d_col = _MOVES[action]
    return min(max(row + d_row, 0), nrow - 1) * ncol + min(max(col + d_col, 0), ncol - 1)


def _manhattan(cell: int, goal: int, ncol: int) -> int:
    row, col = divmod(cell, ncol)
    goal_row, goal_col = divmod(goal, ncol)
    return abs(row - goal_row) + abs(col - goal_col)


def _distances_to_goal(tiles: str, nrow: int, ncol: int, goal: int) -> tuple[int | None, ...]:
    """Breadth-first search from the goal over non-hole tiles (moves are reversible, so this is
    the distance *to* the goal). Holes and cells cut off from the goal get None."""
    distance: list[int | None] = [None] * len(tiles)
    distance[goal] = 0
    frontier = deque([goal])
    while frontier:
        cell = frontier.popleft()
        for action in range(len(ACTIONS)):
            nxt = _intended_cell(cell, action, nrow, ncol)
            if distance[nxt] is None and tiles[nxt] != "H":
                distance[nxt] = distance[cell] + 1
                frontier.append(nxt)
    return tuple(distance)


def _shortest_moves(cell: int, distance: Sequence[int | None], hole_probability: Sequence[float],
                    nrow: int, ncol: int) -> tuple[int, ...]:
    """The actions whose intended move brings `cell` one step closer to the goal, in oracle order
    (lowest hole probability first, then gymnasium's action order). Empty at the goal, in holes
    and in cells cut off from the goal."""
    here = distance[cell]
    if not here:  # the goal (0) or no path (None)
        return ()
    closer = [action for action in range(len(ACTIONS))
              if distance[_intended_cell(cell, action, nrow, ncol)] == here - 1]
    return tuple(sorted(closer, key=lambda action: (hole_probability[action], action)))


def _validate_desc(desc: Sequence[str]) -> tuple[str, ...]:
    """Checks a hand-written map (rectangular, S/F/H/G only, exactly one S and one G)."""
    if isinstance(desc, str) or not isinstance(desc, Sequence) or not desc:
        raise ValueError(f"desc={desc!r}: expected a non-empty list of row strings")
    rows = tuple(desc)
    if not all(isinstance(row, str) and row for row in rows):
        raise ValueError(f"desc={desc!r}: every row must be a non-empty string")
    if len({len(row) for row in rows}) != 1:
        raise ValueError(f"desc={desc!r}: rows must all have the same length")
    tiles = "".join(rows)
    if not set(tiles) <= _TILES:
        raise ValueError(f"desc={desc!r}: tiles must be S, F, H or G")
    if tiles.count("S") != 1 or tiles.count("G") != 1:
        raise ValueError(f"desc={desc!r}: expected exactly one S and one G")
    return rows


class FrozenLake(TextEnv):
    """Gymnasium's FrozenLake as a text environment (rules and decisions: module docstring)."""

    name = "frozen_lake"
    action_spec = "an int 0-3 (Left, Down, Right, Up)"
    system_prompt = ("You are a careful agent crossing a frozen lake on a grid. Think about where "
                     "the holes are, then give exactly one move in <answer></answer> tags.")

    def __init__(self, *, style: str = "chat", size: int = 4, frozen_prob: float = 0.8,
                 slippery: bool = False, hole_penalty: float = 10.0, max_steps: int = 10,
                 format_penalty: float = -0.1, desc: Sequence[str] | None = None,
                 turn_score: str = "realized"):
        super().__init__(style=style, max_steps=max_steps, format_penalty=format_penalty)
        if not isinstance(slippery, bool):
            raise ValueError(f"slippery={slippery!r} must be a bool")
        if turn_score not in TURN_SCORES:
            raise ValueError(f"turn_score={turn_score!r} must be one of {TURN_SCORES}")
        self.turn_score_mode = turn_score
        if not (isinstance(hole_penalty, (int, float)) and math.isfinite(hole_penalty)
                and hole_penalty > 0):
            raise ValueError(f"hole_penalty={hole_penalty!r} must be a positive number (TSR's λ)")
        self.slippery = slippery
        self.hole_penalty = float(hole_penalty)
        self.size = size
        self.frozen_prob = frozen_prob
        self._fixed_lake: Lake | None = None
        if desc is None:
            self._validate_generator_options()
        else:
            self._fixed_lake = _build_lake(_validate_desc(desc), slippery)
            shortest = self._fixed_lake.distance[self._fixed_lake.start]
            if shortest is None or shortest > self.max_steps:
                raise ValueError(f"desc={desc!r}: needs a safe path from S to G of at most "
                                 f"max_steps={self.max_steps} moves (shortest: {shortest})")
        self._lake: Lake | None = self._fixed_lake
        self._cell = 0

    def _validate_generator_options(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 2:
            raise ValueError(f"size={self.size!r} must be an integer of at least 2")
        if 2 * (self.size - 1) > self.max_steps:
            raise ValueError(f"size={self.size} needs at least {2 * (self.size - 1)} moves from S "
                             f"to G, more than max_steps={self.max_steps}")
        if not (isinstance(self.frozen_prob, (int, float)) and 0 < self.frozen_prob <= 1):
            raise ValueError(f"frozen_prob={self.frozen_prob!r} must be in (0, 1]")

    # ------------------------------------------------------------------ the game

    def _reset_game(self, seed: int) -> None:
        del seed  # self.rng is already seeded with it
        self._lake = self._fixed_lake or self._draw_lake()
        self._cell = self._lake.start

    def _draw_lake(self) -> Lake:
        """Redraws gymnasium maps from self.rng until one is solvable within max_steps."""
        while True:
            desc = generate_random_map(size=self.size, p=self.frozen_prob,
                                       seed=int(self.rng.integers(_MAP_SEED_BOUND)))
            lake = _build_lake(desc, self.slippery)
            if lake.distance[lake.start] <= self.max_steps:  # generated maps always have a path
                return lake

    def _parse(self, content: str) -> int | None:
        return _ACTION_INDEX.get(content.lower())

    def _is_action(self, action) -> bool:
        return is_int(action) and 0 <= action < len(ACTIONS)

    def _is_legal(self, action: int) -> bool:
        return True  # edge moves are legal too (the agent stays put)

    def _apply(self, action: int) -> tuple[float, bool, bool]:
        outcomes = self._lake.transitions[self._cell][action]
        _, self._cell, reward, terminated = outcomes[self._sample_outcome(outcomes)]
        return float(reward), bool(terminated), self._cell == self._lake.goal

    def _sample_outcome(self, outcomes: list) -> int:
        """Index of the outcome drawn by probability; deterministic moves draw nothing."""
        if len(outcomes) == 1:
            return 0
        return _draw_outcome(outcomes, self.rng)

    def _format_action(self, action: int) -> str:
        return ACTIONS[action]

    def _random_action(self, rng: np.random.Generator) -> int:
        """One of the four moves, uniformly (every move is legal)."""
        return int(rng.integers(len(ACTIONS)))

    def _render(self, style: str | None) -> str:
        if self._style(style) == "chat":
            return f"{self._grid(_CHAT_TILES, _CHAT_PLAYER, ' ')}\n{_CHAT_LEGEND}"
        return self._grid(_COMPACT_TILES, _COMPACT_PLAYER, "")

    def _grid(self, tile_symbols: dict, player_symbols: dict, separator: str) -> str:
        symbols = [tile_symbols[tile] for tile in self._lake.tiles]
        symbols[self._cell] = player_symbols[self._lake.tiles[self._cell]]
        ncol = self._lake.ncol
        return "\n".join(separator.join(symbols[start:start + ncol])
                         for start in range(0, len(symbols), ncol))

    def instructions(self, style: str | None = None) -> str:
        if self._style(style) == "compact":
            slippery = " Ice is slippery." if self.slippery else ""
            return f"FrozenLake: reach G, avoid H.{slippery} Moves: Left Down Right Up."
        slippery = (" The ice is slippery: each move goes in the chosen direction only one time "
                    "in three, and otherwise slides to one of the two perpendicular directions."
                    if self.slippery else "")
        return ("You are on a frozen lake drawn as a grid. Walk from your position (P) to the "
                "goal (G) without stepping into a hole (O): reaching the goal wins the game, "
                "falling into a hole loses it. Each turn you move one square with one of the "
                "actions Left, Down, Right or Up; walking into the edge of the lake leaves you "
                f"where you are.{slippery} You have at most {self.max_steps} moves. Give exactly "
                "one action per turn inside answer tags, for example <answer>Up</answer>.")

    def _canonical_state(self) -> str:
        row, col = divmod(self._cell, self._lake.ncol)
        return f"{row},{col}"  # the map is fixed within an episode

    def _copy_state(self, other: "FrozenLake") -> None:
        """Nothing to copy: the agent's cell is an int and the Lake is read-only and shared."""

    # ------------------------------------------------------------------ queries

    @property
    def desc(self) -> tuple[str, ...]:
        """The current map as gymnasium-style row strings."""
        if not self._ready:
            raise self._not_reset("desc")
        return self._lake.desc

    @property
    def position(self) -> tuple[int, int]:
        """The agent's (row, column)."""
        if not self._ready:
            raise self._not_reset("position")
        return divmod(self._cell, self._lake.ncol)

    def distance(self, cell: tuple[int, int] | None = None) -> int | None:
        """Moves on a shortest safe path from `cell` (row, column; default: the agent's cell) to
        the goal; None for holes and cells cut off from the goal."""
        if not self._ready:
            raise self._not_reset("distance")
        if cell is None:
            return self._lake.distance[self._cell]
        row, col = cell
        lake = self._lake
        if not (0 <= row < lake.nrow and 0 <= col < lake.ncol):
            raise ValueError(f"cell={cell!r} is outside the {lake.nrow}x{lake.ncol} map")
        return lake.distance[row * lake.ncol + col]

    def _oracle_action(self) -> int:
        return self._lake.shortest_moves[self._cell][0]

    def _verify(self, action: int) -> bool:
        return action in self._lake.shortest_moves[self._cell]

    def _process_score(self) -> float:
        lake = self._lake
        if self._cell == lake.goal:
            return 1.0
        distance = lake.distance[self._cell]
        if distance is None:  # in a hole
            return 0.0
        return min(1.0, max(0.0, self.total_reward + 1.0 - distance / lake.max_distance))

    def _turn_score(self, action: int | None) -> float:
        lake = self._lake
        if action is None:
            return self.format_penalty - _manhattan(self._cell, lake.goal, lake.ncol)
        outcomes = lake.transitions[self._cell][action]
        if self.turn_score_mode == "expected" and len(outcomes) > 1:
            return (-lake.expected_manhattan[self._cell][action]
                    - self.hole_penalty * lake.hole_probability[self._cell][action])
        # The outcome the next step(action) draws: a copy of the generator draws the same slip.
        index = _draw_outcome(outcomes, copy_generator(self.rng)) if len(outcomes) > 1 else 0
        cell = outcomes[index][1]
        return (-_manhattan(cell, lake.goal, lake.ncol)
                - self.hole_penalty * (lake.tiles[cell] == "H"))

    def _metrics(self) -> dict:
        """The BFS distance from the agent to the goal (None once in a hole)."""
        return {"distance": self._lake.distance[self._cell]}
