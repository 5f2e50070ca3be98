"""Training metrics: one JSON line per step in <workdir>/metrics.jsonl, mirrored to TensorBoard.

Only process 0 writes (on a multi-host run every process computes the same replicated metrics).
On resume the log is cut back to the restored step, so a run that was interrupted and resumed
reads like one that never stopped.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import jax
import numpy as np

from jaxtree.train.workdir import check_unchanged
from jaxtree.utils import report

METRICS_FILE = "metrics.jsonl"


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The records of a JSON-lines log (empty if there is none). A line that does not parse (the
    torn last line of a process killed mid-write, or bytes that are not UTF-8: a damaged disk
    block, a file edited by hand) is dropped with a warning."""
    if not os.path.exists(path):
        return []
    records, torn = [], 0
    with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is one bad line, not the file
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:  # UnicodeDecodeError included
                torn += 1
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                torn += 1
    if torn:
        report(f"{path}: {torn} unreadable line(s) dropped (a write cut off by a kill?)")
    return records


def keep_records_until(path: str, step: int) -> None:
    """Rewrites a JSON-lines log with only its records of steps <= `step` (a resumed run
    continues the log of the checkpoint it resumed, without the steps it will redo); the
    rewrite goes through a temporary file, so a kill during it loses nothing."""
    kept = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for record in kept:
            f.write(json.dumps(record) + "\n")
    os.replace(tmp, path)


def read_metrics(workdir: str) -> list[dict[str, Any]]:
    """All records of <workdir>/metrics.jsonl (empty if there is none)."""
    return read_jsonl(os.path.join(workdir, METRICS_FILE))


def tensorboard_tag(name: str) -> str:
    """`name` with the characters TensorBoard rejects in a tag replaced ("rollout/pass@8" ->
    "rollout/pass_at_8"): tensorboardX would rename it too, logging a warning at every step."""
    return re.sub(r"[^-/\w\.]", "_", name.replace("@", "_at_"))


def _plain(value: Any) -> Any:
    if isinstance(value, (np.generic, jax.Array)):
        value = np.asarray(value).item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN / inf
    return value


class MetricsWriter:
    def __init__(self, workdir: str, resume_step: int = 0, tensorboard: bool = True):
        self.active = jax.process_index() == 0
        self._tb = None
        if not self.active:
            return
        os.makedirs(workdir, exist_ok=True)
        self.path = os.path.join(workdir, METRICS_FILE)
        # A run resumed from no checkpoint redoes step 0 (its initial evaluation) too: a kill
        # before the first checkpoint leaves records that the new run writes again.
        keep_records_until(self.path, resume_step if resume_step > 0 else -1)
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                report(f"tensorboardX is not installed: metrics go to {self.path} only")
            else:
                self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"),
                                         purge_step=resume_step + 1 if resume_step else None)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.active:
            return
        record = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        # a workdir deleted under the run would be recreated by this append, holding a partial
        # log that reads as the run's
        check_unchanged(self.path)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(tensorboard_tag(key), value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
