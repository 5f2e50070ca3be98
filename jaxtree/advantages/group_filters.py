"""The group-filter stage: which rollout groups reach the update (`config.filter`).

A group filter keeps whole groups of a round of rollouts, judged on the round's rewards:

    keep = group_filter.keep(batch, rewards)      # bool[N], whole groups

With `max_rounds` > 1 the trainer refills the batch: it samples further rounds of fresh tasks
until `groups_per_step` groups are kept or the rounds are spent (DAPO's dynamic sampling), then
trains on the first `groups_per_step` kept groups. New filters register with their settings
(`config.filter.<name>.*`):

    @FILTERS.register("my_filter", MyConfig)
    def my_filter(settings: MyConfig) -> GroupFilter: ...
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from jaxtree.advantages import filters
from jaxtree.config import Registry, Section, between, one_of, option, positive
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import TrajectoryBatch

FILTERS = Registry("filter")


class GroupFilter(Protocol):
    max_rounds: int  # rollout rounds to refill the batch with kept groups (1: no refill)

    def keep(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        """bool[N]: the rows of the groups kept."""


@dataclasses.dataclass(frozen=True)
class FilterStage(Section):
    """Config section `filter`: which groups are trained on."""

    PARTS = {"name": FILTERS}

    name: str = option("none", "the group filter (a registered filter)",
                       check=one_of(FILTERS.names))


def build_filter(stage: FilterStage) -> GroupFilter:
    return FILTERS.build(stage.name, stage.part_settings(stage.name))


@dataclasses.dataclass(frozen=True)
class _KeepAll:
    max_rounds: int = 1

    def keep(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        return np.ones(len(batch), bool)


@FILTERS.register("none")
def keep_all(settings: None) -> GroupFilter:
    """Every group is trained on."""
    del settings
    return _KeepAll()


@dataclasses.dataclass(frozen=True)
class DynamicSamplingConfig(Section):
    max_rounds: int = option(3, "rollout rounds of fresh tasks to refill the batch with groups "
                             "that have a learning signal", check=positive())


@dataclasses.dataclass(frozen=True)
class _DynamicSampling:
    max_rounds: int

    def keep(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        return filters.dynamic_sampling_keep(rewards.outcome, batch.group_ids)


@FILTERS.register("dynamic_sampling", DynamicSamplingConfig)
def dynamic_sampling(settings: DynamicSamplingConfig) -> GroupFilter:
    """DAPO: drop groups whose outcome rewards are all equal (no GRPO gradient), refill from
    further rounds of fresh tasks."""
    return _DynamicSampling(settings.max_rounds)


@dataclasses.dataclass(frozen=True)
class TopStdConfig(Section):
    keep_fraction: float = option(0.25, "fraction p of groups kept, by the std of their "
                                  "outcome rewards (TSR / StarPO-S: p = 0.25)",
                                  check=between(0, 1, low_open=True))


@dataclasses.dataclass(frozen=True)
class _TopStd:
    keep_fraction: float
    max_rounds: int = 1

    def keep(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        return filters.top_std_groups_keep(rewards.outcome, batch.group_ids, self.keep_fraction)


@FILTERS.register("top_std", TopStdConfig)
def top_std(settings: TopStdConfig) -> GroupFilter:
    """Instance filtering (TSR Alg. 1, StarPO-S): keep the groups with the largest reward std."""
    return _TopStd(settings.keep_fraction)
