"""MC-PR's rollout: independent episodes plus Monte-Carlo value estimates of every visited state.

VPR's "MC-PR" baseline (Yuan et al., 2026, §3.1 Baselines) "estimates intermediate state values
using ... Monte Carlo rollouts with the policy model ... and defines the process reward as the
temporal difference between consecutive state values". This strategy rolls out `group_size`
episodes per task like `independent`, and before each of an episode's actions forks it into
`continuations` copies that play to the end with the current policy. The state's value is the
mean return of its continuations,

    V(s_t) = (1/m) sum_j return_j,

recorded on the turn as the `mc_value` label (`batch.label("mc_value")[i, t]`); the
`mc_process` reward term turns the values into r_t = V(s_{t+1}) - V(s_t) with V(s_T) = the
episode's own return.

A continuation's return counts the rewards of the whole episode it continues (history
included): the history's rewards are common to all continuations of a state, so they cancel in
V(s_{t+1}) - V(s_t) except for the action's own reward r_t, which is the temporal difference with
gamma = 1. Continuations are forked on device (`SlotEngine.fork`: copied cache rows and a cloned
environment, nothing re-prefilled) and dropped from the training batch; they sample with their
own episode ids, hence independent randomness.

Schedule (a controller of the shared tree loop, `jaxtree.rollout.tree`, whose probes are the
continuations): the episodes advance in lockstep. At each turn boundary every live episode waits
(keeps its slot, sits turns out) while continuations are forked for as many of them as the free
slots allow (the last rows first), more as slots free up; when all have finished, the episodes
play one turn. The engine needs num_slots >= (episodes per step) + continuations.

Cost: about m x (mean remaining turns) continuation turns per episode turn; the metrics
`mc/continuations`, `mc/continuation_steps` and `mc/main_steps` report it per step.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np

from jaxtree.config import Section, option, positive
from jaxtree.rollout.strategies.base import RolloutContext, register_tree_method, require_slots
from jaxtree.rollout.trajectory import TrajectoryBatch
from jaxtree.rollout.tree import Decision, ForestView, TreeController, TreeLog, tree_rollout

PAPER_CONTINUATIONS = 100   # VPR §3.1: "100 light-weight Monte Carlo rollouts"


@dataclasses.dataclass(frozen=True)
class McValuesConfig(Section):
    continuations: int = option(8, "m, Monte-Carlo continuations per visited state (VPR §3.1 "
                                "uses 100; the cost grows linearly in m)", check=positive())


def mc_values_decide(view: ForestView, state: None) -> tuple[Decision, None]:
    """Before each turn, every live episode's state is probed by its continuations (the last
    rows first); once they have played out, V(s_t) = the mean of their returns is attached to
    the episode's next turn."""
    live = view.live()
    if not live:
        return Decision(), state
    if not view.probes:
        return Decision(probe=tuple(b.episode_id for b in reversed(live))), state
    values = tuple((b.episode_id, "mc_value",
                    float(np.mean([p.returns for p in view.probes[b.episode_id]])))
                   for b in live)
    return Decision(labels=values), state


def mc_metrics(log: TreeLog) -> dict[str, float]:
    return {"mc/continuations": float(log.probes), "mc/continuation_steps": float(log.probe_turns),
            "mc/main_steps": float(log.branch_turns)}


def mc_values_controller(group_size: int, continuations: int) -> TreeController:
    """`group_size` episodes per task, each state valued by `continuations` continuations."""
    return TreeController(roots=group_size, decide=mc_values_decide,
                          probe_copies=continuations,
                          metrics=lambda batch, log: mc_metrics(log), summed_metrics=("mc/",))


def sample_with_values(engine, params, rng: jax.Array, task_ids: Sequence[int],
                       group_size: int, continuations: int) -> tuple[TrajectoryBatch,
                                                                     dict[str, float]]:
    """`group_size` episodes per task with V(s_t) of every turn's state in the `mc_value` label.

    Returns (batch of the episodes ordered by group, cost metrics)."""
    needed = group_size * len(task_ids) + continuations
    if engine.rollout.num_slots < needed:
        raise ValueError(f"rollout.num_slots={engine.rollout.num_slots} is too small for MC "
                         f"values: {group_size * len(task_ids)} episodes + {continuations} "
                         f"continuations need at least {needed}")
    controller = mc_values_controller(group_size, continuations)
    batch, log = tree_rollout(engine, params, rng, task_ids, controller)
    return batch, controller.metrics(batch, log)


def _check_slots(settings: McValuesConfig, stage) -> None:
    """Slots for every episode of a step plus one state's continuations."""
    require_slots(stage, stage.groups_per_step * stage.group_size + settings.continuations)


@register_tree_method("mc_values", McValuesConfig, produces=("mc_value",), check=_check_slots)
def mc_values(settings: McValuesConfig, context: RolloutContext) -> TreeController:
    """Independent episodes with Monte-Carlo state values from `continuations` forked
    continuations per visited state (VPR's MC-PR baseline; use with reward.terms=
    ('mc_process',))."""
    return mc_values_controller(context.group_size, settings.continuations)
