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

A child is `SlotEngine.fork`: the parent's cache rows are copied on device and its environment
cloned, so the shared prefix is not re-prefilled (ARPO re-sends it to vLLM). The child samples its
own next reply from the branch point.

Choices, stated:
  * Entropy: ARPO's code sums vLLM's top-10 log-prob entropies of the first 20 tokens. The decode
    loop here keeps no full distributions, so H uses the sampled tokens' surprisal under the
    policy at temperature 1: its expectation is the policy's entropy at those positions (an
    unbiased one-sample estimate, summed over the same first tokens and normalised the same way).
  * H_init: the paper's "initial entropy" is the first reply's; children inherit their root's.
    (The code records a branch's first reply after it was created, so a child's dH starts at 0.)
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
from collections import defaultdict
from typing import Sequence

import jax
import numpy as np

from jaxtree.config import Section, between, non_negative, option, positive, require
from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.strategies.base import (STRATEGIES, RolloutContext, require_slots,
                                             share_key, start_trees, tree_group_metrics)
from jaxtree.rollout.trajectory import TrajectoryBatch

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


def sample_arpo(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
                settings: ArpoConfig, vocab_size: int, decisions: list | None = None
                ) -> tuple[TrajectoryBatch, dict[str, float]]:
    """One ARPO tree per task (group g = task_ids[g]).

    Args:
      engine: the slot engine (needs num_slots >= M x tasks).
      vocab_size: V of the entropy's normalisation.
      decisions: when a list, every branching point is appended to it as a dict (group, turn,
        episode, entropy, delta, draws, children ids, refused).

    Returns:
      (the groups' trajectories ordered by episode id, metrics under `arpo/`).
    """
    choice_rng, budget_used = start_trees(engine, params, rng, task_ids,
                                          settings.initial_branches)
    budget_used = defaultdict(int, budget_used)   # group -> rollouts started (roots, forks, refills)
    initial: dict[int, float] = {}           # episode -> H_init of its tree's root
    counts = defaultdict(float)
    entropies, deltas = [], []
    while engine.has_work:
        engine.play_turn()
        by_group = defaultdict(list)
        for e in engine.live:
            by_group[e.group_id].append(e)
        for group in sorted(by_group):
            for e in sorted(by_group[group], key=lambda e: e.episode_id):
                h = reply_entropy(e.action_logprobs, settings.entropy_tokens, vocab_size)
                h0 = initial.setdefault(e.episode_id, h)
                delta = h - h0
                entropies.append(h)
                deltas.append(delta)
                room = settings.max_branches - budget_used[group]
                wanted, draws = fork_count(delta, settings, room, choice_rng)
                granted = min(wanted, engine.free_slots)
                children = engine.fork(e.episode_id, granted) if granted else []
                for child in children:
                    initial[child] = h0
                budget_used[group] += granted
                counts["forks"] += granted
                counts["refused"] += wanted - granted
                counts["points"] += 1
                if decisions is not None:
                    decisions.append({"group": group, "turn": e.num_turns,
                                      "episode": e.episode_id, "entropy": h, "delta": delta,
                                      "draws": draws, "children": children,
                                      "refused": wanted - granted})
        if settings.refill:
            busy = {e.group_id for e in engine.episodes.values() if not e.finished}
            for group, task in enumerate(task_ids):
                if group not in busy and budget_used[group] < settings.max_branches:
                    engine.add_episode(task, group_id=group)
                    budget_used[group] += 1
                    counts["refills"] += 1
            engine.start_queued()
    batch = engine.collect()
    metrics = {
        **tree_group_metrics("arpo", batch, budget_used, len(task_ids)),
        "arpo/branch_points": counts["points"], "arpo/forks": counts["forks"],
        "arpo/refills": counts["refills"], "arpo/refused": counts["refused"],
        "arpo/entropy": float(np.mean(entropies)) if entropies else 0.0,
        "arpo/entropy_delta": float(np.mean(deltas)) if deltas else 0.0,
    }
    return batch, metrics


@STRATEGIES.register("arpo", ArpoConfig)
class Arpo:
    """ARPO's entropy-guided branching after each observation (see the module docstring);
    branches fork on device (copied cache rows, cloned environment)."""

    @staticmethod
    def check_stage(settings: ArpoConfig, stage) -> None:
        """Slots to start every task's M rollouts at once."""
        require_slots(stage, settings.initial_branches * stage.groups_per_step)

    def __init__(self, settings: ArpoConfig, context: RolloutContext):
        self.settings = settings
        self.vocab_size = context.model_config.vocab_size
        self.engine = SlotEngine(context.model_config, context.tokenizer, context.make_env,
                                 context.rollout)

    share_sums = ("arpo/branch_points", "arpo/forks", "arpo/refills", "arpo/refused")

    def sample(self, params, rng: jax.Array, tasks: Sequence[int], step: int, *,
               first_group: int = 0) -> tuple[TrajectoryBatch, dict[str, float]]:
        del step
        batch, metrics = sample_arpo(self.engine, params, share_key(rng, first_group), tasks,
                                     self.settings, self.vocab_size)
        return batch, {**metrics, **self.engine.stats.metrics()}
