"""ARPO-style entropy-guided branching, PATR's adaptive-branching baseline, on the slot engine.

ARPO (Dong et al. 2025, "Agentic Reinforced Policy Optimization", §3.2) branches a rollout right
after a tool result when the policy's entropy over the first tokens of its reply has risen above
the entropy of its first reply. What is implemented is the rule of ARPO's released rollout code
(`vllm_rollout_with_tools.py`), with a turn's observation in the role of the tool result:

    1  each task starts M = `initial_branches` rollouts; its tree holds at most N = `max_branches`
       (ARPO's budget `n`: every group ends with N trajectories when the slots allow)
    2  after every turn, each branch that goes on (oldest first) measures
           H_t = sum_{j < k} -log pi(x_j) / log V      over the first k = `entropy_tokens` tokens
       of the reply it just sampled (V: vocabulary size) and dH = H_t - H_init, H_init = the H of
       its tree's first reply
    3  it forks `branch_factor` - 1 children while the budget lasts, each with probability
           P = clip(tau + w * dH, 0, 1)        (the code: u - w * dH <= tau, u ~ U(0, 1))
       tau = `branch_probability` (0.5), w = `entropy_weight` (0.2, ARPO's scripts)
    4  a task with no branch left and budget to spare starts one new rollout from its prompt per
       turn (the code's "non-active samples", `refill`)

ARPO is a controller of the shared tree loop (`jaxtree.rollout.tree`). A child is a fork: the
parent's cache rows are copied on device and its environment cloned, so the shared prefix is not
re-prefilled (ARPO re-sends it to vLLM). The child samples its own next reply from the branch
point.

Choices, stated:
  * Entropy: ARPO's code sums vLLM's top-10 log-prob entropies of the first 20 tokens. The decode
    loop here keeps no full distributions, so H uses the sampled tokens' surprisal under the
    policy at temperature 1: its expectation is the policy's entropy at those positions (an
    unbiased one-sample estimate, summed over the same first tokens and normalised the same way).
  * H_init: the paper's "initial entropy" is the first reply's; children inherit their root's
    (a branch's first turn is its root's: forks copy the history). (The code records a branch's
    first reply after it was created, so a child's dH starts at 0.)
  * Advantages: ARPO's default "soft" advantage attribution is GRPO over the whole group (shared
    prefix tokens get the mean of their branches' advantages through identical importance
    ratios), so the group enters the configured advantage (GRPO) unchanged.
  * A fork that finds no free slot is refused (`arpo/refused`); the rollout never fails for room.

Tree metadata: forked rows record their parent episode and fork turn (`parent_ids`,
`fork_turns`, `depth`), as PATR's do.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import numpy as np

from jaxtree.config import Section, between, non_negative, option, positive, require
from jaxtree.rollout.strategies.base import RolloutContext, register_tree_method, require_slots
from jaxtree.rollout.trajectory import TrajectoryBatch
from jaxtree.rollout.tree import (Decision, Expand, ForestView, TreeController, TreeLog,
                                  tree_rollout)

# ARPO's released scripts (ARPO_7B_Reasoning_1node.sh and the deep-search ones).
PAPER_INITIAL_BRANCHES = 8
PAPER_MAX_BRANCHES = 16
PAPER_BRANCH_FACTOR = 2        # `beam_size`
PAPER_BRANCH_PROBABILITY = 0.5
PAPER_ENTROPY_WEIGHT = 0.2
PAPER_ENTROPY_TOKENS = 20


@dataclasses.dataclass(frozen=True)
class ArpoConfig(Section):
    """Config section `rollout.arpo`."""

    initial_branches: int = option(PAPER_INITIAL_BRANCHES, "M, rollouts started from each "
                                   "task's prompt (replaces rollout.group_size)",
                                   check=positive())
    max_branches: int = option(PAPER_MAX_BRANCHES, "N, trajectories per task (the budget "
                               "branches and refills fill)", check=positive())
    branch_factor: int = option(PAPER_BRANCH_FACTOR, "a branching point forks up to "
                                "branch_factor - 1 children (ARPO's beam_size)",
                                check=between(2))
    branch_probability: float = option(PAPER_BRANCH_PROBABILITY, "tau: the fork probability "
                                       "when the entropy has not changed", check=between(0, 1))
    entropy_weight: float = option(PAPER_ENTROPY_WEIGHT, "w: how much a rise in entropy raises "
                                   "the fork probability", check=non_negative())
    entropy_tokens: int = option(PAPER_ENTROPY_TOKENS, "k: leading reply tokens whose "
                                 "surprisal makes H", check=positive())
    refill: bool = option(True, "a task with no live branch and budget left starts a new "
                          "rollout from its prompt (ARPO's code)")

    def check(self):
        super().check()
        require(self.max_branches >= self.initial_branches, "max_branches",
                f"{self.max_branches} is below initial_branches={self.initial_branches}")


def reply_entropy(logprobs: np.ndarray | None, tokens: int, vocab_size: int) -> float:
    """H of one reply: the surprisal of its first `tokens` tokens (float32[n] log-probs) summed,
    over log V."""
    if logprobs is None or not len(logprobs):
        return 0.0
    return float(-np.sum(logprobs[:tokens], dtype=np.float64)) / math.log(vocab_size)


def fork_count(delta: float, settings: ArpoConfig, room: int, rng: np.random.Generator
               ) -> tuple[int, list[float]]:
    """How many children one branch forks at a branching point (ARPO's draw per child, at most
    branch_factor - 1 and `room`); returns (count, the uniforms drawn)."""
    count, draws = 0, []
    for _ in range(min(settings.branch_factor - 1, room)):
        u = float(rng.random())
        draws.append(u)
        if min(1.0, max(0.0, u - settings.entropy_weight * delta)) <= settings.branch_probability:
            count += 1
    return count, draws


def arpo_decide(settings: ArpoConfig, vocab_size: int, view: ForestView,
                state: None) -> tuple[Decision, None]:
    """ARPO's branching points at one boundary: every branch that has played a turn and goes on
    (tasks in order, oldest first) draws its children; a task with no live branch and budget
    left gets a new rollout. The grants are those the loop will make (free slots, then the
    budget), so each draw sees the room its predecessors left, as in ARPO's loop."""
    expand, refills, records = [], [], []
    free = view.free_slots
    for group in range(view.num_groups):
        live = view.live(group)
        used = view.started[group]
        for branch in sorted(live, key=lambda b: b.episode_id):
            if branch.num_turns == 0:
                continue
            turns = branch.turns
            h = reply_entropy(turns[-1].action_logprobs, settings.entropy_tokens, vocab_size)
            h0 = reply_entropy(turns[0].action_logprobs, settings.entropy_tokens, vocab_size)
            wanted, draws = fork_count(h - h0, settings, settings.max_branches - used, view.rng)
            granted = min(wanted, free)
            free, used = free - granted, used + granted
            if wanted:
                expand.append(Expand(branch.episode_id, wanted, partial=True))
            records.append({"group": group, "turn": branch.num_turns,
                            "episode": branch.episode_id, "entropy": h, "delta": h - h0,
                            "draws": draws, "expanded": [branch.episode_id] * bool(wanted),
                            "wanted": wanted})
        if settings.refill and not live and used < settings.max_branches:
            refills.append((group, 1))
    return Decision(expand=tuple(expand), add_roots=tuple(refills), records=tuple(records)), state


def branch_points(log: TreeLog) -> list[dict]:
    """Every branching point of an ARPO session (group, turn, episode, entropy, delta, draws,
    the children forked and the number refused for want of slots)."""
    points = []
    for boundary in log.boundaries:
        for record in boundary["records"]:
            episode = record["episode"]
            points.append({**record, "children": boundary["forked"].get(episode, []),
                           "refused": boundary["refused"].get(episode, 0)})
    return points


def arpo_metrics(log: TreeLog, batch: TrajectoryBatch) -> dict[str, float]:
    points = log.records
    forks = sum(len(children) for b in log.boundaries for children in b["forked"].values())
    entropies = [p["entropy"] for p in points]
    refills = sum(count for b in log.boundaries for _, count in b["added"])
    return {
        **log.group_metrics("arpo", batch),
        "arpo/branch_points": float(len(points)), "arpo/forks": float(forks),
        "arpo/refills": float(refills), "arpo/refused": float(log.refused),
        "arpo/entropy": float(np.mean(entropies)) if entropies else 0.0,
        "arpo/entropy_delta": float(np.mean([p["delta"] for p in points])) if points else 0.0,
    }


def arpo_controller(settings: ArpoConfig, vocab_size: int) -> TreeController:
    """ARPO's entropy-guided branching as a tree controller (V = `vocab_size`)."""
    return TreeController(
        roots=settings.initial_branches,
        decide=lambda view, state: arpo_decide(settings, vocab_size, view, state),
        max_branches=settings.max_branches, metrics=lambda batch, log: arpo_metrics(log, batch),
        summed_metrics=("arpo/branch_points", "arpo/forks", "arpo/refills", "arpo/refused"))


def sample_arpo(engine, params, rng: jax.Array, task_ids: Sequence[int], settings: ArpoConfig,
                vocab_size: int, decisions: list | None = None
                ) -> tuple[TrajectoryBatch, dict[str, float]]:
    """One ARPO tree per task (group g = task_ids[g]) on `engine` (needs num_slots >= M x
    tasks); `decisions`, when a list, receives every branching point (`branch_points`).

    Returns (the groups' trajectories ordered by episode id, metrics under `arpo/`)."""
    controller = arpo_controller(settings, vocab_size)
    batch, log = tree_rollout(engine, params, rng, task_ids, controller)
    if decisions is not None:
        decisions.extend(branch_points(log))
    return batch, controller.metrics(batch, log)


def _check_slots(settings: ArpoConfig, stage) -> None:
    """Slots to start every task's M rollouts at once."""
    require_slots(stage, settings.initial_branches * stage.groups_per_step)


@register_tree_method("arpo", ArpoConfig, check=_check_slots)
def arpo(settings: ArpoConfig, context: RolloutContext) -> TreeController:
    """ARPO's entropy-guided branching after each observation (see the module docstring);
    branches fork on device (copied cache rows, cloned environment)."""
    return arpo_controller(settings, context.model_config.vocab_size)
