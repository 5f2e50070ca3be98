"""Typed config sections and part registries (jaxtree.config)."""

import dataclasses
import glob
import inspect
import os
import re

import pytest

from jaxtree.config import (ConfigError, Registry, Section, between, each, one_of, option,
                            positive, reference_rows)
from jaxtree.compare.grid import import_file
from jaxtree.experiment import Experiment
from jaxtree.train.jobs import read_prm_config
from jaxtree.train.pipeline import check_experiment

WIDGETS = Registry("widget")


@dataclasses.dataclass(frozen=True)
class Inner(Section):
    size: int = option(3, "a size", check=positive())


@dataclasses.dataclass(frozen=True)
class Knobs(Section):
    rate: float = option(0.5, "a rate", check=between(0, 1, high_open=True))
    names: tuple[str, ...] = option(("a",), "some names", check=each(one_of(("a", "b", "c"))))
    pairs: tuple[tuple[int, float], ...] = option((), "pairs")
    inner: Inner = Inner()


@dataclasses.dataclass(frozen=True)
class Stage(Knobs):
    PARTS = {"widget": WIDGETS}
    widget: str = option("plain", "which widget", check=one_of(WIDGETS.names))


@dataclasses.dataclass(frozen=True)
class FancyConfig(Section):
    shine: float = option(1.0, "how much", check=positive())


WIDGETS.register("plain")(lambda settings: "plain widget")
WIDGETS.register("fancy", FancyConfig)(lambda settings: f"fancy widget {settings.shine}")


def test_values_are_coerced_to_the_field_types():
    knobs = Knobs.from_config({"rate": 0, "names": ("b,c",), "pairs": [[1, 2], (3, 4.5)],
                               "inner": {"size": 7}}, "knobs")
    assert knobs == Knobs(0.0, ("b", "c"), ((1, 2.0), (3, 4.5)), Inner(7))
    assert isinstance(knobs.rate, float) and isinstance(knobs.pairs[0][1], float)
    assert Knobs.from_config({"names": "a, c"}, "knobs").names == ("a", "c")
    assert hash(knobs) == hash(Knobs.from_config(knobs.to_dict(), "knobs"))  # a static jit arg


@pytest.mark.parametrize("values,message", [
    ({"rate": 1.0}, "config.knobs.rate: 1.0 is not in [0, 1)"),
    ({"rate": "fast"}, "config.knobs.rate: 'fast' is not a number"),
    ({"rate": True}, "config.knobs.rate: True is not a number"),
    ({"names": ("a", "z")}, "config.knobs.names: ('a', 'z') is not all one of ('a', 'b', 'c')"),
    ({"pairs": ((1,),)}, "config.knobs.pairs: (1,) does not have the form tuple[int, float]"),
    ({"inner": {"size": 0}}, "config.knobs.inner.size: 0 is not positive"),
    ({"inner": {"sise": 2}}, "config.knobs.inner.sise: unknown field (given 2); known fields: size"),
    ({"ratee": 0.1}, "config.knobs.ratee: unknown field (given 0.1); known fields: rate, names, pairs, inner"),
])
def test_each_violation_is_one_line_naming_the_field(values, message):
    with pytest.raises(ConfigError) as error:
        Knobs.from_config(values, "knobs")
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


def test_a_section_built_in_python_is_checked_the_same_way():
    with pytest.raises(ConfigError, match=r"^Knobs\.rate: -1\.0 is not in \[0, 1\)$"):
        Knobs(rate=-1.0)


def test_parts_take_their_settings_from_their_subsection():
    stage = Stage.from_config({"widget": "fancy", "fancy": {"shine": 2.5}}, "stage")
    assert WIDGETS.build(stage.widget, stage.part_settings(stage.widget)) == "fancy widget 2.5"
    assert Stage.from_config({"widget": "fancy"}, "stage").part_settings("fancy").shine == 1.0
    assert Stage.from_config(None, "stage").part_settings("plain") is None
    assert stage.narrowed(Knobs) == Knobs()  # the base section's fields only
    with pytest.raises(ConfigError, match=r"config\.stage\.fancy\.shine: 0\.0 is not positive"):
        Stage.from_config({"fancy": {"shine": 0.0}}, "stage")  # checked even when not selected
    with pytest.raises(ConfigError, match=r"config\.stage\.plain: widget part 'plain' takes no "):
        Stage.from_config({"plain": {"x": 1}}, "stage")
    with pytest.raises(ConfigError, match=r"config\.stage\.widget: 'shiny' is not one of "
                                          r"\('plain', 'fancy'\)"):
        Stage.from_config({"widget": "shiny"}, "stage")
    assert Stage.defaults()["fancy"] == {"shine": 1.0} and "plain" not in Stage.defaults()


def test_registries_refuse_duplicates_and_untyped_settings():
    with pytest.raises(ValueError, match="already registered"):
        WIDGETS.register("plain")(lambda settings: None)
    with pytest.raises(TypeError, match="must be a Section class"):
        WIDGETS.register("odd", dict)


def test_reference_rows_cover_nested_fields_and_part_settings():
    rows = {row[0]: row for row in reference_rows(Stage, "stage")}
    assert rows["stage.inner.size"] == ("stage.inner.size", "int", "3", "positive", "a size")
    assert rows["stage.fancy.shine"][3] == "positive"
    assert rows["stage.rate"][3] == "in [0, 1)"


def test_evaluations_build_the_environment_with_eval_options_on_top():
    from jaxtree.experiment import EnvSpec
    spec = EnvSpec.from_config({"name": "tictactoe", "options": {"style": "compact"},
                                "eval_options": {"opponent": "mcts"}}, "env")
    train_env, eval_env = spec.factory()(), spec.eval_factory()()
    assert (train_env.opponent_option, eval_env.opponent_option) == ("mixed", "mcts")
    assert eval_env.style == "compact"
    with pytest.raises(ConfigError, match=r"config\.env\.eval_options: .*'opponent': 'best'"):
        EnvSpec.from_config({"name": "tictactoe", "eval_options": {"opponent": "best"}}, "env")


# ----------------------------------------------------------------------------- recorded parts

def _part_field_paths(section_cls, path):
    """Config paths of every field of every registered part's settings under a section, the
    parts of parts included (rollout.patr.judge.weight)."""
    from jaxtree.config import config_fields
    out = []
    for registry in section_cls.PARTS.values():
        for name in registry.names():
            settings = registry.part(name).config
            if settings is None:
                continue
            out += [f"{path}.{name}.{f.name}" for f in config_fields(settings)]
            out += _part_field_paths(settings, f"{path}.{name}")
    return out


def test_every_registered_parts_settings_round_trip_through_config_json(tmp_path):
    """A job's config.json records the settings of every registered part (selected or not), so
    it says what ran; read back, it is the same experiment, non-default part settings kept."""
    import json
    from jaxtree.experiment import SECTIONS, Experiment, default_config, set_path
    from jaxtree.train.workdir import record_config
    config = default_config()
    for path, value in {"rollout.patr.interval": 3, "rollout.patr.judge.weight": 0.25,
                        "advantage.rtmc.gamma": 0.9, "reward.verifier.outcome_bonus": 0.5,
                        "filter.top_std.keep_fraction": 0.5}.items():
        set_path(config, path, value)
    exp = Experiment.from_config(config)
    record_config(str(tmp_path), exp.to_dict())
    with open(tmp_path / "config.json") as f:
        recorded = json.load(f)
    assert Experiment.from_config(recorded) == exp
    assert recorded["rollout"]["patr"]["judge"]["weight"] == 0.25
    paths = [p for name, cls in SECTIONS.items() for p in _part_field_paths(cls, name)]
    assert len(paths) > 60 and "rollout.patr.prm.aggregation" in paths
    for path in paths:
        node = recorded
        for key in path.split("."):
            node = node[key]          # every part field is in the record


def test_a_resume_with_any_changed_part_setting_is_refused_naming_it(tmp_path):
    """For every field of every registered part: a workdir whose config.json holds another
    value refuses the job's config, naming the field."""
    import copy
    from jaxtree.experiment import SECTIONS, Experiment, default_config
    from jaxtree.train.workdir import WorkdirError, record_config
    exp = Experiment.from_config(default_config())
    current = exp.to_dict()
    for path in [p for name, cls in SECTIONS.items() for p in _part_field_paths(cls, name)]:
        recorded = copy.deepcopy(current)
        *parents, field = path.split(".")
        node = recorded
        for key in parents:
            node = node[key]
        value = node[field]
        node[field] = ((not value) if isinstance(value, bool) else
                       value + 1 if isinstance(value, (int, float)) else
                       f"{value}-other" if isinstance(value, str) else list(value) + ["x"])
        record_config(str(tmp_path), recorded, allow_change=True)
        with pytest.raises(WorkdirError, match=rf"another config \({re.escape(path)}: "):
            record_config(str(tmp_path), current)


CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


@pytest.mark.parametrize("name", sorted(os.path.basename(p)[:-3] for p in
                                        glob.glob(os.path.join(CONFIG_DIR, "*.py"))))
def test_every_shipped_config_is_a_valid_experiment(name):
    """Each file of configs/ (and its `:lora` variant, where `get_config` takes one) builds the
    typed experiment its launch jobs validate at start, every read label with a producer."""
    module = import_file(os.path.join(CONFIG_DIR, f"{name}.py"), f"_config_{name}")
    variants = [()]
    if "variant" in inspect.signature(module.get_config).parameters:
        variants.append(("lora",))
    for args in variants:
        config = module.get_config(*args)
        if "prm" in config:  # a launch.train_prm config: the experiment plus its PRM settings
            experiment, _ = read_prm_config(config)
        else:
            experiment = Experiment.from_config(config)
        check_experiment(experiment)
        if args:
            assert experiment.model.lora.rank > 0
