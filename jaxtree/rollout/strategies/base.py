"""The rollout stage: the strategy protocol, its registry and the `rollout` config section.

A rollout strategy turns a step's tasks into a batch of trajectories, `group_size` (or, for tree
methods, a variable number of) episodes per task:

    strategy = build_strategy(stage, context)
    batch, metrics = strategy.sample(params, rng, tasks, step)

`tasks` are environment seeds; group g of the batch holds the episodes of tasks[g]. `step` is the
training step (strategies whose behaviour is annealed, like LATR's hybrid fraction, read it).
Metrics are floats to log under the strategy's own prefix (e.g. `latr/`).

In a multi-process job each process plays a contiguous share of the step's tasks
(`jaxtree.parallel.distributed`) and passes `first_group`, the step-wide index of its tasks[0].
Strategies whose draws are keyed per episode or per group (independent, best_of_n, latr) offset
those keys by it, so a share draws exactly what one process playing every group would; tree
controllers (patr, arpo, beam, lookahead, mc_values), whose episode ids follow the order of forks
in the session, fold it into their key (`share_key`): every share draws its own stream, the same
for a given number of processes. Groups never span processes. The batch's ids stay local (group
0 is tasks[0]); the trainer renumbers the shares when it joins them. Metrics of the shares are
combined by `combine_shares`: a strategy lists its counts in `share_sums`.

A new strategy is a class (or any object with `sample`) registered with its typed settings:

    @STRATEGIES.register("my_tree", MyTreeConfig)
    def my_tree(settings: MyTreeConfig, context: RolloutContext) -> RolloutStrategy: ...

after which `--config.rollout.strategy=my_tree` selects it and `config.rollout.my_tree.*` holds
its settings. A strategy whose settings constrain the rest of the section (slots for its branches,
a group size it needs) gives its class a static `check_stage(settings, stage)` that raises
ConfigError naming the field; launch runs it with the other cross-section checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol, Sequence

import jax
import numpy as np

from environments.base import TextEnv
from jaxtree.config import Registry, one_of, option, positive, require
from jaxtree.models.config import ModelConfig
from jaxtree.rollout.engine import RolloutConfig
from jaxtree.rollout.trajectory import TrajectoryBatch
from jaxtree.tokenizers import Tokenizer

STRATEGIES = Registry("rollout strategy")


class RolloutStrategy(Protocol):
    def sample(self, params: Any, rng: jax.Array, tasks: Sequence[int], step: int, *,
               first_group: int = 0) -> tuple[TrajectoryBatch, dict[str, float]]:
        """Episodes of every task (group g = tasks[g]) and the strategy's metrics; `first_group`
        is the step-wide index of tasks[0] (a process's share of the step, see above)."""


def share_key(rng: jax.Array, first_group: int) -> jax.Array:
    """A tree controller's key for the share of groups starting at `first_group`: the step's
    key itself for the first share (one process: unchanged), else the key folded with it, so
    the shares of a multi-process step draw independent streams."""
    return rng if first_group == 0 else jax.random.fold_in(rng, first_group)


def combine_shares(metrics: Sequence[dict[str, float]], groups: Sequence[int],
                   sums: Sequence[str] = ()) -> dict[str, float]:
    """One process's view of a step's strategy metrics from every share's (`metrics[p]` from
    the process that played `groups[p]` groups): a metric named by (or starting with) an entry
    of `sums` is a count and adds up, one ending in `_min` / `_max` takes the extreme, and any
    other (a mean or a rate) is averaged weighted by the shares' groups."""
    out = {}
    for key in dict.fromkeys(k for m in metrics for k in m):  # every share's keys, in order
        present = [p for p, m in enumerate(metrics) if key in m]
        values = np.asarray([metrics[p][key] for p in present], np.float64)
        weights = np.asarray([groups[p] for p in present], np.float64)
        if any(key.startswith(prefix) for prefix in sums):
            out[key] = float(values.sum())
        elif key.endswith("_min"):
            out[key] = float(values.min())
        elif key.endswith("_max"):
            out[key] = float(values.max())
        else:
            out[key] = float((values * weights).sum() / max(weights.sum(), 1.0))
    return out


@dataclasses.dataclass(frozen=True)
class RolloutContext:
    """What every strategy is built with: the policy's architecture and tokenizer, the
    environment, the engine settings and the group size."""

    model_config: ModelConfig
    tokenizer: Tokenizer
    make_env: Callable[[], TextEnv]
    rollout: RolloutConfig
    group_size: int


@dataclasses.dataclass(frozen=True)
class RolloutStage(RolloutConfig):
    """Config section `rollout`: the slot engine, the strategy and the batch shape per step.

    A step rolls out `groups_per_step` tasks x `group_size` rollouts with the strategy."""

    PARTS = {"strategy": STRATEGIES}

    strategy: str = option("independent", "how a step's episodes are generated (a registered "
                           "rollout strategy)", check=one_of(STRATEGIES.names))
    groups_per_step: int = option(8, "tasks per training step (rollout groups)",
                                  check=positive())
    group_size: int = option(8, "rollouts per task", check=positive())

    def engine(self) -> RolloutConfig:
        """The slot engine's part of the section."""
        return self.narrowed(RolloutConfig)


def require_slots(stage: "RolloutStage", needed: int) -> None:
    """ConfigError on `rollout.num_slots` unless it holds `needed` episodes at once."""
    require(stage.num_slots >= needed, "rollout.num_slots",
            f"{stage.num_slots} is too few for rollout.strategy={stage.strategy!r}: it needs at "
            f"least {needed}")


def start_trees(engine, params, rng: jax.Array, task_ids: Sequence[int], roots: int
                ) -> tuple[np.random.Generator, dict[int, int]]:
    """Starts a tree controller's session: `roots` episodes of every task (group g = task_ids[g])
    queued and started. Returns (a numpy generator seeded by `rng` for the controller's own
    draws, {group: episodes started}). ValueError if the slots cannot hold every root."""
    if engine.rollout.num_slots < roots * len(task_ids):
        raise ValueError(f"rollout.num_slots={engine.rollout.num_slots} cannot start {roots} "
                         f"branches for each of {len(task_ids)} tasks (needs "
                         f"{roots * len(task_ids)})")
    engine.begin(params, rng)
    draws = np.random.default_rng(np.asarray(jax.random.key_data(rng)).ravel().tolist())
    started = {}
    for group, task in enumerate(task_ids):
        for _ in range(roots):
            engine.add_episode(task, group_id=group)
        started[group] = roots
    engine.start_queued()
    return draws, started


def tree_group_metrics(prefix: str, batch: TrajectoryBatch, started: dict[int, int],
                       num_groups: int) -> dict[str, float]:
    """A tree controller's group shape: episodes started per task (`<prefix>/branches`, mean)
    and the smallest and largest group the batch holds."""
    sizes = np.bincount(batch.group_ids, minlength=num_groups) if len(batch) else np.zeros(1)
    return {f"{prefix}/branches": float(np.mean(list(started.values()))),
            f"{prefix}/group_size_min": float(sizes.min()),
            f"{prefix}/group_size_max": float(sizes.max())}


def check_stage(stage: "RolloutStage") -> None:
    """The configured strategy's own constraints on the section (its `check_stage`, if any)."""
    check = getattr(STRATEGIES.part(stage.strategy).build, "check_stage", None)
    if check is not None:
        check(stage.part_settings(stage.strategy), stage)


def build_strategy(stage: RolloutStage, model_config: ModelConfig, tokenizer: Tokenizer,
                   make_env: Callable[[], TextEnv]) -> RolloutStrategy:
    """The configured strategy, built with its settings (`config.rollout.<strategy>`)."""
    context = RolloutContext(model_config, tokenizer, make_env, stage.engine(), stage.group_size)
    return STRATEGIES.build(stage.strategy, stage.part_settings(stage.strategy), context=context)
