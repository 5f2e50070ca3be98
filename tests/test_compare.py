"""The comparison harness (jaxtree.compare, launch.compare), with a fake runner: nothing is
trained (the grid's variants are validated as typed experiments, which imports JAX)."""

import glob
import io
import json
import math
import os
import sys

import numpy as np
import pytest
from scipy import stats as scipy_stats

from jaxtree import compare
from jaxtree.utils import processor
from toy_run import run_module_jobs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = """
from jaxtree.experiment import base_config

def get_config():
    c = base_config("frozen_lake", dict(), context_length=256, max_action_tokens=8, epsilon=0.2)
    c.sft.steps = 10
    c.sft.warmup_steps = 0
    c.train.init = "{init}"
    c.train.steps = {steps}
    c.eval.every = 2
    return c
"""

# (variant, seed) -> eval/success_rate at steps 0, 2, 4 (pass@1 is half of it)
CURVES = {("a", 0): (0.2, 0.7, 0.6), ("a", 1): (0.4, 0.5, 0.8),
          ("b", 0): (0.1, 0.2, 0.3), ("b", 1): (0.3, 0.2, 0.5)}


# The tests that read the curve figures. matplotlib draws one in ~0.15 s and the harness draws
# every metric's on each run, so the ~40 runs of this file would spend ~12 s of CPU on figures
# only these tests open; the others check the harness with the drawing left out.
DRAWS_CURVES = ("test_aggregation_outputs_and_hand_checked_values",)


@pytest.fixture(autouse=True)
def _curves_drawn_only_where_read(request, monkeypatch):
    if request.node.originalname not in DRAWS_CURVES:
        monkeypatch.setattr(compare.results, "plot_curves", lambda results, out: [])


class FakeRunner:
    """Writes what launch.sft / launch.train would leave behind, from CURVES."""

    def __init__(self, fail=(), preempt=(), steps=4, init="sft", stop_warm_start=False):
        self.calls = []
        self.evaluated = []     # the runs that evaluated the warm start instead of reading it
        self.fail = set(fail)
        self.preempt = set(preempt)
        self.steps, self.init = steps, init      # the config file's train.steps and train.init
        # launch.sft stopped by a signal: it saves where it stopped (optimizer state included,
        # to resume) and exits 0
        self.stop_warm_start = stop_warm_start

    def jobs(self, job):
        return [c for c in self.calls if c[0] == job]

    def share_initial_eval(self, workdir, variant, seed):
        """As the trainer does (jaxtree.train.shared_eval): reads the warm start's step-0
        evaluation when its record is there, else evaluates and writes it."""
        evals = os.path.join(workdir, "sft", "initial_evals")
        if not os.path.isdir(os.path.join(workdir, "sft")):
            return
        path = os.path.join(evals, "0123abcd.json")
        if os.path.exists(path):
            return
        self.evaluated.append((variant, seed))
        os.makedirs(evals, exist_ok=True)
        with open(path, "w") as f:
            json.dump({"metrics": {"success_rate": 0.25}, "transcripts": []}, f)

    def __call__(self, argv, workdir, log_path):
        job = argv[argv.index("-m") + 1]
        flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
        os.makedirs(workdir, exist_ok=True)
        variant = os.path.basename(os.path.dirname(workdir))
        seed = int(flags.get("config.train.seed", -1))
        self.calls.append((job, variant, seed))
        with open(log_path, "a") as log:
            log.write(f"fake {job} {workdir}\n")
            if job == "launch.sft":
                if "warm_start" in self.fail:
                    log.write("RuntimeError: no demonstrations\n")
                    return 1
                if self.stop_warm_start:
                    os.makedirs(os.path.join(workdir, "checkpoints", "5", "opt_state"))
                    return 0
                os.makedirs(os.path.join(workdir, "checkpoints", "10"), exist_ok=True)
                return 0
            assert os.path.isdir(os.path.join(workdir, "sft", "checkpoints")) or \
                flags.get("config.train.init", self.init) == "model"
            self.share_initial_eval(workdir, variant, seed)
            if (variant, seed) in self.fail:
                log.write("Traceback (most recent call last):\nValueError: boom\n")
                return 3
            steps = int(flags.get("config.train.steps", self.steps))
            curve = CURVES.get((variant, seed), (0.0, 0.5, 1.0))
            preempted = (variant, seed) in self.preempt
            self.preempt.discard((variant, seed))
            done = steps // 2 if preempted else steps
            with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
                for i, step in enumerate(range(0, done + 1, steps // 2)):
                    f.write(json.dumps({"step": step, "eval/success_rate": curve[i],
                                        "eval/pass@1": curve[i] / 2}) + "\n")
                    if step < done:
                        f.write(json.dumps({"step": step + 1, "train/kl": 0.01}) + "\n")
            with open(os.path.join(workdir, "train_summary.json"), "w") as f:
                json.dump({"step": done, "preempted": preempted, "seconds": 1.0}, f)
        return 0


def make_grid(tmp_path, variants=None, name="g", init="sft", steps=4, **extra):
    """configs/exp.py (CONFIG: train.init `init`, train.steps `steps`) and
    configs/grids/<name>.py under tmp_path; returns the grid path."""
    configs = tmp_path / "configs"
    (configs / "grids").mkdir(parents=True, exist_ok=True)
    (configs / "exp.py").write_text(CONFIG.format(init=init, steps=steps))
    grid = dict(config="exp.py", seeds=(0, 1), title="test grid",
                variants=variants if variants is not None else
                {"a": {"loss.kl_coef": 0.0}, "b": {"loss.kl_coef": 0.1}})
    grid.update(extra)
    path = configs / "grids" / f"{name}.py"
    path.write_text(f"def get_grid():\n    return {grid!r}\n")
    return str(path)


def run(grid, out, runner=None, **kwargs):
    stdout, stderr = io.StringIO(), io.StringIO()
    rc = compare.run_compare(grid, str(out), runner=runner or FakeRunner(), stdout=stdout,
                             stderr=stderr, **kwargs)
    return rc, stdout.getvalue(), stderr.getvalue()


# ----------------------------------------------------------------------------- statistics

T_TABLE = {(0.975, 1): 12.706204736174694, (0.975, 2): 4.302652729749462,   # scipy.stats.t.ppf
           (0.975, 4): 2.7764451051977934, (0.975, 9): 2.262157162798205,
           (0.975, 30): 2.0422724563012378, (0.995, 3): 5.840909309733355,
           (0.9, 1): 3.0776835371752544}


def test_t_quantile_matches_reference_values():
    for (p, df), expected in T_TABLE.items():
        assert compare.t_quantile(p, df) == pytest.approx(expected, rel=1e-9)
        assert compare.t_quantile(1 - p, df) == pytest.approx(-expected, rel=1e-9)
    assert compare.t_quantile(0.5, 3) == 0.0
    rng = np.random.default_rng(0)
    for p, df in zip(rng.uniform(0.5005, 0.9995, 40), rng.uniform(0.5, 200, 40)):
        assert compare.t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-8)


def test_mean_ci_matches_numpy_on_random_inputs():
    rng = np.random.default_rng(1)
    for n in range(2, 25):
        values = rng.normal(rng.uniform(-5, 5), rng.uniform(0.01, 3), size=n)
        ci = compare.mean_ci(values)
        t = scipy_stats.t.ppf(0.975, n - 1)
        assert ci.n == n and ci.mean == pytest.approx(np.mean(values), rel=1e-12, abs=1e-12)
        assert ci.half_width == pytest.approx(t * np.std(values, ddof=1) / math.sqrt(n), rel=1e-9)
    # a hand-computed case: [0.6, 0.8] -> 0.7 ± 12.7062 * 0.141421 / 1.41421
    ci = compare.mean_ci([0.6, 0.8])
    assert (ci.mean, ci.n) == (pytest.approx(0.7), 2)
    assert ci.half_width == pytest.approx(1.2706204736, rel=1e-9)
    assert compare.mean_ci([0.5]) == compare.Interval(0.5, None, 1)
    assert compare.mean_ci([]) == compare.Interval(None, None, 0)


def test_values_render_as_ml_collections_parses_them():
    assert compare.render_value("model") == "model"     # a quoted string would keep its quotes
    assert compare.render_value((20, 30)) == "(20, 30)"
    assert compare.render_value([7]) == "(7,)"
    assert compare.render_value(5e-4) == "0.0005"
    assert compare.render_value(True) == "True"
    assert compare.render_value(60) == "60"


# ----------------------------------------------------------------------------- the grid

def test_grid_loading_resolves_the_config_in_the_configs_directory(tmp_path):
    grid = compare.load_grid(make_grid(tmp_path, variants={
        "z": {"train": {"steps": 8}}, "a": {"loss.kl_coef": 0.01}}, overrides={"sft.steps": 2}))
    assert grid.config == str(tmp_path / "configs" / "exp.py")
    assert list(grid.variants) == ["z", "a"]                     # grid order, not sorted
    assert grid.variants["z"] == {"train.steps": 8}              # nested dicts are flattened
    assert (grid.seeds, grid.seed_field, grid.metrics) == ((0, 1), "train.seed",
                                                           compare.DEFAULT_METRICS)
    runs = compare.plan_runs(grid, tmp_path / "out")
    assert [(r.variant, r.seed, r.steps) for r in runs] == [("z", 0, 8), ("z", 1, 8),
                                                            ("a", 0, 4), ("a", 1, 4)]
    assert runs[1].argv[1:] == [
        "-m", "launch.train", f"--config={grid.config}",
        f"--workdir={tmp_path / 'out' / 'runs' / 'z' / 'seed_1'}", "--config.sft.steps=2",
        "--config.train.steps=8", "--config.train.seed=1"]


@pytest.mark.parametrize("case, message", [
    ("missing", "grid file not found"),
    ("no_variants", "has no variants"),
    ("only", "unknown variant(s) in --only: nope"),
    ("no_get_grid", "defines no get_grid()"),
    ("seed_in_variant", "sets the seed field train.seed"),
    ("bad_seeds", "--seeds must be integers"),
    ("bad_config", "exp.py failed to load: RuntimeError: broken"),
    ("reach_keys", "'reach' must be a dict with keys ['metric', 'reference']"),
    ("reach_metric", "reach: metric 'eval/return' is not one of the grid's metrics"),
    ("reach_reference", "reach: reference 'c' is not one of the grid's variants ['a', 'b']"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, case, message):
    reach = {"reach_keys": {"metric": "eval/pass@1"},
             "reach_metric": {"metric": "eval/return", "reference": "a"},
             "reach_reference": {"metric": "eval/pass@1", "reference": "c"}}
    grid = make_grid(tmp_path, variants={} if case == "no_variants" else
                     {"a": {"train.seed": 3}} if case == "seed_in_variant" else None,
                     **({"reach": reach[case]} if case in reach else {}))
    kwargs = {}
    if case == "missing":
        grid = str(tmp_path / "nothing.py")
    elif case == "only":
        kwargs["only"] = ["a", "nope"]
    elif case == "no_get_grid":
        open(grid, "w").write("GRID = {}\n")
    elif case == "bad_seeds":
        kwargs["seeds"] = ["0", "x"]
    elif case == "bad_config":
        (tmp_path / "configs" / "exp.py").write_text(
            "def get_config():\n    raise RuntimeError('broken')\n")
    runner = FakeRunner()
    rc, out, err = run(grid, tmp_path / "out", runner, **kwargs)
    assert rc == 2 and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert runner.calls == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides, message", [
    ({"loss.kl_coeff": 0.1}, ("config.loss.kl_coeff: unknown field (given 0.1); known fields: "
                              "aggregation, norm_constant, eps_low, eps_high, kl_coef, "
                              "entropy_coef")),
    ({"train.init": "scratch"}, "config.train.init: 'scratch' is not one of ('sft', 'model')"),
    ({"loss.kl_coef": -1.0}, "config.loss.kl_coef: -1.0 is not non-negative"),
    ({"train.steps": "many"}, ("config.train.steps: cannot set 'many': Could not override field "
                               "'steps' (reference). many is of original type <class 'str'> and "
                               "cannot be casted to type <class 'int'>")),
    ({"rollout.group_size": 1}, ("config.rollout.group_size: 1 is not >= 2 (group-relative "
                                 "advantages compare the rollouts of a task)")),  # check_experiment
    ({"train.kl_coef": 0.1}, "config.train.kl_coef: moved to config.loss.kl_coef"),
])
def test_an_invalid_variant_is_refused_before_anything_runs(tmp_path, overrides, message):
    grid = make_grid(tmp_path, variants={"a": {}, "kl": overrides})
    runner = FakeRunner()
    rc, out, err = run(grid, tmp_path / "out", runner)
    assert rc == 2 and err == f"compare: error: grid {grid}: variant 'kl': {message}\n", err
    assert runner.calls == [] and out == "" and not (tmp_path / "out").exists()
    with pytest.raises(compare.GridError, match="variant 'kl'"):
        compare.load_grid(grid)


@pytest.mark.parametrize("kwargs", [{"only": ["a"]}, {"dry_run": True}, {"aggregate_only": True},
                                    {"seeds": ["7"]}])
def test_every_variant_of_a_real_config_is_validated_whatever_runs(tmp_path, kwargs):
    """configs/frozen_lake_grpo.py: a misspelt field in a variant that --only leaves out, or with
    --dry_run / --aggregate_only, is still refused before anything runs."""
    grid = make_grid(tmp_path, config=os.path.join(REPO, "configs", "frozen_lake_grpo.py"),
                     variants={"a": {}, "kl": {"loss.kl_coeff": 0.01}})
    runner = FakeRunner()
    rc, out, err = run(grid, tmp_path / "out", runner, **kwargs)
    assert rc == 2 and out == "" and runner.calls == [] and not (tmp_path / "out").exists()
    assert err == (f"compare: error: grid {grid}: variant 'kl': config.loss.kl_coeff: unknown "
                   f"field (given 0.01); known fields: aggregation, norm_constant, eps_low, eps_high, "
                   f"kl_coef, entropy_coef\n")


def test_the_grid_overrides_and_the_seed_field_are_validated_too(tmp_path):
    grid = make_grid(tmp_path, overrides={"eval.evry": 5})
    rc, _, err = run(grid, tmp_path / "out")
    assert rc == 2 and err.startswith(f"compare: error: grid {grid}: variant 'a': "
                                      f"config.eval.evry: unknown field (given 5)")
    grid = make_grid(tmp_path, seed_field="train.sed")
    rc, _, err = run(grid, tmp_path / "out")
    assert rc == 2 and err.startswith(f"compare: error: grid {grid}: variant 'a': "
                                      f"config.train.sed: unknown field (given 0)")
    grid = make_grid(tmp_path, overrides={"train.steps": 20})      # the variants' own checks
    grid_b = make_grid(tmp_path, name="h", overrides={"train.steps": 2},
                       variants={"a": {}, "warm": {"optim.warmup_steps": 5}})
    assert run(grid, tmp_path / "out", dry_run=True)[0] == 0
    rc, _, err = run(grid_b, tmp_path / "out", dry_run=True)
    assert rc == 2 and err == (f"compare: error: grid {grid_b}: variant 'warm': "
                               f"config.optim.warmup_steps: 5 is not in [0, 2] (the run's "
                               f"optimizer steps)\n")


def test_steps_and_init_come_from_the_real_config_file_unless_overridden(tmp_path):
    config = os.path.join(REPO, "configs", "frozen_lake_grpo.py")
    grid = compare.load_grid(make_grid(tmp_path, config=config, seeds=(0,), variants={
        "default": {}, "short": {"train.steps": 6}, "from_model": {"train.init": "model"}}))
    assert grid.config == config and grid.config_arg == "configs/frozen_lake_grpo.py"
    runs = compare.plan_runs(grid, tmp_path / "out")
    assert [(r.variant, r.steps) for r in runs] == [("default", 60), ("short", 6),
                                                    ("from_model", 60)]
    default, short, from_model = runs
    assert default.warm_start is short.warm_start is not None     # train.init = 'sft' there
    assert from_model.warm_start is None
    assert default.argv[4:] == [f"--workdir={tmp_path / 'out' / 'runs' / 'default' / 'seed_0'}",
                                "--config.train.seed=0"]


def test_front_end_bad_input_and_dry_run(tmp_path):
    grid = make_grid(tmp_path, variants={"a": {}, "m": {"train.init": "model"}})
    missing, proc = run_module_jobs(
        ("-m", "launch.compare", f"--grid={tmp_path / 'missing.py'}", f"--out={tmp_path / 'out'}"),
        ("-m", "launch.compare", f"--grid={grid}", f"--out={tmp_path / 'out'}", "--dry_run",
         "--seeds=5"), cwd=REPO, timeout=60)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (f"compare: error: grid file not found: "
                                      f"{tmp_path / 'missing.py'}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    commands = [line for line in lines if not line.startswith("#")]
    assert len(commands) == 3                         # one warm start, two runs
    assert " -m launch.sft " in commands[0] and "seed" not in commands[0]
    assert commands[1].endswith(f"--workdir={tmp_path / 'out' / 'runs' / 'a' / 'seed_5'} "
                                f"--config.train.seed=5")
    assert "--config.train.init=model" in commands[2]
    assert "# variant=m seed=5: new" in lines
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- running

def test_warm_starts_are_shared_and_linked(tmp_path):
    assert compare.WARM_START_FIELDS == ("env.", "model.", "sft.", "rollout.context_length")
    key = compare.warm_start_key
    base = {"loss.kl_coef": 0.0, "sft.steps": 5, "rollout.context_length": 128, "train.seed": 0}
    assert key("c.py", base) == key("c.py", {**base, "loss.kl_coef": 0.1, "train.seed": 3,
                                             "rollout.sampling.temperature": 0.5,
                                             "optim.learning_rate": 1.0})
    assert key("c.py", base) == key("c.py", dict(reversed(list(base.items()))))
    assert key("c.py", base) != key("c.py", {**base, "sft.steps": 6})
    assert key("c.py", base) != key("c.py", {**base, "rollout.context_length": 256})
    assert key("c.py", base) != key("c.py", {**base, "model.name": "small"})
    assert key("c.py", base) != key("d.py", base)
    assert compare.warm_start_overrides(base) == {"sft.steps": 5,
                                                  "rollout.context_length": 128}

    grid = make_grid(tmp_path, variants={"a": {"loss.kl_coef": 0.0}, "b": {"loss.kl_coef": 0.1},
                                         "c": {"sft.epsilon": 0.5}, "m": {"train.init": "model"}})
    runner = FakeRunner()
    rc, out, err = run(grid, tmp_path / "out", runner)
    assert rc == 0, out + err
    assert [c[1] for c in runner.jobs("launch.sft")] == ["warm_starts"] * 2   # built once each
    assert len(runner.jobs("launch.train")) == 8
    links = {v: os.path.realpath(tmp_path / "out" / "runs" / v / "seed_1" / "sft") for v in "abc"}
    assert links["a"] == links["b"] != links["c"]
    assert os.path.dirname(links["a"]) == str(tmp_path / "out" / "warm_starts")
    assert os.path.islink(tmp_path / "out" / "runs" / "a" / "seed_0" / "sft")
    assert not os.path.lexists(tmp_path / "out" / "runs" / "m" / "seed_0" / "sft")
    record = json.loads((tmp_path / "out" / "runs" / "c" / "seed_0" / "run.json").read_text())
    assert record["overrides"] == {"sft.epsilon": 0.5, "train.seed": 0}
    assert record["warm_start"] == os.path.basename(links["c"])
    assert record["machine"] == processor()  # runs are bit-identical only on the same processor
    ws = json.loads((tmp_path / "out" / "warm_starts" / record["warm_start"] /
                     "warm_start.json").read_text())
    assert ws["complete"] and ws["overrides"] == {"sft.epsilon": 0.5}


class StoppedInTheWarmStart(compare.runner.Runner):
    """A SIGTERM to the harness during the warm start: forwarded, the job saves where it stopped
    and exits 0 (FakeRunner's stop_warm_start), and the harness is asked to start nothing more."""

    def __init__(self):
        self.fake = FakeRunner(stop_warm_start=True)

    def __call__(self, argv, workdir, log_path):
        self.stop_requested = True
        return self.fake(argv, workdir, log_path)


@pytest.mark.parametrize("stopped_by", ["the_harness", "the_job_alone"])
def test_a_warm_start_stopped_midway_is_not_complete_and_no_run_starts(tmp_path, stopped_by):
    """A warm start whose job exits 0 without a finished checkpoint (stopped by a signal to the
    harness, or to the job alone) is not recorded as built and no run starts from it; the same
    command then builds it and runs everything."""
    grid = make_grid(tmp_path)
    out = tmp_path / "out"
    runner = StoppedInTheWarmStart() if stopped_by == "the_harness" else \
        FakeRunner(stop_warm_start=True)
    rc, stdout, _ = run(grid, out, runner)
    fake = runner.fake if stopped_by == "the_harness" else runner
    assert fake.jobs("launch.train") == [] and len(fake.jobs("launch.sft")) == 1
    if stopped_by == "the_harness":
        assert rc == 130 and "stopped by a signal; not starting further runs" in stdout
    else:
        assert rc == 1 and "exit code 0 but not finished" in stdout
    (record,) = glob.glob(str(out / "warm_starts" / "*" / "warm_start.json"))
    assert not json.load(open(record))["complete"]
    runner = FakeRunner()
    rc, stdout, _ = run(grid, out, runner)
    assert rc == 0 and len(runner.jobs("launch.sft")) == 1 and len(runner.jobs("launch.train")) == 4
    assert json.load(open(record))["complete"]


def test_a_grid_warm_start_is_shared_by_variants_that_change_env_options(tmp_path):
    variants = {"a": {"env.options.slippery": False}, "b": {"env.options.slippery": True}}
    separate = compare.plan_runs(compare.load_grid(make_grid(tmp_path, variants, name="s")),
                                 tmp_path / "o1")
    assert len({r.warm_start.key for r in separate}) == 2
    grid = make_grid(tmp_path, variants, name="w", warm_start={"sft.epsilon": 0.5})
    runs = compare.plan_runs(compare.load_grid(grid), tmp_path / "o2")
    assert len({r.warm_start.key for r in runs}) == 1
    assert runs[0].warm_start.overrides == {"sft.epsilon": 0.5}
    assert runs[0].warm_start.argv[-1] == "--config.sft.epsilon=0.5"


def test_second_invocation_skips_finished_and_resumes_unfinished(tmp_path):
    grid = make_grid(tmp_path)
    runner = FakeRunner(preempt={("b", 1)})
    rc, out, _ = run(grid, tmp_path / "out", runner)
    assert rc == 1 and "FAILED run variant=b seed=1: exit code 0 but not finished" in out
    assert len(runner.jobs("launch.train")) == 4
    runner = FakeRunner()
    rc, out, _ = run(grid, tmp_path / "out", runner)
    assert rc == 0, out
    assert runner.calls == [("launch.train", "b", 1)]       # no warm start, no finished run
    assert "[1/4] variant=a seed=0: finished, skipped" in out
    assert "variant=b seed=1: resuming" in out
    record = json.loads((tmp_path / "out" / "runs" / "b" / "seed_1" / "run.json").read_text())
    assert record["attempts"] == 2 and record["returncode"] == 0
    assert run(grid, tmp_path / "out", FakeRunner())[0] == 0


def test_records_carry_finished_runs_to_a_fresh_output_directory(tmp_path):
    grid, records = make_grid(tmp_path), str(tmp_path / "records")
    rc, _, _ = run(grid, tmp_path / "first", FakeRunner(preempt={("b", 1)}), records=records)
    assert rc == 1
    kept = sorted(os.path.relpath(p, records) for p in glob.glob(f"{records}/[ab]/*/*"))
    assert kept == [f"{v}/seed_{s}/{f}" for v, s in (("a", 0), ("a", 1), ("b", 0))
                    for f in ("metrics.jsonl", "run.json", "train_summary.json")]
    # A fresh machine: only the run that had not finished runs (with the warm start it needs);
    # the others are restored and aggregated as if they had run here.
    runner = FakeRunner()
    rc, out, _ = run(grid, tmp_path / "fresh", FakeRunner(), records=records, dry_run=True)
    assert rc == 0 and out.count("finished (skipped; restored from the records)") == 3
    assert not os.path.exists(tmp_path / "fresh" / "runs")       # a dry run changes nothing
    rc, out, _ = run(grid, tmp_path / "fresh", runner, records=records)
    assert rc == 0, out
    assert runner.calls == [("launch.sft", "warm_starts", -1), ("launch.train", "b", 1)]
    assert out.count("finished elsewhere, restored from") == 3
    assert os.path.exists(os.path.join(records, "b", "seed_1", "train_summary.json"))
    rc, _, _ = run(grid, tmp_path / "plain", FakeRunner())
    assert rc == 0 and (tmp_path / "fresh" / "results.md").read_text() == \
        (tmp_path / "plain" / "results.md").read_text()
    # A run directory that holds a run is never overwritten by its record.
    metrics = tmp_path / "fresh" / "runs" / "a" / "seed_0" / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + json.dumps({"step": 4, "train/kl": 0.5}) + "\n")
    assert run(grid, tmp_path / "fresh", FakeRunner(), records=records)[0] == 0
    assert "0.5" in metrics.read_text()
    (tmp_path / "a_file").write_text("")
    rc, _, err = run(grid, tmp_path / "fresh", FakeRunner(), records=str(tmp_path / "a_file"))
    assert rc == 2
    assert err == f"compare: error: --records {tmp_path / 'a_file'} is not a directory\n"
    # Records made with other overrides are refused like any finished run.
    make_grid(tmp_path, variants={"a": {"loss.kl_coef": 0.05}, "b": {"loss.kl_coef": 0.1}})
    rc, _, err = run(grid, tmp_path / "other", FakeRunner(), records=records)
    assert rc == 2 and "refusing to mix results" in err and "runs/a/seed_0" in err


def test_records_keep_the_warm_starts_step_0_evaluation_for_a_rebuilt_one(tmp_path):
    grid, records = make_grid(tmp_path), str(tmp_path / "records")
    first = FakeRunner(preempt={("b", 1)})
    assert run(grid, tmp_path / "first", first, records=records)[0] == 1
    assert first.evaluated == [("a", 0)]          # one evaluation, shared by the grid's runs
    (key,) = os.listdir(os.path.join(records, "warm_starts"))
    kept = os.path.join(records, "warm_starts", key, "initial_evals", "0123abcd.json")
    with open(kept) as f:
        assert json.load(f)["metrics"] == {"success_rate": 0.25}
    # A fresh machine rebuilds the warm start; the unfinished run reads the kept evaluation.
    fresh = FakeRunner()
    assert run(grid, tmp_path / "fresh", fresh, records=records)[0] == 0
    assert fresh.calls == [("launch.sft", "warm_starts", -1), ("launch.train", "b", 1)]
    assert fresh.evaluated == []
    assert os.path.exists(tmp_path / "fresh" / "warm_starts" / key / "initial_evals" /
                          "0123abcd.json")
    # Without the records the rebuilt warm start is evaluated again, and the records do not
    # count their evaluations as a variant.
    plain = FakeRunner()
    assert run(grid, tmp_path / "plain", plain)[0] == 0
    assert plain.evaluated == [("a", 0)]
    assert compare.records.record_seeds(records, "warm_starts") == []


def test_the_records_evaluations_name_is_not_a_variant(tmp_path):
    grid = make_grid(tmp_path, variants={"warm_starts": {}})
    rc, _, err = run(grid, tmp_path / "out")
    assert rc == 2 and "variant name 'warm_starts' is reserved" in err


def test_refuses_when_a_finished_run_was_made_with_other_overrides(tmp_path):
    grid = make_grid(tmp_path)
    assert run(grid, tmp_path / "out")[0] == 0
    make_grid(tmp_path, variants={"a": {"loss.kl_coef": 0.05}, "b": {"loss.kl_coef": 0.1}})
    for kwargs in ({}, {"aggregate_only": True}, {"dry_run": True}):
        runner = FakeRunner()
        rc, _, err = run(grid, tmp_path / "out", runner, **kwargs)
        assert rc == 2 and err.count("\n") == 1, err
        assert "refusing to mix results" in err and "runs/a/seed_0" in err
        assert "loss.kl_coef: recorded 0.0, grid 0.05" in err and "runs/b" not in err
        assert runner.calls == []


def test_steps_and_init_come_from_the_config_file_unless_overridden(tmp_path):
    # The config file starts from the model and trains 6 steps; variant 's' warm-starts.
    grid = make_grid(tmp_path, init="model", steps=6, seeds=(0,),
                     variants={"m": {}, "s": {"train.init": "sft"}, "short": {"train.steps": 2}})
    runner = FakeRunner(steps=6, init="model")
    rc, out, err = run(grid, tmp_path / "out", runner)
    assert rc == 0, out + err
    assert runner.calls == [("launch.train", "m", 0), ("launch.sft", "warm_starts", -1),
                            ("launch.train", "s", 0), ("launch.train", "short", 0)]
    runs = tmp_path / "out" / "runs"
    assert not os.path.lexists(runs / "m" / "seed_0" / "sft")
    assert os.path.islink(runs / "s" / "seed_0" / "sft")
    steps = {v: json.loads((runs / v / "seed_0" / "run.json").read_text())["steps"]
             for v in ("m", "s", "short")}
    assert steps == {"m": 6, "s": 6, "short": 2}
    # A run that stops at another step than the config file's is not finished.
    rc, out, _ = run(grid, tmp_path / "out2", FakeRunner(steps=4, init="model"), only=["m"])
    assert rc == 1 and "FAILED run variant=m seed=0: exit code 0 but not finished " \
                       "(train_summary.json: step 4 of 6, preempted False)" in out


def test_a_failing_run_is_reported_and_the_others_still_run(tmp_path):
    grid = make_grid(tmp_path)
    runner = FakeRunner(fail={("a", 0)})
    rc, out, _ = run(grid, tmp_path / "out", runner)
    assert rc == 1
    assert len(runner.jobs("launch.train")) == 4
    report = out[out.index("failure(s):"):]
    assert "FAILED run variant=a seed=0: exit code 3" in report
    assert "runs/a/seed_0/log.txt" in report and "| ValueError: boom" in report
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["variants"]["a"]["runs"] == 1
    assert results["variants"]["a"]["missing_seeds"] == [0]
    assert "| a | 1 | 0.400 (n=1) |" in out


def test_aggregation_outputs_and_hand_checked_values(tmp_path):
    grid = make_grid(tmp_path)
    rc, out, _ = run(grid, tmp_path / "out")
    assert rc == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    a = results["variants"]["a"]
    assert a["seeds"]["1"]["metrics"]["eval/success_rate"]["final"] == 0.8
    assert a["seeds"]["0"]["metrics"]["eval/success_rate"]["best"] == 0.7
    assert a["seeds"]["0"]["metrics"]["eval/success_rate"]["best_step"] == 2
    cells = a["cells"]["eval/success_rate"]
    assert cells["initial"]["mean"] == pytest.approx(0.3)
    assert cells["final"]["mean"] == pytest.approx(0.7)
    assert cells["final"]["ci"] == pytest.approx(1.2706204736, rel=1e-8)   # t(.975, 1) s/√2
    assert cells["best"]["mean"] == pytest.approx(0.75)
    assert cells["best"]["ci"] == pytest.approx(0.6353102368, rel=1e-8)
    assert cells["delta"] == {"mean": pytest.approx(0.4), "ci": pytest.approx(0.0, abs=1e-12),
                              "n": 2}
    # mean over steps: seed 0 (0.2 + 0.7 + 0.6) / 3 = 0.5, seed 1 (0.4 + 0.5 + 0.8) / 3 = 0.5667
    assert a["seeds"]["0"]["metrics"]["eval/success_rate"]["mean"] == pytest.approx(0.5)
    assert cells["mean"]["mean"] == pytest.approx((0.5 + 1.7 / 3) / 2)
    assert a["cells"]["eval/pass@1"]["final"]["mean"] == pytest.approx(0.35)
    assert [p["step"] for p in a["curves"]["eval/success_rate"]] == [0, 2, 4]
    assert a["curves"]["eval/success_rate"][1]["mean"] == pytest.approx(0.6)

    table = (tmp_path / "out" / "results.md").read_text()
    assert "| variant | runs | eval/success_rate initial | eval/success_rate final | " \
           "eval/success_rate best | eval/success_rate final − initial | " \
           "eval/success_rate mean over steps |" in table
    assert "| a | 2 | 0.300 ± 1.271 | 0.700 ± 1.271 | 0.750 ± 0.635 | 0.400 ± 0.000 | " \
           "0.533 ± 0.424 |" in table
    assert "| a | 2 | 0.300 ± 1.271 |" in out                 # printed too
    for name in ("curves_eval_success_rate.png", "curves_eval_pass_1.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --aggregate_only rebuilds the same results without running anything
    os.remove(tmp_path / "out" / "results.md")
    runner = FakeRunner()
    rc, _, _ = run(grid, tmp_path / "out", runner, aggregate_only=True)
    assert rc == 0 and runner.calls == [] and (tmp_path / "out" / "results.md").exists()
    assert json.loads((tmp_path / "out" / "results.json").read_text()) == results


@pytest.mark.parametrize("reference", ["a", "b"])
def test_steps_to_reach_the_reference_peak_hand_checked(tmp_path, reference):
    """CURVES by hand. Reference b: its peaks are 0.3 (seed 0) and 0.5 (seed 1), both first at
    step 4; a reaches them at step 2 (0.7 >= 0.3, 0.5 >= 0.5): 2x. Reference a: peaks 0.7 at
    step 2 and 0.8 at step 4, which b (at most 0.5) never reaches."""
    grid = make_grid(tmp_path, reach={"metric": "eval/success_rate", "reference": reference})
    rc, out, _ = run(grid, tmp_path / "out")
    assert rc == 0
    reach = json.loads((tmp_path / "out" / "results.json").read_text())["reach"]
    assert (reach["metric"], reach["reference"]) == ("eval/success_rate", reference)
    a, b = reach["variants"]["a"], reach["variants"]["b"]
    table = (tmp_path / "out" / "results.md").read_text()
    if reference == "b":
        assert a["seeds"]["0"] == {"target": 0.3, "reference_step": 4, "step": 2, "last_step": 4}
        assert a["seeds"]["1"] == {"target": 0.5, "reference_step": 4, "step": 2, "last_step": 4}
        assert (a["reached"], a["step"]["mean"], a["speedup"]["mean"]) == (2, 2.0, 2.0)
        assert (b["reached"], b["step"]["mean"], b["speedup"]["mean"]) == (2, 4.0, 1.0)
        assert ("| a | 2/2 | 2.000 ± 0.000 | 2.000 ± 0.000 | seed 0: 0.300, 4 → 2; "
                "seed 1: 0.500, 4 → 2 |") in table
    else:
        assert a["seeds"]["0"] == {"target": 0.7, "reference_step": 2, "step": 2, "last_step": 4}
        assert (b["reached"], b["compared"], b["step"]["n"], b["speedup"]["n"]) == (0, 2, 0, 0)
        assert b["seeds"]["1"]["step"] is None
        assert "| b | 0/2 | – | – | seed 0: 0.700, 2 → not by 4; seed 1: 0.800, 4 → not by 4 |" \
            in table
    assert "| variant | reached | step (of those) | speed-up |" in out   # printed too


@pytest.mark.parametrize("reference", ["a", "b"])
def test_steps_to_reach_the_reference_final_value_hand_checked(tmp_path, reference):
    """CURVES by hand, the reference's last evaluation as the target. Reference a: its finals
    are 0.6 (seed 0, first reached at step 2 with 0.7) and 0.8 (seed 1, step 4); a reaches
    them there, b (at most 0.5) never. Reference b: its finals are its peaks (0.3 and 0.5, both
    first at step 4), which a reaches at step 2: 2x, as with the peak."""
    grid = make_grid(tmp_path, reach={"metric": "eval/success_rate", "reference": reference})
    rc, out, _ = run(grid, tmp_path / "out")
    assert rc == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    final = results["reach_final"]
    assert (final["metric"], final["reference"], final["target"]) == (
        "eval/success_rate", reference, "final")
    a, b = final["variants"]["a"], final["variants"]["b"]
    table = (tmp_path / "out" / "results.md").read_text()
    if reference == "a":
        assert a["seeds"]["0"] == {"target": 0.6, "reference_step": 2, "step": 2, "last_step": 4}
        assert a["seeds"]["1"] == {"target": 0.8, "reference_step": 4, "step": 4, "last_step": 4}
        assert (a["reached"], a["speedup"]["mean"]) == (2, 1.0)
        assert (b["reached"], b["compared"]) == (0, 2)
        assert "| b | 0/2 | – | – | seed 0: 0.600, 2 → not by 4; seed 1: 0.800, 4 → not by 4 |" \
            in table
    else:
        assert a["seeds"]["0"] == {"target": 0.3, "reference_step": 4, "step": 2, "last_step": 4}
        assert (a["reached"], a["step"]["mean"], a["speedup"]["mean"]) == (2, 2.0, 2.0)
        assert final["variants"] == results["reach"]["variants"]  # b's finals are its peaks
    assert "Steps to reach " + reference + "'s final eval/success_rate" in table
    assert out.count("| variant | reached | step (of those) | speed-up |") == 2  # both printed


def test_reaching_a_lower_is_better_target_and_step_zero():
    """Lower is better: the target is the reference's minimum; reaching it at step 0 (the
    evaluation every variant shares) gives a step but no speed-up."""
    assert compare.first_reach([(0, 0.5), (2, 0.3), (4, 0.1)], 0.3, True) == 2
    assert compare.first_reach([(0, 0.5), (2, 0.3)], 0.2, True) is None
    assert compare.first_reach([(0, 0.5), (2, 0.3)], 0.4) == 0
    seeds = {"0": {"metrics": {"m": {"best": 0.2, "best_step": 0, "final_step": 2,
                                     "curve": [[0, 0.2], [2, 0.4]]}}}}
    grid = compare.Grid(path="g", config="c", variants={"x": {}}, seeds=(0,), metrics=("m",),
                        lower_is_better=("m",),
                        reach=compare.ReachSpec(metric="m", reference="x"))
    x = compare.reach_summary(grid, {"x": {"seeds": seeds}})["variants"]["x"]
    assert x["seeds"]["0"]["step"] == 0 and x["reached"] == 1 and x["speedup"]["n"] == 0


def test_only_and_seeds_select_runs_and_aggregation_covers_all(tmp_path):
    grid = make_grid(tmp_path)
    runner = FakeRunner()
    rc, out, _ = run(grid, tmp_path / "out", runner, only=["b"], seeds=["1"])
    assert rc == 0 and runner.jobs("launch.train") == [("launch.train", "b", 1)]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["variants"]["b"]["runs"] == 1 and results["variants"]["a"]["runs"] == 0
    assert "| a | 0 | – |" in out and "| b | 1 | 0.300 (n=1) |" in out


def test_a_failed_warm_start_fails_its_runs_only(tmp_path):
    grid = make_grid(tmp_path, variants={"a": {}, "m": {"train.init": "model"}}, seeds=(0,))
    runner = FakeRunner(fail={"warm_start"})
    rc, out, _ = run(grid, tmp_path / "out", runner)
    assert rc == 1 and runner.calls == [("launch.sft", "warm_starts", -1),
                                        ("launch.train", "m", 0)]
    assert "FAILED warm start" in out and "| RuntimeError: no demonstrations" in out
    assert "FAILED run variant=a seed=0: not started: warm start" in out


def test_subprocess_runner_tees_output_and_returns_the_exit_code(tmp_path):
    echo = io.StringIO()
    runner = compare.SubprocessRunner(echo=echo)
    argv = [sys.executable, "-c", "import sys; print('hello'); sys.exit(3)"]
    assert runner(argv, str(tmp_path / "w"), str(tmp_path / "w" / "log.txt")) == 3
    assert "hello" in echo.getvalue()
    log = (tmp_path / "w" / "log.txt").read_text()
    assert "hello" in log and log.rstrip().endswith("=== exit code 3")
    assert compare.log_tail(str(tmp_path / "w" / "log.txt"), 2) == ["hello", "=== exit code 3"]


def test_artifacts_are_built_once_before_the_runs_that_name_them(tmp_path):
    """A grid artifact (a job's output, e.g. a trained PRM) is built under <out>/artifacts/<name>
    before the first run whose overrides name it, once; `{artifact:NAME}` becomes its directory;
    a failed artifact fails only the runs that need it; an unknown name is refused up front."""
    judge = "{artifact:judge}/policy"
    variants = {"a": {}, "j": {"rollout.strategy": "patr", "rollout.num_slots": 32,
                               "rollout.patr.scorer": "judge", "rollout.patr.judge.model": judge}}
    artifacts = {"judge": {"job": "launch.sft", "config": "exp.py",
                           "overrides": {"sft.steps": 3}}}
    grid = make_grid(tmp_path, variants, name="art", seeds=(0,), artifacts=artifacts)
    out = tmp_path / "out"
    runner = FakeRunner()
    rc, text, _ = run(grid, out, runner)
    assert rc == 0, text
    where = str(out / "artifacts" / "judge")
    assert [c[:2] for c in runner.calls] == [("launch.sft", "warm_starts"),
                                             ("launch.train", "a"),
                                             ("launch.sft", "artifacts"),
                                             ("launch.train", "j")]
    record = json.loads((out / "runs" / "j" / "seed_0" / "run.json").read_text())
    assert f"--config.rollout.patr.judge.model={where}/policy" in record["command"]
    built = json.loads((out / "artifacts" / "judge" / "artifact.json").read_text())
    assert built["complete"] and "--config.sft.steps=3" in built["command"]
    runner = FakeRunner()
    assert run(grid, out, runner)[0] == 0 and runner.calls == []       # nothing rebuilt
    # a failed artifact: its runs are not started, the others run
    failing = make_grid(tmp_path, variants, name="art2", seeds=(0,), artifacts=artifacts)
    runner = FakeRunner(fail={"warm_start"})
    rc, text, _ = run(failing, tmp_path / "out2", runner, only=["j"])
    assert rc == 1 and "FAILED run variant=j seed=0: not started: artifact judge failed" in text
    bad = make_grid(tmp_path, {"j": {**variants["j"], "rollout.patr.judge.model": "{artifact:x}"}},
                    name="art3", seeds=(0,), artifacts=artifacts)
    rc, _, err = run(bad, tmp_path / "out3")
    assert rc == 2 and "names artifact 'x'; the grid's artifacts are ['judge']" in err


def test_warm_start_placeholder_names_the_runs_warm_start(tmp_path):
    """`{warm_start}` in an override is the run's warm-start directory (the warm-start policy as
    PATR's judge); a run without a warm start that names it is refused."""
    judge = {"rollout.strategy": "patr", "rollout.num_slots": 32, "rollout.patr.scorer": "judge",
             "rollout.patr.judge.model": "{warm_start}"}
    grid = make_grid(tmp_path, {"j": judge}, name="ws", seeds=(0,))
    out = tmp_path / "out"
    assert run(grid, out)[0] == 0
    record = json.loads((out / "runs" / "j" / "seed_0" / "run.json").read_text())
    target = os.path.realpath(out / "runs" / "j" / "seed_0" / "sft")
    assert f"--config.rollout.patr.judge.model={target}" in record["command"]
    bad = make_grid(tmp_path, {"j": {**judge, "train.init": "model"}}, name="ws2", seeds=(0,))
    rc, _, err = run(bad, tmp_path / "out2")
    assert rc == 2 and "names {warm_start} but the run has no warm start" in err


@pytest.mark.parametrize("path", sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "configs", "grids", "*.py"))))
def test_every_shipped_grid_plans_three_seeds_of_valid_runs(path, tmp_path):
    """Each grid in configs/grids loads (every variant a valid typed experiment), runs at least
    three seeds of every variant, and its docstring carries its own launch command."""
    grid = compare.load_grid(os.path.join(REPO, path))
    runs = compare.plan_runs(grid, str(tmp_path))
    assert len(grid.seeds) >= 3
    assert {(r.variant, r.seed) for r in runs} == {(v, s) for v in grid.variants
                                                  for s in grid.seeds}
    doc = compare.grid.import_file(os.path.join(REPO, path), "_doc_check").__doc__
    assert f"--grid={path}" in doc
    assert not os.listdir(tmp_path)        # planning creates nothing
