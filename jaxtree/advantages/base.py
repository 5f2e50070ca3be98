"""The advantage stage: advantage functions, their registry and the `advantage` config section.

An advantage function is a pure function of the batch and its rewards:

    advantages = advantage_fn(batch, rewards, valid)     # float32[N, T], 0 off action tokens

`valid` (bool[N]) marks the trajectories that take part in group statistics; the others get
advantage 0 (PATR Eq. 9: statistics "over all valid trajectories"). New functions register with
their typed settings (`config.advantage.<name>.*`) and the per-turn labels they read:

    @ADVANTAGES.register("my_estimator", MyConfig, reads=("state_signature",))
    def my_estimator(settings: MyConfig) -> AdvantageFn: ...

A registered function returns the advantage function, or an `AdvantageEstimator` that also has
diagnostics, `metrics(batch, rewards, valid) -> dict[str, float]`, which the trainer logs each
step (RTMC's table sizes, GiGPO's step groups).
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


MetricsFn = Callable[[TrajectoryBatch, Rewards, np.ndarray], dict[str, float]]


class AdvantageEstimator:
    """An advantage function with its diagnostics: `estimator(batch, rewards, valid)` ->
    float32[N, T] and `estimator.metrics(batch, rewards, valid)` -> {name: value} ({} without
    a `metrics_fn`)."""

    def __init__(self, fn: AdvantageFn, metrics_fn: MetricsFn | None = None):
        self.fn = fn
        self.metrics_fn = metrics_fn

    def __call__(self, batch: TrajectoryBatch, rewards: Rewards, valid: np.ndarray):
        return self.fn(batch, rewards, valid)

    def metrics(self, batch: TrajectoryBatch, rewards: Rewards,
                valid: np.ndarray) -> dict[str, float]:
        return {} if self.metrics_fn is None else self.metrics_fn(batch, rewards, valid)


class Advantage:
    """The configured estimator: `advantage(batch, rewards)` -> float32[N, T], and
    `advantage.metrics(batch, rewards)` -> its diagnostics ({} if it has none)."""

    def __init__(self, stage: AdvantageStage):
        self.stage = stage
        built = ADVANTAGES.build(stage.name, stage.part_settings(stage.name))
        self.estimator = (built if isinstance(built, AdvantageEstimator)
                          else AdvantageEstimator(built))

    def __call__(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        return np.asarray(self.estimator(batch, rewards, self.stage.valid(batch)), np.float32)

    def metrics(self, batch: TrajectoryBatch, rewards: Rewards) -> dict[str, float]:
        return self.estimator.metrics(batch, rewards, self.stage.valid(batch))


def build_advantage(stage: AdvantageStage) -> Advantage:
    """The configured estimator (see `Advantage`)."""
    return Advantage(stage)


def dense_groups(group_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """(int32[N] ids in [0, G), G): the batch's group ids renumbered densely (group statistics
    are segment sums over a static number of groups)."""
    _, groups = np.unique(group_ids, return_inverse=True)
    groups = groups.reshape(-1).astype(np.int32)
    return groups, int(groups.max()) + 1 if len(groups) else 0
