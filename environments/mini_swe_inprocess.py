"""Running a mini-SWE task's tests in this process, for trusted code only.

`run_in_process(task, sources, hidden=False)` imports the task's source files from `sources`
(file name -> text) as fresh modules, runs the visible test file's `test*` functions and, with
`hidden`, the hidden cases `(function, args, expected)` on the main module (compared with
`strict_equal`: equal values of equal types). A run that exceeds STEP_BUDGET line events counts
as looping. The task loader (mini_swe_tasks) checks with it that a task's unmodified code passes,
and mini_swe_mutations that a mutant makes a visible test fail. Model-written code never runs
here: it runs in the sandbox (mini_swe_sandbox).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
import sys
import threading
import types

from environments.mini_swe_task import Task


#: Line events a test run may take in process before it counts as looping.
STEP_BUDGET = 200_000


class _Budget(BaseException):
    """Raised by the tracer when a run exceeds STEP_BUDGET line events."""


class _Exit(BaseException):
    """Raised in place of `os._exit(status)` called by code under test: trusted code still must
    not end the process that loads it (a task's test calling `os._exit(3)` would end
    `launch.train` silently with status 3 during its task check)."""


def _no_exit(status=0):
    raise _Exit(status)


@contextlib.contextmanager
def _exits_fail():
    """`os._exit` raises _Exit while code under test runs (under _RUN_LOCK); `sys.exit`'s
    SystemExit is caught where test failures are."""
    real = os._exit
    os._exit = _no_exit
    try:
        yield
    finally:
        os._exit = real


@dataclasses.dataclass(frozen=True)
class Outcome:
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    hidden_failed: int
    looped: bool
    # where the code tried to end the process: "test_x: os._exit(3)", "<collection>: exit(1)"
    exits: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failed and not self.hidden_failed and not self.looped


def strict_equal(a, b) -> bool:
    """Equality that also requires equal types, recursively (a hidden case's check: an object
    whose __eq__ always answers True does not pass)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return (len(a) == len(b) and all(strict_equal(k, k) for k in a)
                and all(k in b and strict_equal(a[k], b[k]) for k in a))
    return bool(a == b)


_RUN_LOCK = threading.Lock()


@functools.cache
def _compiled(source: str, filename: str):
    return compile(source, filename, "exec")


def run_in_process(task: Task, sources: dict[str, str], hidden: bool = False) -> Outcome:
    """Runs the task's visible test functions (and with `hidden`, its hidden cases) against
    `sources` (file name -> source) in this process, with a line-event budget. Only for
    trusted code, the bank's modules, a user's own task directories (load_task) and their
    mutants: model-written code runs in the sandbox."""
    passed, failed, hidden_failed, looped, exits = [], [], 0, False, []
    names = [name for name in task.source_files]
    with _RUN_LOCK:
        saved = {n[:-3]: sys.modules.get(n[:-3]) for n in names}
        events = [0]

        def tracer(frame, event, arg):
            events[0] += 1
            if events[0] > STEP_BUDGET:
                raise _Budget
            return tracer

        old_trace = sys.gettrace()
        sys.settrace(tracer)
        exit_guard = _exits_fail()
        exit_guard.__enter__()
        try:
            modules = {}
            try:
                for name in names:  # imported modules first (helper, then main)
                    module = types.ModuleType(name[:-3])
                    module.__file__ = name
                    sys.modules[name[:-3]] = module
                    # the bank's own modules and mutants: trusted code
                    exec(_compiled(sources[name], name), module.__dict__)  # noqa: S102
                    modules[name] = module
                namespace = {"__name__": task.test_file[:-3]}
                exec(_compiled(task.sources[task.test_file], task.test_file),  # noqa: S102
                     namespace)
            except _Budget:
                raise
            except (Exception, SystemExit, _Exit) as e:  # noqa: BLE001 - a broken module fails
                return Outcome((), ("<collection>",), len(task.hidden) if hidden else 0, False,
                               _exit_note("<collection>", e))
            for key, value in list(namespace.items()):
                if key.startswith("test") and callable(value):
                    try:
                        value()
                        passed.append(key)
                    except _Budget:
                        raise
                    except (Exception, SystemExit, _Exit) as e:  # noqa: BLE001
                        failed.append(key)
                        exits += _exit_note(key, e)
            if hidden:
                main = modules[f"{task.main}.py"]
                for function, args, expected in task.hidden:
                    try:
                        result = getattr(main, function)(*copy.deepcopy(args))
                        hidden_failed += not strict_equal(result, expected)
                    except _Budget:
                        raise
                    except (Exception, SystemExit, _Exit) as e:  # noqa: BLE001
                        hidden_failed += 1
                        exits += _exit_note(f"hidden case {function}", e)
        except _Budget:
            looped = True
        finally:
            exit_guard.__exit__(None, None, None)
            sys.settrace(old_trace)
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
    return Outcome(tuple(passed), tuple(failed), hidden_failed, looped, tuple(exits))


def _exit_note(where: str, error: BaseException) -> tuple[str, ...]:
    """("<where>: os._exit(3)",) or ("<where>: sys.exit(3)",) when `error` is an exit, else ()."""
    if isinstance(error, _Exit):
        return (f"{where}: os._exit({error.args[0] if error.args else ''})",)
    if isinstance(error, SystemExit):
        return (f"{where}: sys.exit({error.code!r})",)
    return ()
