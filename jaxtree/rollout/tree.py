"""One turn loop for every tree-structured rollout: a controller decides, the loop acts.

    batch, log = tree_rollout(engine, params, rng, tasks, controller)

A controller (`TreeController`) is a frozen record of what makes a tree method, mostly pure
functions, the way mctx's `search()` takes its selection functions: how many `roots` each task
starts with, and `decide(view, state) -> (Decision, state)`, called at every turn boundary with
a read-only view of the forest (`ForestView`: every branch's turns, returns, depth, parent, the
per-tree budget used, free slots, a process scorer's scores on demand) and the controller's own
state (None unless it keeps some, like a beam search's ranked beams). The loop owns the rest:
starting roots, playing turns on the slot engine, forking (cache rows copied on device,
environments cloned), refusing what does not fit, stopping and dropping branches, probes, the
tree metadata (parents, fork turns, depth) and the statistics (`TreeLog`).

A boundary, after every turn and once before the first:

  1. `decide(view, state)`; its Decision is applied in this order: `discard` (drop from the batch,
     stopping the branch first if it is live), `stop` (end live branches as PRUNED, kept),
     `expand` (fork copies of live branches; the branch continues as one of its children),
     `add_roots` (new episodes from a task's prompt, within the budget), `labels`
     (strategy-made per-turn labels for a branch's next turn).
  2. If it asked for `probe`s: every live branch waits while `probe_copies` copies of each probed
     branch play ahead (forked in the order given, as slots free up) until they end or have
     played `probe_depth` turns; the copies never reach the batch. `decide` is called again at
     the same boundary with `view.probes` holding what each copy saw, and that decision is
     applied too (it may not probe again).
  3. Every live branch plays one turn. The session ends after a boundary with nothing left to
     play.

Room: an expansion is refused, wholly (or, `partial`, in part) when the engine's free slots or
the tree's budget (`max_branches` started per task) cannot hold it; the branch goes on and the
refusal is counted. A rollout never fails for room, except for roots that do not fit at once
(trees advance in lockstep).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from jaxtree.rollout.labels import MissingLabel
from jaxtree.rollout.trajectory import TrajectoryBatch, TurnRecord


@dataclasses.dataclass(frozen=True)
class Expand:
    """Fork `children` copies of the live branch `branch` (which goes on as one more child);
    `partial`: fork as many as fit rather than none."""

    branch: int
    children: int
    partial: bool = False


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a controller asks of the loop at one boundary (episode ids throughout); `records`
    are free-form notes of the decision (scores, choices) kept in the rollout's log."""

    discard: tuple[int, ...] = ()
    stop: tuple[int, ...] = ()
    expand: tuple[Expand, ...] = ()
    add_roots: tuple[tuple[int, int], ...] = ()       # (group, new episodes of its task)
    labels: tuple[tuple[int, str, Any], ...] = ()     # (branch, label name, value)
    probe: tuple[int, ...] = ()
    records: tuple[dict, ...] = ()


NO_DECISION = Decision()


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What one probe copy saw: its own turns after the fork, the return of its whole episode
    (history included) and how it ended."""

    turns: tuple[TurnRecord, ...]
    returns: float
    end_reason: int


def turn_label(turn: TurnRecord, name: str):
    """Label `name` of a turn; MissingLabel unless the rollout records it (a method that reads
    it declares reads=(name,), and the pipeline's engine then records it)."""
    try:
        return turn.labels[name]
    except KeyError:
        raise MissingLabel(f"a turn carries no {name!r} label: the tree method reads it, so it "
                           f"must declare reads=({name!r},) and its engine record it") from None


class Branch:
    """Read-only view of one branch (an episode of the session)."""

    __slots__ = ("_episode", "root", "born", "ended_step", "live")

    def __init__(self, episode, root: int, born: int, ended_step: int | None, live: bool):
        self._episode = episode
        self.root = root                # episode id of its tree's root
        self.born = born                # the boundary (turns played by the loop) it began at
        self.ended_step = ended_step    # the loop turn it ended in (None: not ended)
        self.live = live                # in a slot, playing (not queued, not ended)

    episode_id = property(lambda self: self._episode.episode_id)
    group = property(lambda self: self._episode.group_id)
    task = property(lambda self: self._episode.task_id)
    parent = property(lambda self: self._episode.parent_id)
    fork_turn = property(lambda self: self._episode.fork_turn)
    depth = property(lambda self: self._episode.depth)
    num_turns = property(lambda self: self._episode.num_turns)
    finished = property(lambda self: self._episode.finished)
    end_reason = property(lambda self: self._episode.end_reason)
    returns = property(lambda self: self._episode.returns)

    @property
    def turns(self) -> tuple[TurnRecord, ...]:
        return tuple(self._episode.turns)

    @property
    def action_signatures(self) -> list:
        """The `action_signature` label of every turn (see `turn_label`)."""
        return [turn_label(turn, "action_signature") for turn in self._episode.turns]

    def __repr__(self) -> str:
        return (f"Branch({self.episode_id}, group={self.group}, turns={self.num_turns}, "
                f"finished={self.finished})")


@dataclasses.dataclass(frozen=True)
class ForestView:
    """Read-only view of a session's forest at one boundary.

    Attributes:
      step: turns the loop has played (0 before the first).
      num_groups: tasks of the session (group g plays tasks[g]).
      branches: every branch still in the session: live ones in the engine's row order, then
        the others (queued, ended) by episode id.
      started: {group: branches started in its tree} (roots, forks, additions: the budget used).
      free_slots: the engine's free slots now.
      rng: the controller's draws (seeded by the rollout key; its state carries over).
      probes: {probed branch: its copies' results, in the order they ended} after a probe
        round of this boundary, else empty.
    """

    step: int
    num_groups: int
    branches: tuple[Branch, ...]
    started: Mapping[int, int]
    free_slots: int
    rng: np.random.Generator
    probes: Mapping[int, tuple[ProbeResult, ...]]
    _score: Callable[[Sequence[Branch]], np.ndarray] | None = None

    def live(self, group: int | None = None) -> tuple[Branch, ...]:
        """The live branches (of `group`), in the engine's row order."""
        return tuple(b for b in self.branches if b.live and (group is None or b.group == group))

    def of_group(self, group: int) -> tuple[Branch, ...]:
        return tuple(b for b in self.branches if b.group == group)

    def scores(self, branches: Sequence[Branch]) -> np.ndarray:
        """float64[len(branches)] process scores in [0, 1] from the rollout's scorer."""
        if self._score is None:
            raise ValueError("this rollout has no process scorer to score branches with")
        return self._score(branches)


@dataclasses.dataclass(frozen=True)
class TreeController:
    """A tree method, as the loop runs it (see the module docstring).

    Attributes:
      roots: episodes started from each task's prompt.
      decide: (view, state) -> (Decision, state), pure but for `view.rng`'s draws.
      init_state: the controller's state before the first boundary.
      max_branches: most branches one task's tree may start (None: no limit).
      probe_copies / probe_depth: copies per probed branch, and the turns they may play (None:
        to the end of their episodes).
      keys_per_group: for a method whose groups are exactly this many roots and nothing else,
        episodes sample with step-wide keys (a share of a step's groups draws what one process
        playing them all would); None: a share's key is folded with its first group.
      queue_roots: roots that do not fit in the slots wait for room (else they must all fit).
      scorer: the process scorer behind `view.scores` (episodes -> float64[n] in [0, 1]; a
        `jaxtree.scorers` scorer), None if the method scores nothing.
      metrics: (batch, log) -> the method's metrics (None: the tree's group shape).
      summed_metrics: prefixes of its metrics that are counts (see `RolloutStrategy`).
    """

    roots: int
    decide: Callable[[ForestView, Any], tuple[Decision, Any]]
    init_state: Any = None
    max_branches: int | None = None
    probe_copies: int = 1
    probe_depth: int | None = None
    keys_per_group: int | None = None
    queue_roots: bool = False
    scorer: Callable[[Sequence[Any]], np.ndarray] | None = None
    metrics: Callable[[TrajectoryBatch, "TreeLog"], dict[str, float]] | None = None
    summed_metrics: tuple[str, ...] = ()


@dataclasses.dataclass
class TreeLog:
    """What a tree session did: per boundary ({"step", "records", "forked", "refused",
    "added"}) the decision's records, the children each expansion forked ({branch: ids}), the
    children refused ({branch: count}) and the roots added ([(group, count)]); counts of the
    whole session."""

    started: dict[int, int]
    boundaries: list[dict] = dataclasses.field(default_factory=list)
    branch_turns: int = 0     # turns played by branches (probe copies aside)
    probe_turns: int = 0      # turns played by probe copies
    probes: int = 0           # probe copies that reported
    stopped: int = 0
    discarded: int = 0

    @property
    def records(self) -> list[dict]:
        return [record for boundary in self.boundaries for record in boundary["records"]]

    @property
    def refused(self) -> int:
        return sum(sum(b["refused"].values()) for b in self.boundaries)

    def group_metrics(self, prefix: str, batch: TrajectoryBatch) -> dict[str, float]:
        """Branches started per task (`<prefix>/branches`, mean) and the smallest and largest
        group the batch holds."""
        sizes = (np.bincount(batch.group_ids, minlength=len(self.started)) if len(batch)
                 else np.zeros(1))
        return {f"{prefix}/branches": float(np.mean(list(self.started.values()))),
                f"{prefix}/group_size_min": float(sizes.min()),
                f"{prefix}/group_size_max": float(sizes.max())}


def share_key(rng: jax.Array, first_group: int) -> jax.Array:
    """A tree controller's key for the share of groups starting at `first_group`: the step's
    key itself for the first share (one process: unchanged), else the key folded with it, so
    the shares of a multi-process step draw independent streams."""
    return rng if first_group == 0 else jax.random.fold_in(rng, first_group)


class _Session:
    """The loop's bookkeeping for one `tree_rollout` call."""

    def __init__(self, engine, tasks: Sequence[int], controller: TreeController, scorer):
        self.engine, self.tasks, self.controller, self.scorer = engine, tasks, controller, scorer
        self.root: dict[int, int] = {}
        self.born: dict[int, int] = {}
        self.ended: dict[int, int] = {}
        self.dropped: set[int] = set()
        self.step = 0
        self.log = TreeLog(started={g: 0 for g in range(len(tasks))})

    def add(self, group: int) -> None:
        episode_id = self.engine.add_episode(self.tasks[group], group_id=group)
        self.root[episode_id], self.born[episode_id] = episode_id, self.step
        self.log.started[group] += 1

    def view(self, rng, probes=None) -> ForestView:
        episodes = self.engine.episodes
        live = [e.episode_id for e in self.engine.live]
        taken = set(live) | self.dropped
        order = live + sorted(e for e in episodes if e not in taken)
        branches = tuple(Branch(episodes[e], self.root[e], self.born[e], self.ended.get(e),
                                i < len(live)) for i, e in enumerate(order))
        score = None
        if self.scorer is not None:
            score = lambda chosen: self.scorer([episodes[b.episode_id] for b in chosen])
        return ForestView(self.step, len(self.tasks), branches, dict(self.log.started),
                          self.engine.free_slots, rng, dict(probes or {}), score)

    def note_ended(self, episode_ids) -> None:
        for e in episode_ids:
            self.ended.setdefault(e, self.step)

    def apply(self, decision: Decision) -> None:
        engine = self.engine
        for e in decision.discard:
            if not engine.episodes[e].finished:
                engine.stop(e)
                self.note_ended([e])
            engine.discard(e)
            self.dropped.add(e)
        self.log.discarded += len(decision.discard)
        for e in decision.stop:
            engine.stop(e)
            self.note_ended([e])
        self.log.stopped += len(decision.stop)
        forked, refused = {}, {}
        budget = self.controller.max_branches
        for ex in decision.expand:
            group = engine.episodes[ex.branch].group_id
            room = engine.free_slots
            if budget is not None:
                room = min(room, budget - self.log.started[group])
            count = min(ex.children, room) if ex.partial else (
                ex.children if ex.children <= room else 0)
            children = engine.fork(ex.branch, count) if count > 0 else []
            for child in children:
                self.root[child], self.born[child] = self.root[ex.branch], self.step
            self.log.started[group] += len(children)
            forked[ex.branch] = forked.get(ex.branch, []) + children
            if count < ex.children:
                refused[ex.branch] = refused.get(ex.branch, 0) + ex.children - max(count, 0)
        for group, count in decision.add_roots:
            if budget is not None:
                count = min(count, budget - self.log.started[group])
            for _ in range(count):
                self.add(group)
        if decision.add_roots:
            engine.start_queued()
        for e, name, value in decision.labels:
            engine.episodes[e].attach_label(name, value)
        self.log.boundaries.append({"step": self.step, "records": list(decision.records),
                                    "forked": forked, "refused": refused,
                                    "added": list(decision.add_roots)})

    def play(self) -> list[int]:
        """One turn of every live branch; the ids of those that ended."""
        playing = {e.episode_id: e.num_turns for e in self.engine.live
                   if e.episode_id not in self.engine.held}
        self.step += 1
        finished = self.engine.play_turn()
        episodes = self.engine.episodes
        self.log.branch_turns += sum(episodes[e].num_turns - n for e, n in playing.items())
        self.note_ended(finished)
        return finished

    def probe(self, order: Sequence[int]) -> dict[int, tuple[ProbeResult, ...]]:
        """Plays the probe copies of `order`'s branches while every live branch waits."""
        engine, copies = self.engine, self.controller.probe_copies
        depth = self.controller.probe_depth
        engine.held = {e.episode_id for e in engine.live}
        waiting, owner, start = collections.deque(order), {}, {}
        results = collections.defaultdict(list)

        def report(copy: int) -> None:
            episode = engine.episodes[copy]
            if not episode.finished:
                engine.stop(copy)
            engine.discard(copy)
            self.dropped.add(copy)
            turns = tuple(episode.turns[start.pop(copy):])
            results[owner.pop(copy)].append(ProbeResult(turns, episode.returns,
                                                        episode.end_reason))
            self.log.probe_turns += len(turns)
            self.log.probes += 1

        while waiting or owner:
            while waiting and engine.free_slots >= copies:
                parent = waiting.popleft()
                for child in engine.fork(parent, copies):
                    owner[child], start[child] = parent, engine.episodes[parent].num_turns
            if not owner:
                raise ValueError(f"rollout.num_slots={engine.rollout.num_slots} cannot hold "
                                 f"{copies} probe copies")
            for copy in engine.play_turn():
                if copy in owner:
                    report(copy)
            if depth is not None:
                for copy in [c for c in owner if
                             engine.episodes[c].num_turns - start[c] >= depth]:
                    report(copy)
        engine.held = set()
        return {parent: tuple(found) for parent, found in results.items()}


def tree_rollout(engine, params, rng: jax.Array, tasks: Sequence[int],
                 controller: TreeController, *, first_group: int = 0
                 ) -> tuple[TrajectoryBatch, TreeLog]:
    """Grows one tree per task (group g = tasks[g]) under `controller` on the slot engine.

    Args:
      engine: a `SlotEngine` (or any object with its session interface: begin, add_episode,
        start_queued, episodes, live, held, has_work, free_slots, play_turn, fork, stop,
        discard, collect).
      params, rng: the policy's parameters and the step's key.
      tasks: the environment seed of each group.
      controller: the tree method.
      first_group: the step-wide index of tasks[0] (a process's share of a step).

    Returns:
      (the batch of every branch not discarded, ordered by episode id; the session's log).
    """
    if controller.keys_per_group is not None:
        engine.begin(params, rng, key_offset=first_group * controller.keys_per_group)
        draws_key = rng
    else:
        draws_key = share_key(rng, first_group)
        engine.begin(params, draws_key)
    draws = np.random.default_rng(np.asarray(jax.random.key_data(draws_key)).ravel().tolist())
    roots = controller.roots * len(tasks)
    if not controller.queue_roots and engine.rollout.num_slots < roots:
        raise ValueError(f"rollout.num_slots={engine.rollout.num_slots} cannot start "
                         f"{controller.roots} branches for each of {len(tasks)} tasks (needs "
                         f"{roots})")
    session = _Session(engine, tasks, controller, controller.scorer)
    for group in range(len(tasks)):
        for _ in range(controller.roots):
            session.add(group)
    engine.start_queued()
    state = controller.init_state
    while True:
        decision, state = controller.decide(session.view(draws), state)
        session.apply(decision)
        if decision.probe:
            results = session.probe(decision.probe)
            decision, state = controller.decide(session.view(draws, results), state)
            if decision.probe:
                raise ValueError("a decision after a probe round asked for probes again")
            session.apply(decision)
        if not engine.has_work:
            break
        session.play()
    return engine.collect(), session.log
