"""The job tests/test_multihost.py runs as one or several processes: `launch.train`'s
multi-process path (the same flags and `launch.processes.run_job`) on the toy experiment, then
more jobs in the same processes (a process start costs more than a job here: imports, and every
program of process i > 0 compiled again, since JAX writes the persistent cache from process 0
only and keys CPU programs by device):

    python tests/multihost_job.py --workdir=DIR [--steps=2] [--resume_peer=OTHER_WORKDIR]
        [--long_run=DIR] [--model=POLICY] [--coordinator_address=... --num_processes=...
        --process_id=...]

1. the toy run (from --model, default the tiny preset) to --steps in DIR;
2. with --resume_peer: once OTHER_WORKDIR/train_summary.json exists (that run finished), its
   copy up to the step-1 checkpoint in DIR_resumed, trained to --steps there;
3. with --long_run: a run of 1000 steps there, which the test ends by killing a process.

Every process writes what it saw after each of the first two into <workdir>/process_<i>.json
(the job's result: step and evaluations), so the test can check that the processes agree.
"""

import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository before tests/ on the path: tests/environments would shadow `environments`.
sys.path[:1] = [ROOT, os.path.dirname(os.path.abspath(__file__))]

from absl import flags  # noqa: E402

from launch import processes  # noqa: E402  (defines the multi-process flags)
from launch.common import run_app  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.", required=True)
_STEPS = flags.DEFINE_integer("steps", 2, "Training steps.")
_RESUME_PEER = flags.DEFINE_string("resume_peer", None, "A workdir to resume from step 1.")
_LONG_RUN = flags.DEFINE_string("long_run", None, "A workdir for a run of 1000 steps, last.")
_MODEL = flags.DEFINE_string("model", "tiny", "The policy every run starts from "
                             "(config.model.name).")
PEER_TIMEOUT = 300  # seconds to wait for the peer run


def config(steps):
    from toy_run import toy_config

    # 8 rows per micro-batch: a multiple of data = 4 devices, in one process or two.
    return toy_config(steps=steps, train__micro_batch_size=8, checkpoint__every=1,
                      model__name=_MODEL.value)


def record(workdir: str, result: dict) -> None:
    import jax

    seen = {k: result[k] for k in ("step", "preempted", "initial_eval", "final_eval")}
    with open(os.path.join(workdir, f"process_{jax.process_index()}.json"), "w") as f:
        json.dump(seen, f)


def copy_to_step_one(source: str, target: str) -> None:
    """`source` as it was after step 1: checkpoint 2 and the summary removed (the resumed
    job cuts metrics.jsonl back to the checkpoint it restores)."""
    shutil.copytree(source, target)
    shutil.rmtree(os.path.join(target, "checkpoints", "2"))
    os.remove(os.path.join(target, "train_summary.json"))
    for name in os.listdir(target):
        if name.startswith("process_"):
            os.remove(os.path.join(target, name))


def main(argv):
    del argv
    processes.run_job(run)


def run():
    from jaxtree.parallel import distributed
    from jaxtree.train import jobs

    record(_WORKDIR.value, jobs.train_job(config(_STEPS.value), _WORKDIR.value))
    if _RESUME_PEER.value:
        summary = os.path.join(_RESUME_PEER.value, "train_summary.json")
        deadline = time.time() + PEER_TIMEOUT
        while not os.path.exists(summary):
            if time.time() > deadline:
                raise TimeoutError(f"{summary} did not appear in {PEER_TIMEOUT}s")
            time.sleep(0.2)
        resumed = _WORKDIR.value + "_resumed"
        distributed.on_first(lambda: copy_to_step_one(_RESUME_PEER.value, resumed))
        record(resumed, jobs.train_job(config(_STEPS.value), resumed))
    if _LONG_RUN.value:
        jobs.train_job(config(1000), _LONG_RUN.value)


if __name__ == "__main__":
    run_app(main)
