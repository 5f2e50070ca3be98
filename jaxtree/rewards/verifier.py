"""VPR's verifier reward: the oracle's verdict on each action as its turn reward.

Verifiable Process Rewards (Yuan et al., 2026), §2.1 Eq. 2: with a task-specific verifier
V : S x A -> {0, 1}, the reward of turn t is

    r_t = V(s_t, a_t).

The rollout records V(s_t, a_t) as the `verified` label (the environment's `verify`, 1/0, NaN
past the last turn; the term declares it reads it), so this term only reads it. Readings of the paper:

- Invalid or unparseable actions. V is defined on every action and maps into {0, 1}; an action
  that does not parse to a legal move is not in the oracle-valid set A_V(s) (§2.1), so its reward
  is 0, the same as a legal but non-optimal move, and `environments.base` already makes
  `verify` False for it. §2.3 ("invalid steps penalized") means oracle-invalid steps, which
  receive a negative advantage after normalization, not a separate penalty. Appendix H's
  prompts say that a malformed answer loses the game; ending the episode is the environment's
  rule, not a reward. `invalid_reward` keeps 0 by default; the released code's environments
  give such actions -1 (its Sudoku -2), which this option reproduces.
- Outcome bonus. The paper's reward is the verifier alone (Eq. 2; Appendix F: gamma = 0 so
  "each turn-level advantage depends only on the immediate VPR reward"); it names no outcome
  term, so `outcome_bonus` is 0 by default. The released code can add
  `outcome_reward_scale x success` to the final turn's reward before the turn-level
  normalization (its shipped configs set it to 0); `outcome_bonus` does the same.

The term writes the turn rewards only (float32[N, K], 0 past each episode's last turn); the
outcome rewards stay 0, so outcome-based estimators see nothing from it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxtree.config import Section, between, non_negative, option
from jaxtree.rewards.base import REWARDS, Rewards, zero_rewards
from jaxtree.rollout.trajectory import TrajectoryBatch

# The paper's values (module docstring): no outcome term, V = 0 for an invalid action.
PAPER_OUTCOME_BONUS = 0.0
PAPER_INVALID_REWARD = 0.0


@dataclasses.dataclass(frozen=True)
class VerifierConfig(Section):
    outcome_bonus: float = option(
        PAPER_OUTCOME_BONUS, "added to the last turn's reward of a solved episode; the paper "
        "has no outcome term (VPR §2.1 Eq. 2), hence 0; the released code's "
        "outcome_reward_scale", check=non_negative())
    invalid_reward: float = option(
        PAPER_INVALID_REWARD, "turn reward of an action that did not parse to a legal move; "
        "the paper's V is 0 for it (VPR §2.1: V maps into {0, 1}), the released code's "
        "environments use -1", check=between(high=0))


def verifier_turn_rewards(batch: TrajectoryBatch, *, outcome_bonus: float = PAPER_OUTCOME_BONUS,
                          invalid_reward: float = PAPER_INVALID_REWARD) -> np.ndarray:
    """Per-turn VPR rewards of a batch.

    Args:
      batch: N episodes of at most K turns; reads the `verified` label, turn_valid, num_turns,
        success.
      outcome_bonus: added to the last turn of every solved episode.
      invalid_reward: the reward of a played turn whose action was not a legal move.

    Returns:
      float32[N, K]: V(s_t, a_t) on the legal actions, invalid_reward on the others, plus
      outcome_bonus on the last turn of solved episodes; 0 past num_turns.

    Raises:
      ValueError: a played turn has no verdict (NaN), i.e. the rollout did not record one.
    """
    played = batch.played
    verified = np.asarray(batch.label("verified"), np.float32)
    if np.isnan(verified[played]).any():
        row = int(np.nonzero(np.isnan(np.where(played, verified, 0.0)).any(axis=1))[0][0])
        raise ValueError(f"the verified label is NaN on a played turn of row {row}: the "
                         f"rollout did not record the verifier V(s_t, a_t)")
    # np.where, not a product: the NaN past num_turns must not reach the sums.
    rewards = np.where(played, verified, 0.0)
    rewards = np.where(played & ~batch.turn_valid, invalid_reward, rewards)
    solved = np.nonzero(batch.success & (batch.num_turns > 0))[0]
    rewards[solved, batch.num_turns[solved] - 1] += outcome_bonus
    return rewards.astype(np.float32)


@REWARDS.register("verifier", VerifierConfig, reads=("verified",))
def verifier(settings: VerifierConfig):
    """turn += V(s_t, a_t) per played turn (VPR §2.1 Eq. 2), invalid_reward for an action that
    did not parse to a legal move, + outcome_bonus on a solved episode's last turn (outcome
    untouched)."""
    def term(batch: TrajectoryBatch) -> Rewards:
        return zero_rewards(batch)._replace(turn=verifier_turn_rewards(
            batch, outcome_bonus=settings.outcome_bonus,
            invalid_reward=settings.invalid_reward))
    return term
