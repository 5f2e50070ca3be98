"""Typed config sections: one frozen dataclass per config section, validated in one place.

Experiment configs are `ml_collections.ConfigDict`s (one Python file per experiment, overridable
from the command line). The module that owns a section declares it as a frozen dataclass whose
fields carry their documentation and constraint:

    @dataclasses.dataclass(frozen=True)
    class LossConfig(Section):
        eps_low: float = option(0.2, "lower clip range", check=between(0, 1, high_open=True))

`LossConfig.from_config(config.loss, "loss")` turns the section into the typed config. Every
violation, an unknown field included, raises `ConfigError`, whose message is one line naming the
field by its config path, what is allowed and what was given:

    config.loss.eps_low: 1.5 is not in [0, 1)

Constructing a section directly (`LossConfig(eps_low=1.5)`) runs the same checks. The same
declarations generate the config reference (`reference_rows`), so documentation and validation
cannot drift apart.

Stages with interchangeable parts keep them in a `Registry` (an explicit dict, name -> part): a
part registers with its own typed config, whose fields live in a subsection named after the part
(`config.advantage.grpo_step.gamma`), and declares what it needs from the rest of the pipeline
(`reads`: the per-turn labels it reads; `produces`: labels it makes; `check`: its constraints on
the section that selects it). A section's `parts` field holds the typed settings of every
registered part, so `to_dict()` records them all (a job's config.json says what it ran).
"""

from jaxtree.config.checks import (Check, ConfigError, between, each, non_negative, one_of,
                                   option, positive, require)
from jaxtree.config.registry import Part, Registry
from jaxtree.config.sections import (PartSettings, Section, config_fields, reference_rows,
                                     subsection_names)

__all__ = ["Check", "ConfigError", "Part", "PartSettings", "Registry", "Section", "between",
           "config_fields", "each", "non_negative", "one_of", "option", "positive",
           "reference_rows", "require", "subsection_names"]
