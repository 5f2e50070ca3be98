"""A rollout round split over the processes of a multi-process job.

The step's G tasks are the same on every process (one task stream); process p plays the
contiguous block `distributed.shares(G)[p]` with the strategy, passing the block's first group so
that the strategy keys its episodes step-wide (`jaxtree.rollout.strategies.base`), and the blocks
are all-gathered and joined in group order: every process returns the batch and strategy metrics
one process playing all G groups would have produced (for strategies keyed per episode or group;
tree controllers draw their own stream per share).
"""

from __future__ import annotations

from typing import Any

import jax

from jaxtree.parallel import distributed
from jaxtree.rollout.strategies.base import RolloutStrategy, combine_shares
from jaxtree.rollout.trajectory import TrajectoryBatch, join_shares


def sample_round(strategy: RolloutStrategy, params: Any, key: jax.Array, tasks: list[int],
                 step: int, pad_id: int) -> tuple[TrajectoryBatch, dict[str, float]]:
    """(batch of all `tasks`' groups, strategy metrics), the same on every process; this
    process plays only its share, with `params` its process-local copy."""
    if not distributed.is_multiprocess():
        return strategy.sample(params, key, tasks, step)
    blocks = distributed.shares(len(tasks))
    mine = blocks[jax.process_index()]
    batch, metrics = strategy.sample(params, key, tasks[mine.start:mine.stop], step,
                                     first_group=mine.start)
    pieces = distributed.allgather_objects((batch, metrics))
    joined = join_shares([b for b, _ in pieces], [b.start for b in blocks], pad_id)
    return joined, combine_shares([m for _, m in pieces], [len(b) for b in blocks],
                                  strategy.summed_metrics)
