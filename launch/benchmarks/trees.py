"""Prefix reuse of turn-level trees: PATR, beam and lookahead rollouts with on-device forks,
against the same trees built by re-prefilling every branch from the prompt (the peers' way), and
against independent rollouts of the same number of trajectories.

A fork here copies the parent's cache rows and clones its environment, so the shared prefix is
computed once. The re-prefill arm runs the same rollout (same seeds, same tree) and, at every
fork, also prefills each child's whole prefix (prompt and history, read back from the parent's
slot) through the model, on a scratch slot state of the same shape: the compute a peer that
re-sends the prefix to its inference server pays, without its tokenization and transfer. The
independent arm samples, per task, as many complete episodes as the tree put in its group.

Reported per arm (medians over `repeats` after a compiling run): seconds per rollout step,
prompt/observation tokens prefilled, generated tokens and trajectories, and the ratios.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import environments
from jaxtree.policy import load_policy
from jaxtree.rollout.engine import RolloutConfig, SlotEngine
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.slots import init_slots, prefill_slots, read_slots
from jaxtree.scorers import build_scorer
from jaxtree.rollout.strategies.patr import PatrConfig, sample_patr
from jaxtree.rollout.strategies.tsr import BeamConfig, LookaheadConfig, sample_beam
from jaxtree.sampling.sampler import bucket_length
from jaxtree.utils import print_table
from launch.benchmarks.common import machine_info, seeded_median_seconds, write_json


class ReprefillEngine(SlotEngine):
    """The slot engine whose forks also pay for prefilling each child's prefix from scratch."""

    def begin(self, params, rng):
        super().begin(params, rng)
        self.reprefilled_tokens = 0
        self.scratch = init_slots(self.model_config, self.rollout.num_slots,
                                  self.rollout.context_length)

    def fork(self, episode_id: int, num_children: int) -> list[int]:
        parent = self.episodes[episode_id]
        tokens, *_, lengths = jax.device_get(read_slots(
            self.state, jnp.asarray([parent.slot], jnp.int32)))
        prefix = tokens[0, :int(lengths[0])]
        children = super().fork(episode_id, num_children)
        if num_children and len(prefix):
            start = time.perf_counter()
            rows = min(bucket_length(num_children, 1), self.rollout.num_slots)
            width = bucket_length(len(prefix), 8)
            chunk = np.full((rows, width), self.tokenizer.pad_id, np.int32)
            chunk[:num_children, :len(prefix)] = prefix
            lengths = np.zeros(rows, np.int32)
            lengths[:num_children] = len(prefix)
            self.scratch = prefill_slots(self.model_config, self.params, self.scratch,
                                         jnp.arange(rows, dtype=jnp.int32), jnp.asarray(chunk),
                                         jnp.asarray(lengths), jnp.zeros(rows, jnp.int32))
            jax.block_until_ready(self.scratch.cache.lengths)
            # the scratch rows are emptied for the next fork
            self.scratch = self.scratch._replace(cache=self.scratch.cache._replace(
                lengths=jnp.zeros_like(self.scratch.cache.lengths)))
            self.stats.device_seconds += time.perf_counter() - start
            self.reprefilled_tokens += num_children * len(prefix)
        return children


METHODS = ("patr", "beam", "lookahead")


def _arms(policy, make_env, rollout: RolloutConfig, tasks, patr: PatrConfig, beam: BeamConfig,
          lookahead: LookaheadConfig, group_size: int, methods=METHODS):
    """(method, build, engine, step(engine, seed) -> batch) of every tree arm. Lookahead gets
    twice the slots: each candidate's discarded copy plays while the candidate is held."""
    scorer = build_scorer("heuristic", None)
    arms = []
    for method in methods:
        slots = rollout.num_slots * (2 if method == "lookahead" else 1)
        # each method's engine records the labels it reads
        labels = TurnLabeler(("action_signature",) if method == "patr" else ("turn_score",))
        for mode, engine_type in (("fork", SlotEngine), ("re-prefill", ReprefillEngine)):
            engine = engine_type(policy.config, policy.tokenizer, make_env,
                                 dataclasses.replace(rollout, num_slots=slots), labels)
            if method == "patr":
                step = (lambda e, seed: sample_patr(e, policy.params, jax.random.key(seed), tasks,
                                                    patr, scorer)[0])
            else:
                search = beam if method == "beam" else lookahead
                step = (lambda e, seed, search=search: sample_beam(
                    e, policy.params, jax.random.key(seed), tasks, group_size, search)[0])
            arms.append((method, mode, engine, step))
    return arms


def _measure(method: str, mode: str, engine, step, repeats: int) -> tuple[dict, object]:
    """One compiling call of step(engine, seed), then `repeats` timed ones: (medians of seconds,
    tokens prefilled and generated and trajectories, with every time; the last batch)."""
    def call(seed):
        batch = step(engine, seed)
        prefilled = engine.stats.observation_tokens + getattr(engine, "reprefilled_tokens", 0)
        return prefilled, engine.stats.generated_tokens, len(batch), batch
    seconds, times, outputs = seeded_median_seconds(call, repeats)
    median = lambda i: statistics.median(o[i] for o in outputs)  # noqa: E731
    return ({"method": method, "mode": mode, "seconds": seconds, "prefilled_tokens": median(0),
             "generated_tokens": median(1), "trajectories": median(2), "times": times},
            outputs[-1][3])


def run(policy_spec: str, env_name: str, env_options: dict, groups: int, group_size: int,
        num_slots: int, context_length: int, max_action_tokens: int, max_turns: int,
        interval: int, repeats: int, output: str, methods=METHODS) -> None:
    policy = load_policy(policy_spec)
    make_env = lambda: environments.make(env_name, **env_options)  # noqa: E731
    rollout = RolloutConfig(num_slots=num_slots, context_length=context_length,
                            max_action_tokens=max_action_tokens, max_turns=max_turns)
    tasks = list(range(20_000, 20_000 + groups))
    patr = PatrConfig(interval=interval)
    beam = BeamConfig(beams=2, branching=2)
    lookahead = LookaheadConfig(beams=2, branching=2, depth=2)
    results, rows = [], []
    for method, mode, engine, step in _arms(policy, make_env, rollout, tasks, patr, beam,
                                            lookahead, group_size, methods):
        result, batch = _measure(method, mode, engine, step, repeats)
        results.append(result)
        if mode == "fork":
            # independent episodes, as many per task as the tree's last timed batch held
            sizes = np.bincount(batch.group_ids, minlength=groups)

            def independent(e, seed, sizes=sizes):
                e.begin(policy.params, jax.random.key(seed))
                for g, task in enumerate(tasks):
                    for _ in range(int(sizes[g])):
                        e.add_episode(task, group_id=g)
                e.run()
                return e.collect()
            engine = SlotEngine(policy.config, policy.tokenizer, make_env, rollout)
            results.append(_measure(method, "independent", engine, independent, repeats)[0])
        print(f"  {method} {mode}: done", flush=True)
    by = {(r["method"], r["mode"]): r for r in results}
    for r in results:
        fork = by[(r["method"], "fork")]
        rows.append([r["method"], r["mode"], f"{r['seconds']:.2f}",
                     f"{r['prefilled_tokens']:.0f}", f"{r['generated_tokens']:.0f}",
                     f"{r['trajectories']:.0f}",
                     f"{r['seconds'] / fork['seconds']:.2f}x",
                     f"{r['prefilled_tokens'] / max(fork['prefilled_tokens'], 1):.2f}x"])
    print(f"\nTree rollouts: {policy_spec} on {env_name}, {groups} tasks, PATR (B0 "
          f"{patr.initial_branches}, M {patr.children}, k {patr.expand_top_k}, K {interval}) and "
          f"beam (B {beam.beams}, M {beam.branching}, {group_size} searches per task; lookahead "
          f"the same with D {lookahead.depth}), median of {repeats}")
    print_table(["method", "build", "seconds/step", "tokens prefilled", "tokens generated",
                 "trajectories", "time vs fork", "prefill vs fork"], rows)
    write_json(output, {"benchmark": "trees", "machine": machine_info(), "policy": policy_spec,
                        "env": env_name, "env_options": env_options, "groups": groups,
                        "group_size": group_size, "results": results})
