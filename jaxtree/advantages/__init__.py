"""Advantage estimation: group-relative advantages, their token layout, and group filters.

- `group`: GRPO / Dr.GRPO, RLOO, discounted step returns and "GRPO + Step Reward" (jit-able).
- `broadcast`: per-trajectory or per-turn advantages onto action tokens (jit-able).
- `filters`: DAPO dynamic sampling, StarPO-S / TSR top-std filtering, batch refill (host numpy).
"""

from jaxtree.advantages.broadcast import sequence_to_tokens, turns_to_tokens
from jaxtree.advantages.filters import dynamic_sampling_keep, select_groups, top_std_groups_keep
from jaxtree.advantages.group import (discounted_returns, grpo_advantages, rloo_advantages,
                                      step_reward_advantages)

__all__ = ["discounted_returns", "dynamic_sampling_keep", "grpo_advantages", "rloo_advantages",
           "select_groups", "sequence_to_tokens", "step_reward_advantages", "top_std_groups_keep",
           "turns_to_tokens"]
