"""LATR's sampling study (LATR Table 4) without training: one policy, held-out tasks, k rollouts
per task by independent sampling, by LATR and by a hybrid of the two, over several seeds.

    python -m launch.latr_sampling --tasks=128 --seeds=0,1,2 --output=/tmp/latr_sampling.json
    python -m launch.latr_sampling --checkpoint=/tmp/countdown_sft --k=8 --methods=independent,latr
    python -m launch.latr_sampling --config.model.name=smollm2-135m-instruct \\
        --config.env.options.style=chat --config.rollout.context_length=1024 \\
        --config.rollout.max_action_tokens=256 --config.rollout.num_slots=128 --groups_per_call=16

--config is an experiment config (default configs/countdown_latr.py; `--config.x.y=...`
overrides as for the other jobs); --checkpoint is the policy (default: config.model.name). The
tasks are the held-out evaluation seeds (`jaxtree.tasks.eval_seeds`) on the evaluation
environment, as in `launch.evaluate`. Every method samples every task's group once per seed
(key `jax.random.key(seed)`, the same for every method) after one untimed warm-up call (it
compiles). `--merge=a.json,b.json,...` samples nothing: it joins the outputs of jobs that ran
the same study with different seeds (each seed's numbers depend only on its key, so a study
split into one job per seed, e.g. to survive a restart, is the study run at once, timings
aside) and writes the combined table to --output. `--groups_per_call` samples the tasks in calls of that many (call c with key
fold_in(seed key, c)), so that only those rows' KV cache is resident. Methods:

  independent   the slot engine's k independent samples per task (`rollout.strategy=independent`)
  latr          the LATR kernel with all k slots in the tree (η = 1)
  hybrid        round(η·k) tree slots and the rest plain samples (LATR §3.3, Eq. 9; --eta)

Per method: mean ± 95% confidence half-width over seeds (Student t, as in `launch.compare`) of

  distinct answers   different final answers per group (the environment's parsed action; every
                     unparseable answer counts as one), as the trainer logs it
  distinct well-formed   different answers among the group's well-formed ones (0 when none is)
  malformed          share of rollouts whose answer did not parse
  at n tokens        share of rollouts that used all n = rollout.max_action_tokens tokens (cut
                     off, usually before their answer)
  duplicates/group   rollouts whose generated tokens repeat another rollout of the group exactly
  pass@1, pass@k     mean success, and the share of tasks with a success among their k rollouts
  branches/token     branch events per generated token (the kernel's branching ratio, pruned
                     branches included); 0 for independent sampling
  prunes/group       direct prunes per group; 0 for independent sampling
  saturation         the step at which a group's tree phase ended (LATR Table 10), n when it never
                     saturated; n.a. for independent sampling
  tokens/group       generated tokens per group (the rollouts the batch holds)
  response length    generated tokens per rollout
  forwards/group     slot-token forwards: tokens fed to the model for running rows, prefill
                     excluded. A rollout of m tokens feeds m - 1 (its last token is generated but
                     never fed), so independent sampling feeds the sum of (m - 1); LATR's kernel
                     counts what it feeds, speculative samples a later branch discards included.
                     Two methods are at equal forward budget when these are equal; plain
                     sampling's bound is k·(n - 1) per group (n = rollout.max_action_tokens),
                     which LATR's default completion never exceeds.
  seconds/group      wall time of the method's sampling call divided by the tasks

and, to explain a result where the tree gains nothing, the histograms of the token steps at which
branches and prunes happened (from the kernel's event logs, which keep the first
`rollout.latr.max_events` events of each group; the totals are recorded next to them). Prints a
Markdown table and writes every seed's numbers, the machine and the config as JSON to --output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Sequence

import jax
import numpy as np
from absl import flags
from ml_collections import config_flags

from jaxtree.config import require
from jaxtree.experiment import Experiment
from jaxtree.policy import Policy
from jaxtree.rollout import conversation
from jaxtree.rollout.strategies import (STRATEGIES, RolloutContext, num_tree_slots,
                                        sample_latr_trees, tree_stats)
from jaxtree.rollout.trajectory import TrajectoryBatch, concatenate
from jaxtree.tasks import eval_seeds
from jaxtree.compare.results import CONFIDENCE, format_interval, mean_ci
from jaxtree.train.trainer import group_diversity
from jaxtree.utils import check_writable, print_table
from launch.benchmarks.common import machine_info, write_json
from launch.common import SOURCE_ROOT, fail, load_named_policy, run_app

METHODS = ("independent", "latr", "hybrid")
DEFAULT_CONFIG = os.path.join(SOURCE_ROOT, "configs", "countdown_latr.py")
DEFAULT_OUTPUT = "benchmark_results/latr_sampling.json"

# (key, table column) of the per-seed metrics, in table order.
METRICS = (("distinct_answers", "distinct answers"),
           ("distinct_well_formed", "distinct well-formed"), ("malformed_rate", "malformed"),
           ("capped_rate", "at n tokens"), ("duplicates_per_group", "duplicates/group"),
           ("pass@1", "pass@1"), ("pass@k", "pass@k"),
           ("branching_ratio", "branches/token"), ("prunes_per_group", "prunes/group"),
           ("saturation_length", "saturation"), ("tokens_per_group", "tokens/group"),
           ("response_length", "response length"), ("forwards_per_group", "forwards/group"),
           ("seconds_per_group", "s/group"))
SUMMARY_KEYS = tuple(key for key, _ in METRICS) + ("branches_per_group",)
EVENT_KINDS = {"branch_steps": "branches", "prune_steps": "prunes"}

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (default: "
                                          "configs/countdown_latr.py).", lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Policy to sample (default: "
                                  "config.model.name).")
_TASKS = flags.DEFINE_integer("tasks", 128, "Held-out tasks (the evaluation seeds).",
                              lower_bound=1)
_K = flags.DEFINE_integer("k", None, "Rollouts per task (default: config.rollout.group_size).",
                          lower_bound=1)
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Sampling seeds (one key per seed).")
_METHODS = flags.DEFINE_list("methods", list(METHODS), f"Methods, of {', '.join(METHODS)}.")
_ETA = flags.DEFINE_float("eta", 0.5, "hybrid: the fraction η of tree slots (round(η·k)).",
                          lower_bound=0.0, upper_bound=1.0)
_BINS = flags.DEFINE_integer("bins", 8, "Bins of the branch and prune step histograms.",
                             lower_bound=1)
_OUTPUT = flags.DEFINE_string("output", DEFAULT_OUTPUT, "JSON output path.")
_MERGE = flags.DEFINE_list("merge", None, "Join these outputs of one study run with different "
                           "seeds into --output, sampling nothing.")
_EXAMPLES = flags.DEFINE_integer("examples", 0, "Groups of the first seed kept as text in the "
                                 "output (each method's 'examples'): what the rollouts say.",
                                 lower_bound=0)
_GROUPS_PER_CALL = flags.DEFINE_integer(
    "groups_per_call", None, "Tasks sampled per call (default: all at once); bounds the resident "
    "KV cache, e.g. 16 for a 135M model's 8 x 1,024-token rows on a CPU.", lower_bound=1)


# ----------------------------------------------------------------------------- sampling

@dataclasses.dataclass(frozen=True)
class Method:
    """A way to sample a group: the slot engine's independent samples (tree_slots None) or the
    LATR kernel with `tree_slots` of the k slots in the tree."""

    name: str
    tree_slots: int | None


def make_methods(names: Sequence[str], k: int, eta: float) -> list[Method]:
    """The Methods named (of METHODS); ValueError on an unknown or repeated name."""
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"{','.join(names)}: expected distinct names of {', '.join(METHODS)}")
    slots = {"independent": None, "latr": k, "hybrid": num_tree_slots(eta, k)}
    return [Method(n, slots[n]) for n in names]


class Sampler:
    """Samples every task's group with one method: (batch, strategy metrics, kernel output or
    None for independent sampling)."""

    def __init__(self, method: Method, context: RolloutContext, settings):
        self.method = method
        self.context = context
        self.settings = settings
        # building the strategy checks that it suits the environment (LATR: one turn)
        self.strategy = STRATEGIES.build("independent" if method.tree_slots is None else "latr",
                                         None if method.tree_slots is None else settings,
                                         context=context)

    def __call__(self, params, rng: jax.Array, tasks: Sequence[int],
                 groups_per_call: int | None = None):
        """All tasks in one call, or in calls of `groups_per_call` tasks (the KV cache of every
        row of a call is resident: a real model's 1,024 rows of 1,024 positions do not fit a
        CPU's memory). Call c draws from fold_in(rng, c); one call uses rng itself."""
        size = groups_per_call or len(tasks)
        chunks = [list(tasks[i:i + size]) for i in range(0, len(tasks), size)]
        keys = [rng] if len(chunks) == 1 else [jax.random.fold_in(rng, c)
                                                for c in range(len(chunks))]
        parts = [self._sample(params, key, chunk) for key, chunk in zip(keys, chunks)]
        if len(parts) == 1:
            return parts[0]
        # ids unique across calls (group_diversity groups rows by group id)
        k, starts = self.context.group_size, np.cumsum([0] + [len(c) for c in chunks]).tolist()
        batches = [batch.renumbered(start, start * k, start * k)
                   for (batch, _, _), start in zip(parts, starts)]
        batch = concatenate(batches, self.context.tokenizer.pad_id)
        if self.method.tree_slots is None:
            return batch, {}, None
        out = jax.tree_util.tree_map(lambda *x: np.concatenate(x),
                                     *[jax.device_get(o) for _, _, o in parts])
        return batch, tree_stats(out, self.method.tree_slots), out

    def _sample(self, params, rng: jax.Array, tasks: Sequence[int]):
        if self.method.tree_slots is None:
            batch, metrics = self.strategy.sample(params, rng, tasks, 0)
            return batch, metrics, None
        return sample_latr_trees(self.context, self.settings, params, rng, tasks,
                                 self.method.tree_slots)


def check_prompts_fit(context: RolloutContext, tasks: Sequence[int]) -> None:
    """ConfigError on `rollout.context_length` unless every task's prompt and a full response
    fit it: the slot engine would end such a rollout before its first token while the LATR
    kernel, which has no context limit of its own, samples it, and the methods would not be
    compared on the same tasks."""
    env, longest = context.make_env(), 0
    for task in tasks:
        env.reset(int(task))
        longest = max(longest, len(conversation.first_turn_tokens(context.tokenizer, env)))
    need = longest + context.rollout.max_action_tokens
    require(need <= context.rollout.context_length, "rollout.context_length",
            f"{context.rollout.context_length} cannot hold the longest prompt ({longest} tokens) "
            f"and rollout.max_action_tokens={context.rollout.max_action_tokens}; it needs {need}")


# ----------------------------------------------------------------------------- metrics

def slot_token_forwards(batch: TrajectoryBatch) -> int:
    """Tokens fed to the model for the batch's single-turn rollouts, prefill excluded: a rollout
    of m generated tokens feeds m - 1 (the LATR kernel's count for its plain rows)."""
    generated = batch.action_mask.sum(axis=1)
    return int(np.maximum(generated - 1, 0).sum())


def seed_metrics(batch: TrajectoryBatch, strategy_metrics: dict, seconds: float,
                 num_tasks: int, max_tokens: int) -> dict[str, float | None]:
    """The METRICS of one method and seed from its batch (k rows per task) and its strategy's
    metrics (`latr/*` for the kernel; none of them for independent sampling)."""
    diversity = group_diversity(batch)
    generated = batch.action_mask.sum(axis=1)
    tree = "latr/forwards" in strategy_metrics
    forwards = strategy_metrics["latr/forwards"] if tree else slot_token_forwards(batch)
    groups = [np.flatnonzero(batch.group_ids == g) for g in np.unique(batch.group_ids)]
    well_formed = batch.num_invalid == 0
    return {
        "distinct_answers": diversity["rollout/distinct_answers"],
        # distinct answers counts every malformed answer as one more: these two say how many of
        # a group's answers parsed, and how many different ones they were
        "distinct_well_formed": float(np.mean([
            len({str(batch.infos[i].get("action", "")) for i in rows if well_formed[i]})
            for rows in groups])),
        "malformed_rate": float(np.mean(~well_formed)),
        # rollouts whose generated tokens repeat another rollout of their group exactly
        "duplicates_per_group": float(np.mean([
            len(rows) - len({batch.tokens[i][batch.action_mask[i]].tobytes() for i in rows})
            for rows in groups])),
        # rollouts cut at rollout.max_action_tokens without ending their answer
        "capped_rate": float(np.mean(generated >= max_tokens)),
        "pass@1": diversity["rollout/pass@1"],
        "pass@k": diversity["rollout/pass@group"],
        "branching_ratio": float(strategy_metrics.get("latr/branching_ratio", 0.0)),
        "branches_per_group": float(strategy_metrics.get("latr/branches_per_group", 0.0)),
        "prunes_per_group": float(strategy_metrics.get("latr/prunes_per_group", 0.0)),
        "saturation_length": strategy_metrics["latr/saturation_length"] if tree else None,
        "tokens_per_group": float(generated.sum()) / num_tasks,
        "response_length": float(generated.mean()),
        "forwards_per_group": float(forwards) / num_tasks,
        "seconds_per_group": seconds / num_tasks,
    }


def bin_edges(n: int, bins: int) -> list[int]:
    """Integer step edges splitting [0, n] into at most `bins` near-equal bins."""
    return sorted({int(round(i * n / bins)) for i in range(bins + 1)})


def step_histogram(steps: np.ndarray, counts: np.ndarray, edges: Sequence[int]) -> dict:
    """Histogram of logged event steps.

    steps: int32[P, E], each group's first E event steps (-1 past its count); counts: int32[P],
    the events of each group (logged or not). Returns {'counts': per bin (the last bin holds
    its right edge), 'logged', 'total'}.
    """
    logged = steps[steps >= 0]
    hist, _ = np.histogram(logged, bins=np.asarray(edges))
    return {"counts": hist.astype(int).tolist(), "logged": int(logged.size),
            "total": int(np.sum(counts))}


def tree_events(out, edges: Sequence[int]) -> dict:
    """Branch and prune step histograms of a kernel output (LatrOutput, host arrays)."""
    return {"branch_steps": step_histogram(np.asarray(out.branch_step),
                                           np.asarray(out.num_branches), edges),
            "prune_steps": step_histogram(np.asarray(out.prune_step),
                                          np.asarray(out.num_prunes), edges)}


def summarize(per_seed: Sequence[dict]) -> dict[str, dict]:
    """Per metric: mean and 95% half-width over seeds ({'mean', 'ci', 'n'}; n = 0 when the
    metric does not apply, or an output written before it existed lacks it)."""
    return {key: mean_ci(s[key] for s in per_seed if s.get(key) is not None).to_dict()
            for key in SUMMARY_KEYS}


def summed_events(events: Sequence[dict]) -> dict:
    """The seeds' histograms added up."""
    out = {}
    for kind in EVENT_KINDS:
        out[kind] = {"counts": np.sum([e[kind]["counts"] for e in events], axis=0).tolist(),
                     "logged": sum(e[kind]["logged"] for e in events),
                     "total": sum(e[kind]["total"] for e in events)}
    return out


# Fields that must agree between the outputs `merge_results` joins: the same study.
SAME_STUDY = ("policy", "env", "tasks", "k", "max_action_tokens", "eta", "latr",
              "histogram_edges", "groups_per_call")


def merge_results(results: Sequence[dict], names: Sequence[str]) -> dict:
    """One result from the outputs of jobs that ran the same study (SAME_STUDY fields and
    methods equal) with different seeds: the seeds' numbers side by side, summaries and event
    histograms recomputed over all of them. ValueError naming the output and the field that
    differs, or the seed that repeats."""
    first = results[0]
    seeds: list[int] = []
    for result, name in zip(results, names):
        for key in SAME_STUDY:
            if result.get(key) != first.get(key):
                raise ValueError(f"{name}: {key} differs from {names[0]}'s (another study)")
        if list(result["methods"]) != list(first["methods"]):
            raise ValueError(f"{name}: methods {list(result['methods'])} differ from "
                             f"{names[0]}'s {list(first['methods'])}")
        repeated = set(result["seeds"]) & set(seeds)
        if repeated:
            raise ValueError(f"{name}: seed {min(repeated)} is already in an earlier output")
        seeds += result["seeds"]
    methods = {}
    for method, joined in first["methods"].items():
        per_seed = {seed: metrics for result in results
                    for seed, metrics in result["methods"][method]["seeds"].items()}
        events = [m["events"] for m in per_seed.values() if "events" in m]
        texts = [r["methods"][method].get("examples") for r in results]
        methods[method] = {"tree_slots": joined["tree_slots"], "seeds": per_seed,
                           "summary": summarize(list(per_seed.values())),
                           "events": summed_events(events) if events else None,
                           "examples": next((t for t in texts if t), None)}
    return {**first, "seeds": seeds, "methods": methods, "merged_from": list(names),
            "machine": [result["machine"] for result in results]}


def merge_files(paths: Sequence[str], output: str | None) -> dict:
    """`merge_results` of the JSON files at `paths`; prints the tables, writes `output`."""
    results = []
    for path in paths:
        try:
            with open(path) as f:
                results.append(json.load(f))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a readable study output ({e})") from None
    result = merge_results(results, list(paths))
    print(f"LATR sampling study of {result['policy']}: {len(result['tasks'])} held-out tasks x "
          f"k = {result['k']}, seeds {','.join(map(str, result['seeds']))} "
          f"(merged from {len(paths)} outputs)")
    print_tables(result)
    if output is not None:
        write_json(output, result)
    return result


# ----------------------------------------------------------------------------- the job

def _answer(action) -> str | None:
    return None if action is None else str(action)


def answer_examples(batch: TrajectoryBatch, tokenizer, groups: int) -> list[dict]:
    """The first `groups` groups' rollouts as text (generated tokens only) with what the
    environment made of them: [{'task', 'rollouts': [{'text', 'answer', 'valid', 'success',
    'tokens'}]}]."""
    out = []
    for g in np.unique(batch.group_ids)[:groups]:
        rows = np.flatnonzero(batch.group_ids == g)
        out.append({"task": int(batch.task_ids[rows[0]]), "rollouts": [
            {"text": tokenizer.decode(batch.tokens[i][batch.action_mask[i]].tolist()),
             "answer": _answer(batch.infos[i].get("action")),
             "valid": bool(batch.infos[i].get("valid", False)),
             "success": bool(batch.success[i]), "tokens": int(batch.action_mask[i].sum())}
            for i in rows]})
    return out


def run_method(sampler: Sampler, params, tasks: Sequence[int], seeds: Sequence[int],
               edges: Sequence[int], groups_per_call: int | None = None,
               examples: int = 0) -> dict:
    """One warm-up call (untimed: it compiles), then one timed call per seed; the first seed's
    first `examples` groups are kept as text."""
    sampler(params, jax.random.key(seeds[0]), tasks[:groups_per_call or len(tasks)])
    per_seed, events, texts = {}, [], None
    for seed in seeds:
        start = time.perf_counter()
        batch, metrics, out = sampler(params, jax.random.key(seed), tasks, groups_per_call)
        seconds = time.perf_counter() - start
        if texts is None and examples:
            texts = answer_examples(batch, sampler.context.tokenizer, examples)
        per_seed[seed] = seed_metrics(batch, metrics, seconds, len(tasks),
                                      sampler.context.rollout.max_action_tokens)
        if out is not None:
            per_seed[seed]["events"] = tree_events(jax.device_get(out), edges)
            events.append(per_seed[seed]["events"])
    return {"tree_slots": sampler.method.tree_slots, "seeds": per_seed,
            "summary": summarize(list(per_seed.values())),
            "events": summed_events(events) if events else None, "examples": texts}


def run(config, tasks: int = 128, k: int | None = None, seeds: Sequence[int] = (0, 1, 2),
        methods: Sequence[str] = METHODS, eta: float = 0.5, output: str | None = None,
        checkpoint: str | None = None, policy: Policy | None = None, bins: int = 8,
        machine: dict | None = None, groups_per_call: int | None = None,
        examples: int = 0) -> dict:
    """Samples `tasks` held-out tasks x k rollouts with every method and seed; prints the table
    and returns (and writes to `output`, if given) the results. `policy` replaces loading
    `checkpoint` (or config.model.name); `machine` replaces `machine_info()`; `examples` groups
    of the first seed are kept as text (each method's "examples")."""
    if k is not None:
        config = config.copy_and_resolve_references()
        config.rollout.group_size = k
    exp = Experiment.from_config(config)
    k = exp.rollout.group_size
    chosen = make_methods(methods, k, eta)
    if policy is None:
        policy = load_named_policy("--checkpoint", lambda: exp.model.load(checkpoint))
    context = RolloutContext(policy.config, policy.tokenizer, exp.env.eval_factory(),
                             exp.rollout.engine(), k)
    settings = exp.rollout.part_settings("latr")
    task_ids = eval_seeds(tasks)
    n = exp.rollout.max_action_tokens
    edges = bin_edges(n, bins)
    check_prompts_fit(context, task_ids)
    samplers = [Sampler(m, context, settings) for m in chosen]  # config errors before sampling
    results = {s.method.name: run_method(s, policy.params, task_ids, list(seeds), edges,
                                         groups_per_call, examples)
               for s in samplers}
    result = {"policy": policy.source, "env": exp.env.to_dict(), "tasks": task_ids, "k": k,
              "max_action_tokens": n, "plain_forward_budget_per_group": k * (n - 1),
              "seeds": list(seeds), "eta": eta, "confidence": CONFIDENCE,
              "groups_per_call": groups_per_call,
              "latr": settings.to_dict(), "histogram_edges": edges, "methods": results,
              "config": config.to_dict(), "machine": machine_info() if machine is None else machine}
    print(f"LATR sampling study of {policy.source} on {exp.env.name}: {tasks} held-out tasks x "
          f"k = {k}, n = {n} tokens, seeds {','.join(map(str, seeds))}")
    print_tables(result)
    if output is not None:
        write_json(output, result)
    return result


def print_tables(result: dict) -> None:
    """The metrics (mean ± 95% CI over seeds) and the event histograms, as Markdown."""
    seeds = len(result["seeds"])
    rows = []
    for name, r in result["methods"].items():
        cells = [format_interval(r["summary"][key], seeds) if r["summary"][key]["n"] else "n.a."
                 for key, _ in METRICS]
        rows.append([name, "-" if r["tree_slots"] is None else r["tree_slots"]] + cells)
    print_table(["method", "tree slots"] + [label for _, label in METRICS], rows)
    edges = result["histogram_edges"]
    labels = [f"[{lo}, {hi})" for lo, hi in zip(edges[:-1], edges[1:])]
    labels[-1] = labels[-1][:-1] + "]"
    rows = []
    for name, r in result["methods"].items():
        for kind, label in EVENT_KINDS.items() if r["events"] else ():
            e = r["events"][kind]
            rows.append([name, label] + e["counts"] + [f"{e['logged']}/{e['total']}"])
    if rows:
        print("\nevent steps (all seeds and groups):")
        print_table(["method", "event"] + labels + ["logged/total"], rows)


# ----------------------------------------------------------------------------- flags

def parse_seeds(values: Sequence[str]) -> list[int]:
    """Distinct integer seeds; ValueError otherwise."""
    try:
        seeds = [int(v) for v in values]
    except ValueError:
        raise ValueError(f"{','.join(values)}: expected comma-separated integers") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"{','.join(values)}: expected distinct integers")
    return seeds


def checked_output(path: str) -> str:
    """--output, once its directory is known to take a new file (before minutes of sampling)."""
    if os.path.isdir(path):
        fail(f"--output={path} is a directory; name the JSON file to write")
    try:
        check_writable(os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        fail(f"--output={path}: its directory is not writable ({e.strerror or e})")
    return path


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if _MERGE.value:
        output = checked_output(_OUTPUT.value)
        try:
            merge_files(_MERGE.value, output)
        except ValueError as e:
            fail(f"--merge: {e}")
        return
    try:
        seeds = parse_seeds(_SEEDS.value)
    except ValueError as e:
        fail(f"--seeds={e}")
    try:
        make_methods(_METHODS.value, 1, _ETA.value)
    except ValueError as e:
        fail(f"--methods={e}")
    if _GROUPS_PER_CALL.value and _TASKS.value % _GROUPS_PER_CALL.value:
        fail(f"--groups_per_call={_GROUPS_PER_CALL.value} does not divide --tasks={_TASKS.value} "
             "(every call has the shape the warm-up compiled)")
    output = checked_output(_OUTPUT.value)
    run(_CONFIG.value, _TASKS.value, _K.value, seeds, _METHODS.value, _ETA.value, output,
        _CHECKPOINT.value, bins=_BINS.value, groups_per_call=_GROUPS_PER_CALL.value,
        examples=_EXAMPLES.value)


def with_default_config(argv: list[str]) -> list[str]:
    """argv with `--config=<configs/countdown_latr.py>` first when it names no config. (A
    default in the flag's definition would be loaded at import, before `--config.x=...`
    overrides could be reported in one line.)"""
    if any(a == "--config" or a.startswith("--config=") for a in argv[1:]):
        return argv
    return argv[:1] + [f"--config={DEFAULT_CONFIG}"] + argv[1:]


if __name__ == "__main__":
    sys.argv = with_default_config(sys.argv)
    run_app(main)

