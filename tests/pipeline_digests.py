"""Digests of short fixed toy runs that cover every registered rollout strategy and advantage: what the
pipeline computes, recorded so that a change that means to keep the numbers can prove it did.

Each case is the toy experiment (tests/toy_run.py) with a few overrides, trained for STEPS steps
from a short warm start of the one-block tiny model (WARM_START from `toy_run.one_layer_policy`:
enough for it to write some legal moves, so that the step-level rewards, and hence those cases'
advantages, differ within groups); its digest is every step's deterministic metrics (wall-clock
timings left out) and a hash of the final parameters' bytes. `tests/test_pipeline_digests.py`
compares a fresh run of every case to `tests/data/pipeline_digests.json`.

    python tests/pipeline_digests.py --write [case ...]     # record (all cases by default)
    python tests/pipeline_digests.py --check [case ...]     # compare, naming what differs

The digests were first recorded by the code before the pipeline's redesign (5 steps from a
30-step warm start of the four-block tiny model); the code after it reproduced them exactly, then
recorded 2 steps from the same warm start, and the present ones come from the one-block model
(the digests' programs trace and compile about three times faster; a 16-step warm start writes no
legal FrozenLake move, which leaves most cases' advantages zero). Record again only when a change
is meant to change the numbers, and say which.

Float results depend on the machine as well as the code: XLA:CPU and the kernels it calls choose
vector widths and block sizes by the processor, so the same program sums in another order on
another processor. The digests recorded on an AMD EPYC (32 MiB L3) and run on an Intel Xeon
with AVX-512 (48 KiB L1d, 480 MiB L3) differed from the first update on by float rounding (the
largest metric difference 1.2e-5 relative, a gradient norm; every count equal). So a recording
names the machine that made it (`machine()`: processor, vector extensions, caches, jaxlib, XLA
flags); on that machine a fresh run must match it bit for bit, on any other within float
tolerance (metrics to RTOL/ATOL, and each parameter's update norm, |final - warm start|, to
RTOL), which a changed computation does not pass.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

# tests/ after the repository root: tests/environments must not shadow the environments package
sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                os.path.dirname(os.path.abspath(__file__))]
import conftest  # noqa: E402,F401  (the test suite's XLA flags and CPU platform, before JAX starts)
from toy_run import ROOT, one_layer_policy, toy_config  # noqa: E402
from jaxtree.models.lora import content_hash  # noqa: E402

STEPS = 2
DIGESTS = os.path.join(ROOT, "tests", "data", "pipeline_digests.json")
# Float tolerance on a machine other than the recording one: about 8x the largest difference
# measured between two processors (a gradient norm, 1.2e-5 relative) and between two sets of XLA
# flags on one processor (an update norm, 1.3e-5), and ATOL for metrics that are zero up to
# rounding (a KL of identical policies, ~1e-14; a clipped-ratio loss, ~1e-8).
RTOL, ATOL = 1e-4, 1e-6

# Countdown (one turn) at toy size for LATR: k = 4 rows per task, answers of at most 16 tokens.
_COUNTDOWN = {
    "env.name": "countdown",
    "env.options": {"min_numbers": 2, "max_numbers": 2, "max_number": 10, "max_target": 100,
                    "style": "compact"},
    "rollout.max_turns": 0, "rollout.max_action_tokens": 16, "rollout.group_size": 4,
    "train.micro_batch_size": 4,
}

# Each registered rollout strategy paired with an advantage (and reward terms and filters) so
# that every strategy and every advantage runs in some case.
CASES: dict[str, dict] = {
    "independent_grpo": {},
    "latr_grpo": {**_COUNTDOWN, "rollout.strategy": "latr", "rollout.latr.windows": (4, 8)},
    "mc_values_vpr": {"rollout.strategy": "mc_values", "rollout.mc_values.continuations": 2,
                      "reward.terms": ("mc_process",), "advantage.name": "vpr"},
    "patr_rtmc": {"rollout.strategy": "patr", "rollout.patr.initial_branches": 2,
                  "rollout.patr.interval": 1, "rollout.patr.expand_top_k": 1,
                  "rollout.patr.max_branches": 4, "rollout.num_slots": 12,
                  "reward.terms": ("outcome", "step_validity", "validation_bonus"),
                  "advantage.name": "rtmc"},
    "tree_random_best_n_gigpo": {
        "rollout.strategy": "patr", "rollout.patr.initial_branches": 2,
        "rollout.patr.interval": 1, "rollout.patr.max_branches": 4,
        "rollout.patr.selection": "random", "rollout.patr.group": "best_n",
        "rollout.patr.repeat_limit": 2, "rollout.num_slots": 12,
        "reward.terms": ("outcome", "step_validity"), "advantage.name": "gigpo"},
    "arpo_grpo_step": {"rollout.strategy": "arpo", "rollout.arpo.initial_branches": 2,
                       "rollout.arpo.max_branches": 4, "rollout.num_slots": 12,
                       "reward.terms": ("outcome", "step_validity"),
                       "advantage.name": "grpo_step", "filter.name": "dynamic_sampling",
                       "filter.dynamic_sampling.max_rounds": 2},
    "best_of_n_rloo": {"rollout.strategy": "best_of_n", "rollout.best_of_n.candidates": 3,
                       "reward.terms": ("outcome", "format_penalty"), "advantage.name": "rloo"},
    "beam_drgrpo": {"rollout.strategy": "beam", "rollout.beam.beams": 1,
                    "rollout.beam.branching": 2, "advantage.name": "drgrpo",
                    "loss.aggregation": "seq-sum", "filter.name": "top_std",
                    "filter.top_std.keep_fraction": 0.5},
    "lookahead_vpr": {"rollout.strategy": "lookahead", "rollout.lookahead.beams": 1,
                      "rollout.lookahead.branching": 2, "rollout.lookahead.depth": 1,
                      "rollout.num_slots": 16, "reward.terms": ("verifier",),
                      "advantage.name": "vpr"},
}


# The warm start every case of an environment starts from (trained once per run of the cases).
WARM_START = {"sft.num_episodes": 64, "sft.steps": 30, "sft.warmup_steps": 4,
              "sft.batch_size": 8, "sft.log_every": 10}


def _config(overrides: dict):
    config = toy_config(steps=STEPS)
    for path, value in overrides.items():
        section, _, rest = path.partition(".")
        node = config[section]
        *parents, field = rest.split(".")
        for parent in parents:
            node = node[parent]
        node[field] = value
    return config


def warm_starts(directory: str) -> dict[str, str]:
    """{environment name: warm-start checkpoint} of every environment the cases use, each
    trained from the one-block tiny model (`toy_run.one_layer_policy`)."""
    from jaxtree.train import jobs
    model = one_layer_policy(os.path.join(directory, "one_layer"))
    paths = {}
    for overrides in CASES.values():
        env = overrides.get("env.name", "frozen_lake")
        if env not in paths:
            env_overrides = {k: v for k, v in overrides.items() if k.startswith("env.")}
            paths[env] = jobs.sft_job(_config({**env_overrides, **WARM_START,
                                               "model.name": model}),
                                      os.path.join(directory, f"sft_{env}"))
    return paths


def case_config(name: str, warm_start: dict[str, str]):
    """The toy experiment of case `name` from its environment's warm start, STEPS steps, one
    checkpoint at the end."""
    env = CASES[name].get("env.name", "frozen_lake")
    # the per-trajectory update the digests were recorded with (the prefix-shared one computes
    # the same loss up to float reassociation: tests/test_prefix_update.py)
    return _config({"model.name": warm_start[env], "checkpoint.every": STEPS,
                    "eval.every": STEPS, "train.prefix_sharing": "off", **CASES[name]})


def case_reads(name: str, warm_start: dict[str, str]) -> set[str]:
    """The per-turn labels case `name`'s experiment reads."""
    from jaxtree.experiment import Experiment
    from jaxtree.train.pipeline import labels_read
    return set(labels_read(Experiment.from_config(case_config(name, warm_start))))


def params_digest(params) -> str:
    """sha256 over every parameter leaf's path, dtype, shape and bytes."""
    return content_hash(params)


def update_norms(initial, final) -> dict[str, float]:
    """{parameter path: |final - initial|} (float64): what the steps changed, leaf by leaf."""
    import jax
    import numpy as np
    start = dict(jax.tree_util.tree_flatten_with_path(initial)[0])
    return {jax.tree_util.keystr(path): float(np.linalg.norm(
                np.asarray(leaf, np.float64) - np.asarray(start[path], np.float64)))
            for path, leaf in jax.tree_util.tree_flatten_with_path(final)[0]}


def machine() -> dict[str, str]:
    """What a digest's floats depend on besides the code: the processor, jaxlib and XLA flags."""
    import jaxlib.version
    from jaxtree.utils import processor
    return {**processor(), "jaxlib": jaxlib.version.__version__,
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


def deterministic(records: list[dict]) -> list[dict]:
    """The metric records without wall-clock measurements."""
    from jaxtree.rollout.stats import TIMING_METRICS
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in TIMING_METRICS}
            for r in records]


def run_case(name: str, warm_start: dict[str, str], workdir: str) -> dict:
    """{'metrics': per-step deterministic metrics, 'params': final parameter digest,
    'update_norms': update_norms(warm start, final)}."""
    from jaxtree.checkpoints import load_policy_checkpoint
    from jaxtree.train import jobs
    from jaxtree.train.metrics import read_metrics
    config = case_config(name, warm_start)
    result = jobs.train_job(config, workdir)
    assert result is not None and result["step"] == STEPS, result
    params = load_policy_checkpoint(workdir)[1]
    initial = load_policy_checkpoint(config.model.name)[1]
    # JSON round trip: the stored form (floats as repr, exact)
    return json.loads(json.dumps({"metrics": deterministic(read_metrics(workdir)),
                                  "params": params_digest(params),
                                  "update_norms": update_norms(initial, params)}))


# Metrics a run logs only when its experiment reads the per-turn label they count (the first
# recording, made before labels were computed on demand, has them for every run).
ONLY_WHEN_READ = {"rollout/verified_rate": "verified"}


def _close(new, old, rtol: float, atol: float = 0.0) -> bool:
    numbers = (int, float)
    if isinstance(new, numbers) and isinstance(old, numbers) and not isinstance(new, bool):
        return abs(new - old) <= atol + rtol * abs(old)
    return new == old


def differences(stored: dict, fresh: dict, reads: set[str] = frozenset(),
                exact: bool = True) -> list[str]:
    """What a fresh digest changed: every stored metric that differs or is missing (unless it
    is one of ONLY_WHEN_READ and its label is not in `reads`), and the parameters (metrics a
    run adds beyond the stored ones are not differences). `exact`: bit for bit (the recording
    machine); else numbers within RTOL/ATOL and parameter updates within RTOL."""
    out = []
    if len(fresh["metrics"]) != len(stored["metrics"]):
        out.append(f"{len(fresh['metrics'])} metric records, stored {len(stored['metrics'])}")
    for old, new in zip(stored["metrics"], fresh["metrics"]):
        for key, value in old.items():
            if key in ONLY_WHEN_READ and ONLY_WHEN_READ[key] not in reads and key not in new:
                continue
            if key not in new:
                out.append(f"step {old.get('step')}: {key} missing")
            elif (new[key] != value) if exact else not _close(new[key], value, RTOL, ATOL):
                out.append(f"step {old.get('step')}: {key} {new[key]!r}, stored {value!r}")
    if exact:
        if fresh["params"] != stored["params"]:
            out.append("final parameters differ")
        return out
    if set(fresh["update_norms"]) != set(stored["update_norms"]):
        out.append("the parameter leaves differ")
    for path, value in stored["update_norms"].items():
        if path in fresh["update_norms"] and not _close(fresh["update_norms"][path], value, RTOL):
            out.append(f"update of {path}: |change| {fresh['update_norms'][path]!r}, "
                       f"stored {value!r}")
    return out


def load_digests() -> dict:
    """{'machine': the recording machine, 'cases': {case: digest}} (empty before a recording)."""
    if not os.path.exists(DIGESTS):
        return {"machine": {}, "cases": {}}
    with open(DIGESTS) as f:
        return json.load(f)


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("--write", "--check"):
        raise SystemExit(__doc__)
    names = argv[1:] or list(CASES)
    digests, here = load_digests(), machine()
    exact = digests["machine"] == here
    if argv[0] == "--write" and not exact and set(names) != set(CASES):
        raise SystemExit("this machine did not record the digests: record every case "
                         "(python tests/pipeline_digests.py --write), not some")
    if argv[0] == "--check":
        print("bit for bit (the recording machine)" if exact else
              f"within float tolerance (recorded on {digests['machine'].get('processor')})")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        warm_start = warm_starts(tmp)
        for name in names:
            fresh = run_case(name, warm_start, os.path.join(tmp, name))
            if argv[0] == "--write":
                digests["cases"][name] = fresh
                print(name, fresh["params"][:16], flush=True)
            else:
                diff = differences(digests["cases"][name], fresh, case_reads(name, warm_start),
                                   exact)
                failed |= bool(diff)
                print(name, "same" if not diff else "DIFFERS: " + "; ".join(diff[:5]),
                      flush=True)
    if argv[0] == "--write":
        digests["machine"] = here
        os.makedirs(os.path.dirname(DIGESTS), exist_ok=True)
        with open(DIGESTS, "w") as f:
            json.dump(digests, f, indent=1, sort_keys=True)
            f.write("\n")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
