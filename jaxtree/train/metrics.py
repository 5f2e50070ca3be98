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
from absl import logging

METRICS_FILE = "metrics.jsonl"


def read_metrics(workdir: str) -> list[dict[str, Any]]:
    """All records of <workdir>/metrics.jsonl (empty if there is none)."""
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


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
        kept = [r for r in read_metrics(workdir) if r.get("step", 0) <= resume_step]
        with open(self.path, "w") as f:
            for record in kept:
                f.write(json.dumps(record) + "\n")
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                logging.warning("tensorboardX is not installed: metrics go to %s only", self.path)
            else:
                self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"),
                                         purge_step=resume_step + 1 if resume_step else None)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.active:
            return
        record = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
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
