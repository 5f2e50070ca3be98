"""PATR's adaptive tree rollout (Alg. 1) and its Tree-Random baseline, on the slot engine.

Process-scorer guided Adaptive Tree Rollout (PATR, §4.1, Alg. 1), for each task:

    1  A <- B0 branches from the prompt; C <- {}
    2  while A is not empty:
    3      advance every branch of A by up to K turns
    4      move the branches that ended (solved, failed, turn limit) from A to C
    5-8    score the rest (s_i in [0, 1], Eq. 3); E = the top-k scores; L = the branches of A \\ E
           with s_i < median_A(s) - alpha (Eq. 5) or whose last Theta actions are one action
    9-10   every branch of E is replaced by M children forked from its state (Eq. 4); L moves to C
    13 return the group C

Here PATR is a controller of the shared tree loop (`jaxtree.rollout.tree`): at every turn
boundary `decide` looks at the view of the forest, and the loop forks, stops and drops. A branch
is a slot-engine episode; a child is a fork: the parent's cache rows are copied on device and its
environment cloned, so the shared prefix is neither re-sent nor re-prefilled. The parent
continues as the first of its M children (its next action is not sampled yet, so it is
distributed exactly like a fresh child), and M - 1 copies are forked. Branches of a task advance
in lockstep, so "every K turns" is every turn count that is a multiple of K.

Choices the paper leaves open, stated:
  * E is the top `expand_top_k` scores of the active set, ties broken by branch age (the older
    episode first); E and L are disjoint (line 8), and L is decided with the median over all of A.
  * The Theta rule counts identical consecutive actions (the environment's action signature;
    all unparseable answers count as one action) at the end of the branch, checked at the
    scoring points.
  * Budget: a tree holds at most `max_branches` branches. An expansion that would exceed it, or
    the engine's free slots, is refused and the branch survives (counted in `patr/refused`); the
    rollout never fails for lack of room. Pruned branches leave their slots before expansions
    are placed (the loop applies stops first).
  * Group construction (§5.3, Table 4): `keep_all` keeps pruned branches in the group as
    negatives (the paper's default); `best_n` drops them, keeping only the branches that ended
    on their own. Group sizes vary in both; group-relative advantages use each group's own rows.
  * Tree-Random (`selection="random"`, §5.1: "the same tree rollout structure as PATR but ...
    random branch allocation"): E is k branches drawn uniformly from A and no branch is pruned by
    score (the Theta rule, which reads no score, still applies).

Tree metadata: each forked row records its parent episode and the turn it forked at
(`parent_ids`, `fork_turns`, `depth`); pruned rows end with `PRUNED`.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Sequence

import jax
import numpy as np

from jaxtree.config import Section, between, one_of, option, positive, require
from jaxtree.rollout.strategies.base import RolloutContext, register_tree_method, require_slots
from jaxtree.rollout.trajectory import TrajectoryBatch
from jaxtree.rollout.tree import (Decision, Expand, ForestView, TreeController, TreeLog,
                                  tree_rollout)
from jaxtree.scorers import SCORERS, Scorer, build_scorer

# PATR §5.1 Implementation Details (FrozenLake).
PAPER_INITIAL_BRANCHES = 4
PAPER_CHILDREN = 2
PAPER_TOP_K = 2
PAPER_INTERVAL = 5            # K = 5 for FrozenLake (13 for SWE-agent training)
PAPER_MARGIN = 0.5
PAPER_REPEAT_LIMIT = 6
SELECTIONS = ("score", "random")
GROUPS = ("keep_all", "best_n")


@dataclasses.dataclass(frozen=True)
class PatrConfig(Section):
    """Config section `rollout.patr` (the scorer's settings: `rollout.patr.<scorer>`)."""

    PARTS = {"scorer": SCORERS}

    initial_branches: int = option(PAPER_INITIAL_BRANCHES, "B0, branches started from each "
                                   "task's prompt (replaces rollout.group_size)",
                                   check=positive())
    children: int = option(PAPER_CHILDREN, "M, children replacing an expanded branch",
                           check=between(2))
    expand_top_k: int = option(PAPER_TOP_K, "branches expanded at each scoring point (the top "
                               "scores)", check=between(0))
    interval: int = option(PAPER_INTERVAL, "K, turns between scoring points", check=positive())
    prune_margin: float = option(PAPER_MARGIN, "alpha of Eq. 5: prune below the median score "
                                 "minus alpha", check=between(0))
    repeat_limit: int = option(PAPER_REPEAT_LIMIT, "Theta: prune a branch whose last Theta "
                               "actions are the same action", check=between(2))
    max_branches: int = option(32, "most branches one task's tree may hold (expansions beyond "
                               "it are refused; the branch survives)", check=positive())
    scorer: str = option("heuristic", "process scorer of the partial trajectories (a "
                         "registered scorer)", check=one_of(SCORERS.names))
    selection: str = option("score", "'score': PATR; 'random': Tree-Random (random expansion, "
                            "no score pruning)", check=one_of(SELECTIONS))
    group: str = option("keep_all", "'keep_all': pruned branches stay in the group; 'best_n': "
                        "they are dropped (PATR Table 4)", check=one_of(GROUPS))

    def check(self):
        super().check()
        require(self.max_branches >= self.initial_branches, "max_branches",
                f"{self.max_branches} is below initial_branches={self.initial_branches}")


def trailing_repeats(actions: Sequence[str]) -> int:
    """How many of the last actions equal the last one (0 for no actions)."""
    count = 0
    for action in reversed(actions):
        if action != actions[-1]:
            break
        count += 1
    return count


def expand_and_prune(scores: Sequence[float], repeats: Sequence[int], settings: PatrConfig,
                     rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Alg. 1 lines 7-8 for one task's active branches, oldest first.

    Args:
      scores: s_i of each active branch (ignored by Tree-Random).
      repeats: identical trailing actions of each branch (`trailing_repeats`).
      settings: k, alpha, Theta and the selection rule.
      rng: draws Tree-Random's expansion set.

    Returns:
      (E, L): indices of the branches to expand (best first; for Tree-Random in draw order) and
      of the branches to prune (ascending), disjoint.
    """
    n = len(scores)
    k = min(settings.expand_top_k, n)
    if settings.selection == "score":
        expand = sorted(range(n), key=lambda i: (-scores[i], i))[:k]
        floor = statistics.median(scores) - settings.prune_margin if n else 0.0
        low = {i for i in range(n) if scores[i] < floor}
    else:
        expand = [int(i) for i in rng.choice(n, size=k, replace=False)] if k else []
        low = set()
    chosen = set(expand)
    prune = [i for i in range(n) if i not in chosen
             and (i in low or repeats[i] >= settings.repeat_limit)]
    return expand, prune


def patr_decide(settings: PatrConfig, view: ForestView, state: None) -> tuple[Decision, None]:
    """PATR's decision at one boundary: at each task's scoring point (its live branches have
    played a positive multiple of K turns), Alg. 1 lines 6-10 on the active branches, oldest
    first. Pruned branches are stopped (Keep-All) or dropped (Best-n)."""
    expand, prune, records = [], [], []
    for group in range(view.num_groups):
        active = sorted((b for b in view.live(group)
                         if b.num_turns > 0 and b.num_turns % settings.interval == 0),
                        key=lambda b: b.episode_id)
        if not active:
            continue
        scores = (view.scores(active) if settings.selection == "score"
                  else np.zeros(len(active)))
        repeats = [trailing_repeats(b.action_signatures) for b in active]
        chosen, low = expand_and_prune(scores, repeats, settings, view.rng)
        expand += [Expand(active[i].episode_id, settings.children - 1) for i in chosen]
        prune += [active[i].episode_id for i in low]
        records.append({
            "group": group, "turn": active[0].num_turns,
            "branches": [b.episode_id for b in active], "scores": list(map(float, scores)),
            "repeats": repeats, "expanded": [active[i].episode_id for i in chosen],
            "pruned": [active[i].episode_id for i in low],
            "pruned_by_repeats": [active[i].episode_id for i in low
                                  if repeats[i] >= settings.repeat_limit]})
    dropped = settings.group == "best_n"
    return Decision(stop=() if dropped else tuple(prune), discard=tuple(prune) if dropped else (),
                    expand=tuple(expand), records=tuple(records)), state


def scoring_points(log: TreeLog) -> list[dict]:
    """Every scoring point of a PATR session (group, turn, branch ids, scores, repeats,
    expanded, pruned and refused ids): the record a test or a tree picture reads."""
    points = []
    for boundary in log.boundaries:
        for record in boundary["records"]:
            refused = [e for e in record["expanded"] if boundary["refused"].get(e)]
            points.append({**record, "refused": refused})
    return points


def patr_metrics(log: TreeLog, batch: TrajectoryBatch, scorer: Scorer) -> dict[str, float]:
    points = scoring_points(log)
    repeat = sum(len(p["pruned_by_repeats"]) for p in points)
    metrics = {
        **log.group_metrics("patr", batch),
        "patr/scoring_points": float(len(points)),
        "patr/expanded": float(sum(len(p["expanded"]) - len(p["refused"]) for p in points)),
        "patr/refused": float(sum(len(p["refused"]) for p in points)),
        "patr/pruned_score": float(sum(len(p["pruned"]) for p in points) - repeat),
        "patr/pruned_repeat": float(repeat),
    }
    # A scorer with its own counts (the HTTP judge's requests, failures and fallbacks since the
    # previous step) reports them with the tree's metrics.
    metrics.update({f"patr/judge_{name}": float(count)
                    for name, count in scorer.metrics().items()})
    return metrics


def patr_controller(settings: PatrConfig, scorer) -> TreeController:
    """PATR (or Tree-Random) as a tree controller scoring with `scorer` (episodes -> scores)."""
    scorer = scorer if isinstance(scorer, Scorer) else Scorer(settings.scorer, scorer)
    return TreeController(
        roots=settings.initial_branches,
        decide=lambda view, state: patr_decide(settings, view, state),
        max_branches=settings.max_branches, scorer=scorer,
        metrics=lambda batch, log: patr_metrics(log, batch, scorer),
        summed_metrics=("patr/scoring_points", "patr/expanded", "patr/refused", "patr/pruned_",
                        "patr/judge_"))


def sample_patr(engine, params, rng: jax.Array, task_ids: Sequence[int], settings: PatrConfig,
                scorer, decisions: list | None = None) -> tuple[TrajectoryBatch, dict]:
    """One PATR tree per task (group g = task_ids[g]) on `engine` (needs num_slots >= B0 x
    tasks); `decisions`, when a list, receives every scoring point (`scoring_points`).

    Returns (the groups' finished branches ordered by episode id, metrics under `patr/`)."""
    controller = patr_controller(settings, scorer)
    batch, log = tree_rollout(engine, params, rng, task_ids, controller)
    if decisions is not None:
        decisions.extend(scoring_points(log))
    return batch, controller.metrics(batch, log)


def _patr_reads(settings: PatrConfig) -> tuple[str, ...]:
    """The repeat rule reads action signatures; the scorer may read more."""
    scorer = SCORERS.part(settings.scorer)
    return ("action_signature",) + scorer.labels_read(settings.part_settings(settings.scorer))


def _check_slots(settings: PatrConfig, stage) -> None:
    """Slots to start every task's B0 branches at once."""
    require_slots(stage, settings.initial_branches * stage.groups_per_step)


@register_tree_method("patr", PatrConfig, reads=_patr_reads, check=_check_slots)
def patr(settings: PatrConfig, context: RolloutContext) -> TreeController:
    """PATR's process-scored adaptive tree over turns (Alg. 1), or Tree-Random with
    `selection='random'`; branches fork on device (copied cache rows, cloned environment)."""
    del context
    return patr_controller(settings, build_scorer(settings.scorer,
                                                  settings.part_settings(settings.scorer)))
