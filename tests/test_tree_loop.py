"""The shared tree loop (jaxtree.rollout.tree): controllers decided on hand-built views without an
engine, the loop's mechanics on a scripted engine, and a new tree method defined here, registered
and trained by config alone."""

import dataclasses
import math

import jax
import numpy as np
import pytest

from jaxtree.config import Section, option, positive
from jaxtree.rollout.episode import Episode
from jaxtree.rollout.strategies import STRATEGIES, register_tree_method
from jaxtree.rollout.strategies.arpo import ArpoConfig, arpo_decide, fork_count, reply_entropy
from jaxtree.rollout.strategies.mc_values import mc_values_decide
from jaxtree.rollout.strategies.patr import (PatrConfig, expand_and_prune, patr_decide,
                                             trailing_repeats)
from jaxtree.rollout.strategies.tsr import BeamConfig, beam_decide
from jaxtree.rollout.trajectory import DONE, PRUNED, TurnRecord
from jaxtree.rollout.tree import (Branch, Decision, Expand, ForestView, ProbeResult,
                                  TreeController, tree_rollout)
from test_patr import ScriptedEngine

# ----------------------------------------------------------------------------- views by hand


def make_branch(episode_id, group=0, moves=(), live=True, parent=-1, root=None, born=0,
                logprobs=None, scores=None):
    """A branch of `moves` (action signatures), each with reward 0.1 and its turn score."""
    episode = Episode(episode_id, task_id=100 + group, group_id=group, parent_id=parent)
    for t, move in enumerate(moves):
        labels = {"action_signature": move}
        if scores is not None:
            labels["turn_score"] = scores[t]
        episode.turns.append(TurnRecord(0.1, True, 1000 * episode_id + t, labels,
                                        None if logprobs is None else logprobs[t]))
    if not live:
        episode.end(DONE)
    return Branch(episode, episode_id if root is None else root, born, None if live else 0, live)


def make_view(branches, step=1, num_groups=1, free_slots=8, started=None, probes=None,
              scores=None, seed=0):
    started = started or {g: sum(b.group == g for b in branches) for g in range(num_groups)}
    score = None if scores is None else (
        lambda chosen: np.array([scores[b.episode_id] for b in chosen]))
    return ForestView(step, num_groups, tuple(branches), started, free_slots,
                      np.random.default_rng(seed), probes or {}, score)


def test_patr_decides_on_a_view_of_its_scoring_point():
    """At turn K the active branches are ranked by score (Alg. 1 lines 6-8): the top k expand
    into M - 1 copies each, the low and the repeating ones are pruned; off the scoring turns
    nothing happens, and Best-n drops what Keep-All stops."""
    settings = PatrConfig(initial_branches=4, children=3, expand_top_k=1, interval=2,
                          prune_margin=0.1, repeat_limit=2)
    moves = {0: ("Up", "Down"), 1: ("Up", "Up"), 2: ("Left", "Down"), 3: ("Down", "Left")}
    scores = {0: 0.5, 1: 0.9, 2: 0.2, 3: 0.55}
    view = make_view([make_branch(e, moves=m) for e, m in moves.items()], scores=scores)
    decision, state = patr_decide(settings, view, None)
    chosen, low = expand_and_prune([scores[e] for e in range(4)],
                                   [trailing_repeats(moves[e]) for e in range(4)], settings,
                                   np.random.default_rng(0))
    assert state is None and chosen == [1] and low == [2]
    assert decision.expand == (Expand(1, 2),) and decision.stop == (2,) and not decision.discard
    record, = decision.records
    assert record["turn"] == 2 and record["pruned_by_repeats"] == []
    best_n = dataclasses.replace(settings, group="best_n")
    assert patr_decide(best_n, view, None)[0].discard == (2,)
    off_turn = make_view([make_branch(e, moves=m[:1]) for e, m in moves.items()], scores=scores)
    assert patr_decide(settings, off_turn, None)[0] == Decision()


def test_arpo_decides_from_the_entropy_of_each_branchs_last_and_first_reply():
    """H of the last reply against H_init of the tree's first one; the draws and the children
    wanted follow fork_count on the same generator, the room each draw sees shrinking with the
    grants before it; a task with no live branch and budget left gets a new root."""
    settings = ArpoConfig(initial_branches=2, max_branches=4, branch_factor=3,
                          branch_probability=0.5, entropy_weight=1.0, entropy_tokens=2)
    vocab = 16
    lp = [np.array([-0.1, -0.2, -5.0], np.float32), np.array([-2.0, -1.0], np.float32)]
    branches = [make_branch(0, moves=("Up", "Up"), logprobs=lp),
                make_branch(1, moves=("Up", "Down"), logprobs=lp[::-1]),
                make_branch(2, group=1, moves=("Up",), live=False)]
    view = make_view(branches, num_groups=2, free_slots=1, started={0: 2, 1: 3}, seed=7)
    decision, _ = arpo_decide(settings, vocab, view, None)
    rng, free, used, expected = np.random.default_rng(7), 1, 2, []
    for b in branches[:2]:
        turns = b.turns
        delta = (reply_entropy(turns[-1].action_logprobs, 2, vocab)
                 - reply_entropy(turns[0].action_logprobs, 2, vocab))
        wanted, _ = fork_count(delta, settings, settings.max_branches - used, rng)
        granted = min(wanted, free)
        free, used = free - granted, used + granted
        if wanted:
            expected.append(Expand(b.episode_id, wanted, partial=True))
    assert decision.expand == tuple(expected)
    assert decision.records[0]["entropy"] == pytest.approx(3.0 / math.log(vocab))
    assert decision.add_roots == ((1, 1),)       # group 1: nothing live, 3 of 4 started


def test_beam_ranks_candidates_keeps_the_best_and_forks_them():
    """Before the first turn every root is forked into M candidates; after a turn each search
    keeps its `beams` best candidates by accumulated turn score (ties to the earlier one),
    drops the others, forks the kept live ones again, and a search without a live beam keeps
    its best final trajectory."""
    settings = BeamConfig(beams=1, branching=3)
    start, state = beam_decide(settings, 1, 1, make_view([make_branch(0)], step=0), None)
    assert start.expand == (Expand(0, 2),) and state.beams == {0: (0,)}
    candidates = [make_branch(0, moves=("a",), scores=[0.2]),
                  make_branch(1, moves=("b",), scores=[0.7], parent=0, root=0, born=0),
                  make_branch(2, moves=("c",), scores=[0.7], parent=0, root=0, born=0)]
    ranked, state = beam_decide(settings, 1, 1, make_view(candidates, step=1), state)
    assert ranked.discard == (0, 2) and ranked.expand == (Expand(1, 2),)
    assert state.beams == {0: (1,)} and ranked.records[0]["scores"] == [0.2, 0.7, 0.7]
    ended = [make_branch(1, moves=("b", "d"), scores=[0.7, 0.0], live=False, parent=0, root=0),
             make_branch(3, moves=("b", "e"), scores=[0.7, 0.4], live=False, parent=1, root=0,
                         born=1)]
    final, state = beam_decide(settings, 1, 1, make_view(ended, step=2), state)
    assert final.discard == (1,) and not final.expand          # 3 is the search's result
    assert final.records[-1] == {"search": 0, "final": [3], "chosen": [3]}


@pytest.mark.parametrize("ranking", ["accumulated", "last"])
def test_lookahead_probes_first_then_ranks_with_the_copies_scores(ranking):
    """Candidates are probed before they are ranked; "accumulated" adds the copy's turn scores
    to the candidate's, "last" ranks by the newest score on the path: the copy's S_{t+D}."""
    settings = BeamConfig(beams=1, branching=2, depth=2, ranking=ranking)
    _, state = beam_decide(settings, 1, 1, make_view([make_branch(0)], step=0), None)
    candidates = [make_branch(0, moves=("a",), scores=[0.5]),
                  make_branch(1, moves=("b",), scores=[0.4], parent=0, root=0, born=0)]
    ask, same = beam_decide(settings, 1, 1, make_view(candidates, step=1), state)
    assert ask == Decision(probe=(0, 1)) and same is state
    seen = lambda *s: ProbeResult(tuple(TurnRecord(0, True, 0, {"turn_score": x}) for x in s),
                                  0.0, DONE)
    probes = {0: (seen(0.0, 0.1),), 1: (seen(0.5, -0.2),)}
    ranked, _ = beam_decide(settings, 1, 1, make_view(candidates, step=1, probes=probes), state)
    if ranking == "accumulated":
        assert ranked.discard == (0,) and ranked.records[0]["scores"] == [0.5 + 0.1, 0.4 + 0.3]
    else:   # the copies' last scores: 0.1 and -0.2 (not 0.5 + 0.1 and 0.4 - 0.2)
        assert ranked.discard == (1,) and ranked.records[0]["scores"] == [0.1, -0.2]


def test_mc_values_probe_every_live_episode_then_label_its_next_turn():
    live = [make_branch(e) for e in (3, 1, 2)]
    ask, _ = mc_values_decide(make_view(live), None)
    assert ask.probe == (2, 1, 3)                 # the last rows first
    probes = {e: (ProbeResult((), float(e), DONE), ProbeResult((), 1.0, DONE))
              for e in (1, 2, 3)}
    labelled, _ = mc_values_decide(make_view(live, probes=probes), None)
    assert labelled.labels == ((3, "mc_value", 2.0), (1, "mc_value", 1.0),
                               (2, "mc_value", 1.5))


# ----------------------------------------------------------------------------- the loop


def run_loop(controller, tasks=(5,), slots=6):
    return tree_rollout(ScriptedEngine(num_slots=slots), None, jax.random.key(0), list(tasks),
                        controller)


def test_the_loop_refuses_what_does_not_fit_and_applies_removals_first():
    """At the first boundary: branch 0 is dropped and 1 stopped (kept, PRUNED), which frees two
    of the 6 slots; then 2 asks for 4 copies where 3 fit under the budget of 7 started (refused
    whole) and 3 for 4 copies partially (3 granted); labels land on the branch's next turn."""
    def decide(view, state):
        if view.step != 1:
            return Decision(), state
        return Decision(discard=(0,), stop=(1,), expand=(Expand(2, 4), Expand(3, 4, True)),
                        labels=((2, "mc_value", 0.25),)), state

    batch, log = run_loop(TreeController(roots=4, decide=decide, max_branches=7), slots=6)
    boundary = log.boundaries[1]
    assert boundary["refused"] == {2: 4, 3: 1} and boundary["forked"] == {2: [], 3: [4, 5, 6]}
    assert log.started == {0: 7} and log.discarded == 1 and log.stopped == 1
    ids = batch.episode_ids.tolist()
    assert sorted(ids) == [1, 2, 3, 4, 5, 6]
    assert batch.end_reason[ids.index(1)] == PRUNED
    assert batch.parent_ids[ids.index(4)] == 3 and batch.fork_turns[ids.index(4)] == 1
    values = batch.label("mc_value")
    assert values[ids.index(2), 1] == 0.25 and np.isnan(values[ids.index(2), 0])
    assert np.isnan(values[ids.index(3)]).all()


def test_probes_play_ahead_while_the_tree_waits_and_never_reach_the_batch():
    """Two copies of each probed branch play at most `depth` turns (the branches sit still), are
    dropped, and the second decision of the boundary sees their own turns and returns."""
    seen = []

    def decide(view, state):
        if view.step == 0 and not view.probes:
            return Decision(probe=(1, 0)), state
        if view.probes:
            seen.append({e: [len(r.turns) for r in results] for e, results in
                         view.probes.items()})
            assert all(b.num_turns == 0 for b in view.live())
        return Decision(), state

    controller = TreeController(roots=2, decide=decide, probe_copies=2, probe_depth=3)
    batch, log = run_loop(controller, slots=6)
    assert sorted(batch.episode_ids.tolist()) == [0, 1]
    assert seen[0].keys() == {0, 1} and all(n <= 3 for runs in seen[0].values() for n in runs)
    assert log.probes == 4 and log.probe_turns == sum(sum(r) for r in seen[0].values())


# ----------------------------------------------------------------------------- a new method


@dataclasses.dataclass(frozen=True)
class FewestRepeatsConfig(Section):
    roots: int = option(2, "branches started from each task's prompt", check=positive())
    max_branches: int = option(4, "most branches a task's tree may start", check=positive())


def fewest_repeats(settings: FewestRepeatsConfig, context) -> TreeController:
    """After every turn, each task's live branch with the fewest identical trailing actions
    (the older on ties) forks one copy, until the budget is spent."""
    def decide(view, state):
        expand = []
        for group in range(view.num_groups):
            live = view.live(group)
            if live and view.step > 0:
                pick = min(live, key=lambda b: (trailing_repeats(b.action_signatures),
                                                b.episode_id))
                expand.append(Expand(pick.episode_id, 1))
        return Decision(expand=tuple(expand), records=({"expand": expand},)), state

    return TreeController(roots=settings.roots, decide=decide,
                          max_branches=settings.max_branches)


@pytest.fixture
def registered_fewest_repeats():
    register_tree_method("fewest_repeats", FewestRepeatsConfig,
                         reads=("action_signature",))(fewest_repeats)
    yield
    STRATEGIES.unregister("fewest_repeats")


def test_a_tree_method_defined_outside_the_library_trains_by_config(registered_fewest_repeats,
                                                                    tmp_path):
    """The controller above, registered from this file, is selected and configured by
    `rollout.strategy` / `rollout.fewest_repeats.*` alone and trains; its trees fork."""
    from jaxtree.train import jobs
    from jaxtree.train.metrics import read_metrics
    from toy_run import one_layer_policy, toy_config
    config = toy_config(steps=2, model__name=one_layer_policy(str(tmp_path / "model")),
                        rollout__strategy="fewest_repeats", eval__every=2,
                        rollout__fewest_repeats={"roots": 2, "max_branches": 3},
                        rollout__num_slots=8)
    result = jobs.train_job(config, str(tmp_path))
    assert result["step"] == 2
    records = read_metrics(str(tmp_path))
    assert records[1]["fewest_repeats/branches"] == 3.0     # 2 roots + 1 fork per task
    assert records[1]["fewest_repeats/group_size_max"] == 3.0
    assert all(r["train/skipped"] == 0 for r in records[1:])
