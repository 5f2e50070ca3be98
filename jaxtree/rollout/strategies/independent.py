"""Independent sampling: G complete rollouts per task, the GRPO / DAPO baseline."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax

from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.strategies.base import STRATEGIES, RolloutContext, RolloutStrategy
from jaxtree.rollout.trajectory import TrajectoryBatch


def sample_independent(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
                       group_size: int,
                       progress: Callable[[int], Any] | None = None,
                       first_group: int = 0) -> TrajectoryBatch:
    """Rolls out `group_size` episodes of every task; group g holds the episodes of task_ids[g]
    (`progress` as in `SlotEngine.run`). Episode j of group g samples with the keys of episode
    (first_group + g) x group_size + j: a share of the groups starting at `first_group` draws
    what it would among all of them.

    Returns the batch ordered by group (episode ids are assigned group by group).
    """
    if group_size <= 0:
        raise ValueError(f"group_size={group_size} must be positive")
    engine.begin(params, rng, key_offset=first_group * group_size)
    for group, task in enumerate(task_ids):
        for _ in range(group_size):
            engine.add_episode(task, group_id=group)
    engine.run(progress)
    return engine.collect()


@STRATEGIES.register("independent")
class Independent(RolloutStrategy):
    """`group_size` independent episodes per task on the slot engine (GRPO's rollout group)."""

    def __init__(self, settings: None, context: RolloutContext):
        del settings  # no settings
        self.group_size = context.group_size
        self.engine = context.engine()

    def sample(self, params, rng: jax.Array, tasks: Sequence[int], step: int, *,
               first_group: int = 0) -> tuple[TrajectoryBatch, dict[str, float]]:
        del step  # the same at every step
        batch = sample_independent(self.engine, params, rng, tasks, self.group_size,
                                   first_group=first_group)
        return batch, self.engine.stats.metrics()
