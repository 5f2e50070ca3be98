"""Advantage estimation and group filters.

- `base`: the advantage stage (registry `ADVANTAGES`, `config.advantage`).
- `estimators`: GRPO, Dr.GRPO, RLOO and "GRPO + step reward" as registered advantage functions.
- `vpr`: VPR's turn-level normalisation of verifier rewards (and the released code's state groups).
- `rtmc`: RTMC's (state, action) statistics table, Q(s, a) - V'(s) per turn.
- `gigpo`: GiGPO's episode advantage plus step advantages grouped by anchor state.
- `group_filters`: the filter stage (registry `FILTERS`, `config.filter`): none, DAPO dynamic
  sampling, TSR/StarPO top-std instance filtering, and the batch refill selection.
- `group`: the jit-able group statistics (GRPO / Dr.GRPO, RLOO, discounted step returns).
- `broadcast`: per-trajectory or per-turn advantages onto action tokens (jit-able).
"""

from jaxtree.advantages import estimators, gigpo, rtmc, vpr  # noqa: F401  (registration)
from jaxtree.advantages.base import (ADVANTAGES, AdvantageEstimator, AdvantageFn, AdvantageStage,
                                     build_advantage)
from jaxtree.advantages.broadcast import sequence_to_tokens, turns_to_tokens
from jaxtree.advantages.group_filters import (FILTERS, FilterStage, GroupFilter, build_filter,
                                              dynamic_sampling_keep, select_groups,
                                              top_std_groups_keep)
from jaxtree.advantages.group import (discounted_returns, grpo_advantages, rloo_advantages,
                                      step_reward_advantages)

__all__ = ["ADVANTAGES", "AdvantageEstimator", "AdvantageFn", "AdvantageStage", "FILTERS",
           "FilterStage", "GroupFilter", "build_advantage", "build_filter", "discounted_returns", "dynamic_sampling_keep",
           "grpo_advantages", "rloo_advantages", "select_groups", "sequence_to_tokens",
           "step_reward_advantages", "top_std_groups_keep", "turns_to_tokens"]
