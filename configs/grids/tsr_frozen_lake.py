"""TSR Table 1 at the tiny scale, FrozenLake 4x4: instance filtering vs TSR best-of-N vs
lookahead vs beam search, 3 seeds.

    python -m launch.compare --grid=configs/grids/tsr_frozen_lake.py --out=/tmp/tsr_frozen_lake

As in TSR §4.2 and Alg. 1, every variant samples P = 16 tasks per step, builds L = 8 trajectories
per task (the tiny model's group size; the paper's 16) and keeps the top p = 25% of groups by the
standard deviation of their returns (instance filtering, `filter.name=top_std`); the loss has no
KL term and clips higher (DAPO's clip range 0.2 / 0.28, token-mean), with GRPO advantages and
the entropy bonus of TSR App. E (coefficient 0.001, "applied in all experiments"); evaluation
samples at TSR's temperature 0.5. configs/grids/tsr_sokoban.py runs the same variants on
Sokoban, which the paper trains with PPO (this codebase has no critic). Only the rollout
differs:

  filtering    L independent episodes (the paper's baseline);
  best_of_n    N = 14 episodes, the L best returns kept (the paper's 28 -> 16 ratio);
  lookahead    L searches of B = 2 beams x M = 4 candidates, each ranked after a D = 2-turn
               continuation on a discarded copy;
  beam         L searches of B = 2 beams x M = 4 candidates per turn.

Candidates are ranked by the environment's turn score (the reward a clone receives; FrozenLake:
the risk-aware expected distance to the goal and hole probability of the move). Metrics: success
rate, response length and turns on held-out tasks. Results: docs/results.md.
"""

GROUPS = 16
L = 8
# 40 steps, as the VPR grids: beam and lookahead sample B x M = 8 candidate moves per kept move
# (lookahead plays each two turns further), which two CPU cores pay for at every step.
STEPS = 40
BRANCHING, BEAMS, DEPTH = 4, 2, 2


def get_grid():
    return {
        "title": ("FrozenLake 4x4: instance filtering vs TSR best-of-N, lookahead, beam (TSR Table "
                  "1, tiny scale)"),
        "config": "frozen_lake_grpo.py",
        "overrides": {"loss.aggregation": "token-mean", "loss.eps_low": 0.2,
                      "loss.eps_high": 0.28, "loss.kl_coef": 0.0, "loss.entropy_coef": 0.001,
                      "advantage.name": "grpo", "eval.temperature": 0.5,
                      "filter.name": "top_std", "filter.top_std.keep_fraction": 0.25,
                      "rollout.groups_per_step": GROUPS, "rollout.group_size": L,
                      "train.steps": STEPS},
        "variants": {
            "filtering": {},
            "best_of_n": {"rollout.strategy": "best_of_n",
                          "rollout.best_of_n.candidates": 14},
            "lookahead": {"rollout.strategy": "lookahead",
                          "rollout.lookahead.beams": BEAMS,
                          "rollout.lookahead.branching": BRANCHING,
                          "rollout.lookahead.depth": DEPTH,
                          "rollout.num_slots": GROUPS * L * BEAMS * BRANCHING * 2},
            "beam": {"rollout.strategy": "beam", "rollout.beam.beams": BEAMS,
                     "rollout.beam.branching": BRANCHING,
                     "rollout.num_slots": GROUPS * L * BEAMS * BRANCHING},
        },
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/response_tokens", "eval/mean_turns"),
    }
