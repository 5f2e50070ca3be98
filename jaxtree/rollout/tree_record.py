"""One rollout group's tree as plain data: what `launch.show_tree` draws.

A turn-level tree rollout (PATR, Tree-Random, any strategy that forks episodes) records for every
row its parent episode and the turn it forked at. `group_tree` turns one group of a batch into a
JSON-ready dict:

    {"task_id": int, "group": int,
     "branches": [{"episode_id", "parent_id" (-1 for a root), "fork_turn" (-1 for a root),
                   "end_reason" ("done" | "truncated" | "pruned" | ...), "success", "return",
                   "actions": [str per turn], "scores": [process score after each turn],
                   "rewards": [float per turn]}, ...]}

Actions and scores are the `action_signature` and `process_score` labels where the rollout
recorded them (the experiment reads them), else "" and None.

A child's turns before `fork_turn` are its parent's; its own turns start at `fork_turn`. The
branches are in depth-first order (each parent followed by its children, by fork turn), so
drawing them one lane each keeps every subtree together.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np

from jaxtree.rollout.trajectory import END_REASONS, NO_PARENT, TrajectoryBatch


def group_tree(batch: TrajectoryBatch, group: int) -> dict:
    """The rows of `group` as the tree described in the module docstring.

    Raises:
      ValueError: the batch has no row in `group`.
    """
    rows = np.flatnonzero(batch.group_ids == group)
    if not len(rows):
        raise ValueError(f"the batch has no row in group {group}")
    by_id = {int(batch.episode_ids[i]): int(i) for i in rows}
    children = defaultdict(list)
    roots = []
    for i in rows:
        parent = int(batch.parent_ids[i])
        # A parent outside the group's rows (dropped, e.g. Best-n) makes its child a root here.
        (children[parent] if parent in by_id else roots).append(int(i))

    actions = batch.labels.get("action_signature")
    scores = batch.labels.get("process_score")

    def branch(i: int) -> dict:
        n = int(batch.num_turns[i])
        return {"episode_id": int(batch.episode_ids[i]), "parent_id": int(batch.parent_ids[i]),
                "fork_turn": int(batch.fork_turns[i]),
                "end_reason": END_REASONS[int(batch.end_reason[i])],
                "success": bool(batch.success[i]), "return": float(batch.outcome_reward[i]),
                "actions": ([str(a) for a in actions[i, :n]] if actions is not None
                            else [""] * n),
                "scores": ([float(s) for s in scores[i, :n]] if scores is not None
                           else [None] * n),
                "rewards": [float(r) for r in batch.turn_rewards[i, :n]]}

    ordered = []

    def visit(i: int) -> None:
        ordered.append(branch(i))
        for child in sorted(children[int(batch.episode_ids[i])],
                            key=lambda c: (int(batch.fork_turns[c]), int(batch.episode_ids[c]))):
            visit(child)
    for i in sorted(roots, key=lambda r: int(batch.episode_ids[r])):
        visit(i)
    return {"task_id": int(batch.task_ids[rows[0]]), "group": int(group), "branches": ordered}


def first_tree_group(batch: TrajectoryBatch) -> int | None:
    """The group of the first forked row (None when nothing forked)."""
    forked = np.flatnonzero(batch.parent_ids != NO_PARENT)
    return int(batch.group_ids[forked[0]]) if len(forked) else None


def tree_path(workdir: str, step: int) -> str:
    return os.path.join(workdir, "trees", f"step_{step}.json")


def write_tree(workdir: str, step: int, tree: dict) -> str:
    path = tree_path(workdir, step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(tree, f)
    return path


def read_tree(workdir: str, step: int) -> dict:
    """The tree saved at `step`; FileNotFoundError naming the steps that have one."""
    path = tree_path(workdir, step)
    if not os.path.exists(path):
        directory = os.path.dirname(path)
        saved = sorted(int(n[5:-5]) for n in os.listdir(directory)
                       if n.startswith("step_") and n.endswith(".json")) \
            if os.path.isdir(directory) else []
        raise FileNotFoundError(f"no tree saved for step {step} in {directory} (saved steps: "
                                f"{saved or 'none: the run used no tree rollout'})")
    with open(path) as f:
        return json.load(f)
