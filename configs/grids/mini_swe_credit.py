"""RTMC's and PATR's SWE comparisons at the tiny scale, on mini-SWE: GRPO vs GRPO + step reward vs
RTMC (RTMC §5), and PATR with the SWE heuristic scorer vs GRPO (PATR's SWE table), 3 seeds.

    python -m launch.compare --grid=configs/grids/mini_swe_credit.py --out=/tmp/mini_swe_credit

Every variant starts from the same warm start (configs/mini_swe_sft.py: oracle repairs with one
random command in ten) and trains 40 steps of 8 tasks with GRPO's loss (configs/mini_swe_grpo.py),
evaluated on the held-out modules. As in RTMC §5.1, "GRPO + step" and RTMC add step rewards of
+0.005 per legal and -0.005 per illegal command (`step_validity`) and the validation shaping
beta = 0.05 (a test run that passes after an edit, once per edit: `validation_bonus`), with
gamma = 0.99 for the step returns; RTMC pools the group's turns by RTMC §4's signatures
(`env.options.action_signatures="rtmc"`: views by 100-line bucket, edits by a hash of range and
text, test runs, submit; the state signature is the set of operations per file with the test
flags) with its prior n_prior = 2. RTMC §5.1 filters uniform-outcome groups for every method; here no
rollout of the warm start succeeds, so that filter would zero every group of every method and
nothing would train (`rtmc/uniform_group_fraction` logs the share it would drop). GRPO and
GRPO + step train on every group, the format penalties of malformed commands being their only
signal; RTMC does too (`drop_uniform_groups=False`), so the three differ in credit assignment
only. PATR starts 4 branches per task, scores them every K = 2 turns
with the environment's SWE heuristic (evidence before editing, targeted verification, repeats;
PATR App. B), expands the top 2 into 2 children each and prunes below the median - 0.5 or after
6 identical commands; GRPO samples 8 independent episodes per task. The rtmc/* metrics say how
much the table pools. Results: docs/results.md.
"""

from jaxtree.experiment import RECIPES

STEP_REWARDS = ("outcome", "step_validity", "validation_bonus")


def get_grid():
    return {
        "title": "mini-SWE: GRPO vs GRPO + step reward vs RTMC vs PATR (tiny scale)",
        "config": "mini_swe_grpo.py",
        "overrides": {**RECIPES["grpo"], "train.steps": 40},
        "variants": {
            "grpo": {},
            "grpo_step": {"reward.terms": STEP_REWARDS, "advantage.name": "grpo_step",
                          "advantage.grpo_step.gamma": 0.99},
            "rtmc": {"reward.terms": STEP_REWARDS, "advantage.name": "rtmc",
                     "env.options.action_signatures": "rtmc",
                     "advantage.rtmc.drop_uniform_groups": False},
            "patr": {"rollout.strategy": "patr", "rollout.patr.initial_branches": 4,
                     "rollout.patr.interval": 2},
        },
        # The signatures change no demonstration: one warm start for every variant.
        "warm_start": {},
        "seeds": (0, 1, 2),
        "metrics": ("eval/success_rate", "eval/pass@2", "eval/mean_turns", "eval/invalid_rate"),
        "lower_is_better": ("eval/invalid_rate",),
    }
