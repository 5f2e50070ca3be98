"""TSR's trajectory-search rollouts (§3): best-of-N, per-turn beam search and shallow lookahead.

Trajectory-Search Rollouts choose each group's trajectories by search before training; the loss
and the advantages do not change (TSR Alg. 1; instance filtering is the `filter` stage).

Best-of-N (Eq. 4): N complete trajectories per task, independently sampled; the L = group_size
with the highest return R(tau) form the group (ties: the earlier episode), the others are
discarded (never in the batch).

Per-turn beam search (Eq. 5): a search keeps B partial trajectories (beams). Every turn each live
beam is forked into M candidates (the beam itself continues as the first: its next action is not
sampled yet, and M - 1 copies are forked on device), every candidate plays one action, and the
top B candidates by score stay: S accumulated over the trajectory's turns, S(tau_<t, a_t, o_t) =
the environment's `turn_score` of the action in the state it was taken in (the reward a clone
receives, or a task heuristic such as FrozenLake's risk-aware distance). Candidates that ended
(solved, failed, turn limit) compete like the others and, when kept, are final; the search ends
when no kept candidate is live, and its best final trajectory is the one it yields.

Shallow lookahead: beam search whose candidates are ranked after a D-step continuation. Each live
candidate is forked once more and the copy plays up to D further turns (the candidates sit these
turns out); the candidate's score adds the copy's turn scores, and the copy is discarded.

How a group gets L trajectories (the paper leaves it open): `per_group="searches"` (default) runs
L independent searches per task and keeps each one's best trajectory, so the group is L
search results (B x M candidates per search and turn); `per_group="top_of_one"` runs one search
per task with max(B, L) beams and keeps its L best final trajectories (cheaper; the trajectories
share more prefixes).

Ranking: `ranking="accumulated"` (default) sums S over the trajectory's turns (a lookahead
candidate's with its copy's); `"last"` uses the newest turn's S only (a lookahead candidate's:
the copy's last, S_{t+D}). Ties go to the earlier candidate.

All three are controllers of the shared tree loop (`jaxtree.rollout.tree`): best-of-N drops the
losers once a task's N episodes have ended; beam search keeps its ranked beams as the
controller's state, forks candidates, probes them (lookahead) and drops the losers.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax

from jaxtree.config import Section, between, one_of, option, positive, require
from jaxtree.rollout.strategies.base import RolloutContext, register_tree_method, require_slots
from jaxtree.rollout.trajectory import TrajectoryBatch
from jaxtree.rollout.tree import (Branch, Decision, Expand, ForestView, TreeController, TreeLog,
                                  tree_rollout, turn_label)

# TSR §4.2 (N = 28 -> L = 16, M = 4, B = 2, D = 2).
PAPER_CANDIDATES = 28
PAPER_BRANCHING = 4
PAPER_BEAMS = 2
PAPER_DEPTH = 2
PER_GROUP = ("searches", "top_of_one")
RANKINGS = ("accumulated", "last")


@dataclasses.dataclass(frozen=True)
class BestOfNConfig(Section):
    """Config section `rollout.best_of_n`."""

    candidates: int = option(PAPER_CANDIDATES, "N, complete trajectories sampled per task (the "
                             "top rollout.group_size by return are kept)", check=positive())


@dataclasses.dataclass(frozen=True)
class BeamConfig(Section):
    """Config section `rollout.beam` (and `rollout.lookahead`, with depth)."""

    beams: int = option(PAPER_BEAMS, "B, partial trajectories a search keeps", check=positive())
    branching: int = option(PAPER_BRANCHING, "M, candidate actions sampled per beam and turn",
                            check=between(2))
    depth: int = option(0, "D, turns a candidate's discarded copy plays before it is ranked (0: "
                        "plain beam search)", check=between(0))
    per_group: str = option("searches", "'searches': group_size searches per task, each "
                            "yielding its best; 'top_of_one': one search per task yielding its "
                            "group_size best", check=one_of(PER_GROUP))
    ranking: str = option("accumulated", "rank by the sum of the turn scores or by the newest "
                          "one", check=one_of(RANKINGS))


@dataclasses.dataclass(frozen=True)
class LookaheadConfig(BeamConfig):
    """Config section `rollout.lookahead`: beam search ranked after a D-step lookahead."""

    depth: int = option(PAPER_DEPTH, "D, turns a candidate's discarded copy plays before it is "
                        "ranked", check=positive())


def top_indices(scores: Sequence[float], count: int) -> list[int]:
    """Indices of the `count` highest scores, best first, ties to the lower index."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:count]


# ----------------------------------------------------------------------------- best-of-N

def best_of_n_decide(group_size: int, view: ForestView, state: None) -> tuple[Decision, None]:
    """Once every episode of a task has ended, the `group_size` best by return stay (Eq. 4;
    ties: the earlier episode) and the others are dropped."""
    discard = []
    for group in range(view.num_groups):
        episodes = sorted(view.of_group(group), key=lambda b: b.episode_id)
        if len(episodes) > group_size and all(b.finished for b in episodes):
            kept = set(top_indices([b.returns for b in episodes], group_size))
            discard += [b.episode_id for i, b in enumerate(episodes) if i not in kept]
    return Decision(discard=tuple(discard)), state


def best_of_n_controller(group_size: int, candidates: int) -> TreeController:
    """N independent episodes per task (keyed step-wide), the `group_size` best kept."""
    if candidates < group_size:
        raise ValueError(f"best_of_n.candidates={candidates} is below the group size "
                         f"{group_size}")
    return TreeController(
        roots=candidates,
        decide=lambda view, state: best_of_n_decide(group_size, view, state),
        keys_per_group=candidates, queue_roots=True,
        metrics=lambda batch, log: {"tsr/candidates": float(sum(log.started.values()))},
        summed_metrics=("tsr/",))


def sample_best_of_n(engine, params, rng: jax.Array, task_ids: Sequence[int], group_size: int,
                     candidates: int, first_group: int = 0) -> tuple[TrajectoryBatch, dict]:
    """N episodes per task, the `group_size` with the highest return kept (Eq. 4); candidate j
    of group g samples with the keys of episode (first_group + g) x N + j."""
    controller = best_of_n_controller(group_size, candidates)
    batch, log = tree_rollout(engine, params, rng, task_ids, controller,
                              first_group=first_group)
    return batch, controller.metrics(batch, log)


# ----------------------------------------------------------------------------- beam search

def ranked_score(turns, ranking: str) -> float:
    """The turns' scores (the `turn_score` label) summed ("accumulated") or the newest one
    ("last"); 0 for no turns."""
    if not turns:
        return 0.0
    scores = [turn_label(turn, "turn_score") for turn in turns]
    return float(sum(scores) if ranking == "accumulated" else scores[-1])


def candidate_score(turns, probes, ranking: str) -> float:
    """A candidate's rank: "accumulated" sums its turn scores and those of its lookahead copy's
    turns; "last" takes the newest score along the candidate's path, its copy's last turn when
    the copy played (S_{t+D}), else its own (S_t)."""
    if ranking == "accumulated":
        return ranked_score(turns, ranking) + sum(ranked_score(p.turns, ranking) for p in probes)
    ahead = [p.turns for p in probes if p.turns]
    return ranked_score(ahead[-1] if ahead else turns, "last")


@dataclasses.dataclass(frozen=True)
class BeamState:
    """A beam search's memory between boundaries, per search (its root's episode id): the live
    beams it kept, best first, and its ended kept candidates in the order they were kept."""

    beams: dict[int, tuple[int, ...]]
    final: dict[int, tuple[int, ...]]


def _candidates(view: ForestView, state: BeamState) -> dict[int, list[Branch]]:
    """Each search's candidates: each kept beam (best first) followed by the copies it forked
    at the previous boundary."""
    by_id = {b.episode_id: b for b in view.branches}
    children: dict[int, list[Branch]] = {}
    for b in view.branches:
        if b.born == view.step - 1 and b.parent in by_id:
            children.setdefault(b.parent, []).append(b)
    return {search: [c for beam in beams for c in [by_id[beam]] + sorted(
                children.get(beam, []), key=lambda b: b.episode_id)]
            for search, beams in state.beams.items()}


def beam_decide(settings: BeamConfig, width: int, keep: int, view: ForestView,
                state: BeamState | None) -> tuple[Decision, BeamState]:
    """One boundary of the searches: probe the live candidates (lookahead), then rank each
    search's candidates by score (+ lookahead score), drop those not kept, choose the final
    trajectories of a search with no live beam left, and fork the kept live beams into M
    candidates each for the next turn."""
    if state is None:   # before the first turn: every search is its root
        roots = sorted(b.episode_id for b in view.branches)
        state = BeamState({r: (r,) for r in roots}, {r: () for r in roots})
    candidates = _candidates(view, state) if view.step > 0 else {
        search: [b for b in view.branches if b.episode_id == search] for search in state.beams}
    if view.step > 0 and settings.depth and not view.probes:
        live = [c.episode_id for ids in candidates.values() for c in ids if not c.finished]
        if live:
            return Decision(probe=tuple(live)), state
    discard, records, beams, final = [], [], {}, dict(state.final)
    for search, ids in candidates.items():
        if not ids:        # a search that has ended
            continue
        if view.step > 0:
            scores = [candidate_score(c.turns, view.probes.get(c.episode_id, ()),
                                      settings.ranking) for c in ids]
            kept = [ids[i] for i in top_indices(scores, width)]
            records.append({"search": search, "turn": ids[0].num_turns,
                            "candidates": [c.episode_id for c in ids], "scores": scores,
                            "kept": [c.episode_id for c in kept]})
            discard += [c.episode_id for c in ids if c not in kept]
            final[search] += tuple(c.episode_id for c in kept if c.finished)
            ids = kept
        beams[search] = tuple(c.episode_id for c in ids if not c.finished)
        if not beams[search] and final[search]:
            by_id = {b.episode_id: b for b in view.branches}
            ended = final[search]
            scores = [ranked_score(by_id[e].turns, settings.ranking) for e in ended]
            chosen = [ended[i] for i in top_indices(scores, keep)]
            records.append({"search": search, "final": list(ended), "chosen": chosen})
            discard += [e for e in ended if e not in chosen]
            final[search] = ()
    expand = tuple(Expand(beam, settings.branching - 1)
                   for live in beams.values() for beam in live)
    return (Decision(discard=tuple(discard), expand=expand, records=tuple(records)),
            BeamState(beams, final))


def beam_metrics(log: TreeLog) -> dict[str, float]:
    return {"tsr/candidates": float(sum(len(r["candidates"]) for r in log.records
                                        if "candidates" in r)),
            "tsr/lookahead_turns": float(log.probe_turns)}


def beam_controller(settings: BeamConfig, group_size: int) -> TreeController:
    """Beam searches (lookahead searches with depth > 0) per the module docstring."""
    searches = group_size if settings.per_group == "searches" else 1
    width = settings.beams if settings.per_group == "searches" else max(settings.beams,
                                                                         group_size)
    keep = 1 if settings.per_group == "searches" else group_size
    return TreeController(
        roots=searches,
        decide=lambda view, state: beam_decide(settings, width, keep, view, state),
        probe_copies=1, probe_depth=settings.depth or None,
        metrics=lambda batch, log: beam_metrics(log), summed_metrics=("tsr/",))


def sample_beam(engine, params, rng: jax.Array, task_ids: Sequence[int], group_size: int,
                settings: BeamConfig, log: list | None = None) -> tuple[TrajectoryBatch, dict]:
    """Beam searches (or lookahead searches, depth > 0) for every task; see the module
    docstring. `engine` records the `turn_score` label. `log`, when a list, receives every
    ranking (search, turn, candidate ids, their scores, kept ids) and every search's result
    ({"search", "final": ids, "chosen": ids}).

    Returns (the chosen trajectories, group g = task_ids[g], ordered by episode id; metrics
    under `tsr/`)."""
    controller = beam_controller(settings, group_size)
    batch, tree_log = tree_rollout(engine, params, rng, task_ids, controller)
    if log is not None:
        log.extend(tree_log.records)
    return batch, controller.metrics(batch, tree_log)


# ----------------------------------------------------------------------------- registration

def _check_best_of_n(settings: BestOfNConfig, stage) -> None:
    """N must cover the group (episodes queue, so any number of slots will do)."""
    require(settings.candidates >= stage.group_size, "rollout.best_of_n.candidates",
            f"{settings.candidates} is below rollout.group_size={stage.group_size}")


def _check_search_slots(settings: BeamConfig, stage) -> None:
    """Slots for every search's candidates at once, plus a lookahead copy of each."""
    if settings.per_group == "searches":
        live = stage.group_size * settings.beams * settings.branching
    else:
        live = max(settings.beams, stage.group_size) * settings.branching
    require_slots(stage, stage.groups_per_step * live * (2 if settings.depth else 1))


@register_tree_method("best_of_n", BestOfNConfig, check=_check_best_of_n)
def best_of_n(settings: BestOfNConfig, context: RolloutContext) -> TreeController:
    """TSR best-of-N: N complete episodes per task, the group_size best by return kept."""
    return best_of_n_controller(context.group_size, settings.candidates)


@register_tree_method("beam", BeamConfig, reads=("turn_score",), check=_check_search_slots)
def beam(settings: BeamConfig, context: RolloutContext) -> TreeController:
    """TSR per-turn beam search: B beams x M candidates per turn, ranked by turn scores."""
    return beam_controller(settings, context.group_size)


@register_tree_method("lookahead", LookaheadConfig, reads=("turn_score",),
                      check=_check_search_slots)
def lookahead(settings: LookaheadConfig, context: RolloutContext) -> TreeController:
    """TSR shallow lookahead: beam search whose candidates are ranked after a D-step
    continuation on a discarded copy."""
    return beam_controller(settings, context.group_size)
