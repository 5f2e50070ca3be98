"""Held-out evaluations shared by the runs that start from the same parameters.

Every run of a comparison grid (`jaxtree.compare`) starts from the grid's one warm start and
evaluates it at step 0 with the same held-out tasks, sampling seed and settings (`eval.seed` is
not the run's `train.seed`: common random numbers), so each of those evaluations is the same
computation. On a pretrained model one costs about a training step (48 SmolLM2 episodes of
FrozenLake: ~9 minutes on one CPU core, ~20 when it is the process's first and compiles), once per
run of the grid.

`SharedEvaluations(directory)` keeps an evaluation's result (metrics and transcripts) as
`<directory>/<key>.json`, where the key is a SHA-256 of the parameters' content (every leaf's
path, dtype, shape and bytes) and of every setting the evaluation reads (the model, environment,
slot-engine and `eval` sections, the JAX version and backend); a run whose key is there reads the
result instead of evaluating again. The trainer uses it for the step-0 evaluation of a run that
starts from a warm start, with the directory inside the warm start (`<workdir>/sft/initial_evals`,
the grid's shared one when the run's `sft` links to it), so the record lives and is removed with
the parameters it describes. A file that does not read is evaluated and written again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Mapping

import jax

from jaxtree.evaluation import EvalResult, Transcript
from jaxtree.models.lora import content_hash

DIRECTORY = "initial_evals"


class SharedEvaluations:
    """Evaluation results in `directory`, keyed by the parameters and the settings."""

    def __init__(self, directory: str):
        self.directory = directory

    @staticmethod
    def key(params, settings: Mapping[str, Any]) -> str:
        """The record's name: 24 hex digits of SHA-256 over the parameters' digest and the
        settings (JSON, sorted keys) with the JAX version and backend."""
        material = json.dumps({"parameters": content_hash(params), "settings": settings,
                               "jax": jax.__version__, "backend": jax.default_backend()},
                              sort_keys=True, default=str)
        return hashlib.sha256(material.encode()).hexdigest()[:24]

    def path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    def load(self, key: str) -> EvalResult | None:
        """The recorded result, or None when there is none or it does not read."""
        try:
            with open(self.path(key)) as f:
                record = json.load(f)
            metrics = dict(record["metrics"])
            transcripts = [Transcript(**t) for t in record["transcripts"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not all(isinstance(v, (int, float)) for v in metrics.values()):
            return None
        return EvalResult(metrics, transcripts)  # as evaluated: 48 episodes stay an int

    def save(self, key: str, result: EvalResult, settings: Mapping[str, Any]) -> str:
        """Writes the record whole (a temporary file per process, then renamed: runs that
        evaluate the same parameters at once leave one complete record); returns its path."""
        os.makedirs(self.directory, exist_ok=True)
        path = self.path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"settings": settings, "metrics": result.metrics,
                       "transcripts": [dataclasses.asdict(t) for t in result.transcripts]},
                      f, sort_keys=True, default=str)
        os.replace(tmp, path)
        return path
