"""Countdown, one turn, tiny model (2 numbers; see countdown_sft.py): warm start (countdown_sft.py)
then GRPO with LATR rollouts (LATR §3, Alg. 1), against the same-budget stochastic baseline
configs/countdown_grpo.py (same steps, tasks and k = 8 rollouts per task).

    python -m launch.train --config=configs/countdown_latr.py --workdir=/tmp/countdown_latr

Branching thresholds are the paper's (τ_abs 0.25, τ_rel 0.15, τ_ed 0.4). The lookahead windows
are scaled to the tiny model's answers: an answer is ~6 tokens (at most 32), where the paper's
windows (20, 30, 50) cover 2-5% of a 1,024-token completion; (4, 8) keep every branch checked
before the answer ends. The hybrid fraction η follows the reference code's Countdown schedule
{0: 1, 10: 0.75, 20: 0.5, 80: 0.25, 200: 0}. Groups short of k are completed with fresh samples
from the prompt (`rollout.latr.completion`); docs/benchmarks.md compares the three completions and the
stochastic baseline on this task.
"""

from jaxtree.experiment import rl_config, sibling_config


def get_config():
    return rl_config(sibling_config(__file__, "countdown_sft"), "grpo", {
        "rollout.strategy": "latr",
        "rollout.latr.windows": (4, 8),
        "rollout.latr.eta_schedule": ((0, 1.0), (10, 0.75), (20, 0.5), (80, 0.25), (200, 0.0)),
    })
