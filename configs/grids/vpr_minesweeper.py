"""VPR Table 1 at the tiny scale, Minesweeper 5x5: outcome reward (OR) vs MC-PR vs VPR, 3 seeds.

    python -m launch.compare --grid=configs/grids/vpr_minesweeper.py --out=/tmp/vpr_minesweeper

The variants of configs/grids/vpr_tictactoe.py (one warm start, 40 steps of 8 tasks x 8 rollouts
with GRPO's loss, rewards and advantages the only difference; MC-PR with m = 4 continuations per
visited state, extra to the 64 policy episodes) on Minesweeper 5x5 (minesweeper_grpo.py) at learning
rate 2e-4. The verifier is the posterior: the move is optimal under the belief over mine layouts.
Metrics: the success rate (SR) and completion rate (CR). Results: docs/results.md.
"""

from jaxtree.compare import sibling_grid


def get_grid():
    grid = sibling_grid(__file__, "vpr_tictactoe")
    grid["title"] = "Minesweeper 5x5: OR vs MC-PR vs VPR (VPR Table 1, tiny scale)"
    grid["config"] = "minesweeper_grpo.py"
    grid["overrides"] = {**grid["overrides"], "optim.learning_rate": 2e-4}
    grid["metrics"] = ("eval/success_rate", "eval/completion_rate")
    return grid
