"""The prefix-shared update against the per-trajectory one on batches the trainer saved.

    python -m launch.train --config=configs/frozen_lake_smollm2.py --workdir=/tmp/b_grpo \
        --config.train.save_batches=1 --stop_after=1
    python -m launch.benchmark prefix_update --batch_files=/tmp/b_grpo/batches/step_1.npz \
        --repeats=3

For each saved batch (`jaxtree.train.batch_update.save_batch`: the tokens, masks, behaviour
log-probs, groups and advantages the update received, and the run's config) the update runs as
the trainer runs it (`BatchUpdate`: the run's model, loss, optimizer, micro-batch size, memory
trade-offs and minibatches), once per tree layout: `train.prefix_sharing` 'off' (every trajectory
from its first token) and 'on' (each group's token tree computed once). Each layout runs in a
fresh process of its own, so that its peak resident memory is its own: the model loads, then
one untimed call of each part compiles, then `repeats` timed calls of the reference log-probs
(the frozen policy's log-probs of every token: the KL term's reference, and the same pass as the
sampler-agreement check) and of the optimizer steps (forward, backward and AdamW over every
minibatch, each from the same starting state). Reported: the batch's unique-token fraction, the
median seconds of each part both ways, their ratios against the fraction, peak RSS above the
loaded model, and the largest difference of the reference log-probs and of the parameters
after the update between the two layouts (the same computation, so float32 noise only).

`--overrides` (a JSON object of dotted config fields -> values) changes the saved runs' configs
before they load, e.g. `'{"model.cpu_library_fusions": false}'` to time the update's programs
compiled without XLA:CPU's library fusions.

The parameters are the run's starting model as `model.name` names it (its random init for a
preset, the released weights for a named model): the time of a step does not depend on their
values, only on the shapes the batch gives it.

`run_synthetic` (`--synthetic=CONFIG_FILE`) measures the break-even of `train.prefix_sharing='auto'`:
random groups whose rollouts share a prompt of a chosen share of their length, so the unique
fraction sweeps from ~1/n to 1 on one model and shape.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from jaxtree.compare.grid import import_file
from jaxtree.experiment import Experiment, set_path
from jaxtree.train.batch_update import BatchUpdate, SavedBatch, load_batch
from jaxtree.train.pipeline import build_updater
from jaxtree.utils import print_table
from launch.benchmarks.common import (interleaved_median_seconds, machine_info, median_seconds,
                                      write_json)

LAYOUTS = ("off", "on")


def _memory_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def config_with(config: dict, overrides: dict) -> dict:
    """A copy of the nested `config` with each dotted field of `overrides` set ('model.lora.rank'
    -> config['model']['lora']['rank']); raises ConfigError naming a field the result does not
    have or a value it refuses (`Experiment.from_config`)."""
    config = copy.deepcopy(config)
    for path, value in overrides.items():
        set_path(config, path, value)
    Experiment.from_config(config)
    return config


def check_batch(path: str, overrides: dict) -> None:
    """Raises ValueError if `path` is not a saved batch, ConfigError (a ValueError) if its config
    refuses `overrides`: cheap, before any model loads."""
    config_with(load_batch(path).config, overrides)


def measure(saved: SavedBatch, layout: str, repeats: int, overrides: dict | None = None) -> dict:
    """Times one layout in this process: compiles, then `repeats` timed calls of each part, with
    the saved run's config changed by `overrides` (`config_with`)."""
    exp = Experiment.from_config(config_with(saved.config, overrides or {}))
    policy = exp.model.load(training=True)
    updater = build_updater(exp, policy, exp.env.factory()().max_steps)
    update = BatchUpdate(updater, exp.train, policy.tokenizer.pad_id)
    inputs = update.inputs(saved.tokens, saved.action_mask, saved.behaviour_logprobs,
                           saved.advantages, saved.group_ids)
    shared = layout == "on"
    reference = updater.place_params(policy.params)
    start = updater.init_state(policy.params)
    loaded_kib = _memory_kib("VmRSS")
    ref = update.logprobs(reference, inputs, shared)
    final = {}

    def optimizer_steps():
        state = jax.tree_util.tree_map(jnp.copy, start)  # each call from the same state
        state, metrics = update.optimizer_steps(state, inputs, ref, shared, saved.step)
        final["params"] = state.params
        jax.block_until_ready(metrics)

    ref_seconds, ref_times = median_seconds(lambda: update.logprobs(reference, inputs, shared),
                                            repeats)
    update_seconds, update_times = median_seconds(optimizer_steps, repeats)
    return {"layout": layout, "reference_seconds": ref_seconds, "reference_times": ref_times,
            "update_seconds": update_seconds, "update_times": update_times,
            "peak_rss_mib": _memory_kib("VmHWM") / 1024,
            "peak_above_loaded_mib": (_memory_kib("VmHWM") - loaded_kib) / 1024,
            "unique_fraction": inputs.unique_fraction, "rows": inputs.real,
            "tokens": int(inputs.widths[:inputs.real].sum()),
            "groups": int(len(np.unique(saved.group_ids))),
            "model": exp.model.name, "strategy": exp.rollout.strategy,
            "env": exp.env.name}, ref, jax.device_get(final["params"])


def _measure_in_subprocess(path: str, layout: str, repeats: int, scratch: str, overrides: dict):
    out = os.path.join(scratch, layout)
    subprocess.run([sys.executable, "-m", "launch.benchmarks.prefix_update", path, layout,
                    str(repeats), out, json.dumps(overrides)], check=True)
    with open(out + ".json") as f:
        result = json.load(f)
    with np.load(out + ".npz") as data:
        arrays = dict(data)
    return result, arrays


def run(paths, repeats: int, output: str, overrides: dict | None = None) -> None:
    overrides = overrides or {}
    for path in paths:  # every file and override checked before the first model loads
        check_batch(path, overrides)
    results, table = [], []
    for path in paths:
        with tempfile.TemporaryDirectory() as scratch:
            measured = {layout: _measure_in_subprocess(path, layout, repeats, scratch, overrides)
                        for layout in LAYOUTS}
        (off, off_arrays), (on, on_arrays) = measured["off"], measured["on"]
        ref_diff = float(np.abs(off_arrays["reference"] - on_arrays["reference"]).max())
        param_diff = max(float(np.abs(off_arrays[k] - on_arrays[k]).max())
                         for k in off_arrays if k.startswith("param/"))
        fraction = off["unique_fraction"]
        update_ratio = on["update_seconds"] / off["update_seconds"]
        ref_ratio = on["reference_seconds"] / off["reference_seconds"]
        results.append({"batch": path, "off": off, "on": on, "update_ratio": update_ratio,
                        "reference_ratio": ref_ratio, "max_reference_difference": ref_diff,
                        "max_param_difference": param_diff})
        table.append([os.path.basename(os.path.dirname(os.path.dirname(path))) or path,
                      off["model"], off["strategy"], off["env"], off["rows"], off["tokens"],
                      f"{fraction:.3f}",
                      f"{off['update_seconds']:.2f}", f"{on['update_seconds']:.2f}",
                      f"{update_ratio:.2f}", f"{1 / update_ratio:.2f}x",
                      f"{off['reference_seconds']:.2f}", f"{on['reference_seconds']:.2f}",
                      f"{ref_ratio:.2f}",
                      f"{off['peak_above_loaded_mib']:,.0f}", f"{on['peak_above_loaded_mib']:,.0f}",
                      f"{ref_diff:.1e}", f"{param_diff:.1e}"])
        print(f"  {path}: done", flush=True)
    print(f"\nprefix-shared ('on') against per-trajectory ('off') update, median of {repeats}; "
          "ratios are on / off (goal: update ratio <= 1.25 x unique fraction)")
    print_table(["run", "model", "strategy", "env", "rows", "tokens", "unique fraction",
                 "update off s", "update on s", "update ratio", "speed-up", "reference off s",
                 "reference on s", "reference ratio", "peak off MiB", "peak on MiB",
                 "max ref diff", "max param diff"], table)
    write_json(output, {"benchmark": "prefix_update", "machine": machine_info(),
                        "repeats": repeats, "overrides": overrides, "results": results})


# ---------------------------------------------------------------------- break-even sweep

def synthetic_batch(config: dict, vocab: int, groups: int, group_size: int, length: int,
                    shared: float, seed: int = 0) -> SavedBatch:
    """`groups` groups of `group_size` rows of `length` tokens whose first `shared` x length
    tokens are the group's own prompt (identical within the group), the rest each row's own
    action (random tokens, so no further sharing)."""
    rng = np.random.default_rng(seed)
    prompt = int(round(shared * length))
    rows = groups * group_size
    tokens = rng.integers(1, vocab, (rows, length)).astype(np.int32)
    for g in range(groups):
        tokens[g * group_size:(g + 1) * group_size, :prompt] = tokens[g * group_size, :prompt]
    mask = np.zeros((rows, length), bool)
    mask[:, max(prompt, 1):] = True
    old = np.where(mask, -rng.uniform(0.1, 3.0, (rows, length)), 0).astype(np.float32)
    advantages = np.where(mask, rng.normal(size=(rows, 1)), 0).astype(np.float32)
    return SavedBatch(tokens, mask, old, advantages, np.repeat(np.arange(groups), group_size),
                      config, 1)


def run_synthetic(config_file: str, overrides: dict, shares, groups: int, group_size: int,
                  length: int, repeats: int, output: str) -> None:
    """Both layouts on `synthetic_batch`es of each prompt share, in this process (timed in
    turn), with the experiment `config_file` plus `overrides` names (its model, loss, micro-batch
    size and memory trade-offs)."""
    config = import_file(config_file, "_jaxtree_benchmark_config").get_config().to_dict()
    exp = Experiment.from_config(config_with(config, overrides))
    policy = exp.model.load(training=True)
    updater = build_updater(exp, policy, exp.env.factory()().max_steps)
    update = BatchUpdate(updater, exp.train, policy.tokenizer.pad_id)
    reference = updater.place_params(policy.params)
    start = updater.init_state(policy.params)
    results, table = [], []
    for share in shares:
        saved = synthetic_batch(exp.to_dict(), min(policy.config.vocab_size, 256), groups,
                                group_size, length, share)
        inputs = update.inputs(saved.tokens, saved.action_mask, saved.behaviour_logprobs,
                               saved.advantages, saved.group_ids)
        ref = update.logprobs(reference, inputs, False)

        def both(shared):
            logprobs = update.logprobs(reference, inputs, shared)
            state = jax.tree_util.tree_map(jnp.copy, start)
            state, metrics = update.optimizer_steps(state, inputs, ref, shared, 1)
            jax.block_until_ready((logprobs, metrics))

        timed = interleaved_median_seconds({"off": lambda: both(False), "on": lambda: both(True)},
                                           repeats)
        ratio = timed["on"][0] / timed["off"][0]
        results.append({"prompt_share": share, "unique_fraction": inputs.unique_fraction,
                        "off_seconds": timed["off"][0], "on_seconds": timed["on"][0],
                        "ratio": ratio, "times": {k: v[1] for k, v in timed.items()}})
        table.append([f"{share:.2f}", f"{inputs.unique_fraction:.3f}", f"{timed['off'][0]:.3f}",
                      f"{timed['on'][0]:.3f}", f"{ratio:.2f}"])
        print(f"  prompt share {share}: done", flush=True)
    print(f"\nreference log-probs + update, {groups} groups x {group_size} rows x {length} tokens "
          f"({exp.model.name}), median of {repeats}; the break-even is where the ratio crosses 1")
    print_table(["prompt share", "unique fraction", "off s", "on s", "on / off"], table)
    write_json(output, {"benchmark": "prefix_update_synthetic", "machine": machine_info(),
                        "config": config_file, "overrides": overrides, "groups": groups,
                        "group_size": group_size, "length": length, "results": results})


def _probe(path: str, layout: str, repeats: int, out: str, overrides: dict) -> None:
    result, ref, params = measure(load_batch(path), layout, repeats, overrides)
    with open(out + ".json", "w") as f:
        json.dump(result, f)
    flat = {f"param/{jax.tree_util.keystr(k)}": np.asarray(v)
            for k, v in jax.tree_util.tree_leaves_with_path(params)}
    np.savez(out + ".npz", reference=ref, **flat)


if __name__ == "__main__":  # one layout of one batch, in a process of its own (`run`)
    _probe(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4],
           json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})
