"""A job's workdir made safe to re-run, kill, resume and share by mistake.

  prepare(workdir)          create it and prove it is writable before any work starts
  WorkdirLock(workdir)      one job at a time: an exclusive `flock` on <workdir>/.lock, whose
                            text names the holder (pid, host, job, start time) for the refusal;
                            the kernel drops the lock when its process dies, so a lock left by a
                            crash or `kill -9` is never stale
  record_config(...)        <workdir>/config.json holds the resolved config the outputs belong to;
                            a later job with another config is refused with a one-line diff
                            unless it says `allow_change`
  remove_outputs(...)       `--overwrite`: the job's own outputs, by name, and nothing else
  check_unchanged(path)     the held workdir holding `path` is still the directory its lock
                            opened: one deleted (or replaced) while the job runs would otherwise
                            be recreated piecemeal by the next write, holding a partial run

Errors a user can act on are `WorkdirError` (a ConfigError-like one-line message; the launch jobs
exit with status 2); a workdir deleted under a running job is `WorkdirVanished` (status 1).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
from typing import Any, Callable, Iterable

from jaxtree.utils import check_writable

LOCK_FILE = ".lock"
CONFIG_FILE = "config.json"


class WorkdirError(Exception):
    """The workdir cannot be used as asked (unwritable, in use, or holding another config's
    outputs); the message is one line that says what to do."""


class WorkdirVanished(Exception):
    """The held workdir was deleted or replaced while the job ran (a fault: its outputs there
    are incomplete); the message names it."""


# {absolute path of a held workdir: (st_dev, st_ino) of the directory its lock opened}
_HELD: dict[str, tuple[int, int]] = {}


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def check_unchanged(path: str) -> None:
    """Raises WorkdirVanished when a workdir held by this process that holds `path` (or is it)
    is no longer the directory its lock opened: deleted, or deleted and made again by a write
    (orbax creates a checkpoint's parent directories), which would leave a partial run that
    reads as finished. A path outside every held workdir passes."""
    path = os.path.abspath(path)
    for workdir, opened in list(_HELD.items()):
        if path == workdir or path.startswith(workdir + os.sep):
            if _identity(workdir) != opened:
                raise WorkdirVanished(
                    f"workdir {workdir} was deleted or replaced while the job ran (it is not the "
                    "directory the job opened), so the job stops; what it wrote is incomplete: "
                    "run the command again to start over")


def prepare(workdir: str) -> str:
    """Creates `workdir` if needed and checks that a file can be written in it; returns its
    absolute path. Raises WorkdirError naming the path and the reason."""
    path = os.path.abspath(workdir)
    try:
        check_writable(path)
    except OSError as e:
        raise WorkdirError(f"workdir {path} is not usable: {e.strerror or e}") from None
    return path


class WorkdirLock:
    """`with WorkdirLock(workdir, job):` holds the workdir for one job. A second job on the same
    workdir gets WorkdirError naming the holder. `flock` locks are per open file and released by
    the kernel when the holder exits however it exits; on network filesystems without `flock`
    support the lock is advisory at best (use one workdir per job there)."""

    def __init__(self, workdir: str, job: str, filename: str = LOCK_FILE):
        self.path = os.path.join(os.path.abspath(workdir), filename)
        self.job = job
        self._file = None

    def __enter__(self) -> "WorkdirLock":
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise WorkdirError(f"workdir {os.path.dirname(self.path)} is in use by {holder}; "
                               "wait for that job to end or use another --workdir") from None
        handle.seek(0)
        handle.truncate()
        started = datetime.datetime.now().isoformat(timespec="seconds")
        handle.write(f"pid {os.getpid()} on {socket.gethostname()} ({self.job}, since {started})")
        handle.flush()
        self._file = handle
        self._workdir = os.path.dirname(self.path)
        _HELD[self._workdir] = _identity(self._workdir)  # the directory this job opened
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            _HELD.pop(self._workdir, None)
            self._file.seek(0)
            self._file.truncate()
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_diff(old: dict[str, Any], new: dict[str, Any],
                defaults: dict[str, Any] | None = None) -> list[str]:
    """'field: old -> new' for every leaf that differs (lists and tuples compare equal: JSON has
    no tuples). A field absent from `old` whose new value is its default in `defaults` (the same
    nesting) is no change: a field added to jaxtree since the run started, at the value that
    keeps the old behaviour."""
    old, new = _flat(json.loads(json.dumps(old))), _flat(json.loads(json.dumps(new)))
    defaults = _flat(json.loads(json.dumps(defaults or {})))
    missing = object()
    return [f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
            for key in sorted(set(old) | set(new))
            if old.get(key, missing) != new.get(key, missing)
            and not (key not in old and key in defaults and new[key] == defaults[key])]


def read_config(workdir: str) -> dict[str, Any] | None:
    """<workdir>/config.json, or None when there is none; WorkdirError when it does not read."""
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise WorkdirError(f"{path} is unreadable ({e}); move it away to start over") from None


def record_config(workdir: str, config: dict[str, Any], allow_change: bool = False,
                  defaults: dict[str, Any] | None = None,
                  change_flag: str | None = "--allow_config_change",
                  project: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> list[str]:
    """Writes `config` (the resolved experiment, every field) to <workdir>/config.json. When the
    workdir already holds a different one (`config_diff` with the fields' `defaults`), raises
    WorkdirError with the diff unless
    `allow_change`, in which case the new config replaces it and the diff is returned (and
    appended to <workdir>/config_changes.jsonl, so the run's history stays readable).
    `change_flag` is the flag of the calling job that allows a change (None: it has none, and
    the refusal offers only --overwrite); `project` picks the fields a record holds from an
    older, fuller one before they are compared (a warm start's record)."""
    path = os.path.join(workdir, CONFIG_FILE)
    changes: list[str] = []
    previous = read_config(workdir)
    if previous is not None and project is not None:
        previous = project(previous)
    if previous is not None:
        changes = config_diff(previous, config, defaults)
        if changes and not allow_change:
            shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more"
                                               if len(changes) > 6 else "")
            allow = f"pass {change_flag} to go on with the new config, " if change_flag else \
                "pass "
            raise WorkdirError(
                f"workdir {workdir} holds a run with another config ({shown}); {allow}"
                "--overwrite to start over, or use another --workdir")
        if changes:
            with open(os.path.join(workdir, "config_changes.jsonl"), "a") as f:
                f.write(json.dumps({"time": datetime.datetime.now().isoformat(timespec="seconds"),
                                    "changes": changes}) + "\n")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)  # never a half-written config.json
    return changes


def remove_outputs(workdir: str, names: Iterable[str]) -> list[str]:
    """Deletes the named outputs of a job from `workdir` (files or directories); returns those
    that existed. Anything else in the workdir is left alone."""
    removed = []
    for name in names:
        path = os.path.join(workdir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
        else:
            continue
        removed.append(name)
    return removed
