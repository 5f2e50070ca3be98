"""Every registered rollout strategy and advantage computes what it computed before the
pipeline's redesign: 2-step toy runs compared, metric by metric and parameter by parameter, with
recorded digests (tests/data/pipeline_digests.json; tests/pipeline_digests.py says how they were
recorded: first by the code before the redesign, which the code after it reproduced exactly)."""

import json

import pytest

from pipeline_digests import CASES, DIGESTS, case_reads, differences, run_case, warm_starts


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    return warm_starts(str(tmp_path_factory.mktemp("warm_starts")))


@pytest.fixture(scope="module")
def stored():
    with open(DIGESTS) as f:
        return json.load(f)


def test_every_strategy_and_advantage_is_covered(stored):
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
    assert set(stored) == set(CASES)
    # the cases' updates differ (a warm start too weak for any legal move leaves most cases'
    # advantages zero, and cases that sample alike then end at the same parameters)
    assert len({digest["params"] for digest in stored.values()}) == len(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_the_first_steps_are_bitwise_those_recorded(name, warm_start, stored, tmp_path):
    fresh = run_case(name, warm_start, str(tmp_path))
    assert differences(stored[name], fresh, case_reads(name, warm_start)) == []
