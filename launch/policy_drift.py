"""How far, and in which direction, training moved each policy from the one it started from.

    python -m launch.policy_drift --base=WARM_START --runs=RUN_A,RUN_B[,...] [--out=drift.json]

`--base` and each of `--runs` is anything `load_policy` loads (a workdir, its `checkpoints`
directory or one step directory; a LoRA run's checkpoint is merged onto its recorded base). Prints,
per run, the size of its update θ - θ₀: relative to the base (‖θ - θ₀‖ / ‖θ₀‖), its largest
entry, and the share of weights that changed at all; then the cosine between every two runs'
updates. With Adam every weight moves by at most about the learning rate a step whatever the
gradient, so runs of one budget travel about the same distance; whether two rewards trained
the policy alike shows in the cosine, not the distance. A comparison whose held-out metrics
do not move is read against these figures: a tiny relative change says the runs were too short
(or their learning rate too small) to tell the variants apart, not that the variants are alike.
"""

from __future__ import annotations

import json

import jax
import numpy as np
from absl import flags

from jaxtree.policy import load_policy
from jaxtree.utils import print_table
from launch.common import fail, load_named_policy, run_app

_BASE = flags.DEFINE_string("base", None, "The policy the runs started from.")
_RUNS = flags.DEFINE_list("runs", None, "Trained policies (comma-separated).")
_OUT = flags.DEFINE_string("out", None, "Optional JSON file for the figures.")


def parameter_drift(base, runs: dict) -> dict:
    """The update of each of `runs` ({name: params}) from `base` (params of the same structure).

    Returns {"runs": {name: {"relative_change": ‖θ - θ₀‖ / ‖θ₀‖, "max_abs_change": max |θ - θ₀|,
    "changed_fraction": share of entries with θ ≠ θ₀}}, "cosine": {"a|b": cos(θ_a - θ₀, θ_b -
    θ₀)} for every pair}, in float64 one leaf at a time (no run's whole update is held twice).
    """
    names = list(runs)
    base_leaves, structure = jax.tree_util.tree_flatten(base)
    run_leaves = {}
    for name in names:
        leaves, run_structure = jax.tree_util.tree_flatten(runs[name])
        if run_structure != structure:
            raise ValueError(f"{name}: its parameters are not shaped like the base's")
        run_leaves[name] = leaves
    base_sq = 0.0
    gram = np.zeros((len(names), len(names)))
    max_abs = dict.fromkeys(names, 0.0)
    changed = dict.fromkeys(names, 0)
    size = 0
    for i, leaf in enumerate(base_leaves):
        leaf = np.asarray(leaf, np.float64)
        base_sq += float(np.sum(leaf * leaf))
        size += leaf.size
        deltas = []
        for name in names:
            other = np.asarray(run_leaves[name][i], np.float64)
            if other.shape != leaf.shape:
                raise ValueError(f"{name}: a parameter of shape {other.shape} where the base's "
                                 f"is {leaf.shape}")
            delta = (other - leaf).ravel()
            max_abs[name] = max(max_abs[name], float(np.max(np.abs(delta), initial=0.0)))
            changed[name] += int(np.count_nonzero(delta))
            deltas.append(delta)
        stacked = np.stack(deltas)
        gram += stacked @ stacked.T
    norms = np.sqrt(np.diag(gram))
    result = {"runs": {name: {"relative_change": float(norms[a] / np.sqrt(base_sq)),
                              "max_abs_change": max_abs[name],
                              "changed_fraction": changed[name] / size}
                       for a, name in enumerate(names)},
              "cosine": {}}
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            denominator = norms[a] * norms[b]
            result["cosine"][f"{names[a]}|{names[b]}"] = (
                float(gram[a, b] / denominator) if denominator > 0 else float("nan"))
    return result


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if not _BASE.value or not _RUNS.value:
        fail("--base and --runs are required")
    if len(set(_RUNS.value)) != len(_RUNS.value):
        fail("--runs: a run is named twice")
    base = load_named_policy("--base", lambda: load_policy(_BASE.value))
    runs = {}
    for run in _RUNS.value:
        policy = load_named_policy("--runs", lambda run=run: load_policy(run))
        runs[run] = policy.params
    try:
        drift = parameter_drift(base.params, runs)
    except ValueError as e:
        fail(f"--runs: {e}")
    print_table(["run", "relative change", "max abs change", "changed"],
                [[name, f"{d['relative_change']:.3e}", f"{d['max_abs_change']:.3e}",
                  f"{d['changed_fraction']:.3f}"] for name, d in drift["runs"].items()])
    if drift["cosine"]:
        print_table(["runs", "cosine of their updates"],
                    [[pair, f"{value:.3f}"] for pair, value in drift["cosine"].items()])
    if _OUT.value:
        with open(_OUT.value, "w") as f:
            json.dump({"base": _BASE.value, **drift}, f, indent=1)
        print(f"wrote {_OUT.value}")


if __name__ == "__main__":
    run_app(main, compilation_cache=False)
