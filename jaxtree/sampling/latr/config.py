"""LATR's hyper-parameters (a typed config section) and the named constants of the tree arrays.

The group size k is not a field here: it is the rollout's group size, owned by the trainer's
config, and a static argument of the kernel (`latr_generate(..., k, ...)`).
"""

from __future__ import annotations

import dataclasses

from jaxtree.config import Section, between, each, one_of, option, positive, require

# Where a slot's final sequence came from (LatrOutput.origin).
TREE = 0        # a branch of the tree (the root or a child that survived its lookahead checks)
PLAIN = 1       # a plain slot of the hybrid rollout: stochastic sampling from step 0
FRESH = 2       # completion: a stochastic sample from the prompt (see `completion`)
DUPLICATE = 3   # completion: a copy of a surviving tree branch ('duplicate')

COMPLETIONS = ("fresh", "restart", "duplicate")

# Fill values of the per-slot tree arrays and the event logs (mctx-style named sentinels).
NO_PARENT = -1  # parent of the root, of plain rows, of free slots
NOT_BORN = -1   # birth step of the root, of plain rows, of free slots
NO_FORK = -1    # fork position / source of a row that never continued another row's sample
NO_EVENT = -1   # an unused entry of an event log (prune_distance uses NaN)

# Row pairs moved per iteration of a copy loop (children born, slots forked) in one step: a step
# usually copies a handful of rows, and a chunk this size moves them in one or two iterations.
COPY_CHUNK = 8


@dataclasses.dataclass(frozen=True)
class LatrConfig(Section):
    """LATR hyper-parameters (defaults: LATR App. B.3). Frozen and hashable: a static argument of
    the jitted kernel."""

    tau_abs: float = option(0.25, "a candidate token branches when its probability exceeds this "
                            "(Eq. 5)", check=between(0, 1))
    tau_rel: float = option(0.15, "... and is within this of the most likely token's probability "
                            "(Eq. 5)", check=between(0, 1))
    tau_ed: float = option(0.4, "a branch is pruned when its normalized edit distance to its "
                           "parent over a lookahead window is below this (Eq. 7)",
                           check=between(0, 1))
    windows: tuple[int, ...] = option((20, 30, 50), "lookahead windows r: a branch born at step "
                                      "b is checked at b + r for each r", check=each(positive()))
    completion: str = option("fresh", "how a group whose tree ends short of its tree slots is "
                             "completed", check=one_of(COMPLETIONS))
    max_events: int = option(32, "branch and prune events logged per group and kind (later ones "
                             "are counted, not logged)", check=positive())

    def check(self) -> None:
        require(len(self.windows) > 0, "windows", "() must name at least one lookahead window")

    @property
    def max_window(self) -> int:
        """The largest lookahead window: the length of a child's edit-distance frontier, and how
        long a child stays young (blocks saturation)."""
        return max(self.windows)
