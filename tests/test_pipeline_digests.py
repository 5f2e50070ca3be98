"""Every registered rollout strategy and advantage computes what it computed before the
pipeline's redesign: 2-step toy runs compared, metric by metric and parameter by parameter, with
recorded digests (tests/data/pipeline_digests.json; tests/pipeline_digests.py says how they were
recorded: first by the code before the redesign, which the code after it reproduced exactly),
bit for bit on the recording machine and within float rounding on any other."""

import pytest

from pipeline_digests import (CASES, case_reads, differences, load_digests, machine, run_case,
                              warm_starts)


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    return warm_starts(str(tmp_path_factory.mktemp("warm_starts")))


@pytest.fixture(scope="module")
def digests():
    return load_digests()


def test_every_strategy_and_advantage_is_covered(digests):
    from jaxtree.advantages import ADVANTAGES
    from jaxtree.rollout.strategies import STRATEGIES
    from pipeline_digests import case_config
    covered = {"strategy": set(), "advantage": set()}
    for name in CASES:
        config = case_config(name, {"frozen_lake": "tiny", "countdown": "tiny"})
        covered["strategy"].add(config.rollout.strategy)
        covered["advantage"].add(config.advantage.name)
    assert covered["strategy"] == set(STRATEGIES.names())
    assert covered["advantage"] == set(ADVANTAGES.names())
    assert set(digests["cases"]) == set(CASES)
    # the cases' updates differ (a warm start too weak for any legal move leaves most cases'
    # advantages zero, and cases that sample alike then end at the same parameters)
    assert len({digest["params"] for digest in digests["cases"].values()}) == len(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_the_first_steps_are_those_recorded(name, warm_start, digests, tmp_path):
    fresh = run_case(name, warm_start, str(tmp_path))
    exact = digests["machine"] == machine()
    assert differences(digests["cases"][name], fresh, case_reads(name, warm_start), exact) == []


def test_another_machine_is_held_to_float_rounding_and_no_more(digests):
    """Off the recording machine a digest matches within float rounding: a run that differs by
    rounding passes, one whose loss, counts or parameter update moved does not."""
    stored = digests["cases"]["independent_grpo"]
    assert differences(stored, stored, exact=True) == []
    assert digests["machine"].keys() == machine().keys()

    def changed(metric=None, factor=1.0, update_factor=1.0):
        fresh = {"metrics": [dict(r) for r in stored["metrics"]], "params": "another machine's",
                 "update_norms": {k: v * update_factor for k, v in stored["update_norms"].items()}}
        if metric:
            step = next(r for r in fresh["metrics"] if metric in r)
            step[metric] = step[metric] * factor
        return fresh

    rounding = changed("train/grad_norm", 1 + 2e-5, update_factor=1 + 2e-5)
    assert differences(stored, rounding, exact=False) == []
    assert differences(stored, rounding, exact=True) == [
        f"step 1: train/grad_norm {rounding['metrics'][1]['train/grad_norm']!r}, "
        f"stored {stored['metrics'][1]['train/grad_norm']!r}", "final parameters differ"]
    assert len(differences(stored, changed("train/loss", 1.01), exact=False)) == 1
    assert len(differences(stored, changed("rollout/episodes", 2), exact=False)) == 1
    assert len(differences(stored, changed(update_factor=1.001), exact=False)) == len(
        stored["update_norms"])
