"""Multi-turn rollouts: the slot engine, its device state, trajectory batches, strategies."""

from jaxtree.rollout.engine import Episode, RolloutConfig, RolloutStats, SlotEngine
from jaxtree.rollout.independent import sample_independent
from jaxtree.rollout.slots import SlotState, copy_slots, init_slots, play_turn
from jaxtree.rollout.trajectory import EpisodeRecord, TrajectoryBatch, assemble

__all__ = ["Episode", "EpisodeRecord", "RolloutConfig", "RolloutStats", "SlotEngine",
           "SlotState", "TrajectoryBatch", "assemble", "copy_slots", "init_slots", "play_turn",
           "sample_independent"]
