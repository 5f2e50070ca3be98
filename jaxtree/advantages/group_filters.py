"""The group-filter stage: which rollout groups reach the update (`config.filter`), and the
numpy group statistics behind the built-in filters.

A group filter keeps whole groups of a round of rollouts, judged on the round's rewards:

    keep = group_filter.keep(batch, rewards)      # bool[N], whole groups

With `max_rounds` > 1 the trainer refills the batch: it samples further rounds of fresh tasks
until `groups_per_step` groups are kept or the rounds are spent (DAPO's dynamic sampling), then
trains on the first `groups_per_step` kept groups (`select_groups`). New filters register with
their settings (`config.filter.<name>.*`):

    @FILTERS.register("my_filter", MyConfig)
    def my_filter(settings: MyConfig) -> GroupFilter: ...

Built-in:
- `dynamic_sampling` (`dynamic_sampling_keep`): DAPO dynamic sampling (Yu et al., 2025;
  described in LATR §2 around Eq. 4): a group whose rewards are all equal has zero GRPO advantage
  everywhere and gives no gradient, so it is dropped (DAPO then oversamples to refill the batch).
  A group of one trajectory has no group baseline and is dropped as well.
- `top_std` (`top_std_groups_keep`): StarPO-S instance filtering (RAGEN, Wang et al., 2025) as
  used by TSR (Algorithm 1 lines 7-9, "filtering ratio p = 0.25"): rank groups by the std of
  their rewards, U_i = Std({R(tau) | tau in G_i}), and keep the top p fraction, the tasks the
  policy is most uncertain about.

The statistics take numpy arrays and return numpy arrays; group ids are any integers (not
necessarily contiguous).
"""

from __future__ import annotations

import abc
import dataclasses

import numpy as np

from jaxtree.config import Registry, Section, between, one_of, option, positive
from jaxtree.rewards.base import Rewards
from jaxtree.rollout.trajectory import TrajectoryBatch

def _rows(name: str, x, n: int | None = None) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name} must have {n} rows like the first argument, got {x.shape[0]}")
    return x


def _groups(rewards, group_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rewards float64[N], inverse int[N] into the sorted distinct ids, counts int[G])."""
    rewards = _rows("rewards", rewards).astype(np.float64)
    group_ids = _rows("group_ids", group_ids, rewards.shape[0])
    _, inverse, counts = np.unique(group_ids, return_inverse=True, return_counts=True)
    return rewards, inverse.reshape(-1), counts


def _group_std(rewards: np.ndarray, inverse: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """float64[G], the population std of each group's rewards; exactly 0 for a group of equal
    rewards. Each group is shifted by its largest reward first: the mean of equal values that
    are not exactly representable (0.1, 0.1, 0.1) is not always equal to them, which would give
    such a group a spurious std of ~1e-17 and rank it above a group of exact equal values."""
    num_groups = counts.shape[0]
    top = np.full(num_groups, -np.inf)
    np.maximum.at(top, inverse, rewards)
    shifted = rewards - top[inverse]            # exactly 0 throughout a group of equal rewards
    mean = np.bincount(inverse, weights=shifted, minlength=num_groups) / counts
    deviation = shifted - mean[inverse]
    return np.sqrt(np.bincount(inverse, weights=deviation ** 2, minlength=num_groups) / counts)


def dynamic_sampling_keep(rewards, group_ids, *, atol: float = 1e-6) -> np.ndarray:
    """DAPO dynamic sampling: keep the groups whose rewards are not all equal.

    Args:
      rewards: float[N], outcome reward of each trajectory.
      group_ids: int[N].
      atol: a group is kept when max - min of its rewards exceeds atol.

    Returns:
      bool[N]: True on the rows of groups with at least two members and max - min > atol.
    """
    rewards, inverse, counts = _groups(rewards, group_ids)
    top = np.full(counts.shape, -np.inf)
    bottom = np.full(counts.shape, np.inf)
    np.maximum.at(top, inverse, rewards)
    np.minimum.at(bottom, inverse, rewards)
    keep_group = (counts >= 2) & (top - bottom > atol)
    return keep_group[inverse]


def top_std_groups_keep(rewards, group_ids, keep_fraction: float) -> np.ndarray:
    """StarPO-S / TSR instance filtering: keep the groups with the largest reward std.

    Args:
      rewards: float[N], outcome reward of each trajectory.
      group_ids: int[N].
      keep_fraction: p in (0, 1]; max(1, round(p * num_groups)) groups are kept (Python round,
        half to even).

    Returns:
      bool[N]: True on the rows of the kept groups. Groups are ranked by the population std
      (ddof=0) of their rewards, largest first; equal stds keep the lower group id first.
    """
    if isinstance(keep_fraction, bool) or not isinstance(keep_fraction, (int, float, np.number)):
        raise ValueError(f"keep_fraction must be a number in (0, 1], got {keep_fraction!r}")
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    rewards, inverse, counts = _groups(rewards, group_ids)
    num_groups = counts.shape[0]
    if num_groups == 0:
        return np.zeros((0,), bool)
    std = _group_std(rewards, inverse, counts)
    # Groups with mathematically equal stds (e.g. rewards {0, 1} and {0, 0, 1, 1}) can differ in
    # the last float64 bits depending on the summation order; comparing at float32 precision
    # lets the group-id order decide such ties instead of rounding noise.
    rank_key = std.astype(np.float32)
    # np.unique sorted the ids, so a stable sort on -std keeps the lower id first among ties.
    order = np.argsort(-rank_key, kind="stable")
    num_kept = max(1, round(keep_fraction * num_groups))
    keep_group = np.zeros(num_groups, bool)
    keep_group[order[:num_kept]] = True
    return keep_group[inverse]


def select_groups(keep, group_ids, num_groups_wanted: int) -> np.ndarray:
    """Row indices of the first `num_groups_wanted` kept groups.

    Args:
      keep: bool[N], rows that survived filtering (whole groups, as the filters above return).
      group_ids: int[N].
      num_groups_wanted: number of groups to select (>= 0).

    Returns:
      int64[M], ascending row indices of the kept rows whose group is among the first
      `num_groups_wanted` kept groups in order of first appearance (of a kept row); all kept rows
      when fewer groups are kept.
    """
    keep = _rows("keep", keep)
    if keep.dtype != np.bool_:
        raise ValueError(f"keep must be a boolean mask, got dtype {keep.dtype}")
    group_ids = _rows("group_ids", group_ids, keep.shape[0])
    if isinstance(num_groups_wanted, bool) or not isinstance(num_groups_wanted, (int, np.integer)) \
            or num_groups_wanted < 0:
        raise ValueError(f"num_groups_wanted must be a non-negative int, got {num_groups_wanted!r}")
    kept_rows = np.flatnonzero(keep)
    kept_ids = group_ids[kept_rows]
    _, first = np.unique(kept_ids, return_index=True)
    chosen = kept_ids[np.sort(first)][:num_groups_wanted]
    return kept_rows[np.isin(kept_ids, chosen)].astype(np.int64)


# ----------------------------------------------------------------------------- the stage

FILTERS = Registry("filter")


class GroupFilter(abc.ABC):
    """A registered group filter. `max_rounds`: rollout rounds to refill the batch with kept
    groups (1, the default: no refill)."""

    max_rounds: int = 1

    @abc.abstractmethod
    def keep(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        """bool[N]: the rows of the groups kept."""


@dataclasses.dataclass(frozen=True)
class FilterStage(Section):
    """Config section `filter`: which groups are trained on."""

    PARTS = {"name": FILTERS}

    name: str = option("none", "the group filter (a registered filter)",
                       check=one_of(FILTERS.names))


def build_filter(stage: FilterStage) -> GroupFilter:
    """The configured filter, built with its settings (`config.filter.<name>`)."""
    built = FILTERS.build(stage.name, stage.part_settings(stage.name))
    if not isinstance(built, GroupFilter):
        raise TypeError(f"filter {stage.name!r} built a {type(built).__name__}, not a "
                        "GroupFilter")
    return built


class _KeepAll(GroupFilter):
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
class _DynamicSampling(GroupFilter):
    max_rounds: int

    def keep(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        return dynamic_sampling_keep(rewards.outcome, batch.group_ids)


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
class _TopStd(GroupFilter):
    keep_fraction: float

    def keep(self, batch: TrajectoryBatch, rewards: Rewards) -> np.ndarray:
        return top_std_groups_keep(rewards.outcome, batch.group_ids, self.keep_fraction)


@FILTERS.register("top_std", TopStdConfig)
def top_std(settings: TopStdConfig) -> GroupFilter:
    """Instance filtering (TSR Alg. 1, StarPO-S): keep the groups with the largest reward std."""
    return _TopStd(settings.keep_fraction)
