"""Countdown: combine the given numbers with + - * / into an expression that equals the target.

Source: LATR (Lookahead Tree-Based Rollouts), §4.1 "Logical Reasoning" and Appendix B.1, Eq. 11,
which follow TinyZero's Countdown task (Pan et al., 2025): prompt wording, answer tags and the
0.1 / 0.9 reward split.

Rules
-----
An instance is `n` numbers (n drawn uniformly from [min_numbers, max_numbers], each number uniform
in [1, max_number]) and a target in [1, max_target]. The agent answers once with an arithmetic
expression that uses every given number exactly once (the multiset must match: a number given
twice is used twice) with the binary operators + - * / and parentheses. The episode is a single
turn: it ends after the first step whatever the text.

Instances are always solvable: the generator draws the numbers, builds a random expression over all
of them (a random binary tree over a random order of the numbers, each inner node a uniform
operator) and keeps the instance when the expression's exact value is an integer in
[1, max_target]; otherwise it redraws the numbers and the expression (the count n is drawn once, so
it stays uniform). TinyZero trains on a fixed task set (Countdown-Tasks-3to4) whose construction
it does not describe, and the `gen_dataset` helper of its preprocessing script draws the target
independently of the numbers, so such tasks may have no solution; we guarantee one.

Decisions the papers leave open (tested in tests/environments/test_countdown.py):
  * Arithmetic is exact rational arithmetic (fractions.Fraction), and intermediate results may be
    negative or fractional, as in TinyZero, which evaluates the whole answer with Python (e.g.
    `8 / (3 - 8 / 3)` reaches 24). The generator and the solver use the same rule, so every answer
    the verifier accepts is one the solver can find. TinyZero compares floats with a 1e-5 tolerance;
    we compare exactly, so a value that merely rounds to the target is wrong.
  * Grammar. Answers are unsigned decimal integer literals (compared by value, so `07` is 7), the
    binary operators + - * / with the usual precedence and left associativity, parentheses, and
    ASCII whitespace anywhere between tokens. Unary minus or plus is rejected (the given numbers are
    positive, so no answer needs it), as are `**`, `=`, decimals, exponents, Unicode digits or
    operators, and any other character: such text is malformed.
  * "Format" (Eq. 11's syntactic validity) means the answer parses under that grammar. TinyZero's
    reward function gives its 0.1 to any text it extracts from <answer> tags, even text its checker
    rejects; Eq. 11 asks for syntactic validity, so we give it only to well-formed expressions.
    A well-formed expression that divides by zero, or uses the wrong numbers, earns the format
    reward but is not correct.
  * Safety. Model text is never passed to eval/exec/ast; a regex tokenizer and a recursive-descent
    parser build the expression tree. Answers longer than MAX_ANSWER_CHARS (200) characters are
    malformed before tokenizing. That bound also bounds everything else. Without exponentiation,
    every subexpression's value is p/q with |p| and q at most 2^(operators) times the product of
    its literals (each counted as at least 1), by induction over + - * /; for a 200-character text
    that is at most 10^200, so exact evaluation takes microseconds. Parentheses nest at most 99
    deep (about 300 Python frames of recursion).

Actions
-------
The parsed action is the expression tree: an int leaf, or a tuple (op, left, right) with op one of
"+", "-", "*", "/". Its canonical text puts spaces around operators and the fewest parentheses
that reparse to the same tree (a right operand of equal precedence keeps its parentheses):
`(1 + 2) * 3`, `8 / (3 - 8 / 3)`. Chat style wraps the answer as `<answer> (1 + 2) * 3 </answer>`
(the last such block counts; <think> text outside it is ignored); compact style answers with the
bare expression. `is_expression` is the action check of environments/base.py's contract: leaves
are non-negative ints (Python or numpy, not bools), inner nodes 3-tuples with one of the four
operators; anything else (a string, a list, a negative or float leaf, a 2-tuple) is not an action.

Rewards (LATR Eq. 11)
---------------------
  * 0.1 * format + 0.9 * correct for a well-formed expression: 1.0 when it uses exactly the given
    numbers and equals the target, 0.1 otherwise (info valid True);
  * `format_penalty` for malformed text, default 0.0: Eq. 11 gives a malformed answer nothing, so
    this environment's default differs from the -0.1 (RAGEN/TSR) of the other environments. The
    episode ends either way (info valid False), since the task is a single answer.

Method queries
--------------
  * oracle_action(): the solver's expression (exhaustive search, memoised per instance);
  * verify(action): the expression uses exactly the given numbers and equals the target (False
    once the answer is given, as every verifier once the episode is over);
  * process_score(): 0 before the answer, then its Eq. 11 reward (0.1 * format + 0.9 * correct,
    in [0, 1] whatever `format_penalty` is);
  * turn_score(action): the base default, the reward a clone receives (the single step's reward);
  * metrics(): `format` and `correct`, each 0/1 (0 before the answer);
  * random_action(rng): a random expression over the given numbers, drawn from `rng` (the
    generator's expression distribution; well-formed, so always legal).

Parameters (constructor, keyword-only)
--------------------------------------
  min_numbers, max_numbers  how many numbers (uniform in between); default 3 and 4, as TinyZero's
                            3-to-4 task set. At least 2; at most MAX_NUMBERS (5), because the
                            exhaustive solver's cost grows by a factor of about 6 * C(n, 2) per
                            extra number.
  max_number                numbers are drawn from [1, max_number]; default 100 (TinyZero). At most
                            MAX_NUMBER (10^6), so every canonical answer stays far below the length
                            bound.
  max_target                targets lie in [1, max_target]; default 100 (TinyZero does not state
                            its targets' range; this keeps them in the numbers' range).
  style                     "chat" (TinyZero's prompt) or "compact" (`3 5 7 -> 22`).
  max_steps                 default 1; larger values change nothing, since every answer ends the
                            episode.
  format_penalty            default 0.0 (see Rewards).
  reasoning                 default 0. With R > 0, chat-style `answer_text` (what demonstrations
                            and the oracle write) precedes the answer with a <think> trace: up to
                            R wrong attempts, each a random expression over the numbers worked
                            out step by step ("7 + 5 = 12, 12 * 3 = 36. 36 is not 22."), then the
                            answer's own steps. The attempts' count (uniform in [0, R]) and
                            expressions are drawn from the instance (numbers and target), so a
                            task's demonstration is always the same. A warm start on these
                            teaches a model to reason before answering (LATR's setting: the
                            branching happens in the reasoning) without changing what is scored:
                            only the last <answer> block counts.

Observation
-----------
Chat: "Using the numbers [3, 5, 7], create an equation that equals 22." after TinyZero-style
instructions; compact: `3 5 7 -> 22`. After the answer, a line (chat) or suffix (compact) says
whether it was correct, wrong or malformed. canonical_state(): sorted numbers, target and the
answer's status, e.g. `3,5,7->22|open`.
"""

from __future__ import annotations

import functools
import numbers
import operator
import re
from fractions import Fraction
from typing import Union

import numpy as np

from environments.base import TextEnv, is_int

#: An expression tree: an int literal, or (operator, left operand, right operand).
Expr = Union[int, tuple[str, "Expr", "Expr"]]

OPERATORS = ("+", "-", "*", "/")
FORMAT_REWARD = 0.1  # LATR Eq. 11: weight of the format indicator
CORRECT_REWARD = 0.9  # LATR Eq. 11: weight of the correctness indicator
MAX_ANSWER_CHARS = 200
MAX_NUMBERS = 5
MAX_NUMBER = 10**6

SYSTEM_PROMPT = ("You are a helpful assistant. You first think about the reasoning process in your "
                 "mind and then provide the user with the answer.")

_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_LEAF_PRECEDENCE = 3
# One token after optional ASCII whitespace: an integer literal or an operator/parenthesis.
_TOKEN = re.compile(r"\s*(?:([0-9]+)|([-+*/()]))", re.ASCII)


# ---------------------------------------------------------------------------- expressions


class _Malformed(Exception):
    """Raised inside the parser; parse_expression turns it into None."""


def _tokenize(text: str) -> list[str | int]:
    """Integer literals as ints, operators and parentheses as one-character strings (`text` has
    no trailing whitespace)."""
    tokens: list[str | int] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise _Malformed
        literal, symbol = match.groups()
        tokens.append(int(literal) if literal is not None else symbol)
        pos = match.end()
    return tokens


class _Parser:
    """Recursive descent over the tokens, one method per grammar rule:
    expr := term (('+' | '-') term)*,  term := factor (('*' | '/') factor)*,
    factor := integer | '(' expr ')'.  Chains are left-associative."""

    def __init__(self, tokens: list[str | int]):
        self.tokens = tokens
        self.pos = 0

    def _peek(self) -> str | int | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> str | int:
        token = self._peek()
        if token is None:
            raise _Malformed
        self.pos += 1
        return token

    def parse(self) -> Expr:
        expr = self._expr()
        if self._peek() is not None:
            raise _Malformed
        return expr

    def _expr(self) -> Expr:
        left = self._term()
        while self._peek() in ("+", "-"):
            left = (self._take(), left, self._term())
        return left

    def _term(self) -> Expr:
        left = self._factor()
        while self._peek() in ("*", "/"):
            left = (self._take(), left, self._factor())
        return left

    def _factor(self) -> Expr:
        token = self._take()
        if isinstance(token, int):
            return token
        if token != "(":
            raise _Malformed
        inner = self._expr()
        if self._take() != ")":
            raise _Malformed
        return inner


def parse_expression(text: str) -> Expr | None:
    """The expression tree of `text`, or None when it is malformed or longer than
    MAX_ANSWER_CHARS (see the module docstring for the grammar). Never evaluates anything."""
    text = text.strip()
    if not text or len(text) > MAX_ANSWER_CHARS:
        return None
    try:
        return _Parser(_tokenize(text)).parse()
    except _Malformed:
        return None


def is_expression(value, depth: int = 0) -> bool:
    """Whether `value` is an expression tree (the action type): a non-negative integer literal
    (a Python or numpy int, not a bool) or a tuple (op, left, right) with op in OPERATORS, nested
    less than MAX_ANSWER_CHARS deep (no answer text nests deeper, and the bound keeps the recursion
    shallow). Never raises."""
    if isinstance(value, tuple):
        return (len(value) == 3 and depth < MAX_ANSWER_CHARS and isinstance(value[0], str)
                and value[0] in _PRECEDENCE and is_expression(value[1], depth + 1)
                and is_expression(value[2], depth + 1))
    return (type(value) is int or is_int(value)) and value >= 0


def evaluate(expr: Expr) -> Fraction | None:
    """Exact value of an expression, or None when it divides by zero."""
    try:
        return _value(expr)
    except ZeroDivisionError:
        return None


def _value(expr: Expr) -> Fraction:
    if not isinstance(expr, tuple):
        return Fraction(int(expr))
    op, left, right = expr
    return _APPLY[op](_value(left), _value(right))


def leaves(expr: Expr) -> list[int]:
    """The integer literals of an expression, left to right."""
    if not isinstance(expr, tuple):
        return [int(expr)]
    _, left, right = expr
    return leaves(left) + leaves(right)


def _precedence(expr: Expr) -> int:
    return _PRECEDENCE[expr[0]] if isinstance(expr, tuple) else _LEAF_PRECEDENCE


def format_expression(expr: Expr) -> str:
    """Canonical text: spaced operators and the fewest parentheses that reparse to the same tree."""
    if not isinstance(expr, tuple):
        return str(int(expr))
    op, left, right = expr
    left_text, right_text = format_expression(left), format_expression(right)
    # The parser is left-associative, so a right operand of equal precedence needs parentheses
    # (a - (b - c)); they are kept even where the value would not change (a + (b + c)).
    if _precedence(left) < _PRECEDENCE[op]:
        left_text = f"({left_text})"
    if _precedence(right) <= _PRECEDENCE[op]:
        right_text = f"({right_text})"
    return f"{left_text} {op} {right_text}"


def random_expression(numbers_: list[int], rng: np.random.Generator) -> Expr:
    """A random expression over all of `numbers_`: a random order of the leaves, a random split at
    every inner node and a uniform operator there (drawn in three batches: rng calls dominate the
    cost of generation)."""
    order = [numbers_[i] for i in rng.permutation(len(numbers_)).tolist()]
    ops = iter(rng.integers(len(OPERATORS), size=len(order) - 1).tolist())
    splits = iter(rng.random(len(order) - 1).tolist())

    def build(items: list[int]) -> Expr:
        if len(items) == 1:
            return items[0]
        split = 1 + int(next(splits) * (len(items) - 1))  # uniform in [1, len - 1]
        op = OPERATORS[next(ops)]
        return op, build(items[:split]), build(items[split:])

    return build(order)


def _number_text(value: Fraction) -> str:
    """An integer as itself, a fraction in parentheses, so a step reads unambiguously."""
    return (str(value.numerator) if value.denominator == 1
            else f"({value.numerator}/{value.denominator})")


def worked_steps(expr: Expr) -> list[str]:
    """`expr`'s operations in evaluation order, each with its value: ('+', ('*', 3, 5), 7) ->
    ['3 * 5 = 15', '15 + 7 = 22']; a division by zero stops the list at that step."""
    steps: list[str] = []

    def walk(node: Expr) -> Fraction | None:
        if isinstance(node, int):
            return Fraction(node)
        op, left, right = node
        a = walk(left)
        b = walk(right) if a is not None else None
        if b is None or (op == "/" and b == 0):
            return None
        value = _APPLY[op](a, b)
        steps.append(f"{_number_text(a)} {op} {_number_text(b)} = {_number_text(value)}")
        return value

    walk(expr)
    return steps


# ---------------------------------------------------------------------------- solver


def _combinations(a: tuple[Fraction, Expr], b: tuple[Fraction, Expr],
                  naturals_only: bool) -> list[tuple[Fraction, Expr]]:
    """Every (value, expression) that one operator makes of the two operands, in either order.
    With `naturals_only`, only results that are non-negative integers."""
    (x, ex), (y, ey) = a, b
    results = [(x + y, ("+", ex, ey)), (x * y, ("*", ex, ey)),
               (x - y, ("-", ex, ey)), (y - x, ("-", ey, ex))]
    if y != 0:
        results.append((x / y, ("/", ex, ey)))
    if x != 0:
        results.append((y / x, ("/", ey, ex)))
    if naturals_only:
        results = [(v, e) for v, e in results if v >= 0 and v.denominator == 1]
    return results


def _search(items: list[tuple[Fraction, Expr]], target: Fraction, naturals_only: bool,
            dead: set[tuple[Fraction, ...]]) -> Expr | None:
    """Depth-first search that replaces two of the remaining values by one combination until one
    value is left. `dead` holds the sorted value multisets already known to miss the target, so
    a multiset reached along different paths is searched once."""
    if len(items) == 1:
        value, expr = items[0]
        return expr if value == target else None
    key = tuple(sorted(value for value, _ in items))
    if key in dead:
        return None
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            rest = items[:i] + items[i + 1:j] + items[j + 1:]
            for combined in _combinations(items[i], items[j], naturals_only):
                found = _search(rest + [combined], target, naturals_only, dead)
                if found is not None:
                    return found
    dead.add(key)
    return None


@functools.lru_cache(maxsize=4096)
def solve(numbers_: tuple[int, ...], target: int) -> Expr | None:
    """An expression that uses each of `numbers_` exactly once and equals `target`, or None when
    there is none. Exhaustive and exact; memoised per instance.

    It first looks for a solution whose intermediate results are all non-negative integers (what a
    person writes, and the nicer demonstration), then for any rational one."""
    items = [(Fraction(n), n) for n in numbers_]
    for naturals_only in (True, False):
        found = _search(items, Fraction(target), naturals_only, set())
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------------------- environment


def _check_int(name: str, value, low: int, high: int | None = None) -> int:
    """`value` as an int, or a ValueError naming the option when it is not an integer in
    [low, high] (no upper bound when high is None)."""
    in_range = (isinstance(value, numbers.Integral) and not isinstance(value, bool)
                and low <= value and (high is None or value <= high))
    if not in_range:
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value!r}: expected an integer {bounds}")
    return int(value)


class Countdown(TextEnv):
    """LATR's Countdown: one answer, an expression over the given numbers that equals the target."""

    name = "countdown"
    action_spec = ("an expression tree: an int >= 0, or a tuple (op, left, right) with op one of "
                   "+ - * /")
    system_prompt = SYSTEM_PROMPT

    def __init__(self, *, min_numbers: int = 3, max_numbers: int = 4, max_number: int = 100,
                 max_target: int = 100, style: str = "chat", max_steps: int = 1,
                 format_penalty: float = 0.0, reasoning: int = 0):
        self.reasoning = _check_int("reasoning", reasoning, 0)
        self.min_numbers = _check_int("min_numbers", min_numbers, 2, MAX_NUMBERS)
        self.max_numbers = _check_int("max_numbers", max_numbers, self.min_numbers, MAX_NUMBERS)
        self.max_number = _check_int("max_number", max_number, 1, MAX_NUMBER)
        self.max_target = _check_int("max_target", max_target, 1)
        super().__init__(style=style, max_steps=max_steps, format_penalty=format_penalty)
        # The whole game state is immutable (a tuple, ints and bools), so clones may share it.
        self.numbers: tuple[int, ...] = ()
        self.target = 0
        self.answered = False
        self.well_formed = False
        self.correct = False

    # ------------------------------------------------------------------ game hooks

    def _reset_game(self, seed: int) -> None:
        del seed  # self.rng is already seeded with it
        count = int(self.rng.integers(self.min_numbers, self.max_numbers + 1))
        while True:
            drawn = self.rng.integers(1, self.max_number + 1, size=count).tolist()
            value = evaluate(random_expression(drawn, self.rng))
            if value is not None and value.denominator == 1 and 1 <= value <= self.max_target:
                break
        self.numbers = tuple(drawn)
        self.target = int(value)
        self.answered = self.well_formed = self.correct = False

    def _parse(self, content: str) -> Expr | None:
        return parse_expression(content)

    def _is_action(self, action) -> bool:
        return is_expression(action)

    def _is_legal(self, action: Expr) -> bool:
        del action  # every well-formed expression is a legal answer; a wrong one scores 0.1
        return True

    def _apply(self, action: Expr) -> tuple[float, bool, bool]:
        self.answered, self.well_formed, self.correct = True, True, self._is_correct(action)
        return self._eq11_reward(), True, self.correct

    def _invalid_outcome(self, action) -> tuple[float, bool, bool]:
        """A malformed answer still uses up the single turn: `format_penalty`, episode over."""
        del action
        self.answered, self.well_formed, self.correct = True, False, False
        return self.format_penalty, True, False

    def _format_action(self, action: Expr) -> str:
        return format_expression(action)

    def answer_text(self, action, style: str | None = None) -> str:
        """The base class's text, after a <think> trace in chat style when `reasoning` > 0 (see
        the module docstring)."""
        text = super().answer_text(action, style)
        if self.reasoning == 0 or self._style(style) != "chat" or not self.numbers:
            return text
        return f"<think>{self._reasoning_trace(action)}</think>\n{text}"

    def _reasoning_trace(self, action: Expr) -> str:
        rng = np.random.default_rng([*self.numbers, self.target])
        lines = []
        for _ in range(int(rng.integers(0, self.reasoning + 1))):
            attempt = random_expression(list(self.numbers), rng)
            value = evaluate(attempt)
            if value is None or value == self.target:  # a division by zero, or a lucky hit
                continue
            lines.append(f"Let me try {', '.join(worked_steps(attempt))}. "
                         f"{_number_text(value)} is not {self.target}.")
        value = evaluate(action)
        verdict = ("That works." if value == self.target else "I will answer that.")
        lines.append(f"Let me try {', '.join(worked_steps(action)) or action}. {verdict}")
        return "\n".join(lines)

    def _canonical_state(self) -> str:
        numbers_ = ",".join(map(str, sorted(self.numbers)))
        return f"{numbers_}->{self.target}|{self._status()}"

    def _copy_state(self, other: "Countdown") -> None:
        """Nothing to copy: every game attribute is immutable, so the shallow copy that clone()
        makes is already independent of the original."""

    def _random_action(self, rng: np.random.Generator) -> Expr:
        """A random expression over the given numbers (always legal, rarely correct)."""
        return random_expression(list(self.numbers), rng)

    # ------------------------------------------------------------------ scoring

    def _is_correct(self, expr: Expr) -> bool:
        return (sorted(leaves(expr)) == sorted(self.numbers)
                and evaluate(expr) == self.target)

    def _eq11_reward(self) -> float:
        return FORMAT_REWARD * self.well_formed + CORRECT_REWARD * self.correct

    def _status(self) -> str:
        if not self.answered:
            return "open"
        if not self.well_formed:
            return "malformed"
        return "correct" if self.correct else "wrong"

    # ------------------------------------------------------------------ text

    def _render(self, style: str | None) -> str:
        status = self._status()
        if self._style(style) == "compact":
            line = f"{' '.join(map(str, self.numbers))} -> {self.target}"
            return line if status == "open" else f"{line} | {status}"
        numbers_ = ", ".join(map(str, self.numbers))
        line = f"Using the numbers [{numbers_}], create an equation that equals {self.target}."
        feedback = {
            "open": "",
            "malformed": "\nYour answer is not a valid arithmetic expression.",
            "wrong": "\nYour answer is a valid expression, but it does not use each number exactly "
                     "once or does not equal the target.",
            "correct": "\nYour answer is correct.",
        }[status]
        return line + feedback

    def instructions(self, style: str | None = None) -> str:
        if self._style(style) == "compact":
            return "Use each number once with + - * / to reach the target."
        return ("Create an equation from the given numbers that equals the target. You can use "
                "basic arithmetic operations (+, -, *, /) and parentheses, and each number must be "
                "used exactly once. Show your work in <think> </think> tags, and return the final "
                "answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.")

    # ------------------------------------------------------------------ method queries

    def _oracle_action(self) -> Expr:
        return solve(self.numbers, self.target)

    def _verify(self, action: Expr) -> bool:
        return self._is_correct(action)

    def _process_score(self) -> float:
        return self._eq11_reward() if self.answered else 0.0

    def _metrics(self) -> dict:
        return {"format": int(self.well_formed), "correct": int(self.correct)}
