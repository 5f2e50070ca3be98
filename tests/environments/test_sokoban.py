"""Sokoban: generated levels, the exact solver, rewards, deadlocks, verifier and text.

References are written here from the rules alone: a plain simulator on (row, col) cells parsed from
the compact render, an unpruned breadth-first search, and brute-force enumeration of action
sequences by iterative deepening.
"""

import itertools
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import environments
from environments.sokoban import ACTIONS, Sokoban

UP, DOWN, LEFT, RIGHT = range(4)
DELTAS = {UP: (-1, 0), DOWN: (1, 0), LEFT: (0, -1), RIGHT: (0, 1)}


# ---------------------------------------------------------------------- reference game


def parse(text):
    """(walls, targets, player, boxes) of a compact grid, cells as (row, col)."""
    walls, targets, boxes, player = set(), set(), set(), None
    for r, line in enumerate(text.splitlines()):
        for c, ch in enumerate(line):
            if ch == "#":
                walls.add((r, c))
            if ch in "T*+":
                targets.add((r, c))
            if ch in "B*":
                boxes.add((r, c))
            if ch in "P+":
                player = (r, c)
    return frozenset(walls), frozenset(targets), player, frozenset(boxes)


def ref_move(walls, player, boxes, action):
    dr, dc = DELTAS[action]
    ahead = (player[0] + dr, player[1] + dc)
    if ahead in walls:
        return player, boxes
    if ahead in boxes:
        beyond = (ahead[0] + dr, ahead[1] + dc)
        if beyond in walls or beyond in boxes:
            return player, boxes
        return ahead, (boxes - {ahead}) | {beyond}
    return ahead, boxes


def ref_distance(text):
    """Length of a shortest solution by plain BFS over all reachable states; None if unsolvable."""
    walls, targets, player, boxes = parse(text)
    seen = {(player, boxes): 0}
    queue = deque([(player, boxes)])
    while queue:
        state = queue.popleft()
        if state[1] <= targets:
            return seen[state]
        for action in DELTAS:
            nxt = ref_move(walls, *state, action)
            if nxt not in seen:
                seen[nxt] = seen[state] + 1
                queue.append(nxt)
    return None


def brute_force(text, max_depth):
    """(optimal length, set of first actions of optimal solutions) by iterative deepening over
    all action sequences; (None, set()) if no solution of at most max_depth actions exists."""
    walls, targets, player, boxes = parse(text)
    for depth in range(1, max_depth + 1):
        firsts = set()
        for seq in itertools.product(DELTAS, repeat=depth):
            p, b = player, boxes
            for action in seq:
                p, b = ref_move(walls, p, b, action)
            if b <= targets:
                firsts.add(seq[0])
        if firsts:
            return depth, firsts
    return None, set()


def ref_state_after(text, actions):
    walls, targets, player, boxes = parse(text)
    for action in actions:
        player, boxes = ref_move(walls, player, boxes, action)
    return player, boxes


# ---------------------------------------------------------------------- levels

CORRIDOR = "#####\n#PBT#\n#####"
# Small levels for the brute force (optimal lengths up to 7).
TINY_LEVELS = [
    CORRIDOR,
    "######\n#P.BT#\n######",
    "#####\n#T..#\n#.B.#\n#..P#\n#####",
    "######\n#T...#\n#..B.#\n#.P..#\n######",
    "######\n#...T#\n#.B..#\n#P...#\n######",
    "######\n#TBP.#\n#.B..#\n#T...#\n######",
    "#####\n#...#\n#PB.#\n#.#T#\n#####",
    "######\n#.P..#\n#.BB.#\n#.TT.#\n######",
    # unsolvable: a box in a corner; two boxes frozen against a wall (no dead square)
    "#####\n#B..#\n#.T.#\n#..P#\n#####",
    "#######\n#T.BB.#\n#.....#\n#..T.P#\n#######",
]


def make(level, **kwargs):
    env = Sokoban(level=level, **kwargs)
    env.reset(0)
    return env


# ---------------------------------------------------------------------- generation


@pytest.mark.parametrize("options", [{}, {"num_boxes": 2, "size": 7}, {"size": (5, 8)}])
def test_generated_levels_are_solvable_within_max_steps(options):
    env = Sokoban(**options)
    num_boxes = options.get("num_boxes", 1)
    for seed in range(25):
        env.reset(seed)
        text = env.render("compact")
        lines = text.splitlines()
        walls, targets, player, boxes = parse(text)
        assert (len(lines), len(lines[0])) == (env.rows, env.cols)
        assert set(lines[0] + lines[-1] + "".join(l[0] + l[-1] for l in lines)) == {"#"}
        assert len(boxes) == len(targets) == num_boxes and player is not None
        assert not boxes <= targets  # never solved at the start
        length = ref_distance(text)
        assert length is not None and 1 <= length <= env.max_steps
        assert env.optimal_length() == length


def test_generation_is_deterministic_per_seed():
    a, b = Sokoban(), Sokoban(style="compact")
    levels = set()
    for seed in range(30):
        assert a.reset(seed) == a.render()
        b.reset(seed)
        assert a.render("compact") == b.render()
        levels.add(b.render())
    assert len(levels) > 20
    a.reset(3)
    first = a.render()
    a.reset(4)
    a.reset(3)
    assert a.render() == first


def test_generation_gives_up_on_impossible_options():
    env = Sokoban(size=4, num_boxes=3)  # the player cannot move in a 2x2 room holding 3 boxes
    with pytest.raises(RuntimeError, match="num_boxes=3"):
        env.reset(0)


# ---------------------------------------------------------------------- solver


@pytest.mark.parametrize("level", TINY_LEVELS)
def test_solver_length_matches_iterative_deepening(level):
    env = make(level)
    length, _ = brute_force(level, 7)
    assert env.optimal_length() == length
    assert ref_distance(level) == length
    solution = env.solve()
    if length is None:
        assert solution is None
    else:
        assert len(solution) == length
        _, targets, _, _ = parse(level)
        assert ref_state_after(level, solution)[1] <= targets


@pytest.mark.parametrize("options", [{}, {"num_boxes": 2, "size": 7}])
def test_solution_replay_reaches_success_with_the_rule_return(options):
    env = Sokoban(**options)
    for seed in range(20):
        env.reset(seed)
        _, targets, _, boxes = parse(env.render("compact"))
        on_at_start = len(boxes & targets)
        solution = env.solve()
        total = 0.0
        for i, action in enumerate(solution):
            _, reward, done, info = env.step(env.answer_text(action))
            total += reward
            assert info["valid"] and done == (i == len(solution) - 1)
        assert info["success"] and not info["truncated"]
        # -0.1 per action; the on/off-target rewards sum to the change in the count; +10 at the end
        expected = -0.1 * len(solution) + (len(targets) - on_at_start) + 10
        assert total == pytest.approx(expected)
        assert info["boxes_on_target"] == len(targets)


def test_oracle_plays_generated_levels_to_success():
    env = Sokoban(style="compact")
    for seed in range(30):
        env.reset(seed)
        steps = 0
        while not env.done:
            _, _, _, info = env.step(env.answer_text(env.oracle_action()))
            steps += 1
        assert info["success"] and steps <= env.max_steps
        assert env.oracle_action() is None


def test_clones_keep_their_level_after_the_original_resets():
    env = Sokoban()
    env.reset(1)
    clone = env.clone()
    env.reset(2)  # a new level and a new memo; the clone still plays level 1
    while not clone.done:
        _, _, _, info = clone.step(clone.answer_text(clone.oracle_action()))
    assert info["success"]


# ---------------------------------------------------------------------- verifier


@pytest.mark.parametrize("level", TINY_LEVELS)
def test_verify_matches_brute_force_first_actions(level):
    env = make(level)
    _, firsts = brute_force(level, 7)
    assert {a for a in range(4) if env.verify(a)} == firsts
    if firsts:
        assert env.oracle_action() in firsts


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 10_000), moves=st.lists(st.sampled_from(range(4)), max_size=6),
       two_boxes=st.booleans())
def test_verify_and_oracle_on_visited_states(seed, moves, two_boxes):
    env = Sokoban(num_boxes=2, size=7) if two_boxes else Sokoban()
    env.reset(seed)
    for action in moves:
        if env.done:
            break
        env.step(ACTIONS[action])
    if env.done:
        assert env.oracle_action() is None and not any(env.verify(a) for a in range(4))
        return
    text = env.render("compact")
    here = ref_distance(text)
    assert env.optimal_length() == here
    for action in range(4):
        child = env.clone()
        child.step(ACTIONS[action])
        after = ref_distance(child.render("compact"))
        assert env.verify(action) == (here is not None and after == here - 1)
    if here is not None:
        assert env.verify(env.oracle_action())
    else:
        assert env.oracle_action() == UP
    assert 0.0 <= env.process_score() <= 1.0


def test_unsolvable_state_oracle_and_verify():
    env = make("#####\n#B..#\n#.T.#\n#..P#\n#####")
    assert env.solve() is None and env.optimal_length() is None
    assert env.oracle_action() == UP
    assert not any(env.verify(a) for a in range(4))
    assert not env.verify(None) and not env.verify(7)


# ---------------------------------------------------------------------- rewards


def test_reward_accounting_by_hand():
    level = ("#########\n"
             "#.......#\n"
             "#PB.TT..#\n"
             "#.B.....#\n"
             "#########")
    env = make(level, max_steps=20)
    script = [  # (action, reward, whether the move is blocked)
        ("Left", -0.1, True),    # into the wall
        ("Up", -0.1, False),
        ("Right", -0.1, False),
        ("Down", -0.1, True),    # pushes the box at (2,2) into the box at (3,2)
        ("Left", -0.1, False),
        ("Down", -0.1, False),
        ("Right", -0.1, False),  # box (2,2) -> (2,3)
        ("Right", 0.9, False),   # onto the target (2,4)
        ("Right", -0.1, False),  # target (2,4) -> target (2,5): the count is unchanged
        ("Right", -1.1, False),  # off the target, to (2,6)
    ]
    for i, (action, expected, blocked) in enumerate(script):
        before = env.canonical_state()
        _, reward, done, info = env.step(action)
        assert reward == pytest.approx(expected), i
        assert info["valid"] and not done
        assert (env.canonical_state() == before) == blocked, i
    assert env.canonical_state() == "P2,5|B2,6;3,2"
    assert info["boxes_on_target"] == 0
    assert env.total_reward == pytest.approx(sum(r for _, r, _ in script))


def test_solving_push_earns_eleven_minus_step_penalty():
    env = make(CORRIDOR)
    _, reward, done, info = env.step("<answer>Right</answer>")
    assert reward == pytest.approx(10.9)
    assert done and info["success"] and info["boxes_on_target"] == 1
    # with another box already on its target the last push earns the same
    env = make("######\n#PB.T#\n#...*#\n######")
    env.step("Right")
    _, reward, done, info = env.step("Right")
    assert reward == pytest.approx(10.9) and done and info["success"]


def test_episode_truncates_at_max_steps():
    env = make("######\n#P.BT#\n######", max_steps=3)
    for expected_done in (False, False, True):
        _, reward, done, info = env.step("Left")
        assert reward == pytest.approx(-0.1) and done == expected_done
    assert info["truncated"] and not info["success"]


# ---------------------------------------------------------------------- deadlocks and score


def ref_lone_box_live(walls, targets, cell, player_anywhere):
    """Whether a lone box on `cell` can reach a target. player_anywhere: the player teleports to
    whichever side it needs (the relaxation behind dead squares); else the exact game from every
    player start."""
    floor = {(r, c) for r in range(1 + max(r for r, _ in walls)) for c in
             range(1 + max(c for _, c in walls))} - walls
    if player_anywhere:
        seen, stack = {cell}, [cell]
        while stack:
            box = stack.pop()
            for dr, dc in DELTAS.values():
                behind, ahead = (box[0] - dr, box[1] - dc), (box[0] + dr, box[1] + dc)
                if behind in floor and ahead in floor and ahead not in seen:
                    seen.add(ahead)
                    stack.append(ahead)
        return bool(seen & targets)
    starts = [(p, frozenset({cell})) for p in floor if p != cell]
    seen, stack = set(starts), list(starts)
    while stack:
        state = stack.pop()
        if state[1] <= targets:
            return True
        for action in DELTAS:
            nxt = ref_move(walls, *state, action)
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


@pytest.mark.parametrize("seed", range(15))
def test_dead_squares_match_the_relaxed_brute_force_and_are_truly_dead(seed):
    env = Sokoban(size=7)
    env.reset(seed)
    walls, targets, _, _ = parse(env.render("compact"))
    layout = env.layout
    for cell in range(layout.rows * layout.cols):
        position = layout.position(cell)
        if position in walls:
            continue
        relaxed_live = ref_lone_box_live(walls, targets, position, player_anywhere=True)
        assert (cell in layout.dead) == (not relaxed_live)
        if cell in layout.dead:
            assert not ref_lone_box_live(walls, targets, position, player_anywhere=False)
        corner = any((position[0] + v[0], position[1] + v[1]) in walls
                     and (position[0] + h[0], position[1] + h[1]) in walls
                     for v in ((-1, 0), (1, 0)) for h in ((0, -1), (0, 1)))
        if corner and position not in targets:
            assert cell in layout.dead


def test_deadlock_cases_by_hand():
    corner = make("#####\n#B..#\n#.T.#\n#..P#\n#####")
    assert corner.is_deadlocked() and corner.process_score() == 0.0
    # along the top wall, closed by corners, with no target on that row
    wall_line = make("#######\n#..B..#\n#.....#\n#..T.P#\n#######")
    assert wall_line.is_deadlocked() and wall_line.optimal_length() is None
    # the same with the target on the wall's row: alive and solvable
    alive = make("#######\n#T.B..#\n#.....#\n#....P#\n#######")
    assert not alive.is_deadlocked() and alive.optimal_length() is not None
    # a box on a target in a corner is fine
    on_target = make("#####\n#*..#\n#.B.#\n#.TP#\n#####")
    assert not on_target.is_deadlocked()
    # pushing a box into a corner creates the deadlock
    env = make("#####\n#..T#\n#.B.#\n#..P#\n#####")
    for action in ("Left", "Up", "Right", "Up"):  # the box goes up to (1,2), the player to (1,3)
        env.step(action)
    assert env.canonical_state() == "P1,3|B1,2"
    assert not env.is_deadlocked() and env.process_score() > 0.0
    env.step("Left")  # box into the corner (1,1)
    assert env.is_deadlocked() and env.process_score() == 0.0 and env.optimal_length() is None
    # two boxes frozen against a wall are unsolvable but not a simple deadlock
    frozen = make("#######\n#T.BB.#\n#.....#\n#..T.P#\n#######")
    assert frozen.optimal_length() is None and not frozen.is_deadlocked()


def test_process_score_by_hand():
    level = ("########\n"
             "#PB.T..#\n"
             "#......#\n"
             "#..*...#\n"
             "########")
    env = make(level)  # D0 = 2 (box (1,2) to target (1,4)) + 0
    assert env.process_score() == pytest.approx(0.5 * 1 / 2 + 0.5 * (1 - 2 / 2))
    probe = env.clone()
    probe.step("Right")  # D = 1
    assert probe.process_score() == pytest.approx(0.5 * 1 / 2 + 0.5 * (1 - 1 / 2))
    probe.step("Right")  # solved
    assert probe.success and probe.process_score() == 1.0
    for action in ("Down", "Down", "Right", "Right"):  # pushes the lower box off its target
        env.step(action)
    assert env.canonical_state() == "P3,3|B1,2;3,4"
    assert not env.is_deadlocked()
    # 0.5 * 0 + 0.5 * (1 - 3 / 2) < 0: clipped
    assert env.process_score() == 0.0
    assert env.metrics() == {"boxes_on_target": 0}


# ---------------------------------------------------------------------- text


def test_parsing_is_strict_about_content():
    env = make("######\n#.PBT#\n#....#\n######")
    for text in ("Up", " up ", "UP", "<answer>left</answer>", "think <answer> Down </answer>"):
        assert env.parse_action(text) is not None, text
    for text in ("upward", "up left", "Up!", "Right || Up", "", "1", "<answer></answer>", "U"):
        before = env.canonical_state()
        _, reward, done, info = env.step(text)
        assert not info["valid"] and info["action"] is None, text
        assert reward == pytest.approx(-0.1) and not done
        assert env.canonical_state() == before
    assert env.format_action(env.parse_action("<answer>rIGHT</answer>")) == "Right"


def test_render_styles_by_hand():
    level = "######\n#+B..#\n#..*.#\n######"
    env = make(level)
    assert env.render("compact") == level
    assert env.render("chat") == (
        "# # # # # #\n"
        "# S X _ _ #\n"
        "# _ _ √ _ #\n"
        "# # # # # #\n"
        "Boxes on target: 1/2\n"
        "Legend: # wall, _ floor, O target, X box, √ box on target, P player, "
        "S player on target.")
    assert env.canonical_state() == "P1,1|B1,2;2,3"
    chat = env.instructions("chat")
    for phrase in ("push", "pull", "one box", "Up, Down, Left or Right", "<answer>Left</answer>"):
        assert phrase in chat
    assert "\n" not in env.instructions("compact")
    assert env.prompt("compact").endswith(level)
    assert Sokoban.system_prompt


def test_make_and_option_validation():
    assert isinstance(environments.make("sokoban"), Sokoban)
    for options, name in [({"size": 2}, "size"), ({"size": (6,)}, "size"), ({"size": True}, "size"),
                          ({"num_boxes": 0}, "num_boxes"), ({"num_boxes": 1.5}, "num_boxes"),
                          ({"search_depth": 0}, "search_depth"),
                          ({"size": 3, "num_boxes": 1}, "size"), ({"max_steps": 0}, "max_steps"),
                          ({"style": "plain"}, "style")]:
        with pytest.raises(ValueError, match=name):
            Sokoban(**options)


@pytest.mark.parametrize("level", [
    "#####\n#PBT#",                       # open at the bottom
    "#####\n#PBT##\n#####",               # ragged rows
    "#####\n#PBX#\n#####",                # unknown symbol
    "#####\n#.BT#\n#####",                # no player
    "######\n#PBTP#\n######",             # two players
    "######\n#PBBT#\n######",             # more boxes than targets
    "#####\n#P*.#\n#####",                # already solved
    [],
    [1, 2, 3],
])
def test_level_validation(level):
    with pytest.raises(ValueError, match="level"):
        Sokoban(level=level)


def test_level_as_list_of_rows_plays_every_seed():
    env = Sokoban(level=["#####", "#PBT#", "#####"])
    for seed in (0, 5):
        assert env.reset(seed) == env.render()
        assert env.render("compact") == CORRIDOR
