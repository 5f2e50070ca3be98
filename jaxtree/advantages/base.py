"""The advantage stage: advantage functions, their registry and the `advantage` config section.

An advantage function is a pure function of the batch and its rewards:

    advantages = advantage_fn(batch, rewards, valid)     # float32[N, T], 0 off action tokens

`valid` (bool[N]) marks the trajectories that take part in group statistics; the others get
advantage 0 (PATR Eq. 9: statistics "over all valid trajectories"). New functions register with
their typed settings (`config.advantage.<name>.*`):

    @ADVANTAGES.register("my_estimator", MyConfig)
    def my_estimator(settings: MyConfig) -> AdvantageFn: ...
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from jaxtree.config import Registry, Section, one_of, option
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import TrajectoryBatch

ADVANTAGES = Registry("advantage")

AdvantageFn = Callable[[TrajectoryBatch, Rewards, np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class AdvantageStage(Section):
    """Config section `advantage`: the estimator and which trajectories count."""

    PARTS = {"name": ADVANTAGES}

    name: str = option("grpo", "the advantage estimator (a registered advantage function)",
                       check=one_of(ADVANTAGES.names))
    mask_context_full: bool = option(False, "episodes cut by a full context are left out of "
                                     "group statistics and get advantage 0 (verl/rLLM overlong "
                                     "masking)")

    def valid(self, batch: TrajectoryBatch) -> np.ndarray:
        """bool[N], the trajectories that take part in the statistics."""
        if self.mask_context_full:
            return ~batch.context_full
        return np.ones(len(batch), bool)


def build_advantage(stage: AdvantageStage) -> Callable[[TrajectoryBatch, Rewards], np.ndarray]:
    """(batch, rewards) -> float32[N, T] advantages of the configured estimator."""
    fn = ADVANTAGES.build(stage.name, stage.part_settings(stage.name))
    return lambda batch, rewards: np.asarray(fn(batch, rewards, stage.valid(batch)), np.float32)


def dense_groups(group_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """(int32[N] ids in [0, G), G): the batch's group ids renumbered densely (group statistics
    are segment sums over a static number of groups)."""
    _, groups = np.unique(group_ids, return_inverse=True)
    groups = groups.reshape(-1).astype(np.int32)
    return groups, int(groups.max()) + 1 if len(groups) else 0
