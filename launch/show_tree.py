"""One rollout group's tree of a training run as a PNG.

    python -m launch.show_tree --workdir=/tmp/jaxtree_patr --step=10 [--output=tree.png]

A run whose rollout forks episodes (`rollout.strategy=patr`, ...) saves the tree of one group
(the first with a fork) at every evaluation step as <workdir>/trees/step_<N>.json. This draws it:
one lane per branch, each action a node labelled with its text and coloured by the process score
after it, forks as edges from the parent, and how each branch ended (solved, failed, pruned,
turn limit). Writes <workdir>/trees/step_<N>.png unless --output is given.
"""

from __future__ import annotations

import os

from absl import flags

from jaxtree.rollout.tree_record import read_tree, tree_path
from jaxtree.train.tree_plot import render_tree
from launch.common import fail, run_app

_WORKDIR = flags.DEFINE_string("workdir", None, "Training workdir (holds trees/).")
_STEP = flags.DEFINE_integer("step", None, "Training step whose tree to draw.")
_OUTPUT = flags.DEFINE_string("output", None, "PNG path (default <workdir>/trees/step_<N>.png).")


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _WORKDIR.value is None or _STEP.value is None:
        fail("--workdir and --step are required")
    try:
        tree = read_tree(_WORKDIR.value, _STEP.value)
    except FileNotFoundError as e:
        fail(str(e))
    output = _OUTPUT.value or os.path.splitext(tree_path(_WORKDIR.value, _STEP.value))[0] + ".png"
    print("wrote " + render_tree(tree, output, title=f"step {_STEP.value}, task "
                                 f"{tree['task_id']}: {len(tree['branches'])} branches"))


if __name__ == "__main__":
    run_app(main)
