"""Policy checkpoints: orbax directories holding the parameters and JSON metadata.

Layout: `<workdir>/checkpoints/<step>/{params, metadata}`. The metadata records the model
architecture (`ModelConfig.to_dict()`), the tokenizer ('byte' or a directory), the job's config and
package versions, so a checkpoint alone is enough to rebuild the policy.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from jaxtree.config import Section, option, positive
from jaxtree.models.config import ModelConfig

CHECKPOINTS = "checkpoints"


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(Section):
    """Config section `checkpoint`: when training checkpoints are written and how many stay."""

    every: int = option(10, "steps between checkpoints (also at the end and on SIGTERM)",
                        check=positive())
    keep: int = option(3, "newest checkpoints kept", check=positive())


class CheckpointNotFoundError(FileNotFoundError):
    """No (complete) checkpoint where one was expected."""


def package_versions() -> dict[str, str]:
    versions = {}
    for name in ("jaxtree", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def manager(workdir: str, max_to_keep: int | None = 3) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                           enable_async_checkpointing=False)
    return ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), CHECKPOINTS),
                                 options=options)


def save_policy(workdir: str, step: int, params, model_config: ModelConfig, tokenizer: str,
                extra: dict[str, Any] | None = None) -> str:
    """Saves params + metadata as checkpoint `step` of `workdir`; returns its directory."""
    metadata = {"model": model_config.to_dict(), "tokenizer": tokenizer,
                "versions": package_versions(), **(extra or {})}
    mngr = manager(workdir)
    mngr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                            metadata=ocp.args.JsonSave(metadata)))
    mngr.wait_until_finished()
    mngr.close()
    return os.path.join(os.path.abspath(workdir), CHECKPOINTS, str(step))


def _is_step_dir(path: str) -> bool:
    return os.path.basename(path).isdigit() and (
        os.path.basename(os.path.dirname(path)) == CHECKPOINTS
        or os.path.isdir(os.path.join(path, "params")))


def is_policy_checkpoint(path: str) -> bool:
    """A workdir with checkpoints, a checkpoints directory, or one step directory."""
    path = os.path.abspath(path)
    return (os.path.isdir(os.path.join(path, CHECKPOINTS))
            or (os.path.isdir(path) and os.path.basename(path) == CHECKPOINTS)
            or _is_step_dir(path))


def _resolve(path: str) -> tuple[str, int]:
    """(checkpoints directory, step) for a workdir, a checkpoints directory or a step directory."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise CheckpointNotFoundError(f"checkpoint path {path!r} does not exist")
    if _is_step_dir(path):
        parent, step = os.path.split(path)
        return parent, int(step)
    root = path if os.path.basename(path) == CHECKPOINTS else os.path.join(path, CHECKPOINTS)
    steps = ocp.CheckpointManager(root).all_steps() if os.path.isdir(root) else []
    if not steps:
        raise CheckpointNotFoundError(f"no complete checkpoint under {root}")
    return root, max(steps)


def load_policy_checkpoint(path: str) -> tuple[ModelConfig, Any, str, dict]:
    """(model config, params, tokenizer spec, metadata) of the newest checkpoint under `path`.

    Raises CheckpointNotFoundError when there is none, and ValueError naming the problem when a
    checkpoint is incomplete or corrupt.
    """
    root, step = _resolve(path)
    mngr = ocp.CheckpointManager(root)
    try:
        metadata = mngr.restore(step, args=ocp.args.Composite(
            metadata=ocp.args.JsonRestore()))["metadata"]
        config = ModelConfig.from_dict(metadata["model"])
        params = mngr.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore()))["params"]
    except (KeyError, TypeError, ValueError, FileNotFoundError, OSError) as e:
        raise ValueError(f"checkpoint {os.path.join(root, str(step))} is incomplete or corrupt: "
                         f"{type(e).__name__}: {e}") from e
    finally:
        mngr.close()
    params = jax.tree_util.tree_map(lambda x: x.astype(config.weight_dtype), params)
    return config, params, metadata.get("tokenizer", "byte"), metadata


class TrainCheckpointer:
    """Checkpoints of an RL run: `<workdir>/checkpoints/<step>/` with the items

      params      the policy parameters (so every training checkpoint is also a policy checkpoint)
      opt_state   the optimizer state
      rng         the run's JAX key
      trainer     JSON: training step, task-sampler state, anything else the loop needs to resume
      metadata    JSON: model, tokenizer, config and package versions

    Keeps the newest `max_to_keep`. Saving is synchronous: once `save` returns, the checkpoint is
    complete on disk (what a preemption handler needs before the process exits).
    """

    def __init__(self, workdir: str, max_to_keep: int = 3):
        self._manager = manager(workdir, max_to_keep)

    def latest_step(self) -> int | None:
        """The newest complete training checkpoint (one holding an optimizer state)."""
        for step in sorted(self._manager.all_steps(), reverse=True):
            if os.path.isdir(os.path.join(self._manager.directory, str(step), "opt_state")):
                return step
        return None

    def save(self, step: int, params, opt_state, rng: jax.Array, trainer: dict,
             metadata: dict) -> None:
        metadata = {**metadata, "versions": package_versions()}
        self._manager.save(step, args=ocp.args.Composite(
            params=ocp.args.StandardSave(params), opt_state=ocp.args.StandardSave(opt_state),
            rng=ocp.args.JaxRandomKeySave(rng), trainer=ocp.args.JsonSave(trainer),
            metadata=ocp.args.JsonSave(metadata)), force=True)
        self._manager.wait_until_finished()

    def restore(self, step: int, params_like, opt_state_like):
        """(params, opt_state, rng, trainer dict) of checkpoint `step`, placed like the given
        templates (arrays or ShapeDtypeStructs carrying their shardings)."""
        abstract = lambda tree: jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
            tree)
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract(params_like)),
                opt_state=ocp.args.StandardRestore(abstract(opt_state_like)),
                rng=ocp.args.JaxRandomKeyRestore(), trainer=ocp.args.JsonRestore()))
        except (KeyError, TypeError, ValueError, FileNotFoundError, OSError) as e:
            raise ValueError(f"training checkpoint {self._manager.directory}/{step} is incomplete "
                             f"or corrupt: {type(e).__name__}: {e}") from e
        return out["params"], out["opt_state"], out["rng"], out["trainer"]

    def close(self) -> None:
        self._manager.close()
