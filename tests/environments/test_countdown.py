"""Countdown: generation, the exact solver, the safe parser and LATR Eq. 11's reward table.

References here are independent of environments/countdown.py: a brute force over every leaf order x
tree shape x operator choice, Python's own evaluation of expression strings this file generates,
and hand-checked cases.
"""

import itertools
import operator
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import environments
from environments.countdown import evaluate, format_expression, parse_expression, solve

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


# ---------------------------------------------------------------------------- references


def tree_value(expr):
    """Exact value of an expression tree (raises ZeroDivisionError)."""
    if isinstance(expr, int):
        return Fraction(expr)
    op, left, right = expr
    return OPS[op](tree_value(left), tree_value(right))


def tree_leaves(expr):
    return [expr] if isinstance(expr, int) else tree_leaves(expr[1]) + tree_leaves(expr[2])


def intermediates(expr):
    """The values of every inner node of the tree."""
    if isinstance(expr, int):
        return []
    return intermediates(expr[1]) + intermediates(expr[2]) + [tree_value(expr)]


def _shape_values(seq, naturals_only):
    """All values of expressions with leaves `seq` in this order: every binary tree shape (split
    point) and every operator at every inner node."""
    if len(seq) == 1:
        return {Fraction(seq[0])}
    values = set()
    for k in range(1, len(seq)):
        for a in _shape_values(seq[:k], naturals_only):
            for b in _shape_values(seq[k:], naturals_only):
                for apply in OPS.values():
                    try:
                        v = apply(a, b)
                    except ZeroDivisionError:
                        continue
                    if not naturals_only or (v >= 0 and v.denominator == 1):
                        values.add(v)
    return values


def reachable(numbers, naturals_only=False):
    """Brute force: every value an expression using each number exactly once can take."""
    values = set()
    for order in set(itertools.permutations(numbers)):
        values |= _shape_values(order, naturals_only)
    return values


def env_with(numbers, target, **options):
    """An environment whose episode is the given instance (hand-checked tables need one)."""
    env = environments.make("countdown", **options)
    env.reset(0)
    env.numbers, env.target = tuple(numbers), target
    return env


# ---------------------------------------------------------------------------- generation


@pytest.mark.parametrize("options", [{}, {"min_numbers": 3, "max_numbers": 3},
                                     {"min_numbers": 4, "max_numbers": 4, "max_target": 10},
                                     {"max_number": 6}])
def test_generated_instances_are_solvable_and_the_oracle_scores_one(options):
    env = environments.make("countdown", **options)
    low, high = options.get("min_numbers", 3), options.get("max_numbers", 4)
    counts = set()
    for seed in range(150):
        env.reset(seed)
        numbers, target = env.numbers, env.target
        counts.add(len(numbers))
        assert low <= len(numbers) <= high
        assert all(1 <= n <= options.get("max_number", 100) for n in numbers)
        assert 1 <= target <= options.get("max_target", 100)
        action = env.oracle_action()
        assert sorted(tree_leaves(action)) == sorted(numbers)
        assert tree_value(action) == target
        if seed < 30:
            assert target in reachable(numbers)
        _, reward, done, info = env.step(env.answer_text(action))
        assert (reward, done, info["success"], info["valid"]) == (1.0, True, True, True)
        assert env.oracle_action() is None
    assert counts == set(range(low, high + 1))


def test_a_seed_always_gives_the_same_instance():
    env = environments.make("countdown")
    first = [(env.reset(seed), env.numbers, env.target) for seed in range(20)]
    assert first == [(env.reset(seed), env.numbers, env.target) for seed in range(20)]


# ---------------------------------------------------------------------------- solver


def test_solver_agrees_with_brute_force_on_solvability():
    rng = np.random.default_rng(7)
    checked = {True: 0, False: 0}
    for count, number_sets, targets in ((2, 10, 30), (3, 12, 40), (4, 6, 30)):
        for _ in range(number_sets):
            numbers = tuple(rng.integers(1, 13, size=count).tolist())
            anything, natural = reachable(numbers), reachable(numbers, naturals_only=True)
            for target in range(1, targets + 1):
                solution = solve(numbers, target)
                assert (solution is not None) == (target in anything), (numbers, target)
                checked[solution is not None] += 1
                if solution is None:
                    continue
                assert sorted(tree_leaves(solution)) == sorted(numbers)
                assert tree_value(solution) == target
                if target in natural:  # the solver prefers non-negative integer steps
                    assert all(v >= 0 and v.denominator == 1 for v in intermediates(solution))
    assert min(checked.values()) > 50  # both solvable and unsolvable instances were exercised


@pytest.mark.parametrize("numbers,target", [((3, 3, 8, 8), 24), ((1, 5, 5, 5), 24),
                                            ((1, 3, 4, 6), 24)])
def test_solver_finds_solutions_that_need_fractions(numbers, target):
    assert target not in reachable(numbers, naturals_only=True)
    solution = solve(numbers, target)
    assert sorted(tree_leaves(solution)) == sorted(numbers) and tree_value(solution) == target


def test_solver_reports_unsolvable_instances():
    assert solve((1, 1, 1), 100) is None
    assert solve((2, 2), 5) is None
    assert tree_value(solve((2, 2), 4)) == 4


# ---------------------------------------------------------------------------- parser


SPACES = st.sampled_from(["", "", " ", "  ", "\t", "\n"])


@st.composite
def expression_texts(draw, depth=0):
    """(answer text, the same expression as Python source over Fractions), with random spacing,
    redundant parentheses and leading zeros."""
    if depth >= 3 or draw(st.booleans()):
        value = draw(st.integers(0, 999))
        zeros = "0" * draw(st.integers(0, 1))
        text, python = f"{zeros}{value}", f"Fraction({value})"
    else:
        left_text, left_py = draw(expression_texts(depth + 1))
        right_text, right_py = draw(expression_texts(depth + 1))
        op = draw(st.sampled_from("+-*/"))
        text = f"{left_text}{draw(SPACES)}{op}{draw(SPACES)}{right_text}"
        python = f"{left_py} {op} {right_py}"
    if draw(st.integers(0, 2)) == 0:
        text, python = f"({draw(SPACES)}{text}{draw(SPACES)})", f"({python})"
    return text, python


@settings(max_examples=300, deadline=None)
@given(pair=expression_texts(), pad=SPACES)
def test_parser_value_equals_python_evaluation(pair, pad):
    text, python = pair
    text = f"{pad}{text}{pad}"
    if len(text.strip()) > 200:
        return
    expr = parse_expression(text)
    assert expr is not None
    try:
        # Python source this test generated itself (never model text).
        expected = eval(python, {"Fraction": Fraction})
    except ZeroDivisionError:
        expected = None
    assert evaluate(expr) == expected
    # The canonical text reparses to the same tree.
    assert parse_expression(format_expression(expr)) == expr


@pytest.mark.parametrize("text,canonical", [
    ("(1+2)*3", "(1 + 2) * 3"),
    ("((1 + 2)) * (3)", "(1 + 2) * 3"),
    ("1-(2-3)", "1 - (2 - 3)"),
    ("(1-2)-3", "1 - 2 - 3"),
    ("1+(2+3)", "1 + (2 + 3)"),
    ("(2*3)+4", "2 * 3 + 4"),
    ("8/(3-8/3)", "8 / (3 - 8 / 3)"),
    ("6/(2*3)", "6 / (2 * 3)"),
    ("6/2*3", "6 / 2 * 3"),
    ("007", "7"),
])
def test_canonical_text(text, canonical):
    assert format_expression(parse_expression(text)) == canonical


@pytest.mark.parametrize("text", [
    "", "   ", "()", "1 +", "+ 1", "-3 + 5", "+3", "1 2", "(1 + 2", "1 + 2)", ")(", "1 ** 2",
    "2 ^ 3", "3 * 5 + 7 = 22", "3.0 + 1", "1e9999", "1_000", "0x10", "1j", "x + 1", "3 × 5",
    "3 ÷ 5", "3 − 5", "１＋２", "²", "½", "[1] * 3", "1 if 1 else 2", "lambda: 1",
    '__import__("os").system("true")', "exec('1')", "99999**99999", "9" * 5000, "(" * 10000,
    "1+" * 5000 + "1", "(" * 100 + "1" + ")" * 100,
])
def test_malformed_and_malicious_answers_are_rejected_quickly(text):
    env = env_with((3, 5, 7), 22)
    start = time.perf_counter()
    _, reward, done, info = env.step(f"<answer>{text}</answer>")
    assert time.perf_counter() - start < 0.5
    assert (reward, done, info["valid"], info["success"], info["action"]) == (0.0, True, False,
                                                                               False, None)
    assert (info["format"], info["correct"]) == (0, 0)


@pytest.mark.parametrize("text", [
    "(" * 99 + "1" + ")" * 99,  # 199 characters: deep nesting inside the length bound
    "999999999*" * 19 + "9",
    "1/" * 99 + "1",
    "9" * 199,
    "0/0",
])
def test_extreme_well_formed_answers_evaluate_quickly(text):
    env = env_with((3, 5, 7), 22)
    start = time.perf_counter()
    _, reward, done, info = env.step(text)
    assert time.perf_counter() - start < 0.5
    assert (reward, done, info["valid"], info["correct"]) == (pytest.approx(0.1), True, True, 0)


# ---------------------------------------------------------------------------- rewards


@pytest.mark.parametrize("numbers,target,text,reward,valid,correct", [
    ((3, 5, 7), 22, "3 * 5 + 7", 1.0, True, True),
    ((3, 5, 7), 22, "7 + (5 * 3)", 1.0, True, True),
    ((3, 5, 7), 22, "3 + 5 + 7", 0.1, True, False),  # wrong value
    ((3, 5, 7), 22, "15 + 7", 0.1, True, False),  # right value, a number missing
    ((3, 5, 7), 22, "3 * 7 + 3 / 3", 0.1, True, False),  # 3 reused, 5 missing
    ((3, 5, 7), 22, "3 * 5 + 7 + 5 - 5", 0.1, True, False),  # 5 reused
    ((3, 5, 7), 22, "3 * 5 + 7 + 0", 0.1, True, False),  # an extra number
    ((3, 5, 7), 22, "3 * 5 + 7 = 22", 0.0, False, False),  # malformed
    ((3, 5, 7), 22, "3*5+7.", 0.0, False, False),
    ((3, 5, 7), 22, "", 0.0, False, False),
    ((2, 2, 5), 1, "5 - 2 - 2", 1.0, True, True),  # a repeated number is used as often as given
    ((2, 2, 5), 1, "5 - 2", 0.1, True, False),
    ((2, 2, 5), 1, "5 / (2 - 2)", 0.1, True, False),  # division by zero: well-formed, not correct
    ((3, 3, 8, 8), 24, "8 / (3 - 8 / 3)", 1.0, True, True),  # fractional intermediates are fine
    ((3, 3, 8, 8), 24, "8 * 3 + 8 - 8", 0.1, True, False),
])
def test_reward_table(numbers, target, text, reward, valid, correct):
    env = env_with(numbers, target)
    assert env.metrics() == {"format": 0, "correct": 0} and env.process_score() == 0.0
    _, got, done, info = env.step(text)
    assert got == pytest.approx(reward)
    assert done  # a single turn, whatever the text
    assert (info["valid"], info["success"], info["truncated"]) == (valid, correct, False)
    assert env.metrics() == {"format": int(valid), "correct": int(correct)}
    assert env.process_score() == pytest.approx(reward)
    assert env.oracle_action() is None
    _, again, still_done, info = env.step(text)
    assert (again, still_done, info["valid"]) == (0.0, True, False)


def test_format_penalty_option_applies_to_malformed_answers_only():
    env = env_with((3, 5, 7), 22, format_penalty=-0.5)
    _, reward, done, _ = env.step("3 * 5 + 7 =")
    assert (reward, done, env.process_score()) == (-0.5, True, 0.0)
    env = env_with((3, 5, 7), 22, format_penalty=-0.5)
    assert env.step("3 + 5 + 7")[1] == pytest.approx(0.1)


def test_verify_and_turn_score():
    env = env_with((3, 5, 7), 22)
    assert env.verify(parse_expression("(5*3)+7"))
    assert not env.verify(parse_expression("15 + 7"))
    assert not env.verify(None)
    assert env.turn_score(parse_expression("7 + 3 * 5")) == pytest.approx(1.0)
    assert env.turn_score(parse_expression("7 + 3 + 5")) == pytest.approx(0.1)
    assert env.turn_score(None) == 0.0
    assert not env.done and env.num_steps == 0  # the queries leave the episode untouched


@pytest.mark.parametrize("text,reward", [
    ("<think>3 * 5 = 15, 15 + 7 = 22</think>\n<answer> 3 * 5 + 7 </answer>", 1.0),
    ("<answer>\n\t(3*5)\n +7\n</answer>", 1.0),
    ("<ANSWER>3*5+7</ANSWER>", 1.0),
    ("<answer>1 + 1</answer> no, wait: <answer>3 * 5 + 7</answer>", 1.0),  # the last block counts
    ("<answer>3 * 5 + 7</answer> then <answer>1 + 1</answer>", 0.1),
    ("  3*5 +  7\n", 1.0),  # a bare answer (compact form) is accepted in chat style too
    ("<think>3 * 5 + 7</think>", 0.0),  # no answer block: the whole text is not an expression
    ("The answer is 3 * 5 + 7", 0.0),
])
def test_answer_tags_and_whitespace(text, reward):
    assert env_with((3, 5, 7), 22).step(text)[1] == pytest.approx(reward)


# ---------------------------------------------------------------------------- text and options


def test_render_instructions_and_canonical_state():
    chat, compact = env_with((7, 3, 5), 22), env_with((7, 3, 5), 22, style="compact")
    assert compact.render() == "7 3 5 -> 22"
    assert compact.instructions() == "Use each number once with + - * / to reach the target."
    assert "Using the numbers [7, 3, 5]" in chat.render() and "equals 22" in chat.render()
    assert "<answer>" in chat.instructions() and "exactly once" in chat.instructions()
    assert chat.canonical_state() == compact.canonical_state() == "3,5,7->22|open"
    assert env_with((3, 5, 7), 22).canonical_state() == "3,5,7->22|open"  # order-independent
    compact.step("3 * 5 + 7")
    assert compact.render() == "7 3 5 -> 22 | correct"
    assert compact.canonical_state() == "3,5,7->22|correct"
    chat.step("nonsense")
    assert chat.canonical_state() == "3,5,7->22|malformed"
    assert compact.answer_text(parse_expression("(1+2)*3")) == "(1 + 2) * 3"
    assert chat.answer_text(parse_expression("(1+2)*3")) == "<answer>(1 + 2) * 3</answer>"


@pytest.mark.parametrize("options,name", [
    ({"min_numbers": 1}, "min_numbers"), ({"max_numbers": 6}, "max_numbers"),
    ({"min_numbers": 4, "max_numbers": 3}, "max_numbers"), ({"max_number": 0}, "max_number"),
    ({"max_number": 10**7}, "max_number"), ({"max_target": 0}, "max_target"),
    ({"min_numbers": 3.5}, "min_numbers"), ({"max_target": True}, "max_target"),
    ({"style": "verbose"}, "style"), ({"max_steps": 0}, "max_steps"),
    ({"reasoning": -1}, "reasoning"), ({"reasoning": 1.5}, "reasoning"),
])
def test_bad_options_name_themselves(options, name):
    with pytest.raises(ValueError, match=name):
        environments.make("countdown", **options)


def test_reasoning_traces_work_out_wrong_attempts_then_the_answer():
    """`reasoning=R`: chat demonstrations think before answering. Each step of the trace is
    checked against exact arithmetic (not the environment's evaluator), the attempts are wrong
    and at most R, the oracle's trace ends with its own steps reaching the target, the answer
    still parses to the same action, and the trace depends only on the instance."""
    from environments.countdown import worked_steps

    assert worked_steps(("+", ("*", 3, 5), 7)) == ["3 * 5 = 15", "15 + 7 = 22"]
    assert worked_steps(("*", ("/", 3, 82), 2)) == ["3 / 82 = (3/82)", "(3/82) * 2 = (3/41)"]
    assert worked_steps(("/", 3, ("-", 2, 2))) == ["2 - 2 = 0"]  # stops at the division by 0
    assert worked_steps(7) == []

    def number(text):
        return Fraction(text.strip("()"))

    env = environments.make("countdown", min_numbers=3, max_numbers=4, reasoning=4)
    twin = environments.make("countdown", min_numbers=3, max_numbers=4, reasoning=4)
    attempts, rng = [], np.random.default_rng(0)
    for seed in range(40):
        env.reset(seed)
        twin.reset(seed)
        for action in (env.oracle_action(), env.random_action(rng)):
            text = env.answer_text(action)
            assert env.parse_action(text) == action
            assert text == twin.answer_text(action)          # a function of the instance
            think, answer = text.split("</think>\n")
            assert think.startswith("<think>") and answer == f"<answer>{format_expression(action)}</answer>"
            lines = think[len("<think>"):].split("\n")
            assert 1 <= len(lines) <= 5
            for line in lines:
                steps, verdict = line[len("Let me try "):].split(". ", 1)
                value = None
                for step in steps.split(", "):
                    left, value_text = step.split(" = ")
                    a, op, b = left.split(" ")
                    value = OPS[op](number(a), number(b))
                    assert number(value_text) == value, step
                if line is not lines[-1]:
                    assert verdict == f"{value_text} is not {env.target}." and value != env.target
            if action == env.oracle_action():
                assert lines[-1].endswith("That works.") and value == env.target
                attempts.append(len(lines) - 1)
    assert set(attempts) >= {0, 1, 2, 3}  # the count varies with the instance
    compact = environments.make("countdown", style="compact", reasoning=4)
    compact.reset(0)
    assert compact.answer_text(compact.oracle_action()) == format_expression(compact.oracle_action())
