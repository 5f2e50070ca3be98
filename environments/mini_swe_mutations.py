"""mini-SWE's bugs: seeded single-site mutations of a task's target file.

Mutation operators (`OPERATORS`), each one textual change at an AST-located site of the module
(never in a docstring or an f-string):
  off_by_one          an int constant +-1, or `+ 1` / `- 1` appended to a range() stop or a
                      slice bound that is not a constant;
  flipped_comparison  a comparison operator negated or made (non-)strict (`<` -> `>=` or `<=`,
                      `==` -> `!=`, `in` -> `not in`, ...);
  wrong_operator      an arithmetic or boolean operator replaced (`+` <-> `-`, `*` -> `+`,
                      `//` -> `/` or `%`, `and` <-> `or`, `+=` -> `-=`, ...);
  swapped_arguments   the first two positional arguments of a call, or parameters of a def;
  wrong_constant      a constant replaced by a different one (not +-1: 0, v + 2, 2v; a string
                      shortened or changed; True <-> False);
  dropped_branch      an `if` statement, an `elif` clause, an `else` clause or one branch of a
                      conditional expression removed;
  wrong_return        a return value replaced (another local name, the negated condition, the
                      first parameter).
A candidate is kept when it compiles, differs from the original AST, and makes at least one
visible test fail within a step budget (mutants that loop are dropped, so every run ends fast);
`valid_mutations(task)` lists the kept ones, computed once per task in process (no sandbox:
mini_swe_inprocess); `by_operator(task)` groups them by operator, which is how `reset` draws one
(an operator, then a site: mini_swe.py).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import threading

from environments.mini_swe_inprocess import run_in_process
from environments.mini_swe_task import Task



OPERATORS = ("off_by_one", "flipped_comparison", "wrong_operator", "swapped_arguments",
             "wrong_constant", "dropped_branch", "wrong_return")


@dataclasses.dataclass(frozen=True)
class Mutation:
    """Lines start..end (1-based, inclusive) of `path` replaced by `new_lines`."""

    operator: str
    path: str
    start: int
    end: int
    old_lines: tuple[str, ...]
    new_lines: tuple[str, ...]
    description: str

    def apply(self, source: str) -> str:
        lines = source.split("\n")
        return "\n".join(lines[:self.start - 1] + list(self.new_lines) + lines[self.end:])


_COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
                 ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
                 ast.IsNot: "is not"}
_FLIPS = {"<": ("<=", ">="), "<=": ("<", ">"), ">": (">=", "<="), ">=": (">", "<"),
          "==": ("!=",), "!=": ("==",), "in": ("not in",), "not in": ("in",),
          "is": ("is not",), "is not": ("is",)}
_BINOP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
               ast.Mod: "%", ast.Pow: "**"}
_OPERATOR_SWAPS = {"+": ("-",), "-": ("+",), "*": ("+",), "/": ("//", "*"), "//": ("/", "%"),
                   "%": ("//",), "**": ("*",), "and": ("or",), "or": ("and",)}


def _middle_token(line: str, c0: int, c1: int, token: str) -> tuple[int, int] | None:
    """Columns of `token` (an operator, as a whole word for keywords) in line[c0:c1]: the text
    between two operands, which holds only the operator, spaces and parentheses."""
    middle = line[c0:c1]
    if middle.replace("(", "").replace(")", "").split() != token.split():
        return None
    # the operator is the middle with its parentheses and spaces stripped
    stripped = middle.strip(" ()")
    offset = middle.index(stripped)
    return c0 + offset, c0 + offset + len(stripped)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                out.add(id(body[0].value))
    return out


def _inside_fstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.update(id(n) for n in ast.walk(node))
    return out


def _wrong_constants(value) -> list:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return sorted({0, value + 2, 2 * value} - {value - 1, value, value + 1})
    if isinstance(value, float):
        return sorted({0.0, 2 * value} - {value})
    if isinstance(value, str):
        if not value:
            return [" "]
        if len(value) > 1:
            return [value[:-1]]
        swaps = {" ": "_", ",": ";", "-": "_", "_": "-", ".": ",", ";": ",", "=": ":", "$": "#"}
        if value in swaps:
            return [swaps[value]]
        if value.isalpha():
            return [value.swapcase()]
        if value.isdigit():
            return [str((int(value) + 5) % 10)]
        return ["?"]
    return []


def _candidates(path: str, source: str) -> list[Mutation]:
    """Every candidate single-site mutation of `source` (not yet checked against the tests)."""
    tree = ast.parse(source)
    lines = source.split("\n")
    skip = _docstring_nodes(tree) | _inside_fstrings(tree)
    parents = {}
    functions = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for sub in ast.walk(node):
                functions.setdefault(id(sub), node)
    out: list[Mutation] = []

    def text(node) -> str:
        return lines[node.lineno - 1][node.col_offset:node.end_col_offset]

    def one_line(node) -> bool:
        return node.lineno == node.end_lineno

    def replace(operator, line_no, c0, c1, new, what):
        line = lines[line_no - 1]
        new_line = line[:c0] + new + line[c1:]
        if new_line != line:
            out.append(Mutation(operator, path, line_no, line_no, (line,), (new_line,),
                                f"{what} on line {line_no}"))

    def drop(operator, first, last, what):
        out.append(Mutation(operator, path, first, last, tuple(lines[first - 1:last]), (),
                            f"{what} (lines {first}-{last})"))

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and one_line(node):
            value = node.value
            if isinstance(value, int) and not isinstance(value, bool):
                for new in (value + 1, value - 1):
                    replace("off_by_one", node.lineno, node.col_offset, node.end_col_offset,
                            repr(new), f"{value} -> {new}")
            for new in _wrong_constants(value):
                literal = repr(new)
                if isinstance(new, str) and text(node).startswith('"'):
                    literal = json.dumps(new)  # keep the module's quote style
                replace("wrong_constant", node.lineno, node.col_offset, node.end_col_offset,
                        literal, f"constant {value!r} -> {new!r}")
        bounds = []
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "range" and node.args):
            bounds.append(node.args[1] if len(node.args) > 1 else node.args[0])
        if isinstance(node, ast.Slice):
            bounds += [b for b in (node.lower, node.upper) if b is not None]
        for bound in bounds:
            if isinstance(bound, ast.Constant) or not one_line(bound) or id(bound) in skip:
                continue
            atomic = isinstance(bound, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
            body = text(bound) if atomic else f"({text(bound)})"
            for sign in ("+", "-"):
                replace("off_by_one", bound.lineno, bound.col_offset, bound.end_col_offset,
                        f"{body} {sign} 1", f"bound {text(bound)} {sign} 1")
        if isinstance(node, ast.Compare) and one_line(node):
            operands = [node.left] + node.comparators
            for i, op in enumerate(node.ops):
                token = _COMPARE_TEXT[type(op)]
                span = _middle_token(lines[node.lineno - 1], operands[i].end_col_offset,
                                     operands[i + 1].col_offset, token)
                if span is None:
                    continue
                for new in _FLIPS[token]:
                    replace("flipped_comparison", node.lineno, *span, new, f"{token} -> {new}")
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and one_line(node):
            token = _BINOP_TEXT.get(type(node.op))
            left = node.left if isinstance(node, ast.BinOp) else node.target
            right = node.right if isinstance(node, ast.BinOp) else node.value
            if token is not None:
                full = token if isinstance(node, ast.BinOp) else token + "="
                span = _middle_token(lines[node.lineno - 1], left.end_col_offset,
                                     right.col_offset, full)
                for new in _OPERATOR_SWAPS.get(token, ()) if span else ():
                    new_full = new if isinstance(node, ast.BinOp) else new + "="
                    replace("wrong_operator", node.lineno, *span, new_full,
                            f"{full} -> {new_full}")
        if isinstance(node, ast.BoolOp) and one_line(node):
            token = "and" if isinstance(node.op, ast.And) else "or"
            for a, b in zip(node.values, node.values[1:]):
                span = _middle_token(lines[node.lineno - 1], a.end_col_offset, b.col_offset, token)
                if span:
                    replace("wrong_operator", node.lineno, *span, _OPERATOR_SWAPS[token][0],
                            f"{token} -> {_OPERATOR_SWAPS[token][0]}")
        if (isinstance(node, ast.Call) and one_line(node) and len(node.args) >= 2
                and not any(isinstance(a, ast.Starred) for a in node.args[:2])):
            a, b = node.args[0], node.args[1]
            if text(a) != text(b):
                line = lines[node.lineno - 1]
                swapped = text(b) + line[a.end_col_offset:b.col_offset] + text(a)
                replace("swapped_arguments", node.lineno, a.col_offset, b.end_col_offset,
                        swapped, f"arguments {text(a)}, {text(b)} swapped")
        if isinstance(node, ast.FunctionDef) and len(node.args.args) >= 2:
            a, b = node.args.args[0], node.args.args[1]
            if a.lineno == b.lineno == node.lineno and a.annotation is None:
                line = lines[node.lineno - 1]
                swapped = b.arg + line[a.end_col_offset:b.col_offset] + a.arg
                replace("swapped_arguments", node.lineno, a.col_offset, b.end_col_offset,
                        swapped, f"parameters of {node.name} swapped")
        if isinstance(node, ast.If):
            parent = parents.get(id(node))
            header = lines[node.lineno - 1].lstrip()
            siblings = getattr(parent, "body", []) + getattr(parent, "orelse", [])
            if header.startswith("if ") and not node.orelse and len(siblings) > 1 \
                    and node in getattr(parent, "body", []):
                drop("dropped_branch", node.lineno, node.end_lineno, "if statement removed")
            if header.startswith("elif "):
                drop("dropped_branch", node.lineno, node.body[-1].end_lineno, "elif removed")
            if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
                                    and lines[node.orelse[0].lineno - 1].lstrip()
                                    .startswith("elif ")):
                else_line = node.orelse[0].lineno - 1
                if lines[else_line - 1].strip() == "else:":
                    drop("dropped_branch", else_line, node.orelse[-1].end_lineno,
                         "else clause removed")
        if isinstance(node, ast.IfExp) and one_line(node):
            for branch in (node.body, node.orelse):
                replace("dropped_branch", node.lineno, node.col_offset, node.end_col_offset,
                        text(branch), f"conditional expression -> {text(branch)}")
        if isinstance(node, ast.Return) and node.value is not None and one_line(node.value):
            value = node.value
            function = functions.get(id(node))
            news = []
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                news.append(repr(not value.value))
            elif isinstance(value, ast.Name) and function is not None:
                local = [a.arg for a in function.args.args]
                local += [n.id for n in ast.walk(function)
                          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
                news += sorted(set(local) - {value.id})[:3]
            elif isinstance(value, (ast.Compare, ast.BoolOp)):
                news.append(f"not ({text(value)})")
            elif isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not):
                news.append(text(value.operand))
            elif function is not None and function.args.args:
                news.append(function.args.args[0].arg)
            for new in news:
                replace("wrong_return", value.lineno, value.col_offset, value.end_col_offset,
                        new, f"return {text(value)} -> return {new}")
    return out


_VALID: dict[tuple, tuple[tuple[Mutation, tuple[str, ...]], ...]] = {}
_VALID_LOCK = threading.Lock()


def valid_mutations(task: Task) -> tuple[tuple[Mutation, tuple[str, ...]], ...]:
    """The task's kept mutations (module docstring) with the visible tests each makes fail, in a
    fixed order; computed once per task and process."""
    key = (task.name, task.files, task.target)
    if key in _VALID:
        return _VALID[key]
    with _VALID_LOCK:
        if key in _VALID:
            return _VALID[key]
        source = task.sources[task.target]
        original = ast.dump(ast.parse(source))
        kept = []
        seen = set()
        for mutation in _candidates(task.target, source):
            mutant = mutation.apply(source)
            if mutant in seen:
                continue
            seen.add(mutant)
            try:
                if ast.dump(ast.parse(mutant)) == original:
                    continue
            except SyntaxError:
                continue
            outcome = run_in_process(task, {**task.sources, task.target: mutant})
            if outcome.looped or not outcome.failed:
                continue
            kept.append((mutation, outcome.failed))
        _VALID[key] = tuple(kept)
        return _VALID[key]


def by_operator(task: Task) -> dict[str, list[tuple[Mutation, tuple[str, ...]]]]:
    out: dict[str, list] = {op: [] for op in OPERATORS}
    for mutation, failing in valid_mutations(task):
        out[mutation.operator].append((mutation, failing))
    return {op: v for op, v in out.items() if v}
