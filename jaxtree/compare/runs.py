"""Run directories: what earlier invocations recorded there (run.json, warm_start.json), whether a
run is finished or to be resumed, and executing the unfinished ones with a runner."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from jaxtree.compare.grid import GridError, display_path
from jaxtree.compare.plan import Run, WarmStart, jsonable
from jaxtree.compare.runner import Runner, log_tail, stop_requested
from jaxtree.train.metrics import METRICS_FILE
from jaxtree.train.workdir import WorkdirError, WorkdirLock
from jaxtree.utils import processor

RUN_FILE = "run.json"
LOG_FILE = "log.txt"
SUMMARY_FILE = "train_summary.json"          # written by launch.train


def read_json(path: str) -> Any:
    """The JSON in `path`, or None if it is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path: str, value: Any) -> None:
    """Writes `value` atomically (a reader never sees half a file)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def _timestamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


# ----------------------------------------------------------------------------- run state

def is_finished(workdir: str, steps: int) -> bool:
    """train_summary.json exists, says not preempted, and reached `steps`."""
    summary = read_json(os.path.join(workdir, SUMMARY_FILE))
    if not isinstance(summary, dict) or summary.get("preempted") is not False:
        return False
    try:
        return int(summary.get("step")) == steps
    except (TypeError, ValueError):
        return False


def has_progress(workdir: str) -> bool:
    """Something of a training run is there (metrics, checkpoints or a summary)."""
    metrics = os.path.join(workdir, METRICS_FILE)
    return ((os.path.isfile(metrics) and os.path.getsize(metrics) > 0)
            or os.path.isdir(os.path.join(workdir, "checkpoints"))
            or os.path.exists(os.path.join(workdir, SUMMARY_FILE)))


def run_state(run: Run) -> str:
    """'finished' (skipped), 'resume' (unfinished, with progress) or 'new'."""
    if is_finished(run.workdir, run.steps):
        return "finished"
    return "resume" if has_progress(run.workdir) else "new"


def _describe_diff(recorded: Mapping, current: Mapping) -> str:
    parts = []
    for key in sorted(set(recorded) | set(current)):
        if key not in current:
            parts.append(f"{key}: recorded {recorded[key]!r}, grid unset")
        elif key not in recorded:
            parts.append(f"{key}: recorded unset, grid {current[key]!r}")
        elif recorded[key] != current[key]:
            parts.append(f"{key}: recorded {recorded[key]!r}, grid {current[key]!r}")
    return ", ".join(parts[:3]) + (f", +{len(parts) - 3} more" if len(parts) > 3 else "")


def recorded_mismatch(run: Run) -> str | None:
    """Why the run directory's run.json does not match `run` (None when it matches or when the
    directory has no run of any kind)."""
    recorded = read_json(os.path.join(run.workdir, RUN_FILE))
    if recorded is None:
        return "no run.json" if has_progress(run.workdir) else None
    current = run.record()
    if recorded.get("config") != current["config"]:
        return f"config: recorded {recorded.get('config')!r}, grid {current['config']!r}"
    if recorded.get("overrides") != current["overrides"]:
        return _describe_diff(recorded.get("overrides") or {}, current["overrides"])
    return None


def check_recorded(runs: Iterable[Run], states: Iterable[str], out: str) -> None:
    """Refuses (GridError) when a run in one of `states` was made with other overrides than the
    grid sets now: its results would be mixed with the new ones."""
    bad = []
    for run in runs:
        state = run_state(run)
        if state in states:
            why = recorded_mismatch(run)
            if why:
                bad.append(f"{os.path.relpath(run.workdir, out)} ({state}; {why})")
    if bad:
        raise GridError(
            f"refusing to mix results: {len(bad)} run(s) were made with other overrides than the "
            f"grid sets now: {'; '.join(bad[:3])}{'; ...' if len(bad) > 3 else ''}; delete those "
            f"run directories or restore the grid")


# ----------------------------------------------------------------------------- executing

@dataclasses.dataclass
class Failure:
    """A run (or a warm start) that did not finish."""
    what: str                      # 'run' | 'warm start'
    label: str
    log_path: str
    message: str
    tail: list[str]

    def report(self) -> str:
        lines = [f"FAILED {self.what} {self.label}: {self.message} (log: {self.log_path})"]
        lines += [f"    | {line}" for line in self.tail]
        return "\n".join(lines)


def is_built(ws: WarmStart) -> bool:
    """Whether a warm start (or an artifact) was built to the end."""
    return bool((read_json(os.path.join(ws.workdir, ws.FILE)) or {}).get("complete"))


def ensure_warm_start(ws: WarmStart, runner: Runner, say: Callable[[str], None]) -> Failure | None:
    """Builds the warm start (or the artifact) unless an earlier invocation finished it."""
    record = read_json(os.path.join(ws.workdir, ws.FILE))
    if isinstance(record, dict):
        if (record.get("config"), record.get("overrides")) != (display_path(ws.config),
                                                               jsonable(ws.overrides)):
            raise GridError(f"{ws.WHAT} {ws.workdir} was built from other overrides "
                            f"({record.get('overrides')}); delete it")
        if record.get("complete"):
            return None
    os.makedirs(ws.workdir, exist_ok=True)
    log_path = os.path.join(ws.workdir, LOG_FILE)
    write_json(os.path.join(ws.workdir, ws.FILE), {**ws.record(), "complete": False})
    say(f"{ws.WHAT} {ws.key}: {shlex.join(ws.argv)}")
    rc = runner(list(ws.argv), ws.workdir, log_path)
    if rc != 0:
        return Failure(ws.WHAT, ws.key, log_path, f"exit code {rc}", log_tail(log_path))
    if stop_requested(runner) or not ws.finished():  # saved where it stopped: resumed next time
        return Failure(ws.WHAT, ws.key, log_path, "exit code 0 but not finished (stopped by a "
                       "signal?)", log_tail(log_path))
    write_json(os.path.join(ws.workdir, ws.FILE),
               {**ws.record(), "complete": True, "finished": _timestamp()})
    return None


def link_warm_start(run: Run) -> None:
    """<run>/sft -> the shared warm start (a relative symlink, so <out> can move)."""
    link = os.path.join(run.workdir, "sft")
    target = os.path.relpath(run.warm_start.workdir, run.workdir)
    if os.path.islink(link):
        if os.readlink(link) == target:
            return
        os.unlink(link)
    elif os.path.exists(link):
        raise GridError(f"{link} exists and is not a symlink to a shared warm start; move it away")
    os.symlink(target, link)


def _run_failure(run: Run, rc: int, log_path: str) -> Failure | None:
    """Why a run that exited with `rc` did not finish (None: it did)."""
    if rc != 0:
        return Failure("run", run.label, log_path, f"exit code {rc}", log_tail(log_path))
    if not is_finished(run.workdir, run.steps):
        summary = read_json(os.path.join(run.workdir, SUMMARY_FILE)) or {}
        return Failure("run", run.label, log_path,
                       f"exit code 0 but not finished (train_summary.json: step "
                       f"{summary.get('step')} of {run.steps}, preempted "
                       f"{summary.get('preempted')})", log_tail(log_path))
    return None


def execute(runs: Sequence[Run], runner: Runner, say: Callable[[str], None] = print,
            on_finished: Callable[[Run], None] | None = None,
            before_run: Callable[[Run], None] | None = None) -> list[Failure]:
    """Runs what is not finished, one at a time, in order; returns the failures. `before_run` is
    called with each run about to start (its warm start built and linked), `on_finished` with
    each run this call finished, as soon as it has."""
    failures: list[Failure] = []
    failed_warm: dict[str, Failure] = {}
    for i, run in enumerate(runs, 1):
        state = run_state(run)
        prefix = f"[{i}/{len(runs)}] {run.label}"
        if state == "finished":
            say(f"{prefix}: finished, skipped")
            continue
        if stop_requested(runner):
            break
        needed = run.artifacts + ([run.warm_start] if run.warm_start is not None else [])
        stopped = blocked = False
        for ws in needed:
            key = f"{ws.WHAT} {ws.key}"
            if key not in failed_warm:
                failure = ensure_warm_start(ws, runner, say)
                if failure is not None and stop_requested(runner):
                    say(f"{key}: stopped by a signal; not starting further runs")
                    stopped = True
                    break
                if failure is not None:
                    failed_warm[key] = failure
                    failures.append(failure)
                    say(failure.report())
            if key in failed_warm:
                failures.append(Failure("run", run.label, failed_warm[key].log_path,
                                        f"not started: {key} failed", []))
                blocked = True
                break
        if stopped:
            break
        if blocked:
            continue
        os.makedirs(run.workdir, exist_ok=True)
        if run.warm_start is not None:
            link_warm_start(run)
        if before_run is not None:
            before_run(run)
        run_file = os.path.join(run.workdir, RUN_FILE)
        attempts = int((read_json(run_file) or {}).get("attempts", 0)) + 1
        # the processor too: runs are bit-identical only on the same one (docs/design.md)
        record = {**run.record(), "attempts": attempts, "started": _timestamp(),
                  "machine": processor()}
        write_json(run_file, record)
        say(f"{prefix}: {'resuming' if state == 'resume' else 'starting'}: {shlex.join(run.argv)}")
        log_path = os.path.join(run.workdir, LOG_FILE)
        start = time.time()
        rc = runner(list(run.argv), run.workdir, log_path)
        record.update(returncode=rc, seconds=round(time.time() - start, 1))
        write_json(run_file, record)
        if stop_requested(runner) and not is_finished(run.workdir, run.steps):
            say(f"{prefix}: stopped by a signal (exit code {rc}); not starting further runs")
            break
        failure = _run_failure(run, rc, log_path)
        if failure is None:
            say(f"{prefix}: finished")
            if on_finished is not None:
                on_finished(run)
        else:
            failures.append(failure)
            say(failure.report())
    return failures


class OutputLock(WorkdirLock):
    """An exclusive lock on <out>/.compare.lock: one harness per output directory (GridError
    naming the holder otherwise)."""

    def __init__(self, out: str):
        super().__init__(out, "launch.compare", filename=".compare.lock")

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            return super().__enter__()
        except WorkdirError as e:
            raise GridError(str(e)) from None
