"""MC-PR's cost: a step of `mc_values` rollouts (Monte-Carlo continuations forked at every visited
state) against the same step of independent rollouts, on the same tasks with the same policy.

`--policy` is a preset name or a checkpoint (a warm start makes the episodes as long as training
sees them; a random model's episodes end at its first malformed action). Each configuration rolls
out `groups` tasks x `group_size` episodes once to compile, then `repeats` times timed (medians),
on an engine of the same number of slots;
the table reports seconds per step, environment steps of the policy episodes and of the
continuations, and the ratio to independent rollouts.
"""

from __future__ import annotations

import statistics

import jax

import environments
from jaxtree.policy import load_policy
from jaxtree.rollout.engine import RolloutConfig, SlotEngine
from jaxtree.rollout.strategies import sample_independent
from jaxtree.rollout.strategies.mc_values import sample_with_values
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.utils import print_table
from launch.benchmarks.common import machine_info, seeded_median_seconds, write_json


def run(policy_spec: str, env_name: str, env_options: dict, continuations, groups: int,
        group_size: int, context_length: int, max_action_tokens: int, repeats: int,
        output: str) -> None:
    policy = load_policy(policy_spec)
    make_env = lambda: environments.make(env_name, **env_options)  # noqa: E731
    episodes = groups * group_size
    tasks = list(range(10_000, 10_000 + groups))
    results, rows = [], []
    # One engine shape for every configuration: the same compiled programs, and independent
    # rollouts are not charged for a smaller row bucket.
    num_slots = episodes * (1 + max(continuations, default=0))
    for m in [0] + list(continuations):
        engine = SlotEngine(policy.config, policy.tokenizer, make_env, RolloutConfig(
            num_slots=num_slots, context_length=context_length,
            max_action_tokens=max_action_tokens, sampling=SamplingConfig(temperature=1.0)))

        def step(seed):
            if m == 0:
                batch = sample_independent(engine, policy.params, jax.random.key(seed), tasks,
                                           group_size)
                return batch, {"mc/main_steps": float(batch.num_turns.sum()),
                               "mc/continuation_steps": 0.0}
            return sample_with_values(engine, policy.params, jax.random.key(seed), tasks,
                                      group_size, m)

        seconds, times, outputs = seeded_median_seconds(step, repeats)
        metrics = [info for _, info in outputs]
        main = statistics.median(x["mc/main_steps"] for x in metrics)
        extra = statistics.median(x["mc/continuation_steps"] for x in metrics)
        results.append({"continuations": m, "seconds": seconds, "times": times,
                        "main_steps": main, "continuation_steps": extra})
        rows.append(["independent" if m == 0 else f"mc_values m={m}", f"{seconds:.2f}",
                     f"{main:.0f}", f"{extra:.0f}",
                     f"{seconds / results[0]['seconds']:.1f}x"])
        print(f"  m={m}: done", flush=True)
    print(f"\nMC-PR rollouts: {policy_spec} on {env_name}, {groups} tasks x {group_size} episodes "
          f"per step, median of {repeats}")
    print_table(["rollout", "seconds/step", "policy env steps", "continuation env steps",
                 "vs independent"], rows)
    write_json(output, {"benchmark": "mc_values", "machine": machine_info(),
                        "policy": policy_spec, "env": env_name, "env_options": env_options,
                        "groups": groups, "group_size": group_size, "results": results})
