"""Registered rollout strategies (`config.rollout.strategy`): independent, latr, mc_values (MC-PR),
patr (PATR and Tree-Random), arpo (ARPO-style entropy branching), best_of_n, beam and lookahead
(TSR).

Importing this package registers the built-in strategies; see `base` for the protocol and
`jaxtree.rollout.tree` for the turn loop the tree methods share.
"""

from jaxtree.rollout.strategies import arpo, independent, latr, mc_values, patr, tsr  # noqa: F401
from jaxtree.rollout.strategies.base import (STRATEGIES, RolloutContext, RolloutStage,
                                             RolloutStrategy, TreeStrategy, build_strategy,
                                             check_stage, register_tree_method, require_slots)
from jaxtree.rollout.strategies.independent import sample_independent
from jaxtree.rollout.strategies.latr import (LatrRolloutConfig, eta_at, num_tree_slots,
                                             sample_latr, sample_latr_trees, tree_stats)

__all__ = ["STRATEGIES", "LatrRolloutConfig", "RolloutContext", "RolloutStage", "RolloutStrategy",
           "TreeStrategy", "build_strategy", "check_stage", "eta_at", "num_tree_slots",
           "register_tree_method", "require_slots", "sample_independent", "sample_latr",
           "sample_latr_trees", "tree_stats"]
