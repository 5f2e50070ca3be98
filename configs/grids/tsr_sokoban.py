"""TSR Table 1 at the tiny scale, Sokoban: instance filtering vs TSR best-of-N vs lookahead vs beam
search, 3 seeds.

    python -m launch.compare --grid=configs/grids/tsr_sokoban.py --out=/tmp/tsr_sokoban

The variants, batch shape, filter and loss of configs/grids/tsr_frozen_lake.py on Sokoban
(configs/sokoban_grpo.py). Candidates are ranked by Sokoban's turn score, the reward a clone
receives for the move (step penalty, boxes on and off targets): TSR's reward-based scoring for a
deterministic puzzle. Results: docs/results.md.
"""

from jaxtree.train.compare import sibling_grid


def get_grid():
    grid = sibling_grid(__file__, "tsr_frozen_lake")
    grid["title"] = ("Sokoban: instance filtering vs TSR best-of-N, lookahead, beam (TSR Table 1, "
                     "tiny scale)")
    grid["config"] = "sokoban_grpo.py"
    return grid
