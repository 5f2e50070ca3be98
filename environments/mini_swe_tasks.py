"""mini-SWE tasks: the task directory format, its loader, and the built-in bank read with it.

A task directory holds one subdirectory per task (its name is the task's; names starting with `.`
or `_` are skipped). A task subdirectory holds:

  *.py         the task's modules, flat (no packages); they load in import order, each after the
               sibling modules it imports. They are data: read as text, never imported as part
               of this package;
  test_*.py    exactly one visible test file of assert-style `test*` functions;
  task.json    optional settings: {"main": "<module the tests import>", "target": "<file the
               bug goes into>", "hidden": [["<function of main>", [args...], expected], ...],
               "split": "train" | "test"}. Defaults: the single source file, main's file, "train";
  hidden.txt   instead of task.json's "hidden": one hidden case per line, a Python literal
               `("<function of main>", (args...), expected)`; blank lines and lines starting
               with `#` are skipped. Hidden cases compare types exactly, and JSON has no tuples
               (nor sets, nor non-string dict keys): write such cases here.

At least one hidden case is required: `submit` pays on the hidden cases alone (their expected
values never enter the sandbox, so code under test cannot forge them; the visible tests run in
the sandbox and can), and the environment never plants a mutation that every hidden case passes
(mini_swe.py), so hidden cases that catch the bugs the mutation operators plant make more tasks.

The task directory itself may hold `order.txt`: the task names, one per line (every task exactly
once), the order tasks are listed and drawn in; without it, tasks are in name order. `reset(seed)`
picks an index into that list, so the order is part of what a seed draws: the bank's order.txt
keeps the order its tasks always had.

`load_task(path)` reads one task subdirectory: its Task and split. The unmodified code must pass
its visible tests and hidden cases (run in this process, mini_swe_inprocess: so point it only at
code you trust). `load_task_directory(path)` reads a whole task directory, by split (the env
option `task_dir=`, mini_swe.py). A malformed directory is refused with a ValueError that names
it and the problem.

The built-in bank is such a directory, `environments/mini-swe-tasks/` (BANK_DIR; its README.md
says what its tasks are and how to add one), read by the same loader when this module is
imported: TASKS (name -> Task, in its order.txt order) and SPLITS (split -> (single-file task
names, two-file task names), the two pools the env option `two_file` chooses between). Its name
has a hyphen so that it cannot be imported (as a namespace package) by mistake.
"""

from __future__ import annotations

import ast
import json
import os

from environments.mini_swe_inprocess import run_in_process
from environments.mini_swe_task import Task

#: Optional per-task settings (load_task).
TASK_FILE = "task.json"
#: Optional hidden cases as Python literals, one per line (load_task).
HIDDEN_FILE = "hidden.txt"
#: Optional order of a task directory's tasks (load_tasks).
ORDER_FILE = "order.txt"
SPLIT_NAMES = ("train", "test")
#: The built-in bank, a task directory shipped with the package (setup.py's package_data).
BANK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mini-swe-tasks")


def _dedent(text: str) -> str:
    return text.strip("\n") + "\n"


def _task_error(path: str, message: str) -> ValueError:
    return ValueError(f"mini-SWE task directory {path}: {message}")


def _read_text(path: str, name: str) -> str:
    try:
        with open(os.path.join(path, name), encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise _task_error(path, f"{name}: {e}") from None


def _listed_lines(text: str) -> list[tuple[int, str]]:
    """(line number, stripped line) of the lines that are neither blank nor `#` comments."""
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]


def _settings(path: str) -> dict:
    if not os.path.exists(os.path.join(path, TASK_FILE)):
        return {}
    try:
        settings = json.loads(_read_text(path, TASK_FILE))
    except ValueError as e:
        raise _task_error(path, f"{TASK_FILE} does not parse: {e}") from None
    if not isinstance(settings, dict):
        raise _task_error(path, f"{TASK_FILE} must hold a JSON object")
    unknown = sorted(set(settings) - {"main", "target", "hidden", "split"})
    if unknown:
        raise _task_error(path, f"{TASK_FILE} has unknown fields {unknown}")
    return settings


def _hidden_cases(path: str, settings: dict) -> tuple:
    """The hidden cases of task.json's "hidden" or of hidden.txt, as (function, args tuple,
    expected)."""
    cases = settings.get("hidden", [])
    if os.path.exists(os.path.join(path, HIDDEN_FILE)):
        if "hidden" in settings:
            raise _task_error(path, f"hidden cases in both {TASK_FILE} and {HIDDEN_FILE}: keep "
                                    "one")
        cases = []
        for number, line in _listed_lines(_read_text(path, HIDDEN_FILE)):
            try:
                cases.append(ast.literal_eval(line))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise _task_error(path, f"{HIDDEN_FILE} line {number}: not a Python literal "
                                        f"(function, (args...), expected): {line!r}") from None
    hidden = []
    for case in cases:
        if not (isinstance(case, (list, tuple)) and len(case) == 3 and isinstance(case[0], str)
                and isinstance(case[1], (list, tuple))):
            raise _task_error(path, f"hidden case {case!r}: expected [function, [args...], "
                                    "expected]")
        hidden.append((case[0], tuple(case[1]), case[2]))
    return tuple(hidden)


def load_task(path: str) -> tuple[Task, str]:
    """One task subdirectory (module docstring): its Task and split; ValueError naming the
    directory and the problem when it is malformed or its unmodified code fails its tests."""
    path = os.path.abspath(path)
    name = os.path.basename(path.rstrip(os.sep))
    if not os.path.isdir(path):
        raise _task_error(path, "not a directory")
    # The bank is checked first: while it loads, TASKS does not exist yet.
    if os.path.dirname(path) != BANK_DIR and name in TASKS:
        raise _task_error(path, f"the name {name!r} is a built-in module's; rename the directory")
    settings = _settings(path)
    names = sorted(n for n in os.listdir(path)
                   if n.endswith(".py") and os.path.isfile(os.path.join(path, n)))
    test_files = [n for n in names if n.startswith("test_")]
    sources = [n for n in names if not n.startswith("test_")]
    if len(test_files) != 1:
        raise _task_error(path, f"expected exactly one test_*.py file, found {test_files}")
    if not sources:
        raise _task_error(path, "no source file (*.py other than the test file)")
    files = {}
    for n in names:
        files[n] = _dedent(_read_text(path, n))
        try:
            ast.parse(files[n], n)
        except SyntaxError as e:
            raise _task_error(path, f"{n}: {e}") from None
    default = sources[0][:-3] if len(sources) == 1 else None
    main = settings.get("main", default)
    if main is None or f"{main}.py" not in sources:
        raise _task_error(path, f"main={main!r}: name the module the tests import, one of "
                                f"{[n[:-3] for n in sources]} (in {TASK_FILE})")
    target = settings.get("target", f"{main}.py")
    if target not in sources:
        raise _task_error(path, f"target={target!r}: expected one of {sources}")
    split = settings.get("split", "train")
    if split not in SPLIT_NAMES:
        raise _task_error(path, f"split={split!r}: expected 'train' or 'test'")
    hidden = _hidden_cases(path, settings)
    if not hidden:
        raise _task_error(path, f"no hidden case: submit pays on the hidden cases alone (give "
                                f"them in {HIDDEN_FILE} or {TASK_FILE}'s \"hidden\")")
    ordered = tuple((n, files[n]) for n in _import_order(path, {n: files[n] for n in sources}))
    ordered += ((test_files[0], files[test_files[0]]),)
    task = Task(name, ordered, main, target, test_files[0], hidden, len(sources) > 1)
    outcome = run_in_process(task, task.sources, hidden=True)
    if outcome.exits:
        raise _task_error(path, "its code must not end the process that checks it: "
                                f"{', '.join(outcome.exits)}")
    if outcome.looped or outcome.failed or outcome.hidden_failed:
        raise _task_error(path, "the unmodified code must pass its tests: "
                                f"failed {list(outcome.failed)}, {outcome.hidden_failed} hidden "
                                f"case(s) failed{', ran too long' if outcome.looped else ''}")
    return task, split


def _import_order(path: str, sources: dict[str, str]) -> list[str]:
    """The source files ordered so that each comes after the sibling modules it imports (tests
    load them in this order); ValueError on an import cycle."""
    stems = {n[:-3] for n in sources}
    needs = {}
    for n, text in sources.items():
        imported = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
        needs[n] = {f"{m}.py" for m in imported & stems} - {n}
    order: list[str] = []
    while len(order) < len(sources):
        ready = [n for n in sorted(sources) if n not in order and needs[n] <= set(order)]
        if not ready:
            cycle = sorted(n for n in sources if n not in order)
            raise _task_error(path, f"import cycle among {cycle}")
        order.extend(ready)
    return order


def _task_names(path: str) -> list[str]:
    """The task subdirectories of `path` in order.txt's order, else by name."""
    names = sorted(e for e in os.listdir(path)
                   if os.path.isdir(os.path.join(path, e)) and not e.startswith((".", "_")))
    if not os.path.exists(os.path.join(path, ORDER_FILE)):
        return names
    listed = [line for _, line in _listed_lines(_read_text(path, ORDER_FILE))]
    repeated = sorted({n for n in listed if listed.count(n) > 1})
    unknown = [n for n in listed if n not in names]
    missing = [n for n in names if n not in listed]
    for problem, which in (("lists more than once", repeated),
                           ("lists names that are not task subdirectories:", unknown),
                           ("does not list", missing)):
        if which:
            raise _task_error(path, f"{ORDER_FILE} {problem} {which}")
    return listed


def load_tasks(path: str) -> tuple[tuple[Task, str], ...]:
    """Every task under `path` with its split (load_task), in the directory's order; ValueError
    when there is none or one is malformed."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"mini-SWE task directory {path}: not a directory")
    loaded = tuple(load_task(os.path.join(path, name)) for name in _task_names(path))
    if not loaded:
        raise ValueError(f"mini-SWE task directory {path}: no task subdirectory")
    return loaded


def load_task_directory(path: str) -> dict[str, tuple[Task, ...]]:
    """Every task under `path` by split, each in the directory's order:
    {"train": (...), "test": (...)} (load_tasks)."""
    loaded = load_tasks(path)
    return {split: tuple(task for task, s in loaded if s == split) for split in SPLIT_NAMES}


def _bank() -> tuple[dict[str, Task], dict[str, tuple[tuple[str, ...], tuple[str, ...]]]]:
    loaded = load_tasks(BANK_DIR)
    splits = {split: tuple(tuple(task.name for task, s in loaded
                                 if s == split and task.two_file == two_file)
                           for two_file in (False, True))
              for split in SPLIT_NAMES}
    return {task.name: task for task, _ in loaded}, splits


#: The built-in bank (module docstring): name -> Task, and split -> (single-file task names,
#: two-file task names).
TASKS, SPLITS = _bank()
