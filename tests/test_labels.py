"""Per-turn labels are declared: each part says what it reads, the launch checks that every read
label has a producer, and a rollout computes those labels and no others."""

import jax
import numpy as np
import pytest

from environments.frozen_lake import FrozenLake
from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment, default_config, set_path
from jaxtree.rollout import RolloutConfig, SlotEngine
from jaxtree.rollout.labels import LABELS, MissingLabel, TurnLabeler, environment_labels
from jaxtree.rollout.strategies import sample_independent
from jaxtree.tokenizers import ByteTokenizer
from jaxtree.train.pipeline import check_experiment, check_labels, labels_read, rollout_labels


def experiment(**paths):
    config = default_config()
    for path, value in paths.items():
        set_path(config, path.replace("__", "."), value)
    return Experiment.from_config(config)


def test_a_label_without_its_producer_fails_at_launch_naming_both_fields():
    """MC-PR's process reward reads the Monte-Carlo values that only the mc_values strategy
    makes: configured without it, the launch check names the reward term and the strategy."""
    exp = experiment(reward__terms=("mc_process",), advantage__name="vpr")
    with pytest.raises(ConfigError, match=r"config\.reward\.terms: 'mc_process' reads the "
                       r"per-turn label 'mc_value', which only rollout\.strategy='mc_values' "
                       r"produces; rollout\.strategy is 'independent'"):
        check_experiment(exp)
    check_labels(experiment(reward__terms=("mc_process",), advantage__name="vpr",
                            rollout__strategy="mc_values"))


@pytest.mark.parametrize("paths,expected", [
    ({}, ()),                                                      # GRPO reads no label
    ({"reward__terms": ("verifier",), "advantage__name": "vpr"}, ("verified",)),
    ({"reward__terms": ("verifier",), "advantage__name": "vpr",
      "advantage__vpr__grouping": "state_group"}, ("verified", "state_signature")),
    ({"advantage__name": "rtmc", "rollout__signature": "history"},
     ("state_signature", "action_signature")),
    ({"advantage__name": "gigpo"}, ("anchor_state",)),
    ({"reward__terms": ("outcome", "validation_bonus")}, ("validation",)),
    ({"rollout__strategy": "patr"}, ("action_signature",)),
    ({"rollout__strategy": "beam"}, ("turn_score",)),
    ({"rollout__strategy": "mc_values", "reward__terms": ("mc_process",)}, ("mc_value",)),
])
def test_the_rollout_records_what_the_parts_read(paths, expected):
    exp = experiment(**paths)
    assert set(rollout_labels(exp)) == set(expected)
    for readers in labels_read(exp).values():
        assert all(field in ("reward.terms", "advantage.name", "filter.name", "rollout.strategy",
                             "rollout.signature") for field, _ in readers)


class CountingLake(FrozenLake):
    """FrozenLake counting the label queries made of it."""

    calls: dict = {}

    def _count(self, name):
        CountingLake.calls[name] = CountingLake.calls.get(name, 0) + 1

    def verify(self, action):
        self._count("verify")
        return super().verify(action)

    def process_score(self):
        self._count("process_score")
        return super().process_score()

    def turn_score(self, action):
        self._count("turn_score")
        return super().turn_score(action)

    def state_signature(self):
        self._count("state_signature")
        return super().state_signature()

    def canonical_state(self):
        self._count("canonical_state")
        return super().canonical_state()


def test_a_turn_queries_the_environment_only_for_the_labels_read(tiny):
    """Without labels a turn asks the environment for none of them; with the verifier's, it asks
    for that one once per turn."""
    config, params = tiny
    rollout = RolloutConfig(num_slots=16, context_length=256, max_action_tokens=6, max_turns=3)
    make_env = lambda: CountingLake(style="compact")  # noqa: E731
    for names, queried in [((), set()), (("verified",), {"verify"})]:
        CountingLake.calls = {}
        engine = SlotEngine(config, ByteTokenizer(), make_env, rollout, TurnLabeler(names))
        batch = sample_independent(engine, params, jax.random.key(0), [1, 2], 2)
        assert set(batch.labels) == set(names)
        assert set(CountingLake.calls) == queried
        if queried:
            assert CountingLake.calls["verify"] == int(batch.num_turns.sum())
    with pytest.raises(MissingLabel, match=r"no per-turn label 'anchor_state' \(it holds "
                       r"\['verified'\]\).*reads=\('anchor_state',\)"):
        batch.label("anchor_state")


def test_labels_are_registered_with_their_fills():
    assert set(environment_labels()) == set(LABELS) - {"mc_value"}
    with pytest.raises(ValueError, match="produced by a rollout strategy"):
        TurnLabeler(("mc_value",))
    with pytest.raises(ValueError, match="no per-turn label 'verdict'"):
        TurnLabeler(("verdict",))
    assert np.isnan(LABELS["verified"].fill) and LABELS["state_signature"].fill is None
