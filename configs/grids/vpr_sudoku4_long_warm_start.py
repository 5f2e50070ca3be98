"""Sudoku 4x4, OR vs VPR from a longer warm start: does VPR's edge appear once the policy finds
the empty cells? 3 seeds.

    python -m launch.compare --grid=configs/grids/vpr_sudoku4_long_warm_start.py \
        --out=/tmp/vpr_sudoku4_long

configs/grids/vpr_sudoku4.py's OR and VPR variants (the same 40 steps of 8 puzzles x 8 rollouts,
learning rate 2e-4), from a warm start eight times longer: 1,200 steps over 8,192 oracle
demonstrations instead of 150 over 2,048. The short warm start writes 56% of its moves into
filled cells, so VPR's verifier rejects almost every turn (7.6% positive labels) and its
turn-level normalisation has little to contrast; VPR's paper starts from a base model whose
moves are mostly legal (Table 1, Base CR 0.632). MC-PR is left out: on this task its
continuations play 34x the policy's moves per step (docs/results.md). Results: docs/results.md.
"""

from jaxtree.compare import sibling_grid

WARM_START_STEPS = 1200
DEMONSTRATIONS = 8192


def get_grid():
    grid = sibling_grid(__file__, "vpr_sudoku4")
    grid["title"] = "Sudoku 4x4 from a longer warm start: OR vs VPR"
    grid["overrides"] = {**grid["overrides"], "sft.steps": WARM_START_STEPS,
                         "sft.num_episodes": DEMONSTRATIONS}
    grid["variants"] = {name: grid["variants"][name] for name in ("or", "vpr")}
    return grid
