"""The mini-SWE sandbox: isolated test runs of model-written code (docs/threat_model.md).

`Sandbox.run` copies the files into a fresh `run-*` directory inside the episode directory
(mini_swe_workspace) and starts `python -I -S -B -c <loader>` there (isolated mode, no site
packages, no bytecode files) with a scrubbed environment, in its own session. Its stdin carries the
runner (mini_swe_runner's source, RUNNER, compiled and marshalled once per process by the run's
own interpreter: compiling it at every start would cost a run 3-6 ms) and the run's configuration;
stdout and stderr go to an unnamed file, the results fd to another (O_TMPFILE: no path a run could
open). The runner confines itself before any task code is imported (in a fresh single-threaded
interpreter rather than `preexec_fn`: the host is a multi-threaded JAX program, where code between
fork and exec can deadlock, and without `preexec_fn` subprocess can vfork a large host cheaply).
Its module docstring lists the layers: rlimits, a network namespace, a PID namespace whose init
runs the tests (every process of the run dies with it), a per-run uid when the host is root,
Landlock (reads confined to the run directory and the interpreter's read scope; writes to the run
directory's existing files; no execve) and a seccomp filter (no sockets: no host unix socket can
be reached). `isolation()` names the kernel-enforced layers in effect on this machine, measured by
a probe run; the audit hook is diagnostics, named by `diagnostics()`, never containment.

The read scope (`read_scope(python)`, measured by the same once-per-interpreter probe that compiles
the runner: it imports every extension module of lib-dynload and reads /proc/self/maps): the
interpreter's binary, its standard library (minus site-packages / dist-packages when they lie
inside it), lib-dynload, every file the probe had mapped (shared libraries, the locale and gconv
caches), and /etc/ld.so.cache (read by the dynamic loader when an extension module is imported).

The verdict. Hidden cases `(module, function, args, expected)` are split on the host: the run
receives (module, function, args) only, and returns each value through the strict encoder on the
results fd; the host compares with the expected values, which never leave it (mini_swe_verdict).
`RunResult.cases` holds the host's verdict per case; `all_cases_passed` is what `submit` pays for.
The visible tests' counts (`passed`, `failed`) are what the run reports: informative, forgeable
by the code under test, and never a reward.

The host waits for the run with a wall-clock limit (a pidfd when available); on timeout it sends
SIGTERM to the runner's supervisor (which SIGKILLs the namespace's init, so the kernel kills the
rest) and then SIGKILLs the process group; it reads at most `output_bytes` of output.

Which limit stopped a run (`RunResult.limit`): "timeout" (wall clock), "cpu" (RLIMIT_CPU),
"memory" (MemoryError under RLIMIT_AS), "output" (RLIMIT_FSIZE / the output cap), "process"
(process creation refused or RLIMIT_NPROC hit), "network" (a socket operation attempted),
"filesystem" (a write outside the run directory, or a new file, attempted), "crash" (the runner
ended without its final record: os._exit, a signal); None for a run that finished normally (its
tests may still fail). "network", "filesystem", "process" and "memory" are the runner's
diagnostics: code can suppress them, never turn a failed hidden case into a passed one.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from environments import mini_swe_runner
from environments.mini_swe_verdict import case_verdicts, read_records
from environments.mini_swe_workspace import (ROOT_PREFIX, Workspace, base_dir, process_root,
                                             sweep_stale_roots)

__all__ = ["ROOT_PREFIX", "RunResult", "Sandbox", "Workspace", "base_dir", "process_root",
           "read_scope", "sweep_stale_roots"]

with open(mini_swe_runner.__file__, encoding="utf-8") as _f:
    RUNNER = _f.read()

#: Seconds the runner's supervisor gets, after SIGTERM, to kill its namespace before SIGKILL.
TERMINATE_GRACE = 1.0


@dataclasses.dataclass(frozen=True)
class RunResult:
    output: str               # the run's stdout and stderr, possibly cut
    passed: int               # visible test functions as the run reports them (forgeable)
    failed: int
    limit: str | None         # module docstring: which limit stopped the run
    layers: tuple[str, ...]   # kernel-enforced layers the runner reported
    seconds: float            # wall-clock time of the subprocess (start to reap)
    returncode: int | None
    cases: tuple[bool, ...] = ()  # hidden cases, checked on the host

    @property
    def all_passed(self) -> bool:
        """The visible tests all passed, as the run reports them."""
        return self.limit is None and self.failed == 0 and self.passed > 0

    @property
    def all_cases_passed(self) -> bool:
        """Every hidden case returned its expected value (the host's check) in a run no limit
        stopped: the verdict `submit` pays for."""
        return bool(self.cases) and all(self.cases) and self.limit is None


# ---------------------------------------------------------------------- interpreters

_UID_COUNTER = itertools.count()
_UID_BASE = 1_000_000


def _run_uid() -> int:
    return _UID_BASE + (os.getpid() % 4096) * 4096 + next(_UID_COUNTER) % 4096


def run_uids(pid: int | None = None) -> range:
    """The uids the runs of process `pid` (default: this one) use when the host is root."""
    first = _UID_BASE + ((os.getpid() if pid is None else pid) % 4096) * 4096
    return range(first, first + 4096)


_PROBE = r'''
import marshal, os, sys, sysconfig
runner = compile(sys.stdin.read(), "<mini_swe_runner>", "exec")
dynload = [p for p in sys.path if os.path.basename(p) == "lib-dynload" and os.path.isdir(p)]
for directory in dynload:
    for name in sorted(os.listdir(directory)):
        if name.endswith(".so"):
            try:
                __import__(name.split(".")[0])
            except BaseException:
                pass
mapped = set()
with open("/proc/self/maps") as f:
    for line in f:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            mapped.add(fields[5].strip())
print(repr({"executable": os.path.realpath(sys.executable), "dynload": dynload,
            "stdlib": sysconfig.get_paths()["stdlib"], "mapped": sorted(mapped),
            "runner": marshal.dumps(runner)}))
'''

# Runs execute the runner compiled by their own interpreter (marshal's format is the
# interpreter's): compiling its source at every start would cost a run ~3-6 ms.
_LOADER = "import marshal, sys; exec(marshal.loads(sys.stdin.buffer.read(%d)))"

_PROFILE_LOCK = threading.Lock()
_PROFILES: dict[str, dict] = {}
_PACKAGE_DIRS = ("site-packages", "dist-packages")


def _beneath(path: str, directories) -> bool:
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in directories)


def _profile(python: str) -> dict:
    """What runs of `python` need, measured once per process and interpreter by a probe:
    {"dirs", "files"} (the read scope) and "runner" (RUNNER compiled and marshalled by that
    interpreter; None when the probe failed, and runs compile the source)."""
    if python not in _PROFILES:
        with _PROFILE_LOCK:
            if python not in _PROFILES:
                _PROFILES[python] = _measure(python)
    return _PROFILES[python]


def read_scope(python: str) -> dict[str, tuple[str, ...]]:
    """What a run of `python` may read besides its run directory (module docstring):
    {"dirs": (...), "files": (...)}, real paths; measured once per process and interpreter."""
    profile = _profile(python)
    return {"dirs": profile["dirs"], "files": profile["files"]}


def _measure(python: str) -> dict:
    import ast
    try:
        probe = subprocess.run([python, "-I", "-S", "-B", "-c", _PROBE], capture_output=True,
                               input=RUNNER.encode(), timeout=60, check=True)
        found = ast.literal_eval(probe.stdout.decode().strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, SyntaxError, IndexError):
        return {"dirs": (), "files": (os.path.realpath(python),), "runner": None}
    stdlib = os.path.realpath(found["stdlib"])
    dirs = [stdlib]
    files = []
    if any(os.path.isdir(os.path.join(stdlib, d)) for d in _PACKAGE_DIRS):
        # a virtualenv-style layout: the standard library's entries, without the packages
        entries = [os.path.join(stdlib, e) for e in sorted(os.listdir(stdlib))
                   if e not in _PACKAGE_DIRS]
        dirs = [e for e in entries if os.path.isdir(e)]
        files = [e for e in entries if os.path.isfile(e)]
    dirs += [os.path.realpath(d) for d in found["dynload"]
             if not _beneath(os.path.realpath(d), dirs)]
    files += [found["executable"]]
    files += [os.path.realpath(p) for p in found["mapped"] if os.path.isfile(p)]
    if os.path.isfile("/etc/ld.so.cache"):
        files.append("/etc/ld.so.cache")
    files = sorted({f for f in files if not _beneath(f, dirs)})
    return {"dirs": tuple(dirs), "files": tuple(files), "runner": found["runner"]}


_PYTHON_LOCK = threading.Lock()
_PYTHON: dict[tuple, object] = {}


def _candidate_pythons() -> list[str]:
    out = []
    for path in (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3",
                 shutil.which("python3") or ""):
        path = os.path.realpath(path) if path else ""
        if path and os.path.exists(path) and path not in out:
            out.append(path)
    return out


def _others_can_run(path: str) -> bool:
    """Whether another uid may execute `path` by its permission bits (every directory above it
    searchable, the file readable and executable): a cheap filter before probing a candidate."""
    try:
        if os.stat(path).st_mode & 0o005 != 0o005:
            return False
        directory = os.path.dirname(path)
        while True:
            if not os.stat(directory).st_mode & 0o001:
                return False
            if directory == os.path.dirname(directory):
                return True
            directory = os.path.dirname(directory)
    except OSError:
        return False


# ---------------------------------------------------------------------- the sandbox


class Sandbox:
    """Runs the task's tests and hidden cases on a set of files under the limits and layers of
    the module docstring (each layer can be switched off, for tests and for machines without
    it)."""

    def __init__(self, *, time_limit: float = 10.0, cpu_limit: int = 3, memory_mb: int = 512,
                 output_bytes: int = 1 << 20, max_processes: int = 16, strict: bool = True,
                 netns: bool = True, pidns: bool = True, landlock: bool = True,
                 seccomp: bool = True, drop_uid: bool = True):
        if time_limit <= 0 or cpu_limit < 1 or memory_mb < 64 or output_bytes < 1024:
            raise ValueError("sandbox limits: time_limit > 0, cpu_limit >= 1, memory_mb >= 64, "
                             "output_bytes >= 1024")
        linux = sys.platform.startswith("linux")
        self.time_limit = float(time_limit)
        self.cpu_limit = int(cpu_limit)
        self.memory_mb = int(memory_mb)
        self.output_bytes = int(output_bytes)
        self.max_processes = int(max_processes)
        self.strict = bool(strict)
        self.netns = bool(netns) and linux
        self.pidns = bool(pidns) and linux
        self.landlock = bool(landlock) and linux
        self.seccomp = bool(seccomp) and linux
        self.drop_uid = bool(drop_uid) and linux and os.geteuid() == 0

    def _key(self) -> tuple:
        return (self.drop_uid, self.netns, self.pidns, self.landlock, self.seccomp)

    # -------------------------------------------------------------- interpreter

    def _python(self) -> tuple[str, bool]:
        """(interpreter, whether runs drop to an unprivileged uid): as root, the first candidate
        whose standard library a dropped uid can import (probed once per process)."""
        key = ("python",) + self._key()
        if key in _PYTHON:
            return _PYTHON[key]
        with _PYTHON_LOCK:
            if key not in _PYTHON:
                choice = (os.path.realpath(sys.executable), False)
                if self.drop_uid:
                    for python in _candidate_pythons():
                        if _others_can_run(python) and self._probe(python):
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
        """The kernel-enforced layers a run gets on this machine (a probe run; cached per
        process): "rlimits", "netns", "pidns", "uid", "landlock<ABI>" (with the read scope of
        the module docstring), "seccomp". The audit hook is not among them (`diagnostics`)."""
        key = ("layers",) + self._key()
        if key not in _PYTHON:
            workspace = Workspace({})
            try:
                result = self.run(workspace.path, {"probe.py": "def test_probe():\n    "
                                                               "assert True\n"}, ["probe"])
            finally:
                workspace.close()
            _PYTHON[key] = result.layers
        return _PYTHON[key]

    def diagnostics(self) -> tuple[str, ...]:
        """What watches a run without containing it: the audit hook, "audit-strict" (refuses
        what it sees at the Python level) or "audit" (records only). Python code can remove
        either: they name `RunResult.limit`, they are no boundary."""
        return ("audit-strict",) if self.strict else ("audit",)

    def read_scope(self) -> dict[str, tuple[str, ...]]:
        """What a run may read besides its run directory (module docstring)."""
        return read_scope(self._python()[0]) if self.landlock else {"dirs": ("/",), "files": ()}

    # -------------------------------------------------------------- runs

    def run(self, workspace_dir: str, files: dict[str, str], tests: list[str],
            select: str | None = None, cases=()) -> RunResult:
        """Runs the test functions of modules `tests` (only `select` when given) and the hidden
        `cases` ((module, function, args, expected), ...: the expected values stay here) on
        `files` in a new run directory under `workspace_dir`."""
        python, drop = self._python()
        return self._execute(workspace_dir, files, tests, select, cases, python, drop)

    def _config(self, tests, select, cases, uid, results_fd, python) -> dict:
        scope = read_scope(python) if self.landlock else {"dirs": (), "files": ()}
        return {"tests": list(tests), "select": select,
                "cases": [(c[0], c[1], tuple(c[2])) for c in cases], "strict": self.strict,
                "netns": self.netns, "pidns": self.pidns, "landlock": self.landlock,
                "seccomp": self.seccomp, "uid": uid, "host_pid": os.getpid(),
                "results_fd": results_fd, "read_scope": scope,
                "limits": {"cpu": self.cpu_limit, "memory": self.memory_mb << 20,
                           "fsize": self.output_bytes, "nofile": 64,
                           "nproc": self.max_processes}}

    def _execute(self, workspace_dir, files, tests, select, cases, python, drop) -> RunResult:
        run_dir = tempfile.mkdtemp(prefix="run-", dir=workspace_dir)
        uid = _run_uid() if drop else None
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
            compiled = _profile(python)["runner"]
            program = RUNNER if compiled is None else _LOADER % len(compiled)
            with tempfile.TemporaryFile(dir=workspace_dir) as out, \
                    tempfile.TemporaryFile(dir=workspace_dir) as results:
                config = self._config(tests, select, cases, uid, results.fileno(), python)
                start = time.perf_counter()
                proc = subprocess.Popen([python, "-I", "-S", "-B", "-c", program], cwd=run_dir,
                                        stdin=subprocess.PIPE, stdout=out,
                                        stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True, close_fds=True,
                                        pass_fds=(results.fileno(),))
                try:
                    proc.stdin.write((compiled or b"") + repr(config).encode())
                    proc.stdin.close()
                except (BrokenPipeError, OSError):
                    pass
                timed_out = not _wait_exit(proc.pid, self.time_limit)
                if timed_out and self.pidns:
                    _signal(proc.pid, signal.SIGTERM)  # the supervisor kills its namespace
                    _wait_exit(proc.pid, TERMINATE_GRACE)
                _kill_group(proc.pid)  # the unreaped leader keeps the group id reserved
                returncode = _reap(proc)
                seconds = time.perf_counter() - start
                output, output_full = _read(out.fileno(), self.output_bytes)
                data, records_full = _read(results.fileno(), self.output_bytes)
            proc = None
        finally:
            if proc is not None and proc.returncode is None:  # an exception mid-run
                _signal(proc.pid, signal.SIGTERM)
                _kill_group(proc.pid)
                _reap(proc)
            shutil.rmtree(run_dir, ignore_errors=True)
        return _result(output, output_full, read_records(data, records_full),
                       [c[3] for c in cases], returncode, timed_out, seconds)


def _read(fd: int, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of the file from its start; whether the file reached the limit."""
    size = os.fstat(fd).st_size
    return os.pread(fd, min(size, limit), 0), size >= limit


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


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


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


def _result(output: bytes, output_full: bool, records, expected, returncode, timed_out: bool,
            seconds: float) -> RunResult:
    passed = sum(ok for _, ok in records.tests)
    failed = len(records.tests) - passed
    if timed_out:
        limit = "timeout"
    elif returncode == -signal.SIGXCPU or (returncode == -signal.SIGKILL and not records.ended):
        limit = "cpu"
    elif returncode == -signal.SIGXFSZ or output_full:
        limit = "output"
    elif records.hits:
        limit = records.hits[0]
    elif not records.ended:
        limit = "crash"
    else:
        limit = None
    if not records.ended:
        failed = max(failed, 1)
    text = output.decode("utf-8", errors="replace").rstrip("\n")
    return RunResult(text, passed, failed, limit, records.layers, seconds, returncode,
                     case_verdicts(records, expected))
