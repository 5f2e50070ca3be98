"""FrozenLake: distances against an independent Bellman-Ford reference, map generation, slippery
statistics, and hand-checked oracle / verifier / scores on hand-written maps."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import environments
from environments.frozen_lake import FrozenLake

LEFT, DOWN, RIGHT, UP = range(4)
STEPS = {LEFT: (0, -1), DOWN: (1, 0), RIGHT: (0, 1), UP: (-1, 0)}

# Hand-written map A. Shortest safe distances to G, worked out by hand:
#   S F F      4 3 2
#   F H F      5 - 1
#   H F G      - 1 0      largest finite distance D = 5
MAP_A = ["SFF", "FHF", "HFG"]
# Map C: from S both Down and Right are shortest, but Down can slip Left into the hole.
MAP_C = ["FFF", "HSF", "FFG"]


def reference_distances(desc):
    """Bellman-Ford on the move graph (edge moves stay put, holes absorb, G terminal):
    {(row, col): shortest number of moves to G, or None for holes and cut-off cells}."""
    nrow, ncol = len(desc), len(desc[0])
    cells = [(r, c) for r in range(nrow) for c in range(ncol)]
    dist = {cell: (0 if desc[cell[0]][cell[1]] == "G" else math.inf) for cell in cells}
    for _ in range(len(cells)):
        for r, c in cells:
            if desc[r][c] in "HG":
                continue
            for dr, dc in STEPS.values():
                nxt = (min(max(r + dr, 0), nrow - 1), min(max(c + dc, 0), ncol - 1))
                dist[(r, c)] = min(dist[(r, c)], 1 + dist[nxt])
    return {cell: (None if math.isinf(d) else d) for cell, d in dist.items()}


def find(desc, tile):
    return next((r, c) for r, row in enumerate(desc) for c, t in enumerate(row) if t == tile)


def lake(desc, **options):
    env = FrozenLake(desc=desc, **options)
    env.reset(0)
    return env


# ---------------------------------------------------------------------- distances


@st.composite
def small_maps(draw):
    nrow = draw(st.integers(1, 4))
    ncol = draw(st.integers(2 if nrow == 1 else 1, 4))  # room for S and G
    tiles = draw(st.lists(st.sampled_from("FH"), min_size=nrow * ncol, max_size=nrow * ncol))
    start, goal = draw(st.lists(st.integers(0, nrow * ncol - 1), min_size=2, max_size=2,
                                unique=True))
    tiles[start], tiles[goal] = "S", "G"
    return ["".join(tiles[r * ncol:(r + 1) * ncol]) for r in range(nrow)]


@settings(max_examples=300, deadline=None)
@given(desc=small_maps())
def test_distances_match_bellman_ford(desc):
    expected = reference_distances(desc)
    if expected[find(desc, "S")] is None:  # hand-written maps must be solvable
        with pytest.raises(ValueError, match="desc"):
            FrozenLake(desc=desc, max_steps=64)
        return
    env = lake(desc, max_steps=64)
    assert {cell: env.distance(cell) for cell in expected} == expected


def test_distances_on_a_map_with_a_cut_off_cell():
    env = lake(["SFHF",
                "FFHH",
                "FFFG"])
    expected = [[5, 4, None, None],  # (0, 3) is frozen but walled in by holes
                [4, 3, None, None],
                [3, 2, 1, 0]]
    assert [[env.distance((r, c)) for c in range(4)] for r in range(3)] == expected
    assert env.distance() == 5
    with pytest.raises(ValueError, match="cell"):
        env.distance((3, 0))


# ---------------------------------------------------------------------- generated maps


def test_the_seed_determines_the_map():
    env = FrozenLake()
    maps = []
    for seed in range(50):
        env.reset(seed)
        maps.append(env.desc)
    for seed in (0, 17, 49):
        env.reset(seed)
        assert env.desc == maps[seed]
    assert len(set(maps)) > 35  # a 4x4 map repeats now and then (the all-frozen one is ~4%)


@pytest.mark.parametrize("options", [{}, {"size": 3, "max_steps": 4, "frozen_prob": 0.5},
                                     {"size": 5, "max_steps": 9, "slippery": True}])
def test_generated_maps_are_gymnasium_maps_solvable_within_max_steps(options):
    env = FrozenLake(**options)
    size, max_steps = options.get("size", 4), options.get("max_steps", 10)
    for seed in range(60):
        env.reset(seed)
        desc = env.desc
        assert len(desc) == size and all(len(row) == size for row in desc)
        assert desc[0][0] == "S" and desc[-1][-1] == "G"
        assert set("".join(desc)) <= set("SFHG")
        assert reference_distances(desc)[(0, 0)] <= max_steps


@pytest.mark.parametrize("options", [{}, {"size": 5, "max_steps": 12, "frozen_prob": 0.7}])
def test_deterministic_oracle_walks_a_shortest_safe_path(options):
    env = FrozenLake(**options)
    for seed in range(60):
        env.reset(seed)
        shortest = reference_distances(env.desc)[(0, 0)]
        total, info = 0.0, {}
        while not env.done:
            _, reward, _, info = env.step(env.answer_text(env.oracle_action()))
            total += reward
        assert info["success"] and total == 1.0 and env.num_steps == shortest


# ---------------------------------------------------------------------- dynamics


def test_moves_holes_goal_and_edges_on_map_a():
    env = lake(MAP_A)
    _, reward, done, info = env.step("<answer>Left</answer>")  # into the edge: a legal no-op
    assert (env.position, reward, done, info["valid"]) == ((0, 0), 0.0, False, True)
    env.step("<answer>Right</answer>")
    _, reward, done, info = env.step("<answer>Down</answer>")  # (1, 1) is a hole
    assert env.position == (1, 1) and (reward, done, info["success"]) == (0.0, True, False)

    env.reset(0)
    rewards = [env.step(f"<answer>{word}</answer>")[1] for word in ("Right", "Right", "Down")]
    _, reward, done, info = env.step("<answer>Down</answer>")
    assert rewards == [0.0, 0.0, 0.0] and (reward, done, info["success"]) == (1.0, True, True)
    assert info["distance"] == 0


def test_malformed_text_costs_the_penalty_and_keeps_the_state():
    env = lake(MAP_A, format_penalty=-0.25)
    env.step("<answer>Right</answer>")
    _, reward, done, info = env.step("<answer>jump</answer>")
    assert (env.position, reward, done, info["valid"]) == ((0, 1), -0.25, False, False)


@pytest.mark.parametrize("text,action", [("Up", UP), (" up ", UP), ("LEFT", LEFT),
                                         ("<answer> Down </answer>", DOWN),
                                         ("I go <answer>right</answer>", RIGHT)])
def test_parse_accepts_the_four_words(text, action):
    assert FrozenLake().parse_action(text) == action


@pytest.mark.parametrize("text", ["upward", "up left", "Up!", "2", "", "<answer></answer>",
                                  "U p", "north"])
def test_parse_rejects_anything_else(text):
    assert FrozenLake().parse_action(text) is None


def _frequencies(desc, word, n=3000, slippery=True):
    """Where one move from S ends, over n seeds."""
    env = FrozenLake(desc=desc, slippery=slippery)
    counts = {}
    for seed in range(n):
        env.reset(seed)
        env.step(word)
        counts[env.position] = counts.get(env.position, 0) + 1
    return counts


@pytest.mark.parametrize("desc,word,expected", [
    # From the centre of map C, Down goes Down, slides Left (into the hole) or Right.
    (MAP_C, "Down", {(2, 1): 1 / 3, (1, 0): 1 / 3, (1, 2): 1 / 3}),
    # In a corner, Left and its perpendicular Up both hit the edge: stay put with 2/3.
    (["SF", "FG"], "Left", {(0, 0): 2 / 3, (1, 0): 1 / 3}),
])
def test_slippery_moves_follow_gymnasium_probabilities(desc, word, expected):
    n = 3000
    counts = _frequencies(desc, word, n)
    assert set(counts) == set(expected)
    for cell, p in expected.items():
        assert abs(counts[cell] - n * p) < 5 * math.sqrt(n * p * (1 - p))


def test_deterministic_moves_never_slip():
    assert _frequencies(MAP_C, "Down", 200, slippery=False) == {(2, 1): 200}


# ---------------------------------------------------------------------- method queries


def test_oracle_and_verify_on_map_a():
    env = lake(MAP_A)
    expected_oracle = [RIGHT, RIGHT, DOWN, DOWN]  # the only shortest safe path
    for action in expected_oracle:
        assert env.oracle_action() == action
        assert [env.verify(a) for a in range(4)] == [a == action for a in range(4)]
        env.step(env.answer_text(action))
    assert env.success and env.oracle_action() is None
    assert not any(env.verify(a) for a in range(4)) and not env.verify(None)


def test_oracle_ties_break_by_hole_risk_then_action_order():
    deterministic, slippery = lake(MAP_C), lake(MAP_C, slippery=True)
    for env in (deterministic, slippery):
        assert [env.verify(a) for a in range(4)] == [False, True, True, False]
    assert deterministic.oracle_action() == DOWN  # Left, Down, Right, Up order
    assert slippery.oracle_action() == RIGHT  # Down may slip into the hole at (1, 0)
    assert lake(["SF", "FG"]).oracle_action() == DOWN


def test_turn_score_is_tsr_eq_10_on_map_a():
    env = lake(MAP_A)
    # Next cells from S: Left/Up stay at (0, 0) (Manhattan 4), Down (1, 0) and Right (0, 1) are 3.
    assert [env.turn_score(a) for a in range(4)] == [-4.0, -3.0, -3.0, -4.0]
    assert env.turn_score(None) == pytest.approx(-4.1)  # stays put, pays the format penalty
    env.step("Right")
    # From (0, 1): Down falls into the hole at (1, 1), Manhattan 2 from G.
    assert env.turn_score(DOWN) == -2.0 - 10.0
    assert env.turn_score(RIGHT) == -2.0
    assert lake(MAP_A, hole_penalty=3.0).turn_score(RIGHT) == -3.0
    env = lake(MAP_A, hole_penalty=3.0)
    env.step("Right")
    assert env.turn_score(DOWN) == -5.0


def test_turn_score_scores_the_slip_that_happens_on_slippery_ice():
    """TSR Eq. 10 on the realised outcome o_t: the score computed before a step is that of the
    cell the step then reaches (the slip is drawn from a copy of the lake's generator), and a
    clone scores what the original does."""
    reached = set()
    for seed in range(40):
        env = lake(MAP_C, slippery=True)
        env.rng = np.random.default_rng(seed)
        for _ in range(3):
            if env.done:
                break
            action = seed % 4
            score, cloned = env.turn_score(action), env.clone().turn_score(action)
            env.step(env.answer_text(action))
            row, col = divmod(env._cell, env._lake.ncol)
            goal_row, goal_col = divmod(env._lake.goal, env._lake.ncol)
            hole = env._lake.tiles[env._cell] == "H"
            assert score == cloned == -(abs(row - goal_row) + abs(col - goal_col)) - 10.0 * hole
            reached.add((action, env._cell))
    assert len({cell for action, cell in reached if action == DOWN}) > 1  # slips happened


def test_turn_score_is_an_expectation_on_slippery_ice_when_asked():
    env = lake(MAP_C, slippery=True, turn_score="expected")
    # From (1, 1), each action reaches its direction and both perpendicular ones with 1/3:
    # Left -> (0,1) 3, (1,0) hole 3, (2,1) 1;   Down -> (1,0) hole 3, (2,1) 1, (1,2) 1;
    # Right -> (2,1) 1, (1,2) 1, (0,1) 3;       Up -> (1,2) 1, (0,1) 3, (1,0) hole 3.
    expected = [-7 / 3 - 10 / 3, -5 / 3 - 10 / 3, -5 / 3, -7 / 3 - 10 / 3]
    assert [env.turn_score(a) for a in range(4)] == pytest.approx(expected)


def test_process_score_on_map_a():
    env = lake(MAP_A)
    assert env.process_score() == pytest.approx(1 - 4 / 5)
    env.step("Right")
    assert env.process_score() == pytest.approx(1 - 3 / 5)
    env.step("dance")  # the accumulated reward now holds a -0.1 format penalty
    assert env.process_score() == pytest.approx(1 - 3 / 5 - 0.1)
    env.step("Down")  # into the hole
    assert env.process_score() == 0.0
    env = lake(MAP_A)
    for word in ("Right", "Right", "Down", "Down"):
        env.step(word)
    assert env.process_score() == 1.0


def test_metrics_and_canonical_state():
    env = lake(MAP_A)
    _, _, _, info = env.step("Right")
    assert info["distance"] == 3 and env.canonical_state() == "0,1"
    _, _, _, info = env.step("Down")
    assert info["distance"] is None


# ---------------------------------------------------------------------- text


def test_render_on_map_a():
    env = lake(MAP_A, style="chat")
    chat = env.render().splitlines()
    assert chat[:3] == ["P _ _", "_ O _", "O _ G"]
    assert all(f"{symbol} " in chat[3] for symbol in "P_OGX√")
    assert env.render("compact") == "P..\n.H.\nH.G"
    env.step("<answer>Right</answer>")
    env.step("<answer>Down</answer>")
    assert env.render().splitlines()[:3] == ["_ _ _", "_ X _", "O _ G"]
    assert env.render("compact") == "...\n.X.\nH.G"
    env.reset(0)
    for word in ("Right", "Right", "Down", "Down"):
        env.step(f"<answer>{word}</answer>")
    assert env.render().splitlines()[:3] == ["_ _ _", "_ O _", "O _ √"]
    assert env.render("compact") == "...\n.H.\nH.W"


@pytest.mark.parametrize("slippery", [False, True])
def test_instructions(slippery):
    env = FrozenLake(slippery=slippery)
    chat, compact = env.instructions("chat"), env.instructions("compact")
    for word in ("Left", "Down", "Right", "Up"):
        assert word in chat and word in compact
    assert "<answer>Up</answer>" in chat and "\n" not in compact and len(compact) < 100
    assert ("slippery" in chat) == slippery and ("slippery" in compact) == slippery


# ---------------------------------------------------------------------- options


@pytest.mark.parametrize("options,argument", [
    ({"size": 1}, "size"), ({"size": 2.5}, "size"), ({"size": 7}, "size"),
    ({"frozen_prob": 0.0}, "frozen_prob"), ({"frozen_prob": 1.5}, "frozen_prob"),
    ({"hole_penalty": 0.0}, "hole_penalty"), ({"hole_penalty": math.inf}, "hole_penalty"),
    ({"slippery": "yes"}, "slippery"),
    ({"desc": ["SFF", "FG"]}, "desc"),  # ragged
    ({"desc": ["SXG"]}, "desc"),  # unknown tile
    ({"desc": ["SFS", "FFG"]}, "desc"),  # two starts
    ({"desc": ["SFF"]}, "desc"),  # no goal
    ({"desc": []}, "desc"),
    ({"desc": "SFG"}, "desc"),  # a string, not a list of rows
    ({"desc": ["SHG"]}, "desc"),  # no safe path
    ({"desc": ["S" + "F" * 10 + "G"]}, "desc"),  # 11 moves > max_steps=10
])
def test_bad_options_name_the_argument(options, argument):
    with pytest.raises(ValueError, match=argument):
        environments.make("frozen_lake", **options)


def test_a_fixed_map_is_the_same_for_every_seed():
    env = FrozenLake(desc=["SFH", "FFG"], slippery=True)
    for seed in range(5):
        env.reset(seed)
        assert env.desc == ("SFH", "FFG") and env.position == (0, 0)
