"""mini-SWE's episode directories: where each episode's files live, and their cleanup.

Every episode lives in its own directory `<base>/jaxtree-mini-swe-<pid>-<rand>/ep-*` (the
per-process root, mode 0711; `base_dir()`: $MINI_SWE_TMPDIR, else /dev/shm, else the system
temporary directory). `Workspace` creates one and removes it on `close()`, when it is
garbage-collected, and at interpreter exit (`weakref.finalize`, registered with `atexit` by the
standard library), so a job that exits normally after SIGTERM (jaxtree.train.stop: the handler
only sets a flag and the loop returns) removes all of them; no signal handler is installed here.
A process killed outright (SIGKILL, or SIGTERM with the default action) cannot clean up: its root
is removed by the next process that creates one (`sweep_stale_roots`: roots whose pid is dead and
that belong to this user). Finalizers are pid-guarded: a forked child never removes its parent's
directories. Test runs (mini_swe_sandbox) get their own `run-*` directories inside an episode's.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import tempfile
import threading
import weakref

ROOT_PREFIX = "jaxtree-mini-swe-"

_ROOT_LOCK = threading.Lock()
_ROOT: dict[int, str] = {}  # pid -> this process's root directory


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def base_dir() -> str:
    """Where process roots go: $MINI_SWE_TMPDIR, else /dev/shm when it is a writable directory
    (tmpfs: creating and removing directories there is ~100x cheaper than on a disk mounted with
    `discard`), else the system temporary directory."""
    configured = os.environ.get("MINI_SWE_TMPDIR")
    if configured:
        return configured
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def sweep_stale_roots(tmp: str | None = None) -> list[str]:
    """Removes the roots of dead processes of this user (left by a SIGKILL or a default SIGTERM);
    returns the removed paths."""
    removed = []
    for path in glob.glob(os.path.join(tmp or base_dir(), ROOT_PREFIX + "*")):
        try:
            pid = int(os.path.basename(path)[len(ROOT_PREFIX):].split("-")[0])
            if pid == os.getpid() or _alive(pid) or os.lstat(path).st_uid != os.getuid():
                continue
        except (ValueError, OSError):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _remove(path: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # never in a forked child
        shutil.rmtree(path, ignore_errors=True)


def process_root() -> str:
    """This process's root directory (created on first use; removed at exit)."""
    pid = os.getpid()
    root = _ROOT.get(pid)
    if root is not None and os.path.isdir(root):
        return root
    with _ROOT_LOCK:
        root = _ROOT.get(pid)
        if root is None or not os.path.isdir(root):
            if not _ROOT:
                sweep_stale_roots()
            root = tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{pid}-", dir=base_dir())
            os.chmod(root, 0o711)
            _ROOT[pid] = root
            atexit.register(_remove, root, pid)
    return root


class Workspace:
    """An episode directory holding `repo/` (the files the agent sees) and the runs' scratch
    directories; removed on close(), garbage collection or interpreter exit."""

    def __init__(self, files: dict[str, str]):
        self.path = tempfile.mkdtemp(prefix="ep-", dir=process_root())
        os.chmod(self.path, 0o711)
        self._finalizer = weakref.finalize(self, _remove, self.path, os.getpid())
        self.repo = os.path.join(self.path, "repo")
        os.mkdir(self.repo)
        for name, text in files.items():
            self.write(name, text)

    def write(self, name: str, text: str) -> None:
        """Writes a repository file (`name` is a plain file name, checked by the caller)."""
        with open(os.path.join(self.repo, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        self._finalizer()
