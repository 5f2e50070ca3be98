"""Rollouts: the slot engine, its device state, the shared episode logic and trajectory batches.
The registered rollout strategies are the subpackage `jaxtree.rollout.strategies` (imported on
its own: it builds on the process scorers, `jaxtree.scorers`, which build on the episode)."""

from jaxtree.rollout.engine import RolloutConfig, SlotEngine, SlotEpisode
from jaxtree.rollout.episode import Episode
from jaxtree.rollout.slots import SlotState, copy_slots, init_slots, play_turn
from jaxtree.rollout.stats import TIMING_METRICS, RolloutStats
from jaxtree.rollout.trajectory import (DISCARDED, DONE, END_REASONS, PRUNED, TRUNCATED,
                                        EpisodeRecord, TrajectoryBatch, assemble, concatenate)

__all__ = ["DISCARDED", "DONE", "END_REASONS", "Episode", "EpisodeRecord", "PRUNED",
           "RolloutConfig", "RolloutStats", "SlotEngine", "TIMING_METRICS",
           "SlotEpisode", "SlotState", "TRUNCATED", "TrajectoryBatch", "assemble",
           "concatenate", "copy_slots", "init_slots", "play_turn"]
