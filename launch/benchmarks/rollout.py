"""Rollout throughput of the slot engine: environment turns/s, generated tokens/s, host share.

A policy (default the tiny preset, random weights, so every action runs to the per-turn token
limit: the most decode work per turn; `--policy` names another preset or a checkpoint) plays
`episodes` FrozenLake 4x4 episodes in compact style with `slots` slots, after
a warm-up rollout that compiles every shape. Host time is the engine's tokenize + environment step
+ detokenize + bookkeeping; device time is the wall time of its device calls (dispatch to results
on the host). Processed tokens count the observation tokens appended to the caches as well as the
generated ones: in multi-turn play most device work is reading observations, not writing actions.

`label_sets` compares what a turn records beside its reward: "read" records no label (what a
GRPO experiment reads), "every" the six labels every turn recorded before labels were declared
(VPR's verdict, PATR's process score, RTMC's state and action signatures, GiGPO's anchor, the
validation flag), each run in the same process after its own warm-up.
"""

from __future__ import annotations

import time

import jax

import environments
from jaxtree.policy import load_policy
from jaxtree.rollout.engine import RolloutConfig, SlotEngine
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.signatures import signature_function
from jaxtree.rollout.strategies import sample_independent
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.utils import print_table
from launch.benchmarks.common import write_json


# The labels of each `label_sets` entry.
LABEL_SETS = {"read": (), "every": ("verified", "process_score", "state_signature",
                                    "anchor_state", "action_signature", "validation")}


def run(slots_list, episodes: int, env_name: str, max_action_tokens: int, output: str,
        label_sets=("read",), repeats: int = 1, policy_spec: str = "tiny") -> None:
    policy = load_policy(policy_spec)
    config, params, tokenizer = policy.config, policy.params, policy.tokenizer
    make_env = lambda: environments.make(env_name, style="compact")  # noqa: E731
    results, rows = [], []
    for slots in slots_list:
        engines = {labels: SlotEngine(config, tokenizer, make_env, RolloutConfig(
            num_slots=slots, context_length=512, max_action_tokens=max_action_tokens,
            sampling=SamplingConfig(temperature=1.0)),
            TurnLabeler(LABEL_SETS[labels], signature_function("env"))) for labels in label_sets}
        for engine in engines.values():  # compile every shape first
            sample_independent(engine, params, jax.random.key(1), range(episodes), 1)
        runs = {labels: [] for labels in label_sets}
        for _ in range(repeats):  # the label sets in turn, so that load changes hit both
            for labels, engine in engines.items():
                start = time.perf_counter()
                batch = sample_independent(engine, params, jax.random.key(2), range(episodes), 1)
                runs[labels].append((time.perf_counter() - start, engine.stats))
        for labels, measured in runs.items():
            wall, st = sorted(measured, key=lambda m: m[0])[len(measured) // 2]  # the median
            entry = {"env": env_name, "slots": slots, "labels": labels, "episodes": len(batch),
                     "repeats": repeats, "wall_seconds": wall,
                     "host_ms_per_turn": 1e3 * st.host_seconds / st.env_steps,
                     "env_turns_per_s": st.env_steps / wall,
                     "generated_tokens_per_s": st.generated_tokens / wall,
                     "processed_tokens_per_s": (st.generated_tokens + st.observation_tokens) / wall,
                     "host_share": st.host_seconds / wall, "device_share": st.device_seconds / wall,
                     "start_seconds": st.start_seconds, "env_seconds": st.env_seconds,
                     "other_host_seconds": st.other_host_seconds,
                     "device_seconds": st.device_seconds, "engine_turns": st.turns}
            results.append(entry)
            rows.append([env_name, slots, labels, len(batch), wall, entry["host_ms_per_turn"],
                         entry["env_turns_per_s"], entry["generated_tokens_per_s"],
                         entry["processed_tokens_per_s"], f"{entry['host_share']:.1%}",
                         f"{entry['device_share']:.1%}"])
        print(f"  {slots} slots: done", flush=True)
    print(f"\nrollout: {policy_spec}, {env_name} compact, "
          f"{max_action_tokens} tokens per action, median of {repeats} run(s)")
    table = print_table(["env", "slots", "labels", "episodes", "seconds", "host ms/turn",
                         "env turns/s",
                         "generated tokens/s", "processed tokens/s", "host share", "device share"],
                        rows)
    write_json(output, {"benchmark": "rollout", "results": results, "table": table})
