"""launch.policy_drift: the size and direction of training updates, against flat-vector arithmetic."""

import json

import jax
import numpy as np
import pytest

from jaxtree import checkpoints, models
from jaxtree.policy import load_policy
from launch.policy_drift import parameter_drift
from toy_run import assert_one_line_error, one_layer_policy, run_module_jobs


def test_a_hand_checked_pair_of_updates():
    base = {"w": np.array([3.0, 4.0]), "b": np.array([0.0])}
    drift = parameter_drift(base, {"up": {"w": np.array([3.0, 5.0]), "b": np.array([0.0])},
                                   "right": {"w": np.array([4.0, 4.0]), "b": np.array([0.0])}})
    assert drift["runs"]["up"] == {"relative_change": 0.2, "max_abs_change": 1.0,
                                   "changed_fraction": 1 / 3}
    assert drift["runs"]["right"]["relative_change"] == 0.2
    assert drift["cosine"] == {"up|right": 0.0}  # orthogonal updates


def test_random_updates_match_the_flattened_vectors():
    rng = np.random.default_rng(0)

    def make():
        return {"a": rng.normal(size=(3, 4)),
                "b": {"c": rng.normal(size=5), "d": rng.normal(size=(2, 2, 2))}}

    def flat(tree):
        return np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(tree)])

    base, runs = make(), {name: make() for name in ("x", "y", "z")}
    runs["z"]["a"] = base["a"].copy()  # a run that left one parameter alone
    drift = parameter_drift(base, runs)
    for name, params in runs.items():
        delta = flat(params) - flat(base)
        measured = drift["runs"][name]
        assert measured["relative_change"] == pytest.approx(
            np.linalg.norm(delta) / np.linalg.norm(flat(base)), rel=1e-12)
        assert measured["max_abs_change"] == np.abs(delta).max()
        assert measured["changed_fraction"] == np.mean(delta != 0)
    for pair, cosine in drift["cosine"].items():
        a, b = (flat(runs[n]) - flat(base) for n in pair.split("|"))
        assert cosine == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), rel=1e-12)
    assert set(drift["cosine"]) == {"x|y", "x|z", "y|z"}


def test_the_job_reads_checkpoints_and_refuses_another_architecture_in_one_line(tmp_path):
    base = one_layer_policy(str(tmp_path / "base"), seed=0)
    run = one_layer_policy(str(tmp_path / "run"), seed=1)
    config = models.get_preset("tiny").replace(num_layers=2)
    deeper = str(tmp_path / "deeper")
    checkpoints.save_policy(deeper, 0, models.init_params(config, jax.random.key(0)), config,
                            "byte")
    out = str(tmp_path / "drift.json")
    good, other = run_module_jobs(
        ("-m", "launch.policy_drift", f"--base={base}", f"--runs={run}", f"--out={out}"),
        ("-m", "launch.policy_drift", f"--base={base}", f"--runs={deeper}"))
    assert good.returncode == 0, good.stderr[-3000:]
    assert "relative change" in good.stdout
    with open(out) as f:
        written = json.load(f)
    expected = parameter_drift(load_policy(base).params, {run: load_policy(run).params})
    assert written["runs"] == expected["runs"] and written["base"] == base
    assert_one_line_error(other, 2, "--runs", "not shaped like the base")
