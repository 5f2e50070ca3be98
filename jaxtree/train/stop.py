"""Graceful stops: SIGTERM (a preemption notice) and SIGINT (Ctrl-C) ask the running loop to save
a checkpoint after its current step and return; the job then exits with status 0, and the next
run of the same command resumes.

    with StopRequest() as stop:
        for step in ...:
            ...
            if stop.requested:
                save(); break

A second Ctrl-C while the checkpoint is written is ignored (a half-written checkpoint is worse
than waiting for it); a third ends the process at once (KeyboardInterrupt). Handlers can only be
installed from the main thread; elsewhere the request is a flag nothing sets.
"""

from __future__ import annotations

import signal
import sys
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    def __init__(self):
        self.requested = False
        self.signal_name: str | None = None
        self._interrupts = 0
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:
            self._interrupts += 1
            if self._interrupts >= 3:
                raise KeyboardInterrupt
        if not self.requested:
            print(f"{name}: saving a checkpoint after the current step, then exiting",
                  file=sys.stderr, flush=True)
        self.requested = True
        self.signal_name = self.signal_name or name

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
