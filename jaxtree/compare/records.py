"""Run records: the few kilobytes of a finished run that its results are made of, kept apart from
its checkpoints so that a grid can outlive the machine it ran on.

A grid on a small machine takes longer than the machine is held (a scratch disk wiped between
sessions, a preemptible VM): its checkpoints are gigabytes and go with the machine, but what the
aggregation reads of a finished run is `metrics.jsonl`, `train_summary.json`, the job's
`config.json` and the harness's `run.json`. `launch.compare --records=DIR` copies those files to
`DIR/<variant>/seed_<s>/` as each run finishes (a directory small enough to commit), and before
anything runs copies them back into any run directory that holds nothing yet, so a fresh machine
skips the runs finished elsewhere and aggregates them with the new ones. A restored run is checked
like any finished run: one made with other overrides than the grid sets now is refused.

The warm start is not kept (it is the checkpoint of a job, rebuilt on a fresh machine), but its
step-0 evaluations are: `RECORDS/warm_starts/<key>/initial_evals/` keeps the results the runs read
and wrote in the warm start's `initial_evals` (`jaxtree.train.shared_eval`), and each is put back
into the rebuilt warm start before a run starts. A result is read only under its own key, a hash
of the parameters' bytes and the evaluation's settings, so it serves a warm start rebuilt bit for
bit (the same processor, docs/design.md) and is ignored by any other, which evaluates afresh.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Callable, Iterable

from jaxtree.compare.grid import RESERVED_VARIANT
from jaxtree.compare.plan import Run, WarmStart
from jaxtree.compare.runs import RUN_FILE, SUMMARY_FILE, has_progress, is_finished
from jaxtree.train.metrics import METRICS_FILE
from jaxtree.train.shared_eval import DIRECTORY as EVALS_DIRECTORY
from jaxtree.train.workdir import CONFIG_FILE

RECORD_FILES = (RUN_FILE, SUMMARY_FILE, METRICS_FILE, CONFIG_FILE)


def record_dir(records: str, run: Run) -> str:
    """Where `run`'s record lives under the records directory."""
    return os.path.join(os.path.abspath(records), run.variant, f"seed_{run.seed}")


def has_record(records: str, run: Run) -> bool:
    """The records directory holds a finished record of `run`."""
    return is_finished(record_dir(records, run), run.steps)


def _copy_file(src: str, dst_dir: str, name: str) -> None:
    """Copies `src` to `dst_dir/name` through a temporary name (lanes may copy at once; an
    interrupted copy never leaves a truncated file under the real name)."""
    tmp = os.path.join(dst_dir, f".{name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, os.path.join(dst_dir, name))


def _copy_files(src: str, dst: str) -> None:
    """Copies the record files present in `src` to `dst`, each through a temporary name so that an
    interrupted copy never leaves a truncated file under the real one; train_summary.json last,
    since it is what marks a run finished."""
    os.makedirs(dst, exist_ok=True)
    names = [n for n in RECORD_FILES if n != SUMMARY_FILE] + [SUMMARY_FILE]
    for name in names:
        path = os.path.join(src, name)
        if os.path.isfile(path):
            _copy_file(path, dst, name)


def record_seeds(records: str, variant: str) -> list[int]:
    """The seeds with a seed_<s> directory under the variant in the records directory."""
    vdir = os.path.join(os.path.abspath(records), variant)
    if not os.path.isdir(vdir):
        return []
    return sorted(int(m.group(1)) for m in map(re.compile(r"seed_(-?\d+)").fullmatch,
                                                 os.listdir(vdir)) if m)


def save_record(records: str, run: Run) -> bool:
    """Copies a finished run's record files to the records directory; False (nothing copied) when
    the run is not finished."""
    if not is_finished(run.workdir, run.steps):
        return False
    _copy_files(run.workdir, record_dir(records, run))
    return True


def restore_records(runs: Iterable[Run], records: str,
                    say: Callable[[str], None] = print) -> list[Run]:
    """Copies each run's finished record into its run directory when that directory holds nothing
    of a run yet (a run started or finished here is never overwritten); returns the runs
    restored."""
    restored = []
    for run in runs:
        if has_progress(run.workdir) or not has_record(records, run):
            continue
        _copy_files(record_dir(records, run), run.workdir)
        restored.append(run)
        say(f"{run.label}: finished elsewhere, restored from {record_dir(records, run)}")
    return restored


def evaluations_dir(records: str, warm: WarmStart) -> str:
    """Where the records keep `warm`'s shared step-0 evaluations."""
    return os.path.join(os.path.abspath(records), RESERVED_VARIANT, warm.key, EVALS_DIRECTORY)


def _copy_new_evaluations(src: str, dst: str) -> None:
    """Copies the evaluation results (`<key>.json`) in `src` that `dst` lacks."""
    if not os.path.isdir(src):
        return
    names = sorted(n for n in os.listdir(src) if n.endswith(".json") and not n.startswith(".")
                   and os.path.isfile(os.path.join(src, n))
                   and not os.path.exists(os.path.join(dst, n)))
    if names:
        os.makedirs(dst, exist_ok=True)
    for name in names:
        _copy_file(os.path.join(src, name), dst, name)


def save_evaluations(records: str, warm: WarmStart) -> None:
    """Keeps the warm start's shared evaluations in the records (those not kept yet)."""
    _copy_new_evaluations(os.path.join(warm.workdir, EVALS_DIRECTORY),
                          evaluations_dir(records, warm))


def restore_evaluations(records: str, warm: WarmStart) -> None:
    """Puts the recorded shared evaluations into the (rebuilt) warm start, never replacing one
    there; a run then reads the result whose key its parameters and settings give."""
    _copy_new_evaluations(evaluations_dir(records, warm),
                          os.path.join(warm.workdir, EVALS_DIRECTORY))
