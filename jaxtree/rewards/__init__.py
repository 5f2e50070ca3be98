"""Registered reward terms (`config.reward.terms`): outcome, step_validity, format_penalty and
VPR's verifier turn rewards.

Importing this package registers the built-in terms; see `base` for the protocol.
"""

from jaxtree.rewards import terms, verifier  # noqa: F401  (registration)
from jaxtree.rewards.base import REWARDS, Rewards, RewardStage, RewardTerm, build_rewards

__all__ = ["REWARDS", "RewardStage", "RewardTerm", "Rewards", "build_rewards"]
