"""The mini-SWE sandbox: episode directories and isolated test runs.

Directories. Every episode lives in its own directory `<base>/jaxtree-mini-swe-<pid>-<rand>/ep-*`
(the per-process root, mode 0711; `base_dir()`: $MINI_SWE_TMPDIR, else /dev/shm, else the
system temporary directory). `Workspace` creates one and removes it on `close()`, when it is
garbage-collected, and at interpreter exit (`weakref.finalize`, registered with `atexit` by the
standard library), so a job that exits normally after SIGTERM (jaxtree.train.stop: the handler
only sets a flag and the loop returns) removes all of them; no signal handler is installed here.
A process killed outright (SIGKILL, or SIGTERM with the default action) cannot clean up: its root
is removed by the next process that creates one (`sweep_stale_roots`: roots whose pid is dead and
that belong to this user). Finalizers are pid-guarded: a forked child never removes its parent's
directories.

Test runs. `Sandbox.run` copies the files into a fresh `run-*` directory inside the episode
directory and starts `python -I -S -B -c RUNNER` there (isolated mode, no site packages, no
bytecode files) with a scrubbed environment, in its own session (process group), stdin carrying
the run's configuration, stdout and stderr to a file outside the run directory. The runner's first
statements, before any task code is imported, confine the process (in a fresh single-threaded
interpreter rather than `preexec_fn`: the host is a multi-threaded JAX program, where code between
fork and exec can deadlock, and without `preexec_fn` subprocess can vfork a large host cheaply):

  * rlimits (`resource.setrlimit`): CPU seconds (SIGXCPU), address space, file size (which also
    caps the output file), open files, no core files, and, after the uid drop, processes;
  * network: a new network namespace (`unshare(CLONE_NEWNET)`, with CLONE_NEWUSER when not root)
    where there are no interfaces, so every connection fails; Landlock (ABI >= 4) also denies TCP
    bind and connect;
  * user: when the host runs as root, the runner switches to a per-run unprivileged uid (so that
    RLIMIT_NPROC applies and file permissions protect the host), using an interpreter that uid can
    read (probed once per process; sys.executable may live under /root);
  * filesystem: Landlock (when the kernel has it): read-only everywhere; in the run directory the
    existing files may be written (each under RLIMIT_FSIZE) or removed but nothing created, so a
    run cannot fill the disk; no signals or abstract sockets outside the sandbox (ABI >= 6);
  * a `PR_SET_PDEATHSIG` of SIGKILL (the run dies with the host);
  * an audit hook that records network, process-creation, file-creation and out-of-directory
    write attempts, and in `strict` mode (the default) refuses them at the Python level
    (portable, also where the kernel layers are missing); `import ctypes` is refused in strict
    mode.
The host waits for the run with a wall-clock limit (a pidfd when available), kills the whole process
group (and, after a uid drop, every process of that uid) and reads at most `output_bytes` of output.
`isolation()` names the layers in effect on this machine.

Which limit stopped a run (`RunResult.limit`): "timeout" (wall clock), "cpu" (RLIMIT_CPU),
"memory" (MemoryError under RLIMIT_AS), "output" (RLIMIT_FSIZE / the output cap), "process"
(process creation refused or RLIMIT_NPROC hit), "network" (a socket operation attempted),
"filesystem" (a write outside the run directory, or a new file, attempted), "crash" (the runner
ended without its report: os._exit, a signal); None for a run that finished normally (its tests
may still fail).

The runner reports its counts on a final line that starts with a per-run random nonce, sent on
stdin and never written to the run directory; hidden cases are sent the same way and compared
with exact types (an object whose __eq__ always answers True does not pass). This defends against
accidents and shallow reward hacks, not against code that digs the nonce out of the runner's memory.
"""

from __future__ import annotations

import atexit
import dataclasses
import glob
import itertools
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref

ROOT_PREFIX = "jaxtree-mini-swe-"

# ---------------------------------------------------------------------- the runner (sandbox side)

RUNNER = r'''
import os, sys

def _landlock(ctypes, libc, write_dir):
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    L = ctypes.c_long
    abi = syscall(L(444), None, L(0), L(1))
    if abi < 1:
        return 0
    fs = (1 << 13) - 1
    if abi >= 2: fs |= 1 << 13
    if abi >= 3: fs |= 1 << 14
    if abi >= 5: fs |= 1 << 15
    class Attr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
    class Beneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]
    attr = Attr(fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    ruleset = syscall(L(444), ctypes.byref(attr), L(size), L(0))
    if ruleset < 0:
        return 0
    def allow(path, access):
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            return syscall(L(445), L(ruleset), L(1), ctypes.byref(Beneath(access, fd)), L(0)) == 0
        finally:
            os.close(fd)
    # the run directory: read, write and truncate its files, remove them; create nothing (a
    # loop creating files would fill the disk one RLIMIT_FSIZE at a time)
    own = 1 | 2 | 4 | 8 | (1 << 5) | ((1 << 14) if abi >= 3 else 0)
    ok = allow("/", 1 | 4 | 8) and allow(write_dir, own)
    allow("/dev/null", 2 | 4 | ((1 << 14) if abi >= 3 else 0))
    ok = ok and libc.prctl(38, 1, 0, 0, 0) == 0 and syscall(L(446), L(ruleset), L(0)) == 0
    os.close(ruleset)
    return abi if ok else 0

def _setup(cfg):
    import resource
    lim = cfg["limits"]
    def setlim(res, soft, hard=None):
        try:
            resource.setrlimit(res, (soft, soft if hard is None else hard))
        except (ValueError, OSError):
            pass
    setlim(resource.RLIMIT_CPU, lim["cpu"], lim["cpu"] + 1)
    setlim(resource.RLIMIT_AS, lim["memory"])
    setlim(resource.RLIMIT_FSIZE, lim["fsize"])
    setlim(resource.RLIMIT_NOFILE, lim["nofile"])
    setlim(resource.RLIMIT_CORE, 0)
    layers = ["rlimits"]
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    except Exception:
        return layers, {}
    if cfg["netns"]:
        if os.geteuid() == 0:
            ok = libc.unshare(0x40000000) == 0
        else:
            uid, gid = os.getuid(), os.getgid()
            ok = libc.unshare(0x10000000 | 0x40000000) == 0
            if ok:
                try:
                    for name, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (uid, uid)),
                                       ("gid_map", "%d %d 1" % (gid, gid))):
                        with open("/proc/self/" + name, "w") as f:
                            f.write(text)
                except OSError:
                    pass
        if ok:
            layers.append("netns")
    if cfg["uid"] is not None and os.geteuid() == 0:
        setlim(resource.RLIMIT_NPROC, lim["nproc"])
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/<pid> owned by the uid (host cleanup)
        layers.append("uid")
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = SIGKILL (after the uid change, which clears it)
    if os.getppid() != cfg["host_pid"]:
        os._exit(3)
    abi = _landlock(ctypes, libc, os.getcwd()) if cfg["landlock"] else 0
    if abi:
        layers.append("landlock%d" % abi)
    return layers, {"landlock_net": abi >= 4}

_NET = frozenset(("socket.__new__", "socket.connect", "socket.bind", "socket.sendto",
                  "socket.sendmsg", "socket.getaddrinfo", "socket.gethostbyname",
                  "socket.gethostbyaddr", "socket.gethostbyname_ex"))
_PROC = frozenset(("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                   "subprocess.Popen", "pty.spawn", "os.startfile"))
_PATHS = frozenset(("os.remove", "os.rmdir", "os.rename", "os.replace", "os.truncate",
                    "os.chmod", "os.chown", "os.link", "os.symlink", "os.mkdir", "shutil.rmtree",
                    "os.utime", "shutil.copyfile", "shutil.move", "shutil.chown"))

def _hook(strict, hits, cwd):
    def outside(path, creating=False):
        try:
            if isinstance(path, int):
                return False
            path = os.fsdecode(path)
            real = os.path.realpath(os.path.join(cwd, path))
            if real == "/dev/null":
                return False
            if real == cwd or real.startswith(cwd + os.sep):
                return creating and not os.path.exists(real)  # new files: none
            return True
        except Exception:
            return True
    def hit(kind, message):
        if kind not in hits:
            hits.append(kind)
        if strict:
            raise PermissionError(message)
    def hook(event, args):
        if event in _NET:
            hit("network", "network access is disabled in the sandbox")
        elif event in _PROC:
            hit("process", "starting processes is disabled in the sandbox")
        elif event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in mode for c in "wax+")) or (
                flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
            if writing and outside(path, creating=True):
                hit("filesystem", "creating files, or writing outside the sandbox directory, "
                                  "is disabled")
        elif event in _PATHS:
            creating = event in ("os.rename", "os.replace", "os.link", "os.symlink", "os.mkdir",
                                 "shutil.copyfile", "shutil.move")
            if any(outside(a, creating) for a in args[:2]
                   if isinstance(a, (str, bytes, os.PathLike))):
                hit("filesystem", "changing files outside the sandbox directory is disabled")
        elif strict and (event in ("ctypes.dlopen", "ctypes.dlsym") or (
                event == "import" and args[0] in ("ctypes", "_ctypes"))):
            hit("process", "ctypes is disabled in the sandbox")
    return hook

def _frames(tb, cwd):
    out = []
    while tb is not None:
        code = tb.tb_frame.f_code
        name = code.co_filename
        if not name.startswith("<"):
            if name.startswith(cwd + os.sep):
                name = name[len(cwd) + 1:]
            out.append((tb.tb_frame, name, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return out

def _explain(frame, filename, lineno):
    try:
        import ast, linecache
        line = linecache.getline(frame.f_code.co_filename, lineno).strip()
        node = ast.parse(line).body[0]
        if not isinstance(node, ast.Assert):
            return ""
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            expr = test.left
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            expr = test.operand
        else:
            expr = test
        value = eval(compile(ast.Expression(expr), "<assert>", "eval"), frame.f_globals,
                     frame.f_locals)
        text = repr(value)
        if len(text) > 300:
            text = text[:300] + "..."
        return "    where %s evaluated to %s\n" % (ast.unparse(expr), text)
    except BaseException:
        return ""

def _failure(exc, cwd):
    import linecache
    lines = []
    frames = _frames(exc.__traceback__, cwd)[-6:]
    for frame, name, lineno, func in frames:
        lines.append('  File "%s", line %d, in %s\n' % (name, lineno, func))
        source = linecache.getline(frame.f_code.co_filename, lineno).strip()
        if source:
            lines.append("    %s\n" % source)
    message = "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__
    lines.append(message[:500] + "\n")
    if isinstance(exc, AssertionError) and frames:
        lines.append(_explain(*frames[-1][:3]))
    return "".join(lines)

def _strict_equal(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(k in b and _strict_equal(a[k], b[k]) for k in a)
    return bool(a == b)

def _classify(exc, hits):
    kind = None
    if isinstance(exc, MemoryError):
        kind = "memory"
    elif isinstance(exc, BlockingIOError):
        kind = "process"
    if kind and kind not in hits:
        hits.append(kind)

def _main():
    cfg = eval(sys.stdin.read(), {"__builtins__": {}}, {})
    sys.stdin.close()
    cwd = os.getcwd()
    try:
        layers, caps = _setup(cfg)
    except Exception as exc:
        layers, caps = ["setup-error:%s" % type(exc).__name__], {}
    hits = []
    sys.addaudithook(_hook(cfg["strict"], hits, cwd))
    for name in ("ctypes", "_ctypes", "ctypes._endian"):
        sys.modules.pop(name, None)
    sys.path.insert(0, cwd)
    main_pid = os.getpid()
    write = sys.stdout.write
    passed = failed = 0
    for module_name in cfg["tests"]:
        try:
            module = __import__(module_name)
        except BaseException as exc:
            if os.getpid() != main_pid:
                os._exit(0)
            _classify(exc, hits)
            failed += 1
            write("ERROR collecting %s.py\n%s" % (module_name, _failure(exc, cwd)))
            continue
        tests = [(k, v) for k, v in list(vars(module).items())
                 if k.startswith("test") and callable(v)]
        if cfg["select"] is not None:
            tests = [t for t in tests if t[0] == cfg["select"]]
        for name, function in tests:
            try:
                function()
                ok, detail = True, ""
            except BaseException as exc:
                ok = False
                try:
                    _classify(exc, hits)
                    detail = _failure(exc, cwd)
                except BaseException:
                    detail = "  (no traceback)\n"
            if os.getpid() != main_pid:
                os._exit(0)
            if ok:
                passed += 1
                write("%s ... ok\n" % name)
            else:
                failed += 1
                write("%s ... FAIL\n%s" % (name, detail))
    for index, (module_name, function, args, expected) in enumerate(cfg["cases"]):
        try:
            result = getattr(__import__(module_name), function)(*args)
            ok = _strict_equal(result, expected)
        except BaseException as exc:
            _classify(exc, hits)
            ok = False
        if os.getpid() != main_pid:
            os._exit(0)
        passed += ok
        failed += not ok
        write("hidden case %d ... %s\n" % (index + 1, "ok" if ok else "FAIL"))
    write("%d passed, %d failed\n" % (passed, failed))
    write("%s %d %d %s %s\n" % (cfg["nonce"], passed, failed, ",".join(hits) or "-",
                                ",".join(layers) or "-"))
    sys.stdout.flush()
    os._exit(0)

_main()
'''

# ---------------------------------------------------------------------- directories

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


# ---------------------------------------------------------------------- running


@dataclasses.dataclass(frozen=True)
class RunResult:
    output: str               # the runner's report (the nonce line removed), possibly cut
    passed: int
    failed: int
    limit: str | None         # module docstring: which limit stopped the run
    layers: tuple[str, ...]   # isolation layers the runner reported
    seconds: float            # wall-clock time of the subprocess (start to reap)
    returncode: int | None

    @property
    def all_passed(self) -> bool:
        return self.limit is None and self.failed == 0 and self.passed > 0


_UID_COUNTER = itertools.count()
_UID_BASE = 1_000_000


def _run_uid() -> int:
    return _UID_BASE + (os.getpid() % 4096) * 4096 + next(_UID_COUNTER) % 4096


def _kill_uid(uid: int) -> None:
    """SIGKILLs every process of `uid` (processes that left the run's process group)."""
    for _ in range(5):
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                        continue  # a zombie waiting for its reaper: nothing left to kill
                os.kill(int(entry.name), signal.SIGKILL)
                found = True
            except (OSError, ValueError, IndexError):
                continue
        if not found:
            return
        time.sleep(0.01)


_PYTHON_LOCK = threading.Lock()
_PYTHON: dict[tuple, tuple[str, bool]] = {}


def _candidate_pythons() -> list[str]:
    out = []
    for path in (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3",
                 shutil.which("python3") or ""):
        if path and os.path.exists(path) and path not in out:
            out.append(path)
    return out


class Sandbox:
    """Runs the task's tests on a set of files under the limits of the module docstring."""

    def __init__(self, *, time_limit: float = 10.0, cpu_limit: int = 3, memory_mb: int = 512,
                 output_bytes: int = 1 << 20, max_processes: int = 16, strict: bool = True,
                 netns: bool = True, landlock: bool = True, drop_uid: bool = True):
        if time_limit <= 0 or cpu_limit < 1 or memory_mb < 64 or output_bytes < 1024:
            raise ValueError("sandbox limits: time_limit > 0, cpu_limit >= 1, memory_mb >= 64, "
                             "output_bytes >= 1024")
        self.time_limit = float(time_limit)
        self.cpu_limit = int(cpu_limit)
        self.memory_mb = int(memory_mb)
        self.output_bytes = int(output_bytes)
        self.max_processes = int(max_processes)
        self.strict = bool(strict)
        self.netns = bool(netns) and sys.platform.startswith("linux")
        self.landlock = bool(landlock) and sys.platform.startswith("linux")
        self.drop_uid = (bool(drop_uid) and sys.platform.startswith("linux")
                         and os.geteuid() == 0)

    # -------------------------------------------------------------- interpreter

    def _python(self) -> tuple[str, bool]:
        """(interpreter, whether runs drop to an unprivileged uid): as root, the first candidate
        whose standard library a dropped uid can import (probed once per process)."""
        key = (self.drop_uid, self.netns, self.landlock)
        if key in _PYTHON:
            return _PYTHON[key]
        with _PYTHON_LOCK:
            if key not in _PYTHON:
                choice = (os.path.realpath(sys.executable), False)
                if self.drop_uid:
                    for python in _candidate_pythons():
                        if self._probe(python):
                            choice = (python, True)
                            break
                _PYTHON[key] = choice
        return _PYTHON[key]

    def _probe(self, python: str) -> bool:
        probe = {"probe.py": "import math, re, ast, linecache, collections, json\n"
                             "def test_probe():\n    assert math.sqrt(4) == 2.0\n"}
        workspace = Workspace({})
        try:
            result = self._execute(workspace.path, probe, ["probe"], None, (), python, True)
            return result.passed == 1 and "uid" in result.layers
        except OSError:
            return False
        finally:
            workspace.close()

    def isolation(self) -> tuple[str, ...]:
        """The isolation layers a run gets on this machine (a probe run; cached per process)."""
        key = ("layers", self.drop_uid, self.netns, self.landlock, self.strict)
        if key not in _PYTHON:
            workspace = Workspace({})
            try:
                result = self.run(workspace.path, {"probe.py": "def test_probe():\n    "
                                                               "assert True\n"}, ["probe"])
                layers = result.layers + (("audit-strict",) if self.strict else ("audit",))
            finally:
                workspace.close()
            _PYTHON[key] = layers
        return _PYTHON[key]

    # -------------------------------------------------------------- runs

    def run(self, workspace_dir: str, files: dict[str, str], tests: list[str],
            select: str | None = None, cases=()) -> RunResult:
        """Runs the test functions of modules `tests` (only `select` when given) and the hidden
        `cases` ((module, function, args, expected), ...) on `files` in a new run directory
        under `workspace_dir`."""
        python, drop = self._python()
        return self._execute(workspace_dir, files, tests, select, cases, python, drop)

    def _execute(self, workspace_dir, files, tests, select, cases, python, drop) -> RunResult:
        run_dir = tempfile.mkdtemp(prefix="run-", dir=workspace_dir)
        out_path = run_dir + ".out"
        uid = _run_uid() if drop else None
        nonce = secrets.token_hex(16)
        config = {"nonce": nonce, "tests": list(tests), "select": select,
                  "cases": [tuple(c) for c in cases], "strict": self.strict,
                  "netns": self.netns, "landlock": self.landlock, "uid": uid,
                  "host_pid": os.getpid(),
                  "limits": {"cpu": self.cpu_limit, "memory": self.memory_mb << 20,
                             "fsize": self.output_bytes, "nofile": 64,
                             "nproc": self.max_processes}}
        proc = None
        try:
            for name, text in files.items():
                with open(os.path.join(run_dir, name), "w", encoding="utf-8", newline="") as f:
                    f.write(text)
            if uid is not None:
                os.chown(run_dir, uid, uid)
                os.chmod(run_dir, 0o700)
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                   "HOME": run_dir, "TMPDIR": run_dir}
            with open(out_path, "w+b") as out:
                start = time.perf_counter()
                proc = subprocess.Popen([python, "-I", "-S", "-B", "-c", RUNNER], cwd=run_dir,
                                        stdin=subprocess.PIPE, stdout=out,
                                        stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True, close_fds=True)
                try:
                    proc.stdin.write(repr(config).encode())
                    proc.stdin.close()
                except (BrokenPipeError, OSError):
                    pass
                timed_out = not _wait_exit(proc.pid, self.time_limit)
                _kill_group(proc.pid)  # the unreaped leader keeps the group id reserved
                returncode = _reap(proc)
                if uid is not None:
                    _kill_uid(uid)
                seconds = time.perf_counter() - start
                size = os.fstat(out.fileno()).st_size
                out.seek(0)
                data = out.read(min(size, self.output_bytes))
            proc = None
        finally:
            if proc is not None and proc.returncode is None:  # an exception mid-run
                _kill_group(proc.pid)
                _reap(proc)
                if uid is not None:
                    _kill_uid(uid)
            shutil.rmtree(run_dir, ignore_errors=True)
            try:
                os.unlink(out_path)
            except OSError:
                pass
        return _parse(data, nonce, returncode, timed_out, size >= self.output_bytes, seconds)


def _wait_exit(pid: int, timeout: float) -> bool:
    """Waits until process `pid` has exited, without reaping it (its process group stays valid
    for the kill that follows); False on timeout."""
    deadline = time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if poller.poll(max(1, int(left * 1000))):
                    return True
        finally:
            os.close(fd)
    delay = 0.0005
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.01)
    return False


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(proc: subprocess.Popen) -> int | None:
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # unkillable: leave it to the OS
        return None


def _parse(data: bytes, nonce: str, returncode, timed_out: bool, output_full: bool,
           seconds: float) -> RunResult:
    text = data.decode("utf-8", errors="replace")
    report = None
    kept = []
    for line in text.split("\n"):
        if line.startswith(nonce + " "):
            report = line
        else:
            kept.append(line)
    output = "\n".join(kept).rstrip("\n")
    passed = failed = 0
    hits, layers = [], ()
    if report is not None:
        fields = report.split(" ")
        try:
            passed, failed = int(fields[1]), int(fields[2])
            hits = [] if fields[3] == "-" else fields[3].split(",")
            layers = () if fields[4] == "-" else tuple(fields[4].split(","))
        except (IndexError, ValueError):
            report = None
    if timed_out:
        limit = "timeout"
    elif returncode == -signal.SIGXCPU or (returncode == -signal.SIGKILL and report is None):
        limit = "cpu"
    elif returncode == -signal.SIGXFSZ or output_full:
        limit = "output"
    elif hits:
        limit = hits[0]
    elif report is None:
        limit = "crash"
    else:
        limit = None
    if report is None:
        failed = max(failed, 1)
    return RunResult(output, passed, failed, limit, layers, seconds, returncode)
