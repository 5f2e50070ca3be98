"""Policy checkpoints: orbax directories holding the parameters and JSON metadata.

Layout: `<workdir>/checkpoints/<step>/{params, metadata}`. The metadata records the model
architecture (`ModelConfig.to_dict()`), the tokenizer ('byte' or a directory), the job's config and
package versions, so a checkpoint alone is enough to rebuild the policy. A LoRA run's `params`
are its float32 adapters, and its metadata's `lora` names the base they adapt (how to load it and
its content hash, `jaxtree.models.lora.describe`): the base is never saved again, and a resume
on another base is refused (`check_lora_base`).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import shutil
import sys
from typing import Any

import jax
import numpy as np

from jaxtree.config import ConfigError, Section, option, positive
from jaxtree.models.config import ModelConfig
from jaxtree.parallel import distributed
from jaxtree.utils import free_space, no_space

CHECKPOINTS = "checkpoints"


class _Orbax:
    """`orbax.checkpoint`, imported when a checkpoint is first read or written: it costs every
    job ~0.5 s at start (tensorstore, etils), which a job that stops at its config checks, or
    never checkpoints, should not pay."""

    def __getattr__(self, name: str):
        import orbax.checkpoint

        return getattr(orbax.checkpoint, name)


ocp = _Orbax()


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(Section):
    """Config section `checkpoint`: when training checkpoints are written and how many stay."""

    every: int = option(10, "steps between checkpoints (also at the end and on SIGTERM)",
                        check=positive())
    keep: int = option(3, "newest checkpoints kept", check=positive())


class CheckpointNotFoundError(FileNotFoundError):
    """No (complete) checkpoint where one was expected."""


class BaseMismatchError(ValueError):
    """A LoRA checkpoint whose base no longer has the content it was trained on."""


class CheckpointCorruptError(ValueError):
    """A checkpoint that exists but does not restore (a truncated file, a missing item); the
    message names the step directory and the item or file that failed."""


class DiskFullError(OSError):
    """A checkpoint that could not be written for lack of space (a fault, not a damaged run:
    the checkpoints before it still restore); the message names the directory and its free
    space."""


# A save's unfinished directory: orbax writes `<step>.orbax-checkpoint-tmp-<time>` and renames it
# into place when complete.
TMP_SUFFIX = ".orbax-checkpoint-tmp"


def disk_full(directory: str, step: int, error: BaseException) -> DiskFullError | None:
    """A DiskFullError for a failed save of checkpoint `step` under `directory` when `error` is a
    full disk (else None). Orbax's half-written directory never counts as a step; the next job
    to open the checkpoints removes it (`manager`)."""
    if not no_space(error):
        return None
    return DiskFullError(f"checkpoint {directory}/{step} could not be written: no "
                         f"space left on the device ({free_space(directory)} free there); the "
                         "newest earlier checkpoint is intact: free some space and run the same "
                         "command to resume")


def remove_unfinished_saves(directory: str) -> list[str]:
    """Deletes the unfinished saves (`<step>.orbax-checkpoint-tmp-*`) in a checkpoints
    directory, on process 0 only (the directory is shared); returns their names. Done here,
    synchronously, rather than by orbax's `cleanup_tmp_directories`, whose background thread
    could outlive a short job (a rerun of a finished one) and fail during interpreter shutdown
    with a 40-line 'cannot schedule new futures after shutdown' traceback."""
    if not distributed.is_first() or not os.path.isdir(directory):
        return []
    removed = sorted(name for name in os.listdir(directory) if TMP_SUFFIX in name)
    for name in removed:
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    return removed


def _quiet_orphaned_reads() -> None:
    """Silences, from the first restore on, the 'Event loop is closed' RuntimeErrors that
    TensorStore's pending reads raise as unraisable exceptions once orbax's event loop has
    closed after a failed restore: one traceback per array, printed after (and sometimes long
    after) the real error, which CheckpointCorruptError already reports. Every other unraisable
    exception is reported as usual."""
    if getattr(sys.unraisablehook, "_jaxtree_quiet", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable):
        if not (isinstance(unraisable.exc_value, RuntimeError)
                and str(unraisable.exc_value) == "Event loop is closed"):
            previous(unraisable)

    hook._jaxtree_quiet = True
    sys.unraisablehook = hook


def _reason(error: BaseException) -> str:
    """The first line of the innermost cause: orbax wraps TensorStore's precise error (which names
    the tensor and the file) in a bare Exception whose own text is a 200-line spec dump."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    text = text if len(text) <= 600 else text[:597] + "..."
    return f"{type(error).__name__}: {text}"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in ("jaxtree", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def manager(workdir: str, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
    """The workdir's checkpoint manager. A save interrupted by a kill leaves an unfinished
    `<step>.orbax-checkpoint-tmp-*` directory that never counts as a step; it is deleted here
    (`remove_unfinished_saves`), before the manager exists, so no thread of it is left behind."""
    directory = os.path.join(os.path.abspath(workdir), CHECKPOINTS)
    remove_unfinished_saves(directory)
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                           enable_async_checkpointing=False,
                                           cleanup_tmp_directories=False)
    return ocp.CheckpointManager(directory, options=options)


def save_policy(workdir: str, step: int, params, model_config: ModelConfig, tokenizer: str,
                extra: dict[str, Any] | None = None) -> str:
    """Saves params + metadata as checkpoint `step` of `workdir`; returns its directory."""
    metadata = {"model": model_config.to_dict(), "tokenizer": tokenizer,
                "versions": package_versions(), **(extra or {})}
    mngr = manager(workdir)
    try:
        if step in mngr.all_steps():
            raise FileExistsError(f"checkpoint {mngr.directory}/{step} already exists")
        try:
            saved = mngr.save(step, args=ocp.args.Composite(
                params=ocp.args.StandardSave(params), metadata=ocp.args.JsonSave(metadata)),
                force=True)
            mngr.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - orbax wraps the OSError of a full disk
            raise disk_full(str(mngr.directory), step, e) or e
    finally:
        mngr.close()
    if not saved:
        raise RuntimeError(f"orbax declined to save checkpoint {step} in {workdir}")
    return os.path.join(os.path.abspath(workdir), CHECKPOINTS, str(step))


def complete_steps(path: str) -> list[int]:
    """The finished checkpoint steps under `path` (a workdir or its checkpoints directory), in
    increasing order; unfinished saves are not steps."""
    path = os.path.abspath(path)
    root = path if os.path.basename(path) == CHECKPOINTS else os.path.join(path, CHECKPOINTS)
    if not os.path.isdir(root):
        return []
    return sorted(int(name) for name in os.listdir(root)
                  if name.isdigit() and os.path.isdir(os.path.join(root, name)))


def _is_step_dir(path: str) -> bool:
    return os.path.basename(path).isdigit() and (
        os.path.basename(os.path.dirname(path)) == CHECKPOINTS
        or os.path.isdir(os.path.join(path, "params")))


def is_policy_checkpoint(path: str) -> bool:
    """A workdir or checkpoints directory holding a finished checkpoint, or one step directory
    (a workdir whose only save was interrupted is not one)."""
    path = os.path.abspath(path)
    return bool(complete_steps(path)) or _is_step_dir(path)


def _resolve(path: str) -> tuple[str, int]:
    """(checkpoints directory, step) for a workdir, a checkpoints directory or a step directory."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise CheckpointNotFoundError(f"checkpoint path {path!r} does not exist")
    if _is_step_dir(path):
        parent, step = os.path.split(path)
        return parent, int(step)
    root = path if os.path.basename(path) == CHECKPOINTS else os.path.join(path, CHECKPOINTS)
    steps = complete_steps(root)
    if not steps:
        raise CheckpointNotFoundError(f"no complete checkpoint under {root}")
    return root, max(steps)


def workdir_of(path: str) -> str:
    """The workdir of a checkpoint path (a workdir, its checkpoints directory or a step
    directory): where files a job keeps beside its checkpoints live."""
    root, _ = _resolve(path)
    return os.path.dirname(root)


def _restore_newest(path: str, **items) -> tuple[str, dict]:
    """(step directory, {name: restored item}) of the newest checkpoint under `path`; raises
    CheckpointNotFoundError or CheckpointCorruptError naming it."""
    root, step = _resolve(path)
    step_dir = os.path.join(root, str(step))
    mngr = ocp.CheckpointManager(root)
    try:
        _quiet_orphaned_reads()
        return step_dir, mngr.restore(step, args=ocp.args.Composite(**items))
    except Exception as e:  # noqa: BLE001 - orbax raises bare Exceptions for damaged files
        raise CheckpointCorruptError(f"checkpoint {step_dir} is incomplete or corrupt: "
                                     f"{_reason(e)}") from e
    finally:
        mngr.close()


def _host_target(params_dir: str):
    """A restore target that reads every saved parameter whole into host memory (numpy leaves of
    the saved shapes and dtypes; `np.empty` pages are never touched): without one, orbax
    restores onto the saved mesh's devices and refuses a process with other devices. None when
    the metadata does not read (a damaged checkpoint: the restore then names the bad file)."""
    try:
        tree = ocp.StandardCheckpointer().metadata(params_dir).item_metadata.tree
        return jax.tree_util.tree_map(lambda leaf: np.empty(leaf.shape, leaf.dtype), tree)
    except Exception:  # noqa: BLE001 - orbax raises bare Exceptions (or returns None) for damage
        return None


def read_policy_metadata(path: str) -> dict:
    """The JSON metadata of the newest checkpoint under `path` (no parameters are read)."""
    return _restore_newest(path, metadata=ocp.args.JsonRestore())[1]["metadata"]


def load_policy_checkpoint(path: str) -> tuple[ModelConfig, Any, str, dict]:
    """(model config, params, tokenizer spec, metadata) of the newest checkpoint under `path`,
    the params on this process's default device whatever device or process count saved them.

    Raises CheckpointNotFoundError when there is none, and CheckpointCorruptError (a ValueError)
    naming the step and the bad item or file when it is incomplete or corrupt.
    """
    step_dir, items = _restore_newest(path, metadata=ocp.args.JsonRestore())
    metadata = items["metadata"]
    try:
        config = ModelConfig.from_dict(metadata["model"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointCorruptError(f"checkpoint {step_dir} is incomplete or corrupt: its "
                                     f"metadata has no usable model config ({e})") from e
    target = _host_target(os.path.join(step_dir, "params"))
    params = _restore_newest(step_dir, params=ocp.args.StandardRestore(target))[1]["params"]
    # Onto this process's default device, whatever mesh saved them: a checkpoint of any device
    # or process count loads anywhere (the trainer reshards it onto its own mesh).
    # (LoRA adapters stay float32: they are merged into the base by `jaxtree.policy`)
    dtype = np.float32 if "lora" in metadata else config.weight_dtype
    params = jax.device_put(jax.tree_util.tree_map(lambda x: np.asarray(x).astype(dtype), params))
    return config, params, metadata.get("tokenizer", "byte"), metadata


def check_lora_base(directory: str, saved: dict | None, expected: dict | None) -> None:
    """ConfigError (one line, naming the field) unless checkpoints of `directory` whose metadata
    `lora` is `saved` (None: the whole model was trained) can resume a run whose own is
    `expected`: the same adapters' settings over a base of the same content hash."""
    if saved is None and expected is None:
        return
    if saved is None or expected is None:
        what = (f"LoRA adapters (rank {saved['rank']}) over {saved['base']['name']}" if saved
                else "the whole model's parameters")
        raise ConfigError("model.lora.rank", f"{expected['rank'] if expected else 0}: the "
                          f"checkpoints in {directory} hold {what}; resume with the setting "
                          "that wrote them, or start a new workdir")
    settings = lambda r: (r["rank"], float(r["alpha"]), tuple(r["targets"]))  # noqa: E731
    if settings(saved) != settings(expected):
        raise ConfigError("model.lora", f"(rank, alpha, targets) {settings(expected)}: the "
                          f"checkpoints in {directory} hold adapters {settings(saved)}")
    if saved["base"]["sha256"] != expected["base"]["sha256"]:
        raise ConfigError("model.name", f"the checkpoints in {directory} hold LoRA adapters for "
                          f"the base {saved['base']['name']} (sha256 "
                          f"{saved['base']['sha256'][:16]}), not for {expected['base']['name']} "
                          f"(sha256 {expected['base']['sha256'][:16]}); resume on that base, or "
                          "start a new workdir")


class TrainCheckpointer:
    """Checkpoints of a resumable job (the RL loop, and the warm start when it is interrupted):
    `<workdir>/checkpoints/<step>/` with the items

      params      the policy parameters (so every training checkpoint is also a policy checkpoint)
      opt_state   the optimizer state
      rng         the run's JAX key (RL runs)
      trainer     JSON: the step and anything else the loop needs to resume
      metadata    JSON: model, tokenizer, config and package versions

    Keeps the newest `max_to_keep`. Saving is synchronous: once `save` returns, the checkpoint is
    complete on disk (what a preemption handler needs before the process exits). A save killed
    half-way leaves no step (orbax renames the finished directory into place).
    """

    def __init__(self, workdir: str, max_to_keep: int = 3):
        self._manager = manager(workdir, max_to_keep)

    @property
    def directory(self) -> str:
        return str(self._manager.directory)

    def resumable_steps(self) -> list[int]:
        """Finished checkpoints holding an optimizer state, newest first."""
        return [step for step in sorted(self._manager.all_steps(), reverse=True)
                if os.path.isdir(os.path.join(self.directory, str(step), "opt_state"))]

    def latest_step(self) -> int | None:
        """The newest resumable checkpoint, or None."""
        steps = self.resumable_steps()
        return steps[0] if steps else None

    def save(self, step: int, params, metadata: dict, opt_state=None, rng: jax.Array | None = None,
             trainer: dict | None = None) -> None:
        """Saves checkpoint `step` (replacing one of the same step): params and metadata always,
        the resume state when given. In a multi-process job every process calls it: each writes
        its shards of the global arrays, process-local arrays (the run's key) are saved as
        replicated ones, and process 0 writes the JSON items."""
        params, opt_state, rng = distributed.global_copy((params, opt_state, rng))
        items = {"params": ocp.args.StandardSave(params),
                 "metadata": ocp.args.JsonSave({**metadata, "versions": package_versions()})}
        if opt_state is not None:
            items["opt_state"] = ocp.args.StandardSave(opt_state)
        if rng is not None:
            items["rng"] = ocp.args.JaxRandomKeySave(rng)
        if trainer is not None:
            items["trainer"] = ocp.args.JsonSave(trainer)
        if step in self._manager.all_steps():
            self._manager.delete(step)
        try:
            saved = self._manager.save(step, args=ocp.args.Composite(**items), force=True)
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001 - orbax wraps the OSError of a full disk
            raise disk_full(self.directory, step, e) or e
        if not saved:
            raise RuntimeError(f"orbax declined to save checkpoint {self.directory}/{step}")

    def restore(self, step: int, params_like, opt_state_like, lora: dict | None = None):
        """(params, opt_state, rng or None, trainer dict) of checkpoint `step`, placed like the
        given templates (arrays or ShapeDtypeStructs carrying their shardings): orbax reads the
        slices each of this process's devices needs, whatever mesh or number of processes saved
        them. Raises CheckpointCorruptError naming the step and what failed, and ConfigError
        when the checkpoint's LoRA record does not match `lora` (the run's `Policy.
        lora_metadata()` entry; None for a run that trains the whole model)."""
        step_dir = f"{self.directory}/{step}"
        try:
            _quiet_orphaned_reads()
            saved = self._manager.restore(step, args=ocp.args.Composite(
                metadata=ocp.args.JsonRestore()))["metadata"]
        except Exception as e:  # noqa: BLE001 - orbax raises bare Exceptions for damaged files
            raise CheckpointCorruptError(f"checkpoint {step_dir} is incomplete or corrupt: "
                                         f"{_reason(e)}") from e
        check_lora_base(step_dir, (saved or {}).get("lora"), lora)
        # In a multi-process job a process-local template (the warm start's) is read as a
        # replicated global array, then its copy on this process is taken.
        local = distributed.is_multiprocess() and all(
            getattr(x, "is_fully_addressable", False)
            for x in jax.tree_util.tree_leaves((params_like, opt_state_like)))
        place = distributed.everywhere() if local else None
        abstract = lambda tree: jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                           sharding=place or getattr(x, "sharding", None)),
            tree)
        items = {"params": ocp.args.StandardRestore(abstract(params_like)),
                 "opt_state": ocp.args.StandardRestore(abstract(opt_state_like)),
                 "trainer": ocp.args.JsonRestore()}
        if os.path.isdir(os.path.join(self.directory, str(step), "rng")):
            # read on the host (then onto the default device): the key is tiny, and a key saved
            # by another device or process count has no sharding that fits here
            items["rng"] = ocp.args.JaxRandomKeyRestore(
                restore_args=ocp.RestoreArgs(restore_type=np.ndarray))
        try:
            _quiet_orphaned_reads()
            out = self._manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as e:  # noqa: BLE001 - orbax raises bare Exceptions for damaged files
            raise CheckpointCorruptError(f"checkpoint {self.directory}/{step} is incomplete or "
                                         f"corrupt: {_reason(e)}") from e
        rng = out["rng"] if "rng" in items else None
        params, opt_state = out["params"], out["opt_state"]
        if local:
            params, opt_state = distributed.local_copy((params, opt_state))
        return params, opt_state, rng, out["trainer"]

    def restore_latest(self, params_like, opt_state_like, report=print,
                       lora: dict | None = None):
        """(step, params, opt_state, rng, trainer) of the newest checkpoint that restores, or None
        when there is none. A damaged newer checkpoint is skipped with a line through `report`
        naming it and why; when every one is damaged, CheckpointCorruptError lists them. `lora`:
        as in `restore` (a checkpoint of another base is refused, not skipped)."""
        failures = []
        for step in self.resumable_steps():
            try:
                return (step, *self.restore(step, params_like, opt_state_like, lora))
            except CheckpointCorruptError as e:
                failures.append(str(e))
                report(f"skipping {e}")
        if failures:
            raise CheckpointCorruptError(
                f"no checkpoint under {self.directory} restores ({'; '.join(failures)}); move the "
                "directory away to start over")
        return None

    def close(self) -> None:
        self._manager.close()
