"""LATR as a rollout strategy for single-turn tasks (Countdown): one tree per task, on device.

Each task's first prompt (the same framing as the slot engine's, `conversation.first_turn_tokens`)
is one LATR group of k = group_size slots; `num_tree_slots` of them run the tree and the rest plain
sampling (hybrid rollout, LATR §3.3), with the fraction η annealed over training steps. Every
returned row is played as the episode's single action through the shared episode logic and
assembled into the usual TrajectoryBatch, so rewards, advantages and the loss need nothing
LATR-specific.

Tree metadata: a branch's `parent_ids` is the episode id of its parent slot, `fork_turns` is 0
(LATR forks inside the first action) and `depth` counts the branchings above it; the token step of
the branch, the row's origin (tree / plain / fresh / duplicate) and, for a fresh row that
continued a copy of another sample, the position of its first own token are in its `info`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.config import between, option, require
from jaxtree.rollout.episode import Episode
from jaxtree.rollout.strategies.base import STRATEGIES, RolloutContext, RolloutStrategy
from jaxtree.rollout.trajectory import NO_PARENT, TrajectoryBatch, assemble
from jaxtree.sampling.latr import FRESH, LatrConfig, LatrOutput, latr_generate_jit
from jaxtree.utils import round_up

PROMPT_MULTIPLE = 32  # prompt widths are padded to a multiple of this: few compiled shapes


@dataclasses.dataclass(frozen=True)
class LatrRolloutConfig(LatrConfig):
    """Config section `rollout.latr`: the kernel's thresholds (LATR App. B.3) and the hybrid
    fraction η of tree slots over training (LATR §3.3)."""

    eta0: float = option(1.0, "η at step 0 (LATR Eq. 10)", check=between(0, 1))
    eta_decay: float = option(0.985, "γ of η = η0·γ^step (LATR Eq. 10; 0.985 for Countdown)",
                              check=between(0, 1, low_open=True))
    eta_schedule: tuple[tuple[int, float], ...] = option(
        (), "piecewise-constant η as ((from_step, η), ...); replaces Eq. 10 when given")

    def check(self):
        super().check()
        require(all(start >= 0 and 0 <= eta <= 1 for start, eta in self.eta_schedule),
                "eta_schedule", f"{self.eta_schedule!r} is not ((from_step >= 0, η in [0, 1]), "
                "...)")

    def kernel(self) -> LatrConfig:
        """The kernel's static config (the η schedule changes nothing inside the kernel)."""
        return self.narrowed(LatrConfig)


def num_tree_slots(eta: float, k: int) -> int:
    """LATR Eq. 9: k_LATR = round(η·k) (to the nearest integer), clipped to [0, k]."""
    return int(min(max(round(eta * k), 0), k))


def eta_at(step: int, eta0: float = 1.0, gamma: float = 1.0,
           schedule: Sequence[tuple[int, float]] = ()) -> float:
    """η at a training step: a piecewise-constant schedule {from_step: η} when given (the
    reference code's Countdown schedule is {0: 1, 10: 0.75, 20: 0.5, 80: 0.25, 200: 0}), else
    LATR Eq. 10, η0·γ^step."""
    if schedule:
        value = schedule[0][1]
        for start, eta in sorted(schedule):
            if step >= start:
                value = eta
        return float(value)
    return float(eta0 * gamma ** step)


def _depths(parent: np.ndarray, is_child: np.ndarray) -> np.ndarray:
    """int32[k]: branchings between the root and each slot (parent: int32[k] slot pointers)."""
    depth = np.zeros(len(parent), np.int32)
    for _ in range(len(parent)):  # a chain is at most k long
        depth = np.where(is_child, depth[np.maximum(parent, 0)] + 1, 0)
    return depth


def sample_latr(context: RolloutContext, settings: LatrRolloutConfig, params, rng: jax.Array,
                task_ids: Sequence[int], tree_slots: int, first_group: int = 0
                ) -> tuple[TrajectoryBatch, dict[str, float]]:
    """k = context.group_size rollouts of each task (group g = task_ids[g]), `tree_slots` of
    them in the tree; returns (batch, tree statistics). The kernel keys group g's rows by
    first_group + g (a share of a step's groups draws what it would among all of them)."""
    batch, stats, _ = sample_latr_trees(context, settings, params, rng, task_ids, tree_slots,
                                        first_group)
    return batch, stats


def sample_latr_trees(context: RolloutContext, settings: LatrRolloutConfig, params,
                      rng: jax.Array, task_ids: Sequence[int], tree_slots: int,
                      first_group: int = 0
                      ) -> tuple[TrajectoryBatch, dict[str, float], LatrOutput]:
    """`sample_latr`, also returning the kernel's output (host arrays): its per-group branch
    and prune event logs are what an analysis of the trees reads."""
    tokenizer, k = context.tokenizer, context.group_size
    stops = tokenizer.assistant_stop_sequences
    if any(len(s) != 1 for s in stops):
        raise ValueError("LATR rollouts need single-token stop sequences (the tree ends a branch "
                         f"on a token); this tokenizer's are {stops}")
    labeler = context.labeler()
    roots, prompts = [], []
    for g, task in enumerate(task_ids):
        root = Episode(g * k, int(task), g)
        prompts.append(root.start(context.make_env, tokenizer))
        roots.append(root)
    width = round_up(max(len(p) for p in prompts), PROMPT_MULTIPLE)
    prompt_tokens = np.full((len(prompts), width), tokenizer.pad_id, np.int32)
    for g, p in enumerate(prompts):
        prompt_tokens[g, :len(p)] = p
    out = jax.device_get(latr_generate_jit(
        context.model_config, settings.kernel(), context.rollout.sampling, k,
        context.rollout.max_action_tokens, tokenizer.pad_id, params, jnp.asarray(prompt_tokens),
        jnp.asarray([len(p) for p in prompts], jnp.int32),
        first_group + jnp.arange(len(prompts), dtype=jnp.int32), jnp.int32(tree_slots), rng,
        jnp.asarray([s[0] for s in stops], jnp.int32)))

    records = []
    for g, (root, prompt) in enumerate(zip(roots, prompts)):
        tree_child = (out.parent[g] >= 0) & (out.origin[g] != FRESH) & (out.birth[g] >= 0)
        depth = _depths(out.parent[g], tree_child)
        for j in range(k):
            n = int(out.lengths[g, j])
            action = out.tokens[g, j, :n].tolist()
            row = Episode(g * k + j, root.task_id, g, env=root.env.clone(),
                          parent_id=g * k + int(out.parent[g, j]) if tree_child[j] else NO_PARENT,
                          fork_turn=0 if tree_child[j] else NO_PARENT, depth=int(depth[j]))
            row.play(tokenizer, action, bool(out.finished[g, j]), context.rollout.max_turns,
                     node_id=row.episode_id, labeler=labeler, logprobs=out.logprobs[g, j, :n])
            row.info.update(latr_origin=int(out.origin[g, j]), latr_birth=int(out.birth[g, j]),
                            latr_fork_position=int(out.fork_position[g, j]))
            records.append(row.record(
                np.asarray(prompt + action, np.int32),
                np.asarray([False] * len(prompt) + [True] * n),
                np.concatenate([np.zeros(len(prompt), np.float32),
                                out.logprobs[g, j, :n]]).astype(np.float32),
                np.zeros(len(prompt) + n, np.int32)))
    return assemble(records, tokenizer.pad_id), tree_stats(out, tree_slots), out


def tree_stats(out: LatrOutput, tree_slots: int) -> dict[str, float]:
    """The `latr/*` metrics of a kernel output (host arrays, any number of groups P)."""
    generated = max(int(out.mask.sum()), 1)
    return {
        "latr/tree_slots": tree_slots,
        "latr/saturation_length": float(out.tree_end_step.mean()),
        "latr/branching_ratio": float(out.num_branches.sum()) / generated,
        "latr/branches_per_group": float(out.num_branches.mean()),
        "latr/prunes_per_group": float(out.num_prunes.mean()),
        "latr/completed_rows": int((out.origin >= FRESH).sum()),
        "latr/forked_rows": int((out.fork_position >= 0).sum()),
        "latr/forwards": int(out.forwards.sum()),
    }


@STRATEGIES.register("latr", LatrRolloutConfig)
class Latr(RolloutStrategy):
    """LATR lookahead trees inside each task's single action (single-turn tasks), hybrid with
    plain sampling by the η schedule."""

    def __init__(self, settings: LatrRolloutConfig, context: RolloutContext):
        max_steps = context.make_env().max_steps
        require(max_steps == 1, "rollout.strategy",
                f"'latr' branches inside one generation and needs a single-turn environment; "
                f"this one allows {max_steps} turns")
        self.settings = settings
        self.context = context

    summed_metrics = ("latr/completed_rows", "latr/forked_rows", "latr/forwards")

    def sample(self, params, rng: jax.Array, tasks: Sequence[int], step: int, *,
               first_group: int = 0) -> tuple[TrajectoryBatch, dict[str, float]]:
        s = self.settings
        eta = eta_at(step - 1, s.eta0, s.eta_decay, s.eta_schedule)
        return sample_latr(self.context, s, params, rng, tasks,
                           num_tree_slots(eta, self.context.group_size), first_group)
