"""VPR Table 1 at the tiny scale, Sudoku 4x4: outcome reward (OR) vs MC-PR vs VPR, 3 seeds.

    python -m launch.compare --grid=configs/grids/vpr_sudoku4.py --out=/tmp/vpr_sudoku4

The variants of configs/grids/vpr_tictactoe.py (one warm start, 40 steps of 8 tasks x 8 rollouts
with GRPO's loss, rewards and advantages the only difference; MC-PR with m = 4 continuations per
visited state, extra to the 64 policy episodes) on Sudoku 4x4 (sudoku4_grpo.py) at learning
rate 2e-4. The verifier is the constraint check: the move's digit is the unique solution's.
Metrics: the success rate (SR) and completion rate (CR). Results: docs/results.md.
"""

from jaxtree.compare import sibling_grid


def get_grid():
    grid = sibling_grid(__file__, "vpr_tictactoe")
    grid["title"] = "Sudoku 4x4: OR vs MC-PR vs VPR (VPR Table 1, tiny scale)"
    grid["config"] = "sudoku4_grpo.py"
    grid["overrides"] = {**grid["overrides"], "optim.learning_rate": 2e-4}
    grid["metrics"] = ("eval/success_rate", "eval/completion_rate")
    return grid
