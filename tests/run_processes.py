"""Which processes of this process's sandboxed runs still exist: the check the mini-SWE tests make
after a run and after `close()`."""

import os
import time

from environments.mini_swe_sandbox import run_uids


def processes_of_runs(deadline: float) -> list[str]:
    """Pids whose real uid is one of this process's run uids (`run_uids()`, read from
    /proc/<pid>/status: zombies included) that still exist after up to `deadline` seconds."""
    uids = run_uids()
    end = time.monotonic() + deadline
    while True:
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/status") as f:
                    uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            except (OSError, ValueError, IndexError, StopIteration):
                continue
            if uid in uids:
                found.append(entry.name)
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.05)
