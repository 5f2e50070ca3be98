"""TSR Table 1 at the tiny scale, Sokoban: instance filtering vs TSR best-of-N vs lookahead vs beam
search, 3 seeds.

    python -m launch.compare --grid=configs/grids/tsr_sokoban.py --out=/tmp/tsr_sokoban

The variants, batch shape, filter and loss of configs/grids/tsr_frozen_lake.py on Sokoban
(configs/sokoban_grpo.py) at learning rate 2e-4, as FrozenLake's (docs/results.md, "The default
recipe"): at Sokoban's 5e-4 the filtering baseline of this recipe (no KL term, clip-higher; run
without the entropy bonus) came apart in its first ten steps (seed 0: malformed moves 1% -> 58%
at step 7, KL to the reference 2.2, held-out success 0.195 -> 0.13 -> 0.115 at steps 0, 10,
20), before any variant ran, and a baseline that is falling apart compares nothing. Candidates
are ranked by Sokoban's turn score, the reward a clone receives for the move (step penalty,
boxes on and off targets): TSR's reward-based scoring for a deterministic puzzle. Results:
docs/results.md.
"""

from jaxtree.compare import sibling_grid


def get_grid():
    grid = sibling_grid(__file__, "tsr_frozen_lake")
    grid["title"] = ("Sokoban: instance filtering vs TSR best-of-N, lookahead, beam (TSR Table 1, "
                     "tiny scale)")
    grid["config"] = "sokoban_grpo.py"
    grid["overrides"] = {**grid["overrides"], "optim.learning_rate": 2e-4}
    return grid
