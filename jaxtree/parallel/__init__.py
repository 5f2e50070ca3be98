"""The device mesh and the logical-axis sharding rules, shared by sampling and training."""

from jaxtree.parallel.mesh import (BATCH_AXES, LOGICAL_RULES, MESH_AXES, batch_parallelism,
                                   batch_sharding, make_mesh, param_shardings, replicated)

__all__ = ["BATCH_AXES", "LOGICAL_RULES", "MESH_AXES", "batch_parallelism", "batch_sharding",
           "make_mesh", "param_shardings", "replicated"]
