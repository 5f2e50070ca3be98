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

Errors a user can act on are `WorkdirError` (a ConfigError-like one-line message; the launch jobs
exit with status 2).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
from typing import Any, Iterable

from jaxtree.utils import check_writable

LOCK_FILE = ".lock"
CONFIG_FILE = "config.json"


class WorkdirError(Exception):
    """The workdir cannot be used as asked (unwritable, in use, or holding another config's
    outputs); the message is one line that says what to do."""


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
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
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


def record_config(workdir: str, config: dict[str, Any], allow_change: bool = False,
                  defaults: dict[str, Any] | None = None) -> list[str]:
    """Writes `config` (the resolved experiment, every field) to <workdir>/config.json. When the
    workdir already holds a different one (`config_diff` with the fields' `defaults`), raises
    WorkdirError with the diff unless
    `allow_change`, in which case the new config replaces it and the diff is returned (and
    appended to <workdir>/config_changes.jsonl, so the run's history stays readable)."""
    path = os.path.join(workdir, CONFIG_FILE)
    changes: list[str] = []
    if os.path.exists(path):
        try:
            with open(path) as f:
                previous = json.load(f)
        except (OSError, ValueError) as e:
            raise WorkdirError(f"{path} is unreadable ({e}); move it away to start over") from None
        changes = config_diff(previous, config, defaults)
        if changes and not allow_change:
            shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more"
                                               if len(changes) > 6 else "")
            raise WorkdirError(
                f"workdir {workdir} holds a run with another config ({shown}); pass "
                "--allow_config_change to go on with the new config, --overwrite to start over, "
                "or use another --workdir")
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
