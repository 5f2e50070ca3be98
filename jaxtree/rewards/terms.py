"""Built-in reward terms: the environment's outcome, step validity (RTMC) and a format penalty.

Each term returns `Rewards(turn [N, K], outcome [N])` and says where it writes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxtree.config import Section, non_negative, one_of, option
from jaxtree.rewards.base import REWARDS, Rewards, zero_rewards
from jaxtree.rollout.trajectory import TrajectoryBatch


@dataclasses.dataclass(frozen=True)
class OutcomeConfig(Section):
    source: str = option("return", "'return': the environment's return (its turn rewards summed, "
                         "format penalties included); 'success': 1 if solved else 0 (RAGEN's "
                         "advice for group filters)", check=one_of(("return", "success")))


@REWARDS.register("outcome", OutcomeConfig)
def outcome(settings: OutcomeConfig):
    """outcome += the episode's return or success (turn rewards untouched)."""
    def term(batch: TrajectoryBatch) -> Rewards:
        value = batch.outcome_reward if settings.source == "return" else batch.success
        return zero_rewards(batch)._replace(outcome=np.asarray(value, np.float32))
    return term


@dataclasses.dataclass(frozen=True)
class StepValidityConfig(Section):
    valid: float = option(0.005, "turn reward of an action that parsed to a legal move (RTMC "
                          "§5.1: +0.005)", check=non_negative())
    invalid: float = option(0.005, "penalty of an action that did not (RTMC §5.1: -0.005)",
                            check=non_negative())


@REWARDS.register("step_validity", StepValidityConfig)
def step_validity(settings: StepValidityConfig):
    """turn += +valid / -invalid per played action (RTMC's step reward; outcome untouched)."""
    def term(batch: TrajectoryBatch) -> Rewards:
        per_turn = np.where(batch.turn_valid, settings.valid, -settings.invalid) * batch.played
        return zero_rewards(batch)._replace(turn=np.asarray(per_turn, np.float32))
    return term


@dataclasses.dataclass(frozen=True)
class FormatPenaltyConfig(Section):
    penalty: float = option(0.1, "subtracted from the outcome for every action that did not "
                            "parse to a legal move (RAGEN/TSR: 0.1)", check=non_negative())


@REWARDS.register("format_penalty", FormatPenaltyConfig)
def format_penalty(settings: FormatPenaltyConfig):
    """outcome -= penalty x invalid actions (for environments built with format_penalty=0, or
    a penalty on top of theirs; turn rewards untouched)."""
    def term(batch: TrajectoryBatch) -> Rewards:
        return zero_rewards(batch)._replace(
            outcome=(-settings.penalty * batch.num_invalid).astype(np.float32))
    return term


@dataclasses.dataclass(frozen=True)
class ValidationBonusConfig(Section):
    beta: float = option(0.05, "turn reward of a validation action taken after a modification "
                         "(RTMC §3.4 Eq. 12: beta = 0.05)", check=non_negative())


@REWARDS.register("validation_bonus", ValidationBonusConfig, reads=("validation",))
def validation_bonus(settings: ValidationBonusConfig):
    """turn += beta on each turn the environment reports as a validation after a modification
    (RTMC §3.4 Eq. 12, r'_t = r_t + beta 1[has_modifications(s_t)] 1[is_validation(a_t)]; the
    environment sets info["validation"] to that product; outcome untouched). Environments that
    never report one get no shaping."""
    def term(batch: TrajectoryBatch) -> Rewards:
        per_turn = settings.beta * (batch.label("validation") & batch.played)
        return zero_rewards(batch)._replace(turn=np.asarray(per_turn, np.float32))
    return term
