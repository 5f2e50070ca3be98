"""Runners: a runner runs one job, `runner(argv, workdir, log_path) -> int` (the exit status),
and says whether a signal asked the harness to start no further job (`stop_requested`).
`SubprocessRunner` is the default; a plain callable is a runner that is never stopped
(`as_runner`: tests pass a fake that writes synthetic `metrics.jsonl` / `train_summary.json`)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable, TextIO

from jaxtree.compare.grid import REPO_ROOT

class Runner:
    """Runs one job. `stop_requested`: a signal asked the harness to start no further job
    (never, unless the runner forwards signals: `SubprocessRunner.forward_signals`)."""

    stop_requested: bool = False

    def __call__(self, argv: list, workdir: str, log_path: str) -> int:
        raise NotImplementedError


class FunctionRunner(Runner):
    """A plain `fn(argv, workdir, log_path) -> int` as a runner."""

    def __init__(self, fn: Callable[[list, str, str], int]):
        self.fn = fn

    def __call__(self, argv: list, workdir: str, log_path: str) -> int:
        return self.fn(argv, workdir, log_path)


def as_runner(runner: Runner | Callable[[list, str, str], int]) -> Runner:
    """`runner` itself, or a plain callable wrapped as a runner."""
    return runner if isinstance(runner, Runner) else FunctionRunner(runner)


def stop_requested(runner: Runner) -> bool:
    """Whether a signal asked the harness to start no further job (see `forward_signals`)."""
    return runner.stop_requested


def log_tail(path: str, lines: int = 15) -> list[str]:
    """The last non-empty lines of a log (progress-bar carriage returns count as line ends)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in re.split(r"[\r\n]+", text) if line.strip()][-lines:]


class SubprocessRunner(Runner):
    """`argv` as a subprocess in the repository root, its stdout and stderr appended to
    `log_path` and echoed to `echo` (default sys.stdout).

    `forward_signals()` makes SIGTERM/SIGINT to the harness reach the current job (launch.train
    saves a checkpoint on SIGTERM) and sets `stop_requested`, after which the harness starts no
    further job."""

    def __init__(self, echo: TextIO | None = None):
        self.echo = echo
        self.process: subprocess.Popen | None = None
        self.stop_requested = False

    def forward_signals(self) -> None:
        def handler(signum, frame):  # noqa: ARG001
            self.stop_requested = True
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _echo(self, chunk: bytes) -> None:
        echo = self.echo or sys.stdout
        buffer = getattr(echo, "buffer", None)
        if buffer is not None:
            echo.flush()
            buffer.write(chunk)
            buffer.flush()
        else:
            echo.write(chunk.decode("utf-8", errors="replace"))

    def __call__(self, argv: list[str], workdir: str, log_path: str) -> int:
        os.makedirs(workdir, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
        with open(log_path, "ab") as log:
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, start_new_session=True)
            try:
                while chunk := self.process.stdout.read1(65536):
                    log.write(chunk)
                    log.flush()
                    self._echo(chunk)
                rc = self.process.wait()
            finally:
                if self.process.poll() is None:      # the harness itself is going down
                    self.process.terminate()
                    try:
                        self.process.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        self.process.kill()
                self.process = None
            log.write(f"=== exit code {rc}\n".encode())
        return rc
