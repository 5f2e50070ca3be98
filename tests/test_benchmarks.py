"""The benchmark jobs (`python -m launch.benchmark ...`): each writes its table and JSON."""

import json

import pytest

from toy_run import one_layer_policy, run_module_jobs

# The command-line jobs of this file, as (name, flags); `cli` runs them together.
CLI_JOBS = {
    "envs": ("envs", "--episodes=2", "--policy_seeds=3"),
    "rollout": ("rollout", "--slots=8", "--rollout_episodes=8", "--action_tokens=4",
                "--repeats=1"),  # and --policy: the one-block model (`cli`)
    "bad_yaml_options": ("trees", "--env_options={size: 4}"),
    "bad_list_options": ("trees", "--env_options=[4]"),
    "bad_overrides": ("prefix_update", "--synthetic=configs/frozen_lake_grpo.py", "--overrides=[1]"),
    "unknown_override": ("prefix_update", "--synthetic=configs/frozen_lake_grpo.py",
                         '--overrides={"model.no_such_field": 1}'),
}


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory):
    """The tiny preset with one decoder block (`one_layer_policy`) for the benchmarks of this
    file: what they report does not depend on the model's depth."""
    return one_layer_policy(str(tmp_path_factory.mktemp("one_layer")))


@pytest.fixture(scope="module")
def cli(tmp_path_factory, one_layer):
    """{name: (finished job, its --output path)} of CLI_JOBS, run as `python -m launch.benchmark`
    jobs forked from one process that imported their libraries (PyTorch included: every
    benchmark's JSON describes the machine with it) once."""
    out = tmp_path_factory.mktemp("cli")
    outputs = {name: out / f"{name}.json" for name in CLI_JOBS}
    procs = run_module_jobs(*[("-m", "launch.benchmark", benchmark, *rest,
                               *(("--policy=" + one_layer,) if name == "rollout" else ()),
                               f"--output={outputs[name]}")
                              for name, (benchmark, *rest) in CLI_JOBS.items()],
                            preload=("torch", "launch.benchmarks.common"))
    return {name: (proc, outputs[name]) for name, proc in zip(CLI_JOBS, procs)}


@pytest.mark.slow
def test_sampler_benchmark_writes_its_table_and_json(tmp_path, capsys, one_layer):
    """In the test process (the CLI is exercised by the environment and rollout benchmarks'
    tests): a subprocess would spend most of its time importing PyTorch and transformers."""
    from launch.benchmarks import sampler
    out = tmp_path / "sampler.json"
    sampler.run([one_layer], [4], new_tokens=6, prompt_len=16, repeats=1, floor_batch=4,
                output=str(out), copy_bytes=16 * 1024**2)
    assert f"| {one_layer}" in capsys.readouterr().out
    report = json.loads(out.read_text())
    rows = [r for r in report["results"] if "batch" in r]
    assert [r["batch"] for r in rows] == [4]
    assert rows[0]["jaxtree_tokens_per_s"] > 0 and rows[0]["transformers_tokens_per_s"] > 0
    assert 0 < rows[0]["fraction_of_floor"]
    assert report["copy_bandwidth_bytes_per_s"] > 0


@pytest.mark.slow
def test_trees_benchmark_rebuilds_the_same_trees_by_re_prefilling(tmp_path, capsys, one_layer):
    """Beam search forks every root before its first action, so even a random model's trees
    share prefixes (PATR's forks come after K turns, which a random model rarely reaches)."""
    from launch.benchmarks import trees
    trees.run(one_layer, "frozen_lake", {"style": "compact"}, groups=1, group_size=2, num_slots=16,
              context_length=256, max_action_tokens=6, max_turns=2, interval=2, repeats=1,
              output=str(tmp_path / "trees.json"), methods=("beam", "lookahead"))
    report = json.loads((tmp_path / "trees.json").read_text())["results"]
    for method in ("beam", "lookahead"):
        results = {r["mode"]: r for r in report if r["method"] == method}
        assert set(results) == {"fork", "re-prefill", "independent"}
        fork, again = results["fork"], results["re-prefill"]
        # the same tree: same trajectories and generated tokens; each copy re-prefills the prompt
        assert (fork["trajectories"] == again["trajectories"]
                == results["independent"]["trajectories"])
        assert fork["generated_tokens"] == again["generated_tokens"]
        assert again["prefilled_tokens"] > fork["prefilled_tokens"]
    lookahead = {r["mode"]: r for r in report if r["method"] == "lookahead"}["fork"]
    beam = {r["mode"]: r for r in report if r["method"] == "beam"}["fork"]
    # the lookahead copies' turns are generated (and discarded) on top of the beam's candidates
    assert lookahead["generated_tokens"] > beam["generated_tokens"]
    out = capsys.readouterr().out
    assert "| beam      | re-prefill" in out and "| lookahead | re-prefill" in out


def test_credit_and_mc_values_benchmarks_write_their_tables_and_json(tmp_path, capsys,
                                                                    one_layer):
    from launch.benchmarks import credit, mc_values
    credit.run(rows=16, turns=4, group_size=4, seq_len=16, micro_batch=16, repeats=1,
               output=str(tmp_path / "credit.json"))
    report = json.loads((tmp_path / "credit.json").read_text())
    assert {r["part"] for r in report["results"]} >= {"rtmc host: signature_ids",
                                                      "rtmc device: table advantages"}
    assert 0 < report["rtmc_total_seconds"] and 0 < report["update_step_seconds"]
    # 2 x 2 episodes with 3 continuations each
    mc_values.run(one_layer, "frozen_lake", {"style": "compact"}, [3], groups=2, group_size=2,
                  context_length=256, max_action_tokens=6, repeats=1,
                  output=str(tmp_path / "mc.json"))
    (independent, forked) = json.loads((tmp_path / "mc.json").read_text())["results"]
    assert independent["continuation_steps"] == 0
    # m continuations from the state before each of the policy's actions
    assert forked["continuation_steps"] >= 3 * forked["main_steps"]
    out = capsys.readouterr().out
    assert "| rtmc total (host + device)" in out and "| mc_values m=3" in out


def test_update_lengths_benchmark_compares_fused_and_by_length(tmp_path, capsys, one_layer):
    from launch.benchmarks import train
    train.run_lengths([one_layer], rows=4, long_rows=1, seq_len=32, short_len=8, micro_batches=[2],
                      repeats=1, output=str(tmp_path / "lengths.json"), width_multiple=8)
    (result,) = json.loads((tmp_path / "lengths.json").read_text())["results"]
    # one micro-batch 32 wide and one 8 wide, against two 32 wide
    assert (result["columns_fused"], result["columns_by_length"]) == (128, 80)
    assert result["max_param_difference"] < 1e-5  # both ways compute one update
    assert result["fused_seconds"] > 0 and result["by_length_seconds"] > 0
    assert f"| {one_layer} | 2           |" in capsys.readouterr().out


def test_train_benchmark_compares_memory_modes(tmp_path, capsys, one_layer):
    """The update_lengths benchmark's model and shapes (4 rows of 32 tokens, micro-batches of
    2): its fused step is this one's "none" step, compiled once."""
    from launch.benchmarks import train
    train.run([one_layer], rows=4, seq_len=32, micro_batches=[2], repeats=1,
              output=str(tmp_path / "train.json"),
              memory_modes=("none", "remat:attention+chunk:8"), with_flops=False,
              ceiling_size=256)
    results = json.loads((tmp_path / "train.json").read_text())["results"]
    assert [r["memory_mode"] for r in results] == ["none", "remat:attention+chunk:8"]
    assert all(r["temp_bytes"] > 0 and r["seconds"] > 0 for r in results)
    assert f"| {one_layer} | 2           | remat:attention+chunk:8" in capsys.readouterr().out
    with pytest.raises(ValueError, match="chunk:N"):
        train.parse_memory_mode("chunk:0")


def test_train_benchmark_compares_lora_ranks_kl_and_action_only_logits(tmp_path, capsys,
                                                                        one_layer):
    """Full fine-tuning against rank 4, the KL term and its reference forward on, action-only
    logits (one configuration per axis value: compiling each costs seconds); the minibatch in one
    micro-batch without remat, so the FLOPs are counted on the timed program itself."""
    from launch.benchmarks import train
    train.run_lora([one_layer], ["toy"], [0, 4], [True], [True], rows=4, micro=4,
                   memory_mode="none", repeats=1, output=str(tmp_path / "lora.json"),
                   isolate=False)
    results = json.loads((tmp_path / "lora.json").read_text())["results"]
    assert [(r["action_logits"], r["lora_rank"]) for r in results] == [(True, 0), (True, 4)]
    full, lora = results
    assert lora["trainable_params"] < full["trainable_params"] == full["params"]
    # the frozen base has no weight gradient and no AdamW update: fewer FLOPs in the step
    assert 0 < lora["update_flops"] < full["update_flops"]
    assert all(r["update_seconds"] > 0 and r["reference_seconds"] > 0 and r["temp_bytes"] > 0
               and r["peak_rss_bytes"] > 0 for r in results)
    # a 10-token prompt, then 2 turns of 6 observation and 4 action tokens
    assert full["seq_len"] == 30 and full["action_fraction"] == 8 / 30
    assert "| toy   | on       | on            | 4" in capsys.readouterr().out


def test_a_lora_case_that_dies_is_a_row_of_its_own_and_the_others_still_run(tmp_path, capsys,
                                                                          monkeypatch):
    """A case's process killed (the out-of-memory killer's SIGKILL) is reported in the table
    and the JSON, and the benchmark goes on to the next case."""
    from launch.benchmarks import train

    def isolated(kwargs):
        if kwargs["rank"] == 0:
            how = "killed by SIGKILL (most likely the out-of-memory killer)"
            raise train.CaseFailed(how, f"benchmark case {kwargs} failed ({how}): ")
        return {**kwargs, "trainable_params": 10, "update_seconds": 1.0,
                "reference_seconds": 0.5, "step_seconds": 1.5, "tokens_per_s": 100.0,
                "temp_bytes": 2**20, "peak_rss_bytes": 2**30, "update_flops": 1e9}

    monkeypatch.setattr(train, "_isolated_case", isolated)
    train.run_lora(["m"], ["toy"], [0, 4], [True], [True], rows=4, micro=2, memory_mode="none",
                   repeats=1, output=str(tmp_path / "lora.json"))
    failed, lora = json.loads((tmp_path / "lora.json").read_text())["results"]
    assert failed["rank"] == 0 and "SIGKILL" in failed["failed"] and "failed" not in lora
    out = capsys.readouterr().out
    assert "| full      | failed: killed by SIGKILL" in out and "| 4         | 10 " in out


# The command-line jobs last: they find the tiny preset's initialisation that the tests above
# compiled in the compilation cache.

@pytest.mark.slow
def test_environment_benchmark_writes_its_table_and_json(cli):
    proc, out = cli["envs"]
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    names = {r["environment"] for r in report["results"]}
    assert names == {"frozen_lake", "sokoban", "countdown", "tictactoe", "sudoku", "minesweeper",
                     "mini_swe"}
    for row in report["results"]:
        assert row["step"] > 0 and row["clone"] > 0 and 0 <= row["oracle_success"] <= 1
        assert row["turns_per_s"] > 0
        # only mini-SWE runs code in subprocesses (its oracle's run_tests and submit)
        assert (0 < row["subprocess_share"] < 1) == (row["environment"] == "mini_swe")
        # the oracle's run_tests turns use the sandbox: subprocesses of some milliseconds
        assert (row["sandbox_turns"] > 0) == (row["environment"] == "mini_swe")
        assert row["sandbox_turns"] == 0 or 1 < row["sandbox_turn_ms"] < 5000
        assert (row["sandbox_ms_per_episode"] > 0) == (row["environment"] == "mini_swe")


@pytest.mark.slow
def test_rollout_benchmark_reports_host_share(cli):
    proc, out = cli["rollout"]
    assert proc.returncode == 0, proc.stderr
    row = json.loads(out.read_text())["results"][0]
    assert row["episodes"] == 8 and row["env_turns_per_s"] > 0
    assert 0 < row["host_share"] < 1 and 0 < row["device_share"] <= 1


def test_malformed_env_options_and_overrides_fail_naming_the_flag(cli):
    for name, flag in [("bad_yaml_options", "--env_options"), ("bad_list_options", "--env_options"),
                       ("bad_overrides", "--overrides"), ("unknown_override", "--overrides")]:
        proc, out = cli[name]
        assert proc.returncode != 0 and flag in proc.stderr
        assert "Traceback" not in proc.stderr
        assert not out.exists()
    assert "model.no_such_field: unknown field" in cli["unknown_override"][0].stderr


def test_prefix_update_overrides_set_dotted_fields_of_a_copy_and_refuse_unknown_ones():
    from jaxtree.config import ConfigError
    from launch.benchmarks.prefix_update import config_with

    saved = {"model": {"name": "tiny"}, "train": {"seed": 1}}
    changed = config_with(saved, {"model.cpu_library_fusions": False, "loss.kl_coef": 0.1,
                                  "train.seed": 2})
    assert changed == {"model": {"name": "tiny", "cpu_library_fusions": False},
                       "train": {"seed": 2}, "loss": {"kl_coef": 0.1}}
    assert saved == {"model": {"name": "tiny"}, "train": {"seed": 1}}  # the saved run's, unchanged
    for overrides, field in [({"model.no_such_field": 1}, "model.no_such_field"),
                             ({"train.seed": "x"}, "train.seed"), ({"nosection.x": 1}, "nosection")]:
        with pytest.raises(ConfigError, match=field):
            config_with(saved, overrides)
