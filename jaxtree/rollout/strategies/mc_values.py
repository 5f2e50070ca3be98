"""MC-PR's rollout: independent episodes plus Monte-Carlo value estimates of every visited state.

VPR's "MC-PR" baseline (Yuan et al., 2026, §3.1 Baselines) "estimates intermediate state values
using ... Monte Carlo rollouts with the policy model ... and defines the process reward as the
temporal difference between consecutive state values". This strategy rolls out `group_size`
episodes per task like `independent`, and before each of an episode's actions forks it into
`continuations` copies that play to the end with the current policy. The state's value is the
mean return of its continuations,

    V(s_t) = (1/m) sum_j return_j,

recorded on the turn (`TrajectoryBatch.turn_mc_values[i, t]`); the `mc_process` reward term
turns the values into r_t = V(s_{t+1}) - V(s_t) with V(s_T) = the episode's own return.

A continuation's return counts the rewards of the whole episode it continues (history
included): the history's rewards are common to all continuations of a state, so they cancel in
V(s_{t+1}) - V(s_t) except for the action's own reward r_t, which is the temporal difference with
gamma = 1. Continuations are forked on device (`SlotEngine.fork`: copied cache rows and a cloned
environment, nothing re-prefilled) and dropped from the training batch; they sample with their
own episode ids, hence independent randomness.

Schedule: the episodes advance in lockstep. At each turn boundary every live episode is held
(keeps its slot, sits turns out) while continuations are forked for as many of them as the free
slots allow, more as slots free up; when all have finished, the episodes play one turn. The
engine needs num_slots >= (episodes per step) + continuations.

Cost: about m x (mean remaining turns) continuation turns per episode turn; the metrics
`mc/continuations`, `mc/continuation_steps` and `mc/main_steps` report it per step.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np

from jaxtree.config import Section, option, positive
from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.strategies.base import (STRATEGIES, RolloutContext, require_slots,
                                             share_key)
from jaxtree.rollout.trajectory import TrajectoryBatch

PAPER_CONTINUATIONS = 100   # VPR §3.1: "100 light-weight Monte Carlo rollouts"


@dataclasses.dataclass(frozen=True)
class McValuesConfig(Section):
    continuations: int = option(8, "m, Monte-Carlo continuations per visited state (VPR §3.1 "
                                "uses 100; the cost grows linearly in m)", check=positive())


def sample_with_values(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
                       group_size: int, continuations: int) -> tuple[TrajectoryBatch,
                                                                     dict[str, float]]:
    """`group_size` episodes per task with V(s_t) of every turn's state in turn_mc_values.

    Returns (batch of the episodes ordered by group, cost metrics).
    """
    engine.begin(params, rng)
    mains = [engine.add_episode(task, group_id=g) for g, task in enumerate(task_ids)
             for _ in range(group_size)]
    needed = len(mains) + continuations
    if engine.rollout.num_slots < needed:
        raise ValueError(f"rollout.num_slots={engine.rollout.num_slots} is too small for MC "
                         f"values: {len(mains)} episodes + {continuations} continuations need "
                         f"at least {needed}")
    engine.start_queued()
    main_ids = set(mains)
    returns: dict[tuple[int, int], list[float]] = {}   # (episode, turn) -> continuation returns
    owner: dict[int, tuple[int, int]] = {}             # continuation id -> (episode, turn)
    main_steps = continuation_steps = 0

    def live_mains():
        return [e for e in engine.live if e.episode_id in main_ids]

    while live_mains():
        waiting = live_mains()
        engine.held = {e.episode_id for e in waiting}
        while waiting or owner:
            # With no continuation live, the free slots hold at least m (checked above).
            while waiting and engine.free_slots >= continuations:
                parent = waiting.pop()
                for child in engine.fork(parent.episode_id, continuations):
                    owner[child] = (parent.episode_id, parent.num_turns)
            steps_before = engine.stats.env_steps
            for episode_id in engine.play_turn():
                record = engine.discard(episode_id)
                returns.setdefault(owner.pop(episode_id), []).append(
                    sum(turn.reward for turn in record.turns))
            continuation_steps += engine.stats.env_steps - steps_before
        engine.held = set()
        steps_before = engine.stats.env_steps
        engine.play_turn()
        main_steps += engine.stats.env_steps - steps_before

    for episode_id in mains:
        for t, turn in enumerate(engine.episodes[episode_id].turns):
            turn.mc_value = float(np.mean(returns[(episode_id, t)]))
    batch = engine.collect()
    return batch, {"mc/continuations": float(sum(len(v) for v in returns.values())),
                   "mc/continuation_steps": float(continuation_steps),
                   "mc/main_steps": float(main_steps)}


@STRATEGIES.register("mc_values", McValuesConfig)
class McValues:
    """Independent episodes with Monte-Carlo state values from `continuations` forked
    continuations per visited state (VPR's MC-PR baseline; use with reward.terms=
    ('mc_process',))."""

    @staticmethod
    def check_stage(settings: McValuesConfig, stage) -> None:
        """Slots for every episode of a step plus one state's continuations."""
        require_slots(stage, stage.groups_per_step * stage.group_size + settings.continuations)

    def __init__(self, settings: McValuesConfig, context: RolloutContext):
        self.settings = settings
        self.group_size = context.group_size
        self.engine = SlotEngine(context.model_config, context.tokenizer, context.make_env,
                                 context.rollout)

    share_sums = ("mc/",)

    def sample(self, params, rng: jax.Array, tasks: Sequence[int], step: int, *,
               first_group: int = 0) -> tuple[TrajectoryBatch, dict[str, float]]:
        del step
        batch, metrics = sample_with_values(self.engine, params, share_key(rng, first_group),
                                            tasks, self.group_size, self.settings.continuations)
        return batch, {**metrics, **self.engine.stats.metrics()}
