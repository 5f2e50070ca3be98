"""mini-SWE: repair a planted bug in a small Python repository, SWE-agent style, in a sandbox.

The SWE setting of RTMC (§4, R2E-Gym tools) and PATR (App. A-B, SWE-bench) shrunk to seconds per
episode: a task is one module of the built-in bank (environments/mini-swe-tasks/, read by
mini_swe_tasks; a helper and a main module for two-file tasks) with one seeded bug
(mini_swe_mutations) that makes its visible tests fail; the agent inspects, edits, tests and
submits, and wins when the task's hidden cases (function, arguments, expected value) pass at
`submit`.

Tasks. `reset(seed)` draws, from self.rng: the module (uniformly from the split's modules; a
two-file task with probability `two_file`), a mutation operator (uniformly among those of
`operators` with at least one valid site in the module) and a site (uniformly among that
operator's valid mutations, mini_swe_mutations.valid_mutations, that some hidden case catches:
a bug every hidden case passes would pay unrepaired; the bank has none), each from a list in a fixed
order (modules in the bank's order.txt order), so the same seed always gives the same task.
`split="train"` (default) draws from the training modules, `split="test"` from the fixed held-out
ones (mini_swe_tasks.SPLITS; configure evaluations with `env.eval_options: {split: test}`).
`module=` pins one module (tests, demos). `task_dir=` draws from tasks of your own code instead
of the bank, written in the bank's format (mini_swe_tasks): one subdirectory per task with its
Python files, one visible `test_*.py` file and an optional `task.json` (main module, bug target,
hidden cases, split); every task of the split is drawn alike; the same mutation operators plant
the bug.

Actions (one per turn; chat style wraps them in <answer></answer>, compact style writes them bare)
  view FILE [START END]   FILE with line numbers, or lines START..END (END may pass the end);
  search PATTERN [FILE]   lines containing the literal PATTERN, in FILE or in every file (quote a
                          pattern with spaces: search "a b" x.py); at most 30 matches shown;
  edit FILE START END     lines START..END replaced by the lines that follow the command line
                          (none: the lines are deleted; END = START - 1 inserts before START);
  run_tests [TEST_NAME]   the visible test file (or one test function) in the sandbox;
  submit                  ends the episode: the hidden tests decide success.
Parsing is lenient about case of the command word, whitespace, `START-END` / `START:END` ranges,
`run tests` / `run-tests`, and a ``` fence around an edit's lines; it is strict about content. The
parsed action is a `Command`; `format_action` writes its canonical text. Paths are plain file
names of the repository: absolute paths, `..`, symbolic links and unknown files are illegal.

Rewards and info. `submit` earns 1.0 when every hidden case returns its expected value, else 0.0,
and ends the episode. Its run gets the source files and the cases' inputs only (no test file, no
expected value); each value comes back through the runner's strict encoder and is compared on
the host with exact types (mini_swe_verdict), so nothing the code prints, raises or patches turns
a failed case into a pass. `run_tests` output and counts are what the run reports: code under test
can forge them, but not the reward of `submit` nor `validation`, which also needs the host's
verdict on the hidden cases. Other legal actions
earn 0.0; malformed or illegal text earns `format_penalty`, leaves the repository unchanged and
shows an error message as the observation. A run stopped by a sandbox limit (hostile or runaway
code: a fork bomb, an infinite loop, 1 GB of output, `rm -rf`, a socket) is a legal turn whose
tests count as failed: it costs that turn and nothing else, and
`info["sandbox"]` names the limit ("timeout", "cpu", "memory", "output", "process", "network",
"filesystem", "crash"; mini_swe_sandbox). `info` also has `validation` (RTMC §3.4's indicator:
True on a run_tests turn whose selected tests all pass after a modification not yet validated
and whose hidden cases all pass on the host's verdict, once per modification, so repeated runs
earn no repeated shaping), `tests_passed` /
`tests_failed` (of the turn's run, None otherwise; at `submit`, the hidden cases that passed and
failed), `subprocess_seconds` (the wall time of the turn's sandboxed run, 0.0 for a turn without
one or a cached run: what the sandbox costs a rollout, summed by the rollout engine), and the
metrics `edits`, `test_runs`, `two_file`, `fixed` (every source file is again the original
program: AST-equal) and `task`.
`info["valid"]` is RTMC's step validity (the text parsed to a legal command).

Observations are the tool output, cut to `max_output_chars` with a `[... truncated N chars]` marker
(head and tail kept); chat style adds the turns left.

Sandbox (mini_swe_sandbox): every episode has its own directory, removed on `close()`, garbage
collection or interpreter exit; `clone()` copies it. Code runs only in `run_tests` and `submit`:
in a subprocess under rlimits, a wall-clock timeout, network and PID namespaces (every process of
a run dies with it), an unprivileged uid when the host is root, Landlock (reads confined to the
run directory and the interpreter's files, no execve) and a seccomp filter (no sockets), the
kernel-enforced layers `Sandbox.isolation()` lists; and an audit hook, diagnostics that Python
code can switch off (`strict_sandbox=False` leaves hostile calls to the kernel layers alone; see
docs/threat_model.md). Runs see a copy of the repository, so code cannot change the
episode's files: only `edit` does. Identical runs (same files, same selection) are cached per
process (`cache_runs`), except runs that hit the time or CPU limit.

Method queries
  oracle_action   the inverse mutation as a script, from any state: while some source file differs
                  from the original (difflib hunks; a file AST-equal to its original counts as
                  restored): view the first hunk's lines (+-3) unless they were seen (viewed or
                  shown by a search) since that file's last edit, then edit the hunk back; once
                  restored: run_tests unless a run completed since the last edit, then submit. It
                  solves every task in 4 turns (view, edit, run_tests, submit).
  verify(a)       True when `a` is a step of an optimal fix path from the current state, read as
                  follows: the fix path restores the original program, after gathering evidence
                  for each hunk and followed by a test run and submit. Unrestored: an edit that
                  lowers the number of differing hunks, or a view/search that shows a hunk line not
                  yet seen. Restored: run_tests if no run completed since the last edit, and submit.
                  Everything else is False (repeats, off-target views, reproduction runs, an
                  alternative fix that differs from the original program, even one that passes).
  process_score   PATR App. B's SWE heuristic on the episode so far, starting at 0.5:
                    +0.10 evidence collected (a valid view, a search with matches, or a test run
                          that showed failures);
                    +0.10 at least one edit, every edit preceded by evidence gathered since the
                          previous edit (or the start);
                    -0.15 per blind edit (no evidence since the previous edit), at most 2;
                    +0.05 an error signal observed (a failing test run's traceback);
                    +0.10 tests ran after the last edit (targeted verification), and +0.15 more when
                          that run passed;
                    -0.10 per repeated action (same canonical text as an earlier turn with no edit
                          in between), at most 3;
                    -0.05 per failed turn (invalid, or stopped by a sandbox limit), at most 4;
                  clipped to [0, 1]; 1.0 once solved, 0.0 once the episode ended otherwise
                  (premature or wrong submit, or truncation). Oracle play scores 0.5, 0.6, 0.7,
                  0.95, 1.0.
  turn_score(a)   the reward a clone receives (as the base class), computed without running code
                  for everything but submit (their reward never depends on the run).
  state_signature RTMC §4.2: `file:OPS|...|T<passed runs>/<failed runs>`, files sorted, OPS the
                  sorted set of Vf (full view), V[b] (100-line bucket b = line // 100 viewed), S
                  (searched, or matched by a repository search), M:xxxx / I:xxxx (replace / pure
                  insertion, 4 hex of md5(old text + "\\0" + new text) of the change: the edited
                  range and its new lines without the lines they share at either end, so edits
                  with the same effect hash alike; `edit_change`). Order-invariant, so
                  equivalent histories match at any depth; first visit is explicit: the k-th
                  revisit of a signature within an episode (a repeated view, an invalid turn)
                  appends "#k", so no signature repeats within an episode.
  action_signature the canonical text of the action with its path normalised (`./a.py` is
                  `a.py`: one transition, one signature; the protocol of environments/base.py,
                  which PRM replays and PATR's repeat detection read); `action_signatures="rtmc"`
                  gives RTMC §4.1's `category:scope@target[:result]` instead: view:full@f /
                  view:partial[b0-b1]@f, search:<hash>@f (or @*), modify:replace|insert:<hash>@f
                  (the state's M:/I: hash of the change, old and new text), test:all:ok /
                  test:NAME:error (:ok when every selected test passed, :error otherwise or when a
                  limit stopped the run), finish. Signatures are read after the step (the
                  `action_signature` label, jaxtree/rollout/labels.py): the turn just played gives
                  its change and its result; an action not yet played has no result suffix, and an
                  edit is hashed from the state it would meet (without an episode, from its range
                  and new text).
  canonical_state a digest of the files, the lines seen and whether tests ran since the last edit.

Parameters: split="train", two_file=0.0, operators=None (all of mini_swe_mutations.OPERATORS),
module=None, max_steps=12, format_penalty=-0.1, max_output_chars=2000, time_limit=10.0 (s, wall),
cpu_limit=3 (s), memory_mb=512, strict_sandbox=True, cache_runs=True, action_signatures="text",
style="chat".
"""

from __future__ import annotations

import ast
import collections
import copy
import dataclasses
import difflib
import functools
import hashlib
import os
import re
import shlex
import stat
import threading

import numpy as np

from environments import mini_swe_mutations as mutations
from environments import mini_swe_tasks as tasks
from environments.base import TextEnv, is_int
from environments.mini_swe_inprocess import run_in_process
from environments.mini_swe_sandbox import Sandbox, Workspace

KINDS = ("view", "search", "edit", "run_tests", "submit")
MAX_SEARCH_MATCHES = 30
MAX_FILE_BYTES = 256 * 1024
MAX_EDIT_CHARS = 20_000
CONTEXT = 3  # lines around an edit shown after it, and around a hunk in the oracle's view

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RANGE = re.compile(r"(\d+)\s*[-:]\s*(\d+)")
_TEST_DEF = re.compile(r"^def (test\w*)\s*\(", re.MULTILINE)
_FENCE = re.compile(r"^\s*```[\w+-]*\s*$")


@dataclasses.dataclass(frozen=True)
class Command:
    """A parsed action: `kind` is one of KINDS; view uses path (and start, end); search text
    (the pattern) and path; edit path, start, end and text (the new lines, "\\n"-joined);
    run_tests text (a test name) or nothing; submit nothing."""

    kind: str
    path: str | None = None
    start: int | None = None
    end: int | None = None
    text: str | None = None


def _is_path_token(value) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= 200 and value.isprintable()
            and not any(c.isspace() for c in value))


def _looks_like_path(token: str) -> bool:
    return token.endswith(".py") or "/" in token


def _h4(text: str) -> str:
    return hashlib.md5(text.encode("utf-8", "surrogatepass")).hexdigest()[:4]


@functools.lru_cache(maxsize=8192)
def _ast_dump(text: str) -> str | None:
    try:
        return ast.dump(ast.parse(text))
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=8192)
def _hunks(current: str, original: str) -> tuple[tuple[str, int, int, int, int], ...]:
    """difflib opcodes (tag, i1, i2, j1, j2) turning current lines into original lines, without
    the equal ones; () when the two are the same program (AST-equal)."""
    if current == original or _ast_dump(current) == _ast_dump(original) is not None:
        return ()
    matcher = difflib.SequenceMatcher(None, _lines(current), _lines(original),
                                      autojunk=False)
    return tuple(op for op in matcher.get_opcodes() if op[0] != "equal")


def _lines(text: str) -> list[str]:
    """The lines of a file (a final newline ends the last line; it does not start another)."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _apply_edit(text: str, start: int, end: int, new: str) -> str:
    lines = _lines(text)
    replacement = new.split("\n") if new else []
    lines = lines[:start - 1] + replacement + lines[end:]
    return "\n".join(lines) + "\n" if lines else ""


def _numbered(lines: list[str], first: int, last: int) -> str:
    width = len(str(last))
    return "\n".join(f"{n:>{width}} | {lines[n - 1]}" for n in range(first, last + 1))


def truncate(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters: its head and tail around an explicit
    `[... truncated N chars]` marker."""
    if len(text) <= limit:
        return text
    head = (2 * limit) // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... truncated {cut} chars]\n{text[len(text) - tail:]}"


class _RunCache:
    """Results of identical runs, shared by all environments of the process (bounded LRU)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._data: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            while len(self._data) > self.size:
                self._data.popitem(last=False)


_RUNS = _RunCache()


_CAUGHT: dict[tuple, dict] = {}
_CAUGHT_LOCK = threading.Lock()


def _caught_mutations(task: tasks.Task) -> dict[str, list]:
    """mini_swe_mutations.by_operator(task) without the mutations every hidden case passes:
    `submit` pays on the hidden cases alone, so such a bug would pay unrepaired (checked in
    process, once per task and process; the bank has none, tests/test_mini_swe.py)."""
    key = (task.name, task.files, repr(task.hidden))
    if key not in _CAUGHT:
        with _CAUGHT_LOCK:
            if key not in _CAUGHT:
                source = task.sources[task.target]
                _CAUGHT[key] = {op: kept for op, kept in (
                    (op, [(m, failing) for m, failing in found
                          if _fails_hidden(task, {**task.sources, task.target: m.apply(source)})])
                    for op, found in mutations.by_operator(task).items()) if kept}
    return _CAUGHT[key]


def _fails_hidden(task: tasks.Task, sources: dict[str, str]) -> bool:
    """Some hidden case fails on `sources` (a value, or a loop: in the sandbox a limit stops it)."""
    outcome = run_in_process(task, sources, hidden=True)
    return bool(outcome.hidden_failed or outcome.looped)


@functools.lru_cache(maxsize=16)
def _task_directory(path: str) -> dict[str, tuple[tasks.Task, ...]]:
    """A task directory's tasks, read and checked once per process (every environment of a run
    shares them)."""
    return tasks.load_task_directory(path)


@dataclasses.dataclass(frozen=True)
class _Turn:
    """What process_score reads of one turn."""

    text: str | None          # canonical text (None: malformed)
    kind: str | None
    valid: bool
    evidence: bool            # a view, a search with matches, a failing test run
    edit: bool
    blind: bool               # an edit without evidence since the previous edit
    tests: bool | None        # a completed test run: all passed?
    error_signal: bool        # a test run that showed failures
    limited: bool             # stopped by a sandbox limit


class MiniSWE(TextEnv):
    """Fix the planted bug (module docstring)."""

    name = "mini_swe"
    action_spec = "a mini_swe Command (view, search, edit, run_tests or submit)"
    system_prompt = ("You are an expert software engineer fixing a bug in a small Python "
                     "repository. Inspect the code, make a minimal fix, check it with the tests, "
                     "then submit. Give exactly one command per turn inside <answer></answer> "
                     "tags.")

    def __init__(self, *, style: str = "chat", max_steps: int = 12, format_penalty: float = -0.1,
                 split: str = "train", two_file: float = 0.0, operators=None,
                 module: str | None = None, max_output_chars: int = 2000,
                 time_limit: float = 10.0, cpu_limit: int = 3, memory_mb: int = 512,
                 strict_sandbox: bool = True, cache_runs: bool = True,
                 action_signatures: str = "text", task_dir: str | None = None):
        super().__init__(style=style, max_steps=max_steps, format_penalty=format_penalty)
        if split not in tasks.SPLITS:
            raise ValueError(f"split={split!r}: expected one of {sorted(tasks.SPLITS)}")
        if isinstance(two_file, bool) or not isinstance(two_file, (int, float)) \
                or not 0.0 <= two_file <= 1.0:
            raise ValueError(f"two_file={two_file!r}: expected a fraction in [0, 1]")
        operators = tuple(mutations.OPERATORS if operators is None else operators)
        unknown = [op for op in operators if op not in mutations.OPERATORS]
        if unknown or not operators:
            raise ValueError(f"operators={operators!r}: expected a non-empty subset of "
                             f"{mutations.OPERATORS}")
        # Tasks of your own code (tasks.load_task_directory); the bank otherwise.
        self._own: dict[str, tasks.Task] | None = None
        if task_dir is not None:
            if two_file:
                raise ValueError(f"two_file={two_file!r}: chooses among the built-in bank; "
                                 "with task_dir every task of the split is drawn alike")
            by_split = _task_directory(os.path.abspath(task_dir))
            self._own = {t.name: t for t in by_split[split]}
            if not self._own:
                raise ValueError(f"task_dir={task_dir!r} has no task of split={split!r}")
        self._tasks = tasks.TASKS if self._own is None else self._own  # name -> Task drawn from
        if module is not None and module not in self._tasks:
            raise ValueError(f"module={module!r}: expected one of {sorted(self._tasks)}")
        if action_signatures not in ("text", "rtmc"):
            raise ValueError(f"action_signatures={action_signatures!r}: expected 'text' or "
                             "'rtmc'")
        if max_output_chars < 200:
            raise ValueError(f"max_output_chars={max_output_chars} must be at least 200")
        self.split = split
        self.two_file = float(two_file)
        self.operators = operators
        self.module = module
        self.max_output_chars = int(max_output_chars)
        self.cache_runs = bool(cache_runs)
        self.action_signatures = action_signatures
        self.sandbox = Sandbox(time_limit=time_limit, cpu_limit=cpu_limit, memory_mb=memory_mb,
                               strict=strict_sandbox)
        self._workspace: Workspace | None = None
        self.task: tasks.Task | None = None
        self.mutation: mutations.Mutation | None = None
        self._failing: tuple[str, ...] = ()
        self._files: dict[str, str] = {}
        self._seen: dict[str, frozenset] = {}
        self._ops: dict[str, frozenset] = {}
        self._test_counts = (0, 0)
        self._visits: dict[str, int] = {}
        self._visit = 0
        self._history: list[_Turn] = []
        self._tested = False        # a test run completed since the last edit
        self._unvalidated = False   # an edit not yet followed by a passing run
        self._output: str | None = None
        self._step: dict = {}
        self._played: tuple | None = None  # (command, edit change, test result) of the last turn
        self._edits = 0
        self._test_runs = 0

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Removes the episode directory; the environment holds no episode until reset."""
        if self._workspace is not None:
            self._workspace.close()
            self._workspace = None
        self._ready = False
        self.done = True

    def _reset_game(self, seed: int) -> None:
        del seed  # self.rng is seeded with it
        if self._workspace is not None:
            self._workspace.close()
            self._workspace = None
        self.task, self.mutation, self._failing = self._draw_task()
        original = self.task.sources
        self._files = dict(original)
        self._files[self.task.target] = self.mutation.apply(original[self.task.target])
        self._workspace = Workspace(self._files)
        self._seen = {name: frozenset() for name in self._files}
        self._ops = {}
        self._test_counts = (0, 0)
        self._visits = {}
        self._history = []
        self._tested = False
        self._unvalidated = False
        self._output = None
        self._step = {}
        self._played = None
        self._edits = 0
        self._test_runs = 0
        self._visit_state()

    def _draw_task(self):
        singles, pairs = tasks.SPLITS[self.split]
        if self.module is not None:
            pool = (self.module,)
        elif self._own is not None:
            pool = tuple(self._own)
        elif self.two_file >= 1.0 or (self.two_file > 0.0 and self.rng.random() < self.two_file):
            pool = pairs
        else:
            pool = singles
        for _ in range(1000):
            task = self._tasks[pool[int(self.rng.integers(len(pool)))]]
            available = _caught_mutations(task)
            operators = [op for op in self.operators if op in available]
            if operators:
                break
        else:
            raise ValueError(f"no module of {pool} has a mutation of operators {self.operators} "
                             "that its hidden cases catch")
        operator = operators[int(self.rng.integers(len(operators)))]
        mutation, failing = available[operator][int(self.rng.integers(len(available[operator])))]
        return task, mutation, failing

    def __deepcopy__(self, memo):
        """copy.deepcopy works too (clone() is the cheap way): the copy gets its own directory."""
        other = object.__new__(type(self))
        memo[id(self)] = other
        for key, value in self.__dict__.items():
            if key != "_workspace":
                other.__dict__[key] = copy.deepcopy(value, memo)
        other._workspace = (Workspace(other._files)
                            if self._ready and self._workspace is not None else None)
        return other

    def _copy_state(self, other: MiniSWE) -> None:
        other._files = dict(self._files)
        other._workspace = Workspace(other._files)
        other._seen = dict(self._seen)
        other._ops = dict(self._ops)
        other._visits = dict(self._visits)
        other._history = list(self._history)
        other._step = dict(self._step)

    # ------------------------------------------------------------------ actions

    def _parse(self, content: str) -> Command | None:
        command = self._parse_command(content)
        return command if command is not None and self._is_action(command) else None

    def _parse_command(self, content: str) -> Command | None:
        content = content.replace("\r\n", "\n").replace("\r", "\n")
        lines = content.split("\n")
        if len(lines) > 1 and _FENCE.match(lines[0]) and lines[-1].strip() == "```":
            lines = lines[1:-1]  # the whole command fenced
        while lines and not lines[0].strip():
            lines = lines[1:]
        if not lines:
            return None
        header, rest = lines[0].strip(), lines[1:]
        words = header.split()
        command = words[0].lower()
        args = words[1:]
        if command == "run" and args and args[0].lower() == "tests":
            command, args = "run_tests", args[1:]
        elif command in ("run-tests", "runtests"):
            command = "run_tests"
        if command == "edit":
            return self._parse_edit(args, rest)
        if any(line.strip() for line in rest):
            return None
        if command == "view":
            if len(args) == 1:
                return Command("view", args[0])
            span = self._parse_span(args[1:])
            if span is None or not _is_path_token(args[0]) or span[1] < span[0]:
                return None
            return Command("view", args[0], *span)
        if command == "search":
            remainder = header[len(words[0]):].strip()
            try:
                tokens = shlex.split(remainder)
            except ValueError:
                tokens = [remainder]
            if not tokens:
                return None
            path = None
            if len(tokens) >= 2 and _looks_like_path(tokens[-1]):
                path, tokens = tokens[-1], tokens[:-1]
            pattern = " ".join(tokens)
            if not pattern:
                return None
            return Command("search", path, text=pattern)
        if command == "run_tests":
            if not args:
                return Command("run_tests")
            if len(args) == 1 and _NAME.fullmatch(args[0]):
                return Command("run_tests", text=args[0])
            return None
        if command == "submit" and not args:
            return Command("submit")
        return None

    @staticmethod
    def _parse_span(args: list[str]) -> tuple[int, int] | None:
        if len(args) == 2 and args[0].isdigit() and args[1].isdigit():
            return int(args[0]), int(args[1])
        if len(args) == 1:
            match = _RANGE.fullmatch(args[0])
            if match:
                return int(match.group(1)), int(match.group(2))
        return None

    def _parse_edit(self, args: list[str], rest: list[str]) -> Command | None:
        span = self._parse_span(args[1:]) if args else None
        if span is None or not _is_path_token(args[0]):
            return None
        start, end = span
        if start < 1 or end < start - 1:
            return None
        if rest and _FENCE.match(rest[0]):
            rest = rest[1:]
            if rest and rest[-1].strip() == "```":
                rest = rest[:-1]
        while rest and not rest[-1].strip():
            rest = rest[:-1]
        return Command("edit", args[0], start, end, "\n".join(rest).rstrip())

    def _is_action(self, action) -> bool:
        if not isinstance(action, Command) or action.kind not in KINDS:
            return False
        kind, path, start, end, text = (action.kind, action.path, action.start, action.end,
                                        action.text)
        if kind == "view":
            if text is not None or not _is_path_token(path):
                return False
            if start is None and end is None:
                return True
            return is_int(start) and is_int(end) and 1 <= start <= end
        if kind == "search":
            return (start is None and end is None
                    and (path is None or (_is_path_token(path) and _looks_like_path(path)))
                    and isinstance(text, str) and text != "" and "\n" not in text
                    and "\r" not in text and "\x00" not in text)
        if kind == "edit":
            if not (_is_path_token(path) and is_int(start) and is_int(end) and start >= 1
                    and end >= start - 1 and isinstance(text, str)):
                return False
            lines = text.split("\n")
            return (text == text.rstrip() and "\r" not in text and "\x00" not in text
                    and not (text and (_FENCE.match(lines[0]) or not lines[-1].strip())))
        if kind == "run_tests":
            return (path is None and start is None and end is None
                    and (text is None or (isinstance(text, str) and bool(_NAME.fullmatch(text)))))
        return path is None and start is None and end is None and text is None  # submit

    def _format_action(self, action: Command) -> str:
        kind = action.kind
        if kind == "view":
            if action.start is None:
                return f"view {action.path}"
            return f"view {action.path} {action.start} {action.end}"
        if kind == "search":
            pattern = shlex.quote(action.text)
            return f"search {pattern}" + (f" {action.path}" if action.path else "")
        if kind == "edit":
            header = f"edit {action.path} {action.start} {action.end}"
            return f"{header}\n{action.text}" if action.text else header
        if kind == "run_tests":
            return "run_tests" + (f" {action.text}" if action.text else "")
        return "submit"

    def action_signature(self, action) -> str:
        """The canonical text of the action with its path normalised (default), or RTMC §4.1's
        signature with action_signatures="rtmc", read in the state after the action's step
        (module docstring)."""
        if action is None or not self._is_action(action):
            return super().action_signature(action)
        action = self._normalized(action)
        if self.action_signatures == "text":
            return self._format_action(action)
        if self._ready and self._played is not None and self._played[0] == action:
            return rtmc_action_signature(action, *self._played[1:])
        change = None
        if action.kind == "edit" and self._ready and self._is_legal_safe(action):
            change = edit_change(self._files[self._name(action.path)], action.start, action.end,
                                 action.text)
        return rtmc_action_signature(action, change)

    @staticmethod
    def _normalized(action: Command) -> Command:
        if action.path is None or normal_path(action.path) == action.path:
            return action
        return dataclasses.replace(action, path=normal_path(action.path))

    # ------------------------------------------------------------------ paths

    def _file_error(self, path: str) -> str | None:
        """Why `path` is not a repository file the tools may touch (None: it is)."""
        if path.startswith(("/", "~", "\\")) or "\\" in path:
            return f"{path}: absolute paths are not allowed"
        parts = path.split("/")
        if ".." in parts:
            return f"{path}: paths outside the repository are not allowed"
        name = "/".join(p for p in parts if p not in ("", "."))
        repo = self._workspace.repo
        full = os.path.join(repo, name)
        try:
            info = os.lstat(full)
        except OSError:
            return f"{path}: no such file"
        if stat.S_ISLNK(info.st_mode):
            return f"{path}: symbolic links are not followed"
        real = os.path.realpath(full)
        if not real.startswith(os.path.realpath(repo) + os.sep):
            return f"{path}: outside the repository"
        if not stat.S_ISREG(info.st_mode) or name not in self._files:
            return f"{path}: no such file"
        return None

    def _name(self, path: str) -> str:
        return "/".join(p for p in path.split("/") if p not in ("", "."))

    def _read(self, name: str) -> str:
        """A repository file from disk (no symlinks followed; at most MAX_FILE_BYTES); the
        in-memory copy if the file vanished since the legality check."""
        try:
            fd = os.open(os.path.join(self._workspace.repo, name), os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                return f.read(MAX_FILE_BYTES).decode("utf-8", errors="replace")
        except OSError:
            return self._files[name]

    def _write(self, name: str, text: str) -> None:
        """Writes through to the directory (the in-memory copy, which runs use, is the truth: a
        file swapped for a symlink behind the environment's back is not followed)."""
        try:
            fd = os.open(os.path.join(self._workspace.repo, name),
                         os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        except OSError:
            pass

    def _illegal_reason(self, action: Command) -> str | None:
        kind = action.kind
        if kind in ("view", "edit") or (kind == "search" and action.path is not None):
            error = self._file_error(action.path)
            if error:
                return error
            lines = _lines(self._files[self._name(action.path)])
            n = len(lines)
            if kind == "view" and action.start is not None and action.start > max(n, 1):
                return f"{action.path} has {n} lines; START must be at most {n}"
            if kind == "edit":
                if action.start > n + 1 or action.end > n:
                    return f"{action.path} has {n} lines; edit needs START <= {n + 1}, END <= {n}"
                if len(action.text) > MAX_EDIT_CHARS:
                    return f"edits are limited to {MAX_EDIT_CHARS} characters"
        if (kind == "run_tests" and action.text is not None
                and action.text not in self._test_names()):
            return f"no test named {action.text} in {self.task.test_file}"
        return None

    def _test_names(self) -> list[str]:
        return _TEST_DEF.findall(self._files.get(self.task.test_file, ""))

    def _is_legal(self, action: Command) -> bool:
        return self._illegal_reason(action) is None

    # ------------------------------------------------------------------ dynamics

    def _invalid_outcome(self, action) -> tuple[float, bool, bool]:
        if action is None:
            self._output = ("Error: could not parse a command. Use one of: view FILE [START END], "
                            "search PATTERN [FILE], edit FILE START END (new lines below), "
                            "run_tests [TEST_NAME], submit.")
        else:
            self._output = f"Error: {self._illegal_reason(action) or 'illegal command'}"
        self._step = {}
        self._played = None
        text = None if action is None else self._format_action(action)
        self._record(_Turn(text, None if action is None else action.kind, False, False, False,
                           False, None, False, False))
        return self.format_penalty, False, False

    def _record(self, turn: _Turn) -> None:
        self._history.append(turn)
        self._visit_state()

    def _apply(self, action: Command) -> tuple[float, bool, bool]:
        self._step = {}
        self._played = (self._normalized(action), None, None)
        kind = action.kind
        text = self._format_action(action)
        if kind == "view":
            self._output, evidence = self._view(action)
            self._record(_Turn(text, kind, True, evidence, False, False, None, False, False))
            return 0.0, False, False
        if kind == "search":
            self._output, evidence = self._search(action)
            self._record(_Turn(text, kind, True, evidence, False, False, None, False, False))
            return 0.0, False, False
        if kind == "edit":
            blind = not self._evidence_since_edit()
            self._output = self._edit(action)
            self._record(_Turn(text, kind, True, False, True, blind, None, False, False))
            return 0.0, False, False
        if kind == "run_tests":
            result, seconds = self._run(select=action.text, hidden=False)
            self._test_runs += 1
            ok = result.all_passed
            self._played = (self._normalized(action), None, ok)
            passed_runs, failed_runs = self._test_counts
            self._test_counts = (passed_runs + ok, failed_runs + (not ok))
            validation = False
            if ok and self._unvalidated:
                # The visible run's counts are what the code under test reports (it can forge
                # them); the shaping bonus is paid only when the host's verdict on the hidden
                # cases agrees, so no printed report earns it.
                verdict, verify_seconds = self._run(select=None, hidden=True)
                seconds += verify_seconds
                validation = verdict.all_cases_passed
                self._unvalidated = not validation
            if result.limit not in ("timeout", "cpu"):
                self._tested = True
            self._step = {"sandbox": result.limit, "validation": validation,
                          "tests_passed": result.passed, "tests_failed": result.failed,
                          "subprocess_seconds": seconds}
            self._output = self._run_text(result)
            failing = result.failed > 0 and result.limit is None
            self._record(_Turn(text, kind, True, failing, False, False,
                               None if result.limit else ok, failing, result.limit is not None))
            return 0.0, False, False
        # submit
        result, seconds = self._run(select=None, hidden=True)
        success = result.all_cases_passed
        passed = sum(result.cases)
        failed = len(self.task.hidden) - passed
        self._step = {"sandbox": result.limit, "validation": False,
                      "tests_passed": passed, "tests_failed": failed,
                      "subprocess_seconds": seconds}
        verdict = "all hidden tests passed" if success else "the hidden tests did not pass"
        limit = f" (stopped by the sandbox: {result.limit})" if result.limit else ""
        self._output = f"Submitted: {verdict}{limit} ({passed} passed, {failed} failed)."
        self._record(_Turn(text, kind, True, False, False, False, None, False,
                           result.limit is not None))
        return (1.0 if success else 0.0), True, success

    def _evidence_since_edit(self) -> bool:
        for turn in reversed(self._history):
            if turn.edit:
                return False
            if turn.evidence:
                return True
        return False

    def _view(self, action: Command) -> tuple[str, bool]:
        name = self._name(action.path)
        lines = _lines(self._read(name))
        n = len(lines)
        if action.start is None:
            first, last = 1, n
            self._add_ops(name, {"Vf"})
        else:
            first, last = action.start, min(action.end, n)
            self._add_ops(name, {f"V[{b}]" for b in range(first // 100, last // 100 + 1)})
        self._see(name, range(first, last + 1))
        header = f"{name} (lines {first}-{last} of {n}):"
        return f"{header}\n{_numbered(lines, first, last)}", True

    def _matches(self, pattern: str, path: str | None) -> list[tuple[str, int, str]]:
        names = [self._name(path)] if path else sorted(self._files)
        out = []
        for name in names:
            for number, line in enumerate(_lines(self._files[name]), 1):
                if pattern in line:
                    out.append((name, number, line))
        return out

    def _search(self, action: Command) -> tuple[str, bool]:
        matches = self._matches(action.text, action.path)
        where = f" in {self._name(action.path)}" if action.path else ""
        if action.path:
            self._add_ops(self._name(action.path), {"S"})
        for name in sorted({m[0] for m in matches}):
            self._add_ops(name, {"S"})
        shown = matches[:MAX_SEARCH_MATCHES]
        for name, number, _ in shown:
            self._see(name, (number,))
        if not matches:
            return f"No matches for {action.text!r}{where}.", False
        lines = [f"{len(matches)} matches for {action.text!r}{where}:"]
        lines += [f"{name}:{number}: {line.strip()}" for name, number, line in shown]
        if len(matches) > len(shown):
            lines.append(f"[{len(matches) - len(shown)} more matches not shown]")
        return "\n".join(lines), True

    def _edit(self, action: Command) -> str:
        name = self._name(action.path)
        before = self._files[name]
        change = edit_change(before, action.start, action.end, action.text)
        after = _apply_edit(before, action.start, action.end, action.text)
        self._files[name] = after
        self._write(name, after)
        self._edits += 1
        self._tested = False
        self._unvalidated = True
        self._seen[name] = frozenset()
        self._add_ops(name, {f"{change[0]}:{_change_hash(change)}"})
        self._played = (self._normalized(action), change, None)
        new_count = len(action.text.split("\n")) if action.text else 0
        removed = action.end - action.start + 1
        new_lines = _lines(after)
        first = max(1, action.start - CONTEXT)
        last = min(len(new_lines), action.start + new_count - 1 + CONTEXT)
        message = (f"Edited {name}: {removed} line(s) at {action.start}-{action.end} replaced by "
                   f"{new_count} line(s). Lines {first}-{last} now:\n"
                   f"{_numbered(new_lines, first, last)}")
        if name.endswith(".py") and _ast_dump(after) is None:
            try:
                ast.parse(after)
            except SyntaxError as e:
                message += f"\nWarning: {name} no longer parses: {e.msg} (line {e.lineno})."
        return message

    def _run(self, select: str | None, hidden: bool):
        """The tests' result and the seconds spent in the sandbox's subprocess for it (0 when
        an identical run was cached)."""
        task = self.task
        if hidden:  # the hidden cases alone: the visible test file plays no part in the verdict
            files = {name: self._files[name] for name in task.source_files}
            cases = [(task.main,) + tuple(case) for case in task.hidden]
            tests = []
        else:
            files = dict(self._files)
            cases = []
            tests = [task.test_file[:-3]]
        key = None
        if self.cache_runs:
            digest = hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()
            sandbox = self.sandbox
            key = (digest, select, hidden and (task.name, repr(task.hidden)), sandbox.cpu_limit,
                   sandbox.memory_mb, sandbox.strict, sandbox.time_limit)
            cached = _RUNS.get(key)
            if cached is not None:
                return cached, 0.0
        result = self.sandbox.run(self._workspace.path, files, tests, select=select, cases=cases)
        if key is not None and result.limit not in ("timeout", "cpu"):
            _RUNS.put(key, result)
        return result, result.seconds

    def _run_text(self, result) -> str:
        text = result.output
        if result.limit:
            text = (f"[sandbox: the run was stopped ({result.limit})]\n" + text).rstrip()
        return text or "(no output)"

    def _add_ops(self, name: str, ops: set[str]) -> None:
        self._ops[name] = self._ops.get(name, frozenset()) | ops

    def _see(self, name: str, numbers) -> None:
        self._seen[name] = self._seen.get(name, frozenset()) | frozenset(numbers)

    def _visit_state(self) -> None:
        base = self._signature_base()
        self._visit = self._visits.get(base, 0)
        self._visits[base] = self._visit + 1

    # ------------------------------------------------------------------ rendering

    def _render(self, style: str | None) -> str:
        style = self._style(style)
        if self._output is None:
            return self._task_text(style)
        text = truncate(self._output, self.max_output_chars)
        if style == "compact":
            return text
        left = self.max_steps - self.num_steps
        return f"{text}\n\n(Turns left: {left}.)"

    def _task_text(self, style: str) -> str:
        names = sorted(self._files)
        failing = ", ".join(self._failing)
        if style == "compact":
            files = " ".join(f"{n}({len(_lines(self._files[n]))})" for n in names)
            return f"files: {files}\nfailing: {failing}"
        listing = "\n".join(f"  {n} ({len(_lines(self._files[n]))} lines)" for n in names)
        return (f"Repository files:\n{listing}\n\nIssue: tests in {self.task.test_file} fail "
                f"(failing: {failing}). The tests are correct; find the bug in the source code, "
                f"fix it, check the fix, and submit.\n\n(Turns left: "
                f"{self.max_steps - self.num_steps}.)")

    def instructions(self, style: str | None = None) -> str:
        if self._style(style) == "compact":
            return ("Fix the bug so the tests pass. Commands: view F [S E] | search P [F] | "
                    "edit F S E + new lines | run_tests [T] | submit")
        return ("You are fixing a bug in a small Python repository. Its test file fails; the bug "
                "is in the source code, not in the tests. Give one command per turn inside "
                "<answer></answer> tags:\n"
                "  view FILE [START END]   show FILE, or lines START to END, with line numbers\n"
                "  search PATTERN [FILE]   lines containing the text PATTERN (quote it if it has "
                "spaces), in FILE or in every file\n"
                "  edit FILE START END     replace lines START to END by the lines written below "
                "the command (no lines deletes them; END = START - 1 inserts before START)\n"
                "  run_tests [TEST_NAME]   run the test file, or one test function\n"
                "  submit                  finish: hidden tests decide whether the bug is fixed\n"
                "Example of an edit:\n<answer>edit util.py 3 3\n    return a + b\n</answer>\n"
                f"Outputs longer than {self.max_output_chars} characters are truncated. You have "
                f"at most {self.max_steps} turns. The reward is 1 if the hidden tests pass when "
                "you submit, else 0; malformed or impossible commands cost "
                f"{-self.format_penalty:g}.")

    # ------------------------------------------------------------------ state

    def _signature_base(self) -> str:
        files = "|".join(f"{name}:{','.join(sorted(ops))}" for name, ops in
                         sorted(self._ops.items()))
        passed, failed = self._test_counts
        return f"{files}|T{passed}/{failed}" if files else f"T{passed}/{failed}"

    def state_signature(self) -> str:
        """RTMC §4.2 signature with the explicit first-visit suffix (module docstring)."""
        if not self._ready:
            raise self._not_reset("state_signature")
        base = self._signature_base()
        return base if self._visit == 0 else f"{base}#{self._visit}"

    def _canonical_state(self) -> str:
        files = hashlib.sha1(repr(sorted(self._files.items())).encode()).hexdigest()[:16]
        seen = hashlib.sha1(repr(sorted((k, sorted(v)) for k, v in self._seen.items()))
                            .encode()).hexdigest()[:8]
        return f"files:{files}|seen:{seen}|tested:{int(self._tested)}"

    def _restoration(self) -> list[tuple[str, tuple]]:
        """(file, hunk) of every source file that is not yet the original program."""
        out = []
        for name in self.task.source_files:
            for hunk in _hunks(self._files[name], self.task.sources[name]):
                out.append((name, hunk))
        return out

    def _fixed(self) -> bool:
        return not self._restoration()

    def _anchors(self, name: str, hunk: tuple) -> range:
        _, i1, i2, _, _ = hunk
        n = len(_lines(self._files[name]))
        if i2 > i1:
            return range(i1 + 1, i2 + 1)
        if n == 0:
            return range(0)  # an emptied file: nothing to look at
        line = min(max(i1, 1), n)
        return range(line, line + 1)

    def _unseen_anchors(self) -> set[tuple[str, int]]:
        out = set()
        for name, hunk in self._restoration():
            seen = self._seen.get(name, frozenset())
            out.update((name, line) for line in self._anchors(name, hunk) if line not in seen)
        return out

    # ------------------------------------------------------------------ method queries

    def _oracle_action(self) -> Command:
        restoration = self._restoration()
        if restoration:
            name, hunk = next(((n, h) for n, h in restoration if not self._blank_hunk(n, h)),
                              restoration[0])
            anchors = self._anchors(name, hunk)
            seen = self._seen.get(name, frozenset())
            if any(line not in seen for line in anchors):
                n = len(_lines(self._files[name]))
                return Command("view", name, max(1, anchors[0] - CONTEXT),
                               min(n, anchors[-1] + CONTEXT))
            return self._fix_command(name, hunk)
        if not self._tested:
            return Command("run_tests")
        return Command("submit")

    def _blank_hunk(self, name: str, hunk: tuple) -> bool:
        _, i1, i2, j1, j2 = hunk
        current = _lines(self._files[name])[i1:i2]
        original = _lines(self.task.sources[name])[j1:j2]
        return not any(line.strip() for line in current + original)

    def _fix_command(self, name: str, hunk: tuple) -> Command:
        """The edit that puts `hunk` back, widened by equal neighbouring lines until its text
        ends with a non-blank line (an edit's text cannot end blank); the whole file restored
        when that does not remove a hunk."""
        _, i1, i2, j1, j2 = hunk
        current = _lines(self._files[name])
        original = _lines(self.task.sources[name])
        while j2 > j1 and not original[j2 - 1].strip() and i2 < len(current) \
                and j2 < len(original) and current[i2] == original[j2]:
            i2, j2 = i2 + 1, j2 + 1
        command = Command("edit", name, i1 + 1, i2, "\n".join(original[j1:j2]))
        if self._is_action(command) and self._verify(command):
            return command
        text = "\n".join(original).rstrip()
        return Command("edit", name, 1, len(current), text)

    def _verify(self, action: Command) -> bool:
        restoration = self._restoration()
        kind = action.kind
        if not restoration:
            return kind == "submit" or (kind == "run_tests" and not self._tested)
        if kind == "edit":
            name = self._name(action.path)
            if name not in self.task.source_files:
                return False
            after = _apply_edit(self._files[name], action.start, action.end, action.text)
            before = len(_hunks(self._files[name], self.task.sources[name]))
            return len(_hunks(after, self.task.sources[name])) < before
        unseen = self._unseen_anchors()
        if kind == "view":
            name = self._name(action.path)
            n = len(_lines(self._files[name]))
            first, last = (1, n) if action.start is None else (action.start, min(action.end, n))
            return any((name, line) in unseen for line in range(first, last + 1))
        if kind == "search":
            shown = self._matches(action.text, action.path)[:MAX_SEARCH_MATCHES]
            return any((name, number) in unseen for name, number, _ in shown)
        return False

    def _turn_score(self, action) -> float:
        if action is None or not self._is_legal_safe(action):
            return self.format_penalty
        if action.kind != "submit":
            return 0.0
        return super()._turn_score(action)

    def _random_action(self, rng: np.random.Generator) -> Command:
        """A kind uniformly from KINDS, then its arguments uniformly: view (a random file, whole
        or 20 lines from a random start), search (a random word of a random file, in that file
        or everywhere), edit (a random line of a random file replaced by another of its lines),
        run_tests (all, or a random test), submit."""
        kind = KINDS[int(rng.integers(len(KINDS)))]
        names = sorted(self._files)
        name = names[int(rng.integers(len(names)))]
        lines = _lines(self._files[name])
        n = len(lines)
        if kind == "view":
            if rng.random() < 0.3:
                return Command("view", name)
            start = int(rng.integers(1, max(n, 1) + 1))
            return Command("view", name, start, max(start, min(n, start + 19)))
        if kind == "search":
            words = sorted(set(re.findall(r"[A-Za-z_]\w{2,}", self._files[name]))) or ["def"]
            word = words[int(rng.integers(len(words)))]
            return Command("search", name if rng.random() < 0.5 else None, text=word)
        if kind == "edit":
            if n == 0:
                return Command("edit", name, 1, 0, "")
            line = int(rng.integers(1, n + 1))
            source = lines[int(rng.integers(n))]
            text = source.rstrip() if source.strip() else ""
            return Command("edit", name, line, line, text)
        if kind == "run_tests":
            names = self._test_names()
            if names and rng.random() < 0.5:
                return Command("run_tests", text=names[int(rng.integers(len(names)))])
            return Command("run_tests")
        return Command("submit")

    def _process_score(self) -> float:
        if self.done:
            return 1.0 if self.success else 0.0
        history = self._history
        score = 0.5
        if any(t.evidence for t in history):
            score += 0.10
        edits = [t for t in history if t.edit]
        blind = sum(t.blind for t in edits)
        if edits and not blind:
            score += 0.10
        score -= 0.15 * min(blind, 2)
        if any(t.error_signal for t in history):
            score += 0.05
        last_edit = max((i for i, t in enumerate(history) if t.edit), default=None)
        if last_edit is not None:
            runs = [t for t in history[last_edit + 1:] if t.tests is not None]
            if runs:
                score += 0.10 + (0.15 if runs[-1].tests else 0.0)
        repeats, since_edit = 0, set()
        for turn in history:
            if turn.edit:
                since_edit = set()
            elif turn.text is not None:
                repeats += turn.text in since_edit
                since_edit.add(turn.text)
        score -= 0.10 * min(repeats, 3)
        score -= 0.05 * min(sum((not t.valid) or t.limited for t in history), 4)
        return min(1.0, max(0.0, score))

    def _metrics(self) -> dict:
        return {"edits": self._edits, "test_runs": self._test_runs,
                "two_file": self.task.two_file, "fixed": self._fixed(),
                "task": f"{self.task.name}/{self.mutation.operator}",
                "sandbox": self._step.get("sandbox"),
                "validation": self._step.get("validation", False),
                "tests_passed": self._step.get("tests_passed"),
                "tests_failed": self._step.get("tests_failed"),
                "subprocess_seconds": self._step.get("subprocess_seconds", 0.0)}


def rtmc_action_signature(action: Command, change: tuple[str, str, str] | None = None,
                          passed: bool | None = None) -> str:
    """RTMC §4.1's `category:scope@target[:result]` of a command (module docstring). `change`:
    an edit's (tag, old text, new text) (`edit_change`), known from the state it meets; without
    it the edit is hashed by its range and new text. `passed`: a test run's result, known after
    it (None: no result suffix)."""
    kind = action.kind
    path = normal_path(action.path) if action.path is not None else None
    if kind == "view":
        if action.start is None:
            return f"view:full@{path}"
        b0, b1 = action.start // 100, action.end // 100
        buckets = f"{b0}" if b0 == b1 else f"{b0}-{b1}"
        return f"view:partial[{buckets}]@{path}"
    if kind == "search":
        return f"search:{_h4(action.text)}@{path or '*'}"
    if kind == "edit":
        if change is None:
            scope = "insert" if action.end == action.start - 1 else "replace"
            digest = _h4(f"{action.start}-{action.end}" + chr(10) + action.text)
        else:
            scope = "insert" if change[0] == "I" else "replace"
            digest = _change_hash(change)
        return f"modify:{scope}:{digest}@{path}"
    if kind == "run_tests":
        result = "" if passed is None else (":ok" if passed else ":error")
        return f"test:{action.text or 'all'}{result}"
    return "finish"


def normal_path(path: str) -> str:
    """A repository path without `.` components and repeated slashes (`./a.py` -> `a.py`), so
    that one file has one name in signatures; a path that names no repository file (absolute,
    `~`, backslashes, `..`) stays as written."""
    parts = path.split("/")
    if path.startswith(("/", "~")) or "\\" in path or ".." in parts:
        return path
    return "/".join(p for p in parts if p not in ("", ".")) or path


def edit_change(before: str, start: int, end: int, new: str) -> tuple[str, str, str]:
    """What an edit of lines start..end of `before` into `new` changes: (tag, old text, new
    text) with the lines the two sides share at their start and end left out, so that edits
    with the same effect have the same change; tag "I" for a pure insertion, else "M"."""
    old_lines = _lines(before)[start - 1:end]
    new_lines = new.split("\n") if new else []
    head = 0
    while head < min(len(old_lines), len(new_lines)) and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while (tail < min(len(old_lines), len(new_lines)) - head
           and old_lines[-1 - tail] == new_lines[-1 - tail]):
        tail += 1
    old = old_lines[head:len(old_lines) - tail]
    added = new_lines[head:len(new_lines) - tail]
    return ("I" if added and not old else "M"), "\n".join(old), "\n".join(added)


def _change_hash(change: tuple[str, str, str]) -> str:
    """RTMC §4.2's 4 hex of md5(old text + "\\0" + new text), for the state's M:/I: op and the
    action's modify hash alike."""
    return _h4(change[1] + chr(0) + change[2])
