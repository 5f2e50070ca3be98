"""Policy checkpoints: orbax directories holding the parameters and JSON metadata.

Layout: `<workdir>/checkpoints/<step>/{params, metadata}`. The metadata records the model
architecture (`ModelConfig.to_dict()`), the tokenizer ('byte' or a directory), the job's config and
package versions, so a checkpoint alone is enough to rebuild the policy.
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from jaxtree.models.config import ModelConfig

CHECKPOINTS = "checkpoints"


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
