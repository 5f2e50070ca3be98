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

import copy
import dataclasses
import functools
import sys
import threading
import types

from environments.mini_swe_task import Task


#: Line events a test run may take in process before it counts as looping.
STEP_BUDGET = 200_000


class _Budget(BaseException):
    """Raised by the tracer when a run exceeds STEP_BUDGET line events."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    passed: tuple[str, ...]
    failed: tuple[str, ...]
    hidden_failed: int
    looped: bool

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
    passed, failed, hidden_failed, looped = [], [], 0, False
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
            except Exception:  # noqa: BLE001 - a broken module fails every test
                return Outcome((), ("<collection>",), len(task.hidden) if hidden else 0, False)
            for key, value in list(namespace.items()):
                if key.startswith("test") and callable(value):
                    try:
                        value()
                        passed.append(key)
                    except _Budget:
                        raise
                    except Exception:  # noqa: BLE001
                        failed.append(key)
            if hidden:
                main = modules[f"{task.main}.py"]
                for function, args, expected in task.hidden:
                    try:
                        result = getattr(main, function)(*copy.deepcopy(args))
                        hidden_failed += not strict_equal(result, expected)
                    except _Budget:
                        raise
                    except Exception:  # noqa: BLE001
                        hidden_failed += 1
        except _Budget:
            looped = True
        finally:
            sys.settrace(old_trace)
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
    return Outcome(tuple(passed), tuple(failed), hidden_failed, looped)
