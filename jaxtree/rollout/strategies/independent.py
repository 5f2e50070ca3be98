"""Independent sampling: G complete rollouts per task, the GRPO / DAPO baseline."""

from __future__ import annotations

from typing import Sequence

import jax

from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.trajectory import TrajectoryBatch


def sample_independent(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
                       group_size: int) -> TrajectoryBatch:
    """Rolls out `group_size` episodes of every task; group g holds the episodes of task_ids[g].

    Returns the batch ordered by group (episode ids are assigned group by group).
    """
    if group_size <= 0:
        raise ValueError(f"group_size={group_size} must be positive")
    engine.begin(params, rng)
    for group, task in enumerate(task_ids):
        for _ in range(group_size):
            engine.add_episode(task, group_id=group)
    engine.run()
    return engine.collect()
