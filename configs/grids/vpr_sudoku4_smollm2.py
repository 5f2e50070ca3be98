"""VPR Table 1 on a pretrained model: outcome reward (OR) vs VPR on Sudoku 4x4 with VPR's chat
prompt, SmolLM2-135M-Instruct (configs/sudoku4_smollm2.py), 3 seeds; the tiny model's table is
configs/grids/vpr_sudoku4.py.

    python -m launch.compare --grid=configs/grids/vpr_sudoku4_smollm2.py \
        --out=/tmp/vpr_sudoku4_smollm2 --records=docs/grids/vpr_sudoku4_smollm2
    RECORDS=docs/grids/vpr_sudoku4_smollm2 LANES=1 bash launch/grid_lanes.sh \
        configs/grids/vpr_sudoku4_smollm2.py /tmp/vpr_sudoku4_smollm2
        # the same as one lane; 24 GB holds one

Both resume an interrupted grid when run again with the same output directory, and restore
the finished runs whose records are committed in docs/grids/vpr_sudoku4_smollm2 (running
only the others).

One warm start for both variants (the config's 16 SFT steps on oracle demonstrations), then 8
steps of 2 puzzles x 8 rollouts with GRPO's loss; the variants differ in the reward and the
advantage only:

  or   the puzzle's outcome (solved or not; the format penalty on malformed answers), GRPO
       advantages;
  vpr  the verifier's 0/1 verdict on each fill (the digit is the unique solution's, VPR §3.1),
       VPR's turn-level normalisation (Eq. 4, gamma = 0).

Both without the KL term, as VPR trains (Appendix F: "We disable the KL penalty in all main
experiments"; no reference forward either). MC-PR (the paper's third row) is not run: with m = 4
continuations from each of an episode's ~8 visited states, each ~4 turns long, a step would play
~2,000 extra turns beside the policy's ~130, 16 times the rollout, which this machine cannot
afford for a 135M model (configs/grids/vpr_sudoku4.py runs it on the tiny model).
Metrics: success rate (SR), completion rate (CR) and the verifier's accept rate per move on 12
held-out puzzles x 2 samples at steps 0, 4 and 8, and the training rollouts' SR.

Budget on the 2-core CPU, each run in a lane pinned to one core: an episode is ~1,130 tokens (8
turns), so a step's update covers ~18,000 tokens like the FrozenLake chat grid's (~6 turns of
~150 tokens; configs/grids/patr_frozen_lake_smollm2.py: 448 s a step on two cores, ~15 minutes
on one), less its reference forward; an evaluation plays 24 episodes, ~10 minutes on one core
(the FrozenLake grid's lanes: ~25 s an evaluation episode). 8 steps x ~13 + 3 x 10 = ~2.2 hours
a run (~2 after the first: the runs share the warm start's step-0 evaluation), ~12.5
lane-hours plus the warm start (~30 minutes). Two SmolLM2 lanes did not fit in this machine's
24 GB (launch/grid_lanes.sh), so one lane on both cores: ~9 hours at the ~1.4x a second core gives
a SmolLM2 step (448 s on two cores against 479-735 s on one).
Measured in the first run (OR, seed 0; one lane on both cores): the warm start's 16 SFT steps
~110-160 s each (test runs beside them; loss 0.21, token accuracy 0.90 at the end), the shared
step-0 evaluation ~9 minutes (24 episodes, every one the full 16 turns: the warm start writes
well-formed moves, 76% of them illegal: filled cells, digits outside 1-4), a first step of 809 s
(rollout 202 s, update 607 s, with the step's compilation, test runs beside it) and a second of
741 s alone (rollout 186 s, update 555 s; episodes of 16 turns, unique-token fraction 0.78):
8 steps at ~12 minutes and two evaluations make ~2 hours a run, ~12 hours for the 6 runs, inside
a grid's 15-hour budget.
The six runs took 460-812 s a clean step; their table and its reading are in docs/results.md
("VPR Table 1 at the tiny scale: Sudoku 4x4", "On SmolLM2-135M-Instruct").
"""


def get_grid():
    return {
        "title": "Sudoku 4x4 (chat), SmolLM2-135M-Instruct: OR vs VPR (VPR Table 1)",
        "config": "sudoku4_smollm2.py",
        "overrides": {"rollout.groups_per_step": 2, "rollout.group_size": 8,
                      "train.steps": 8, "eval.every": 4, "eval.num_tasks": 12,
                      "eval.samples_per_task": 2, "checkpoint.every": 1, "loss.kl_coef": 0.0},
        "variants": {
            "or": {},
            "vpr": {"reward.terms": ("verifier",), "advantage.name": "vpr"},
        },
        "warm_start": {},
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/completion_rate", "eval/verified_rate",
                    "rollout/success_rate", "time/step"),
    }
