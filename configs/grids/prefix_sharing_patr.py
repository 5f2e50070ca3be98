"""The prefix-shared update on a grid of docs/results.md: PATR (heuristic, Keep-All) on
FrozenLake 4x4, every trajectory from its first token (`train.prefix_sharing=off`, the
reference implementation) against each group's token tree computed once (`on`), 3 seeds.

    python -m launch.compare --grid=configs/grids/prefix_sharing_patr.py \
        --out=/tmp/prefix_sharing_patr

configs/grids/patr_frozen_lake.py's `patr` variant (one warm start, 8 lakes per step, 4 initial
branches per lake, scored every K = 5 turns), run twice per seed for its first 10 steps (of 60:
the question is whether the two layouts train alike, which the first steps answer, and 6 runs of
60 steps would cost ~1.5 hours alone on the 2-core machine). The two layouts compute the same
update up to float32 reassociation, so step 1's losses and metrics agree to ~1e-6; a sampled
episode amplifies any difference (a token whose probability moves across a sampling threshold),
so later steps can drift apart as two seeds do. The table is docs/results.md's "Prefix-shared
update".
"""

from jaxtree.compare import sibling_grid


def get_grid():
    grid = sibling_grid(__file__, "patr_frozen_lake")
    grid["title"] = ("PATR (heuristic, Keep-All) on FrozenLake 4x4: per-trajectory vs "
                     "prefix-shared update")
    patr = grid["variants"]["patr"]
    grid["variants"] = {"off": {**patr, "train.prefix_sharing": "off"},
                        "on": {**patr, "train.prefix_sharing": "on"}}
    grid["metrics"] = (*grid["metrics"], "update/unique_token_fraction", "time/update",
                       "time/step")
    grid["overrides"] = {**grid["overrides"], "train.steps": 10, "eval.every": 5}
    grid.pop("artifacts", None)
    return grid
