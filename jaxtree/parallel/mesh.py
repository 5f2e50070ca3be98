"""The device mesh and the sharding of parameters and batches over it.

One mesh for the whole codebase, with named axes

  data     pure data parallelism: parameters replicated, batch rows split
  fsdp     batch rows split *and* parameters split along their model dimension (ZeRO-3 style;
           XLA gathers a layer's weights where it is used)
  tensor   parameters split along heads / MLP width / vocabulary (Megatron style)

Every axis is `AxisType.Auto`: the model code carries no sharding annotations, so we fix the
shardings of the jitted step's inputs and outputs (parameters by the rules below, batch rows over
data x fsdp) and let XLA's partitioner propagate them through the transformer. Explicit axes
would require every op in the model to be sharding-typed.

Parameters are sharded through *logical* axis names (what a dimension means) mapped to mesh axes
by one small table, `LOGICAL_RULES`. A dimension not divisible by its mesh axis size is replicated
instead (e.g. the tiny model's 264-token vocabulary over tensor=8), so any mesh shape works with
any model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from jaxtree.config import Check, Section, option, positive

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


@dataclasses.dataclass(frozen=True)
class MeshConfig(Section):
    """Config section `mesh`: the device mesh of the update step."""

    data: int = option(-1, "data-parallel size (-1: the devices left over)",
                       check=Check(lambda v: v == -1 or v > 0, "-1 or positive"))
    fsdp: int = option(1, "fully sharded data-parallel size", check=positive())
    tensor: int = option(1, "tensor-parallel size", check=positive())

    def make(self, devices: Sequence[jax.Device] | None = None) -> Mesh:
        return make_mesh(self.data, self.fsdp, self.tensor, devices)

# logical axis -> mesh axis (None = replicated)
LOGICAL_RULES: dict[str, str | None] = {
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "mlp": "tensor",
    "norm": None,
}

# parameter name (last two path entries) -> logical axes of its dimensions
_PARAM_AXES: dict[tuple[str, str], tuple[str, ...]] = {
    ("embed", "embedding"): ("vocab", "embed"),
    ("lm_head", "kernel"): ("embed", "vocab"),
    ("q_proj", "kernel"): ("embed", "heads"),
    ("k_proj", "kernel"): ("embed", "heads"),
    ("v_proj", "kernel"): ("embed", "heads"),
    ("o_proj", "kernel"): ("heads", "embed"),
    ("q_proj", "bias"): ("heads",),
    ("k_proj", "bias"): ("heads",),
    ("v_proj", "bias"): ("heads",),
    ("o_proj", "bias"): ("embed",),
    ("gate_proj", "kernel"): ("embed", "mlp"),
    ("up_proj", "kernel"): ("embed", "mlp"),
    ("down_proj", "kernel"): ("mlp", "embed"),
    ("gate_proj", "bias"): ("mlp",),
    ("up_proj", "bias"): ("mlp",),
    ("down_proj", "bias"): ("embed",),
}


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over `devices` (default: all); data=-1 takes what is left."""
    devices = list(jax.devices() if devices is None else devices)
    if min(fsdp, tensor) <= 0 or data == 0 or data < -1:
        raise ValueError(f"mesh sizes must be positive (data may be -1): data={data}, "
                         f"fsdp={fsdp}, tensor={tensor}")
    if data == -1:
        if len(devices) % (fsdp * tensor):
            raise ValueError(f"{len(devices)} devices are not divisible by fsdp*tensor="
                             f"{fsdp * tensor}")
        data = len(devices) // (fsdp * tensor)
    if data * fsdp * tensor != len(devices):
        raise ValueError(f"mesh data={data} x fsdp={fsdp} x tensor={tensor} needs "
                         f"{data * fsdp * tensor} devices, have {len(devices)}")
    return jax.make_mesh((data, fsdp, tensor), MESH_AXES, axis_types=(AxisType.Auto,) * 3,
                         devices=devices)


def param_logical_axes(path: tuple[str, ...], ndim: int) -> tuple[str | None, ...]:
    """Logical axes of the parameter at `path` (norm scales and unknown names: replicated)."""
    axes = _PARAM_AXES.get(tuple(path[-2:]))
    if axes is None or len(axes) != ndim:
        return ("norm",) * ndim
    return axes


def _spec(shape: tuple[int, ...], logical: tuple[str | None, ...], mesh: Mesh) -> P:
    spec = []
    for size, name in zip(shape, logical):
        axis = LOGICAL_RULES.get(name) if name else None
        spec.append(axis if axis and size % mesh.shape[axis] == 0 else None)
    return P(*spec)


def _path_names(path) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def param_shardings(params: Any, mesh: Mesh) -> Any:
    """NamedSharding of every parameter leaf, by `LOGICAL_RULES`."""
    def one(path, leaf):
        shape = tuple(np.shape(leaf))
        return NamedSharding(mesh, _spec(shape, param_logical_axes(_path_names(path), len(shape)),
                                         mesh))
    return jax.tree_util.tree_map_with_path(one, params)


def tree_shardings_like(tree: Any, params_shardings: Any, params: Any, mesh: Mesh) -> Any:
    """Shardings for a tree holding parameter-shaped leaves (optimizer moments): a leaf with the
    shape of a parameter at a matching path suffix gets that parameter's sharding, anything else
    (step counts, scalars) is replicated."""
    by_path = {}
    for path, sharding in jax.tree_util.tree_flatten_with_path(params_shardings)[0]:
        by_path[_path_names(path)] = sharding
    shapes = {_path_names(path): np.shape(leaf)
              for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
    replicated = NamedSharding(mesh, P())

    def one(path, leaf):
        names = _path_names(path)
        for start in range(len(names)):
            suffix = names[start:]
            if suffix in by_path and shapes[suffix] == np.shape(leaf):
                return by_path[suffix]
        return replicated
    return jax.tree_util.tree_map_with_path(one, tree)


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Rows split over data x fsdp, every other dimension whole."""
    return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_parallelism(mesh: Mesh) -> int:
    """How many ways batch rows are split: the row count of a batch must be a multiple of it."""
    return math.prod(mesh.shape[a] for a in BATCH_AXES)
