"""The rollout stage: the strategy protocol, its registry, tree methods and the `rollout` section.

A rollout strategy turns a step's tasks into a batch of trajectories, `group_size` (or, for tree
methods, a variable number of) episodes per task:

    strategy = build_strategy(stage, model_config, tokenizer, make_env, labels)
    batch, metrics = strategy.sample(params, rng, tasks, step, first_group=0)

`tasks` are environment seeds; group g of the batch holds the episodes of tasks[g]. `step` is the
training step (strategies whose behaviour is annealed, like LATR's hybrid fraction, read it).
Metrics are floats to log under the strategy's own prefix (e.g. `latr/`). `labels` are the
per-turn labels the experiment reads (`jaxtree.rollout.labels`): the strategy's turns record
those and no others.

Every strategy subclasses `RolloutStrategy` (its hooks have defaults). In a multi-process job each
process plays a contiguous share of the step's tasks (`jaxtree.parallel.distributed`) and passes
`first_group`, the step-wide index of its tasks[0]. Strategies whose draws are keyed per episode
or per group (independent, best_of_n, latr) offset those keys by it, so a share draws exactly
what one process playing every group would; tree methods whose episode ids follow the order of
forks fold it into their key (`tree.share_key`): every share draws its own stream, the same for
a given number of processes. Groups never span processes. The batch's ids stay local (group 0 is
tasks[0]); the trainer renumbers the shares when it joins them, and combines their metrics with
`combine_shares` (a strategy names its counts in `summed_metrics`).

A new strategy registers with its typed settings and what it declares:

    @STRATEGIES.register("my_rollout", MyConfig, reads=("verified",), check=my_slot_check)
    class MyRollout(RolloutStrategy): ...

A new tree method is a controller (`jaxtree.rollout.tree`), run by the shared turn loop:

    @register_tree_method("my_tree", MyTreeConfig, reads=("action_signature",))
    def my_tree(settings: MyTreeConfig, context: RolloutContext) -> TreeController: ...

after which `--config.rollout.strategy=my_tree` selects it and `config.rollout.my_tree.*` holds
its settings. `check(settings, stage)` raises ConfigError naming the field for constraints its
settings put on the section (slots for its branches); launch runs it with the other checks.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, ClassVar, Sequence

import jax
import numpy as np

from environments.base import TextEnv
from jaxtree.config import Registry, one_of, option, positive, require
from jaxtree.models.config import ModelConfig
from jaxtree.rollout.engine import RolloutConfig, SlotEngine
from jaxtree.rollout.labels import TurnLabeler, environment_labels
from jaxtree.rollout.signatures import signature_function
from jaxtree.rollout.trajectory import TrajectoryBatch
from jaxtree.rollout.tree import TreeController, TreeLog, tree_rollout
from jaxtree.tokenizers import Tokenizer

STRATEGIES = Registry("rollout strategy")


class RolloutStrategy(abc.ABC):
    """A registered rollout strategy. `summed_metrics`: prefixes of its metrics that are counts
    (added up over a multi-process step's shares; the others are averaged)."""

    summed_metrics: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def sample(self, params: Any, rng: jax.Array, tasks: Sequence[int], step: int, *,
               first_group: int = 0) -> tuple[TrajectoryBatch, dict[str, float]]:
        """Episodes of every task (group g = tasks[g]) and the strategy's metrics; `first_group`
        is the step-wide index of tasks[0] (a process's share of the step, see above)."""


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
    environment, the engine settings, the group size and the per-turn environment labels its
    turns record (`jaxtree.rollout.labels`)."""

    model_config: ModelConfig
    tokenizer: Tokenizer
    make_env: Callable[[], TextEnv]
    rollout: RolloutConfig
    group_size: int
    labels: tuple[str, ...] = ()

    def labeler(self) -> TurnLabeler:
        """The labeler of this context's turns (the environment labels among `labels`)."""
        names = [name for name in self.labels if name in environment_labels()]
        return TurnLabeler(names, signature_function(self.rollout.signature))

    def engine(self) -> SlotEngine:
        """A slot engine for this context, recording its labels."""
        return SlotEngine(self.model_config, self.tokenizer, self.make_env, self.rollout,
                          self.labeler())


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


def check_stage(stage: "RolloutStage") -> None:
    """The configured strategy's own constraints on the section (its registered `check`)."""
    part = STRATEGIES.part(stage.strategy)
    if part.check is not None:
        part.check(stage.part_settings(stage.strategy), stage)


def build_strategy(stage: RolloutStage, model_config: ModelConfig, tokenizer: Tokenizer,
                   make_env: Callable[[], TextEnv],
                   labels: Sequence[str] = ()) -> RolloutStrategy:
    """The configured strategy, built with its settings (`config.rollout.<strategy>`), whose
    turns record the per-turn `labels` and those the strategy itself reads."""
    settings = stage.part_settings(stage.strategy)
    own = STRATEGIES.part(stage.strategy).labels_read(settings)
    context = RolloutContext(model_config, tokenizer, make_env, stage.engine(),
                             stage.group_size, tuple(dict.fromkeys((*labels, *own))))
    strategy = STRATEGIES.build(stage.strategy, settings, context=context)
    if not isinstance(strategy, RolloutStrategy):
        raise TypeError(f"rollout strategy {stage.strategy!r} built a "
                        f"{type(strategy).__name__}, not a RolloutStrategy")
    return strategy


# ----------------------------------------------------------------------------- tree methods

class TreeStrategy(RolloutStrategy):
    """A tree method as a rollout strategy: its controller run by `tree.tree_rollout` on a slot
    engine. Metrics: the controller's (`TreeController.metrics`), else the tree's group shape
    under the method's name, and the engine's timing shares."""

    def __init__(self, name: str, controller: TreeController, context: RolloutContext):
        self.name = name
        self.controller = controller
        self.engine = context.engine()
        self.summed_metrics = controller.summed_metrics

    def sample(self, params, rng: jax.Array, tasks: Sequence[int], step: int, *,
               first_group: int = 0) -> tuple[TrajectoryBatch, dict[str, float]]:
        del step
        batch, log = tree_rollout(self.engine, params, rng, tasks, self.controller,
                                  first_group=first_group)
        return batch, {**self.metrics(batch, log), **self.engine.stats.metrics()}

    def metrics(self, batch: TrajectoryBatch, log: TreeLog) -> dict[str, float]:
        if self.controller.metrics is not None:
            return self.controller.metrics(batch, log)
        return {**log.group_metrics(self.name, batch), f"{self.name}/refused": log.refused}


def register_tree_method(name: str, config: type | None = None, *,
                         reads: Sequence[str] | Callable[[Any], Sequence[str]] = (),
                         produces: Sequence[str] = (),
                         check: Callable[[Any, Any], None] | None = None):
    """Decorator registering a tree method: `factory(settings, context) -> TreeController`
    becomes the rollout strategy `name` (see the module docstring)."""
    def decorator(factory: Callable[[Any, RolloutContext], TreeController]):
        def build(settings, context: RolloutContext) -> TreeStrategy:
            return TreeStrategy(name, factory(settings, context), context)
        build.__doc__ = factory.__doc__
        STRATEGIES.register(name, config, reads=reads, produces=produces, check=check)(build)
        return factory
    return decorator
