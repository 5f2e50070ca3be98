"""LATR Table 1 / Fig. 3 on a pretrained model: GRPO with independent sampling vs GRPO with LATR
rollouts vs the hybrid, SmolLM2-135M-Instruct on Countdown with reasoning
(configs/countdown_smollm2.py), 3 seeds; the sampling study of the same warm start (no training)
is docs/results.md, "LATR where it belongs".

    python -m launch.compare --grid=configs/grids/latr_countdown_smollm2.py \
        --out=/tmp/latr_countdown_smollm2 --records=docs/grids/latr_countdown_smollm2
    RECORDS=docs/grids/latr_countdown_smollm2 LANES=1 bash launch/grid_lanes.sh \
        configs/grids/latr_countdown_smollm2.py /tmp/latr_countdown_smollm2
        # the same as one lane; 24 GB holds one

Both resume an interrupted grid when run again with the same output directory, and restore
the finished runs whose records are committed in docs/grids/latr_countdown_smollm2 (running
only the others).

One warm start for every variant (the config's 40 SFT steps on demonstrations that reason before
they answer), then 10 GRPO steps of 2 tasks x 8 rollouts of up to 400 tokens, the same 16
rollouts a step for every variant:

  independent  8 independent temperature-1 samples per task;
  latr         all 8 slots in LATR's tree (the config's Countdown eta schedule is 1.0 for the
               first 10 steps), the paper's thresholds (tau_abs 0.25, tau_rel 0.15, tau_ed 0.4)
               and windows (20, 30, 50 tokens);
  hybrid       eta = 0.5 throughout (4 tree slots, 4 independent samples; Eq. 9): the sampling
               study found the pure tree less diverse than independent sampling on this policy,
               the hybrid as diverse.

Metrics: held-out pass@1 and pass@8 (16 tasks x 8 samples at steps 0, 5 and 10); per training
step the rollouts' pass@1, distinct final answers per group, response length (tokens per answer)
and the policy's entropy (nats per action token). The acceleration measure (`reach`, LATR §4.3:
the step at which a variant first reaches the held-out pass@1 at which independent sampling
peaks, per seed; and the step at which it reaches independent sampling's final pass@1) reads the
evaluations, so it resolves 5 steps.

Budget on the 2-core CPU: estimated before running, a step is ~16 rollouts of ~250 tokens (the
sampling study's 16.5 s a group of 8 on two cores, so ~1 min on one) plus an update and reference
pass over 16 rows of ~400 tokens (~6,400 tokens, the mini-SWE benchmark shape's size: 107 s on two
cores, ~3.5 min on one), ~4.5 minutes, and an evaluation of 128 rollouts ~8 minutes on one core.
Measured in the first run (independent, seed 0): steps of 340-480 s in a lane pinned to one core
beside another grid's lane and test runs (not clean timings), and of 159-177 s alone on both cores
(rollout 45-53 s, update 109-125 s), ~5 minutes an evaluation; the run took 37 minutes for its last
8 steps and two evaluations. Two SmolLM2 lanes did not fit in this machine's 24 GB (a lane of this
grid was killed by the OOM killer at 12.1 GB beside a FrozenLake lane: launch/grid_lanes.sh), so the
grid runs as one lane on both cores: ~40-45 minutes a run after the shared step-0 evaluation (the
warm start's, evaluated once), ~6.5 hours for the 9 runs if the tree variants' steps cost what
independent sampling's do, inside a grid's 15-hour budget. The learning rate is the config's 1e-6 (the
papers' for 0.5B-7B models): ten steps may move a 135M model too little for any variant to differ,
which the intervals would show.
"""

HYBRID_ETA = 0.5


def get_grid():
    return {
        "title": "Countdown (3 numbers, reasoning), SmolLM2-135M-Instruct: GRPO with independent "
                 "sampling vs LATR vs hybrid (LATR Table 1 / Fig. 3)",
        "config": "countdown_smollm2.py",
        "overrides": {"rollout.groups_per_step": 2, "rollout.group_size": 8,
                      "train.steps": 10, "eval.every": 5, "eval.num_tasks": 16,
                      "eval.samples_per_task": 8, "checkpoint.every": 1},
        "variants": {
            "independent": {"rollout.strategy": "independent"},
            "latr": {},
            "hybrid": {"rollout.latr.eta_schedule": ((0, HYBRID_ETA),)},
        },
        "warm_start": {},
        "seeds": (0, 1, 2),
        "metrics": ("eval/pass@1", "eval/pass@8", "rollout/pass@1", "rollout/distinct_answers",
                    "rollout/response_tokens", "train/entropy", "time/step"),
        # the paper's acceleration measure, on the held-out evaluations (steps 0, 5, 10)
        "reach": {"metric": "eval/pass@1", "reference": "independent"},
    }
