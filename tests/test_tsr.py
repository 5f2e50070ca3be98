"""TSR's search rollouts: best-of-N keeps the best returns; beam and lookahead keep what an
exhaustive ranking of the same candidates keeps, yield each search's best, and never let a
discarded candidate or lookahead copy into the batch."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest

import environments
from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment, default_config, set_path
from jaxtree.rollout import RolloutConfig, SlotEngine
from jaxtree.rollout.strategies.tsr import (BeamConfig, sample_beam, sample_best_of_n,
                                            top_indices)
from jaxtree.rollout.trajectory import DONE, TRUNCATED
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.tokenizers import ByteTokenizer

TOK = ByteTokenizer()


def exhaustive_best(scores, count):
    """The size-`count` subset with the largest sorted scores, earliest indices on ties: every
    subset compared, as a search over the same candidates would."""
    best = None
    for subset in itertools.combinations(range(len(scores)), min(count, len(scores))):
        key = (sorted((scores[i] for i in subset), reverse=True), [-i for i in subset])
        if best is None or key > best[0]:
            best = (key, subset)
    return set(best[1])


def test_top_indices_equals_an_exhaustive_search():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 7))
        scores = list(rng.integers(-2, 3, n) / 2.0)  # ties are common
        k = int(rng.integers(1, n + 1))
        got = top_indices(scores, k)
        assert set(got) == exhaustive_best(scores, k), (scores, k)
        assert [scores[i] for i in got] == sorted((scores[i] for i in got), reverse=True)


@pytest.fixture(scope="module")
def engine(tiny):
    config, _ = tiny
    # tests/test_rollout.py's engine shapes (shared compilations); 16 slots hold the searches.
    return SlotEngine(config, TOK, lambda: environments.make("frozen_lake", style="compact"),
                      RolloutConfig(num_slots=16, context_length=256, max_action_tokens=6,
                                    max_turns=4), TurnLabeler(("turn_score",)))


def test_best_of_n_keeps_the_highest_returns(tiny, engine):
    _, params = tiny
    batch, metrics = sample_best_of_n(engine, params, jax.random.key(0), [3, 8], group_size=2,
                                      candidates=5)
    assert np.bincount(batch.group_ids).tolist() == [2, 2]
    assert metrics["tsr/candidates"] == 10
    # the same seed without selection: the same 5 episodes per task, by episode id
    engine.begin(params, jax.random.key(0))
    for g, task in enumerate([3, 8]):
        for _ in range(5):
            engine.add_episode(task, group_id=g)
    engine.run()
    everything = engine.collect()
    for g in range(2):
        rows = np.flatnonzero(everything.group_ids == g)
        returns = everything.outcome_reward[rows]
        kept = sorted(everything.episode_ids[rows[i]] for i in top_indices(list(returns), 2))
        assert sorted(batch.episode_ids[batch.group_ids == g]) == kept
    assert not engine.records and not engine.slots


@pytest.mark.parametrize("depth,per_group", [(0, "searches"), (1, "top_of_one")])
def test_search_keeps_the_exhaustive_top_and_yields_each_searchs_best(tiny, engine, depth,
                                                                      per_group):
    _, params = tiny
    settings = BeamConfig(beams=2, branching=2, depth=depth, per_group=per_group)
    log = []
    batch, metrics = sample_beam(engine, params, jax.random.key(1), [2, 6], 2, settings, log)
    rankings = [r for r in log if "kept" in r]
    results = [r for r in log if "chosen" in r]
    width = 2
    for r in rankings:
        scores = r["scores"]
        assert set(r["kept"]) == {r["candidates"][i] for i in exhaustive_best(scores, width)}
    # every row of the batch is a chosen search result; nothing else got in
    chosen = sorted(e for r in results for e in r["chosen"])
    assert sorted(batch.episode_ids.tolist()) == chosen
    assert np.bincount(batch.group_ids).tolist() == [2, 2]
    assert set(batch.end_reason.tolist()) <= {DONE, TRUNCATED}
    assert np.isfinite(batch.labels["turn_score"][batch.played]).all()
    for r in results:
        final_scores = {}
        for i in np.flatnonzero(np.isin(batch.episode_ids, r["chosen"])):
            final_scores[int(batch.episode_ids[i])] = float(
                batch.labels["turn_score"][i, :batch.num_turns[i]].sum())
        # a chosen trajectory's ranking score is the sum of its recorded turn scores
        for e, score in final_scores.items():
            last = [x for x in rankings if e in x["kept"]][-1]
            if depth == 0:
                assert last["scores"][last["candidates"].index(e)] == pytest.approx(score)
    if depth:
        assert metrics["tsr/lookahead_turns"] > 0
    assert not engine.records and not engine.slots and not engine.held


def test_search_settings_are_checked_at_launch():
    from jaxtree.train.pipeline import check_experiment
    config = default_config()
    set_path(config, "rollout.strategy", "best_of_n")
    set_path(config, "rollout.best_of_n.candidates", 4)
    with pytest.raises(ConfigError, match=r"rollout\.best_of_n\.candidates: 4 is below "
                       r"rollout\.group_size=8"):
        check_experiment(Experiment.from_config(config))
    set_path(config, "rollout.strategy", "lookahead")
    set_path(config, "rollout.num_slots", 64)
    # 8 tasks x 8 searches x 2 beams x 4 candidates, twice for the lookahead copies
    with pytest.raises(ConfigError, match=r"rollout\.num_slots: 64 is too few .* at least 1024"):
        check_experiment(Experiment.from_config(config))
