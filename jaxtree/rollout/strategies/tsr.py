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

Ranking: `ranking="accumulated"` (default) sums S over the trajectory's turns; `"last"` uses the
newest turn's S only. Ties go to the earlier candidate.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Sequence

import jax

from jaxtree.config import Section, between, one_of, option, positive, require
from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.strategies.base import (STRATEGIES, RolloutContext, require_slots,
                                             share_key)
from jaxtree.rollout.trajectory import TrajectoryBatch

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


def _returns(engine: SlotEngine, episode_id: int) -> float:
    return float(sum(t.reward for t in engine.episodes[episode_id].turns))


def sample_best_of_n(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
                     group_size: int, candidates: int,
                     first_group: int = 0) -> tuple[TrajectoryBatch, dict]:
    """N episodes per task, the `group_size` with the highest return kept (Eq. 4); candidate j
    of group g samples with the keys of episode (first_group + g) x N + j."""
    if candidates < group_size:
        raise ValueError(f"best_of_n.candidates={candidates} is below the group size "
                         f"{group_size}")
    engine.begin(params, rng, key_offset=first_group * candidates)
    groups = [[engine.add_episode(task, group_id=g) for _ in range(candidates)]
              for g, task in enumerate(task_ids)]
    engine.run()
    for episodes in groups:
        kept = set(top_indices([_returns(engine, e) for e in episodes], group_size))
        for i, e in enumerate(episodes):
            if i not in kept:
                engine.discard(e)
    return engine.collect(), {"tsr/candidates": float(candidates * len(task_ids))}


def _ranked_score(turns, ranking: str) -> float:
    """The turns' scores summed ("accumulated") or the newest one ("last"); 0 for no turns."""
    if not turns:
        return 0.0
    return float(sum(t.turn_score for t in turns) if ranking == "accumulated"
                 else turns[-1].turn_score)


def _score(engine: SlotEngine, episode_id: int, ranking: str) -> float:
    return _ranked_score(engine.episodes[episode_id].turns, ranking)


def _remove(engine: SlotEngine, episode_id: int) -> None:
    """Takes a candidate out of the rollout: stops it if live, then drops its record."""
    if not engine.episodes[episode_id].finished:
        engine.stop(episode_id)
    engine.discard(episode_id)


def sample_beam(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
                group_size: int, settings: BeamConfig, log: list | None = None
                ) -> tuple[TrajectoryBatch, dict]:
    """Beam searches (or lookahead searches, depth > 0) for every task; see the module docstring.

    Args:
      log: when a list, every ranking is appended as a dict (search, turn, candidate ids, their
        scores, kept ids), and every search's result as {"search", "final": ids, "chosen": ids}.

    Returns:
      (the chosen trajectories, group g = task_ids[g], ordered by episode id; metrics under
      `tsr/`).
    """
    searches_per_task = group_size if settings.per_group == "searches" else 1
    width = settings.beams if settings.per_group == "searches" else max(settings.beams,
                                                                         group_size)
    keep_per_search = 1 if settings.per_group == "searches" else group_size
    engine.begin(params, rng)
    engine.score_turns = True
    beams: dict[int, list[int]] = {}                    # search -> live beam ids
    final: dict[int, list[int]] = defaultdict(list)     # search -> ended kept candidates
    search_group = {}
    for g, task in enumerate(task_ids):
        for _ in range(searches_per_task):
            search = len(search_group)
            search_group[search] = g
            beams[search] = [engine.add_episode(task, group_id=g)]
    engine.start_queued()
    counts = defaultdict(float)
    while any(beams.values()):
        candidates: dict[int, list[int]] = {}
        for search, live in beams.items():
            candidates[search] = []
            for beam in live:
                extra = settings.branching - 1
                if engine.free_slots < extra:
                    raise ValueError(
                        f"rollout.num_slots={engine.rollout.num_slots} cannot hold the "
                        f"candidates: {len(task_ids)} tasks x {searches_per_task} searches x "
                        f"{width} beams x {settings.branching} candidates (+ lookahead copies)")
                candidates[search] += [beam] + engine.fork(beam, extra)
        engine.play_turn()
        counts["candidates"] += sum(len(c) for c in candidates.values())
        lookahead_scores = _look_ahead(engine, candidates, settings, counts)
        beams = {}
        for search, ids in candidates.items():
            scores = [_score(engine, e, settings.ranking) + lookahead_scores.get(e, 0.0)
                      for e in ids]
            kept = [ids[i] for i in top_indices(scores, width)]
            if log is not None:
                log.append({"search": search, "turn": engine.episodes[ids[0]].num_turns,
                            "candidates": list(ids), "scores": scores, "kept": kept})
            for e in ids:
                if e not in kept:
                    _remove(engine, e)
            final[search] += [e for e in kept if engine.episodes[e].finished]
            beams[search] = [e for e in kept if not engine.episodes[e].finished]
    for search, ended in final.items():
        scores = [_score(engine, e, settings.ranking) for e in ended]
        chosen = [ended[i] for i in top_indices(scores, keep_per_search)]
        if log is not None:
            log.append({"search": search, "final": list(ended), "chosen": chosen})
        for e in ended:
            if e not in chosen:
                engine.discard(e)
    engine.score_turns = False
    return engine.collect(), {"tsr/candidates": counts["candidates"],
                              "tsr/lookahead_turns": counts["lookahead_turns"]}


def _look_ahead(engine: SlotEngine, candidates: dict[int, list[int]], settings: BeamConfig,
                counts) -> dict[int, float]:
    """Each live candidate's lookahead score: the turn scores of a copy that plays up to
    `depth` more turns while the candidates sit out; the copies are discarded."""
    if settings.depth == 0:
        return {}
    live = [e for ids in candidates.values() for e in ids if not engine.episodes[e].finished]
    if engine.free_slots < len(live):
        raise ValueError(f"rollout.num_slots={engine.rollout.num_slots} cannot hold a lookahead "
                         f"copy of each of {len(live)} candidates")
    copy_of = {engine.fork(e, 1)[0]: e for e in live}
    start = {c: engine.episodes[c].num_turns for c in copy_of}
    engine.held = set(live)
    for _ in range(settings.depth):
        if all(engine.episodes[c].finished for c in copy_of):
            break
        engine.play_turn()
    engine.held = set()
    scores = {}
    for copy, candidate in copy_of.items():
        turns = engine.episodes[copy].turns[start[copy]:]
        counts["lookahead_turns"] += len(turns)
        scores[candidate] = _ranked_score(turns, settings.ranking)
        _remove(engine, copy)
    return scores


@STRATEGIES.register("best_of_n", BestOfNConfig)
class BestOfN:
    """TSR best-of-N: N complete episodes per task, the group_size best by return kept."""

    @staticmethod
    def check_stage(settings: BestOfNConfig, stage) -> None:
        """N must cover the group (episodes queue, so any number of slots will do)."""
        require(settings.candidates >= stage.group_size, "rollout.best_of_n.candidates",
                f"{settings.candidates} is below rollout.group_size={stage.group_size}")

    def __init__(self, settings: BestOfNConfig, context: RolloutContext):
        self.settings = settings
        self.group_size = context.group_size
        self.engine = SlotEngine(context.model_config, context.tokenizer, context.make_env,
                                 context.rollout)

    share_sums = ("tsr/",)

    def sample(self, params, rng, tasks, step, *, first_group: int = 0):
        del step
        batch, metrics = sample_best_of_n(self.engine, params, rng, tasks, self.group_size,
                                          self.settings.candidates, first_group)
        return batch, {**metrics, **self.engine.stats.metrics()}


class _Search:
    def __init__(self, settings: BeamConfig, context: RolloutContext):
        self.settings = settings
        self.group_size = context.group_size
        self.engine = SlotEngine(context.model_config, context.tokenizer, context.make_env,
                                 context.rollout)

    @staticmethod
    def check_stage(settings: BeamConfig, stage) -> None:
        """Slots for every search's candidates at once, plus a lookahead copy of each."""
        if settings.per_group == "searches":
            live = stage.group_size * settings.beams * settings.branching
        else:
            live = max(settings.beams, stage.group_size) * settings.branching
        require_slots(stage, stage.groups_per_step * live * (2 if settings.depth else 1))

    share_sums = ("tsr/",)

    def sample(self, params, rng, tasks, step, *, first_group: int = 0):
        del step
        batch, metrics = sample_beam(self.engine, params, share_key(rng, first_group), tasks,
                                     self.group_size, self.settings)
        return batch, {**metrics, **self.engine.stats.metrics()}


@STRATEGIES.register("beam", BeamConfig)
class Beam(_Search):
    """TSR per-turn beam search: B beams x M candidates per turn, ranked by turn scores."""


@STRATEGIES.register("lookahead", LookaheadConfig)
class Lookahead(_Search):
    """TSR shallow lookahead: beam search whose candidates are ranked after a D-step
    continuation on a discarded copy."""
