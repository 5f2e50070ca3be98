"""Rollouts: the slot engine, its device state, the shared episode logic, trajectory batches and
the registered rollout strategies (`jaxtree.rollout.strategies`)."""

from jaxtree.rollout.engine import RolloutConfig, RolloutStats, SlotEngine, SlotEpisode
from jaxtree.rollout.episode import Episode
from jaxtree.rollout.slots import SlotState, copy_slots, init_slots, play_turn
from jaxtree.rollout.strategies import (STRATEGIES, RolloutStage, build_strategy,
                                        sample_independent)
from jaxtree.rollout.trajectory import (DISCARDED, DONE, END_REASONS, PRUNED, TRUNCATED,
                                        EpisodeRecord, TrajectoryBatch, assemble, concatenate)

__all__ = ["DISCARDED", "DONE", "END_REASONS", "Episode", "EpisodeRecord", "PRUNED",
           "RolloutConfig", "RolloutStage", "RolloutStats", "STRATEGIES", "SlotEngine",
           "SlotEpisode", "SlotState", "TRUNCATED", "TrajectoryBatch", "assemble",
           "build_strategy", "concatenate", "copy_slots", "init_slots", "play_turn",
           "sample_independent"]
