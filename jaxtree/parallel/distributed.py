"""Multi-process (multi-host) runs: joining JAX's multi-controller runtime and moving host data
between the processes.

A pod job runs the same program in P processes (one per TPU host, or per GPU host or GPU), each
owning its local devices; `jax.devices()` lists the devices of all of them and a jitted function
over a mesh of all devices is one SPMD program that every process calls in lockstep. jaxtree
uses that for the update step only. Everything else a process does on its own:

  rollouts      process p plays groups `share(G)[p]` of the step's G tasks with its own slot
                engine, environments and a process-local copy of the parameters (`local_copy`)
  host data     the finished trajectories (and evaluation episodes) are exchanged with
                `allgather_objects`, so every process holds the same step batch and computes
                the same filter, advantages and metrics, and feeds the global update its rows

With one process every helper here is the identity (no collective runs), so a single-process
job behaves exactly as it did before the multi-process path existed.

`DistributedConfig` holds the launch flags (`--coordinator_address`, `--num_processes`,
`--process_id`, `--distributed`, `--heartbeat_timeout`); `initialize` joins the runtime. They
are flags, not a config section: the experiment config is recorded in the workdir and must not
change when a run resumes on another number of processes.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Callable

import jax
import numpy as np

from jaxtree.utils import power_of_two_at_least


class DistributedSetupError(ValueError):
    """A multi-process launch flag that cannot work; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """How a process joins a multi-process job (see `initialize`).

    Explicit: coordinator_address ('host:port' of process 0), num_processes and process_id,
    all three. Detected: `detect` lets JAX read them from the cluster environment (Cloud TPU
    VM metadata, SLURM's SLURM_* variables, Open MPI), and any explicit value wins.
    """

    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    detect: bool = False
    heartbeat_timeout_seconds: int = 100     # a process silent this long counts as dead
    initialization_timeout_seconds: int = 300

    @property
    def enabled(self) -> bool:
        return self.detect or any(v is not None for v in (self.coordinator_address,
                                                          self.num_processes, self.process_id))

    def check(self) -> None:
        """Raises DistributedSetupError naming the first flag that cannot work."""
        if self.num_processes is not None and self.num_processes <= 0:
            raise DistributedSetupError(f"--num_processes: {self.num_processes} is not positive")
        if self.process_id is not None and self.process_id < 0:
            raise DistributedSetupError(f"--process_id: {self.process_id} is negative")
        if (self.process_id is not None and self.num_processes is not None
                and self.process_id >= self.num_processes):
            raise DistributedSetupError(
                f"--process_id: {self.process_id} is not in [0, {self.num_processes}) "
                f"(--num_processes={self.num_processes})")
        if self.coordinator_address is not None:
            host, _, port = self.coordinator_address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise DistributedSetupError(
                    f"--coordinator_address: {self.coordinator_address!r} is not host:port")
        if self.heartbeat_timeout_seconds <= 0:
            raise DistributedSetupError(
                f"--heartbeat_timeout: {self.heartbeat_timeout_seconds} is not positive")
        if self.initialization_timeout_seconds <= 0:
            raise DistributedSetupError(f"--initialization_timeout: "
                                        f"{self.initialization_timeout_seconds} is not positive")
        if not self.detect:
            given = {"--coordinator_address": self.coordinator_address,
                     "--num_processes": self.num_processes, "--process_id": self.process_id}
            missing = [name for name, value in given.items() if value is None]
            if missing and len(missing) < 3:
                raise DistributedSetupError(
                    f"{missing[0]} is required with "
                    f"{', '.join(n for n in given if n not in missing)} (or pass --distributed "
                    "to detect the missing values from the cluster environment)")


def initialize(config: DistributedConfig) -> None:
    """Joins the multi-process runtime when `config.enabled` (before any JAX computation; a
    no-op otherwise). On CPU the collectives go through gloo (XLA:CPU has no other
    cross-process implementation); the setting does not affect TPU or GPU backends.

    A process that stops sending heartbeats for `heartbeat_timeout_seconds` (it died, or its
    host did) makes the coordination service end every other process: JAX aborts them with
    'Terminating process because the JAX distributed service detected fatal errors ... The
    following tasks are unhealthy (stopped sending heartbeats)', rather than leaving them
    blocked in a collective forever."""
    config.check()
    if not config.enabled:
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            config.coordinator_address, config.num_processes, config.process_id,
            initialization_timeout=config.initialization_timeout_seconds,
            heartbeat_timeout_seconds=config.heartbeat_timeout_seconds)
    except (ValueError, TypeError) as e:  # JAX's own: an undetectable or inconsistent setup
        raise DistributedSetupError(f"--distributed: {e} (give --coordinator_address, "
                                    "--num_processes and --process_id)") from None


def is_multiprocess() -> bool:
    return jax.process_count() > 1


def is_first() -> bool:
    """Process 0: the one that writes logs, summaries and the workdir's bookkeeping files."""
    return jax.process_index() == 0


def shares(count: int, processes: int | None = None) -> list[range]:
    """Contiguous blocks of range(count), one per process, sizes differing by at most one
    (earlier processes take the extra items): which groups, or evaluation tasks, each plays."""
    processes = jax.process_count() if processes is None else processes
    bounds = np.cumsum([0] + [count // processes + (p < count % processes)
                              for p in range(processes)])
    return [range(int(bounds[p]), int(bounds[p + 1])) for p in range(processes)]


def _bucket(n: int) -> int:
    """n rounded up to a power of two (at least 1 KiB): one compiled all-gather per size
    bucket, not per payload size."""
    return power_of_two_at_least(n, 1024)


def allgather_objects(value: Any) -> list[Any]:
    """[value of process 0, value of process 1, ...] on every process, for any picklable host
    value (trajectory batches, metric dicts, error messages). With one process: [value].

    The pickled bytes go through a device all-gather (ICI / DCN on a pod, gloo on CPU), not
    through the coordinator, so a batch of any size costs one collective per step."""
    if not is_multiprocess():
        return [value]
    from jax.experimental import multihost_utils

    data = np.frombuffer(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = multihost_utils.process_allgather(np.asarray([data.size], np.int64)).reshape(-1)
    padded = np.zeros(_bucket(int(sizes.max())), np.uint8)
    padded[:data.size] = data
    gathered = multihost_utils.process_allgather(padded)  # uint8[P, bucket]
    return [pickle.loads(gathered[p, :int(sizes[p])].tobytes()) for p in range(len(sizes))]


def any_process(flag: bool) -> bool:
    """True on every process when `flag` is true on any (a stop request that reached one
    host must stop all of them at the same step, or the others would wait in the next
    collective)."""
    if not is_multiprocess():
        return bool(flag)
    return any(allgather_objects(bool(flag)))


class FirstProcessError(RuntimeError):
    """What `on_first`'s function raised on process 0, re-raised on the other processes."""


def on_first(fn: Callable[[], Any]) -> Any:
    """fn() run by process 0 only (writing a shared file once), its result handed to every
    process. An exception on process 0 is raised there and, as the same type when it can be
    built from its message (else FirstProcessError), on every other process, so all of them
    stop together instead of waiting for process 0 in a later collective."""
    if not is_multiprocess():
        return fn()
    result, error = None, None
    if is_first():
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - whatever it is, the others must learn of it
            error = e
    outcome = allgather_objects((result, None if error is None else (type(error), str(error))))[0]
    if error is not None:
        raise error
    value, failure = outcome
    if failure is not None:
        kind, message = failure
        try:
            raised = kind(message)
        except TypeError:
            raised = FirstProcessError(f"process 0 failed: {kind.__name__}: {message}")
        raise raised
    return value


def host_array(x) -> np.ndarray:
    """A numpy copy of an array, gathered from every process when it is sharded over devices
    of other processes (the update's per-row outputs)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def local_copy(tree: Any) -> Any:
    """The process-local view of a tree of fully replicated global arrays: each leaf's copy on
    this process's first device, a plain single-device array that jitted code can use without
    the other processes (the slot engine's many small calls are not lockstep across
    processes). Leaves that are already process-local are returned as they are."""
    def one(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if not x.is_fully_replicated:
            raise ValueError(f"local_copy needs fully replicated arrays; got one sharded as "
                             f"{x.sharding} (replicate it over the mesh first)")
        return x.addressable_data(0)
    return jax.tree_util.tree_map(one, tree)


def put(tree: Any, shardings: Any) -> Any:
    """`jax.device_put(tree, shardings)` of host values that are the same on every process
    (numpy arrays, or process-local arrays) onto shardings that may span every process's
    devices. With one process it is device_put itself. With several, each process builds its
    own shards from its copy (`jax.make_array_from_callback`): device_put would refuse a
    committed local array, and would compare a numpy value across processes with an all-gather
    of the whole of it first. Global arrays are resharded by device_put; PRNG keys travel as
    their key data. `shardings` is a tree like `tree` or one sharding for every leaf."""
    if not is_multiprocess():
        return jax.device_put(tree, shardings)
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree_util.tree_map(lambda _: shardings, tree)

    def one(x, sharding):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return jax.device_put(x, sharding)
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = one(jax.random.key_data(x), sharding)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
    return jax.tree_util.tree_map(one, tree, shardings)


def everywhere() -> "jax.sharding.NamedSharding":
    """Replicated over every device of every process."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.asarray(jax.devices()), ("devices",)), PartitionSpec())


def global_copy(tree: Any) -> Any:
    """Process-local arrays that hold the same value on every process (a key derived from the
    seed, a warm start computed alike everywhere) as fully replicated arrays over all devices:
    what orbax can save in a multi-process job, one process writing each array. Global arrays
    and non-arrays are returned as they are; with one process, the whole tree is."""
    if not is_multiprocess():
        return tree
    sharding = everywhere()

    def one(x):
        if isinstance(x, jax.Array) and x.is_fully_addressable:
            return put(x, sharding)
        return x
    return jax.tree_util.tree_map(one, tree)
