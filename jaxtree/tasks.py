"""Task seeds: training draws from [0, EVAL_SEED_BASE); evaluation uses a fixed held-out block.

A task is an environment seed (the seed fixes the map, level, puzzle or game). Keeping the two
ranges disjoint by construction means no evaluation task is ever trained on.
"""

from __future__ import annotations

import numpy as np

EVAL_SEED_BASE = 1_000_000_000


def train_seeds(rng: np.random.Generator, count: int) -> list[int]:
    """`count` training task seeds drawn uniformly from [0, EVAL_SEED_BASE)."""
    return rng.integers(0, EVAL_SEED_BASE, size=count).tolist()


def eval_seeds(count: int) -> list[int]:
    """The fixed held-out evaluation tasks: EVAL_SEED_BASE, EVAL_SEED_BASE + 1, ..."""
    return list(range(EVAL_SEED_BASE, EVAL_SEED_BASE + count))


class TaskSampler:
    """Draws training task seeds from a numpy generator whose state can be checkpointed, so a
    resumed run draws exactly the tasks the uninterrupted run would have."""

    def __init__(self, seed: int):
        self._rng = np.random.default_rng(seed)

    def draw(self, count: int) -> list[int]:
        return train_seeds(self._rng, count)

    def state(self) -> dict:
        """JSON-serialisable generator state."""
        return self._rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self._rng.bit_generator.state = state
