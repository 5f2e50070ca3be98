"""The multi-process flags of a launch job, and joining the JAX runtime from them.

    --coordinator_address=10.0.0.2:8476 --num_processes=4 --process_id=0   explicit (each process
                                                                           its own id)
    --distributed                                  detected: Cloud TPU VM metadata, SLURM
                                                   (SLURM_* variables), Open MPI; explicit
                                                   flags still win
    --heartbeat_timeout=100                        seconds of silence after which a process
                                                   counts as dead and the others are stopped

Without any of them the job is one process, as always. `launch/cloud/` holds launchers for a TPU
pod, a SLURM cluster and several processes on one machine.

When one process of a job dies, the others cannot finish a step (every update is a collective of
all of them). On CPU (gloo) their next collective fails at once ('Connection reset by peer') and
`run_job` ends them with one line, status 1; where a collective waits instead (TPU, NCCL), JAX's
coordination service aborts them (SIGABRT) once the dead process has missed heartbeats for
--heartbeat_timeout seconds, with 'Terminating process because the JAX distributed service
detected fatal errors ... stopped sending heartbeats'.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

from absl import flags

from jaxtree.checkpoints import CheckpointCorruptError, DiskFullError
from jaxtree.config import ConfigError
from jaxtree.parallel import distributed
from jaxtree.train.trainer import TrainingDiverged
from jaxtree.train.workdir import WorkdirError, WorkdirVanished
from launch.common import FAULT, fail

# Errors `launch.common.run_app` reports in one line itself (every process raises them alike).
_REPORTED = (ConfigError, FileNotFoundError, WorkdirError, CheckpointCorruptError,
             TrainingDiverged, DiskFullError, WorkdirVanished)

_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0's coordinator in a multi-process job "
    "(with --num_processes and --process_id).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0 .. "
                                   "num_processes - 1.")
_DETECT = flags.DEFINE_boolean(
    "distributed", False, "Join a multi-process job whose coordinator, size and index JAX "
    "reads from the cluster environment (Cloud TPU pod, SLURM, Open MPI).")
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout", 100, "Seconds without a heartbeat after which a process of a "
    "multi-process job counts as dead and the others are stopped.")
_INIT_TIMEOUT = flags.DEFINE_integer(
    "initialization_timeout", 300, "Seconds a process waits for the others to join.")


def flag_config() -> distributed.DistributedConfig:
    return distributed.DistributedConfig(
        _COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value, _DETECT.value,
        _HEARTBEAT.value, _INIT_TIMEOUT.value)


def initialize_from_flags() -> None:
    """Joins the multi-process runtime when the flags ask for it (before any JAX computation);
    an unusable flag ends the job in one line naming it (exit status 2)."""
    try:
        distributed.initialize(flag_config())
    except distributed.DistributedSetupError as e:
        fail(str(e))


def run_job(job: Callable[[], Any]) -> Any:
    """job() in the process set up by the flags. In a multi-process job an unexpected error
    ends this process at once (traceback, then one line, status 1): a normal interpreter exit
    would wait in JAX's shutdown barrier for processes that are themselves waiting for this one
    in a collective, until the heartbeat timeout. Its exit breaks their collectives, so they
    stop too."""
    initialize_from_flags()
    try:
        return job()
    except _REPORTED:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of one process ends the job's others
        if not distributed.is_multiprocess():
            raise
        import jax

        traceback.print_exc()
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = ("; another process of the job probably died: see its log"
                if isinstance(e, jax.errors.JaxRuntimeError) else "")
        sys.stderr.flush()
        fail(f"process {jax.process_index()} of {jax.process_count()}: "
             f"{type(e).__name__}: {text}{hint}", FAULT)
