"""The command-line jobs run end to end (small sizes)."""

import json
import subprocess
import sys

import pytest

from hf_reference import build_chatml_tokenizer, random_hf_model


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_sample_with_the_tiny_preset():
    proc = _run("launch.sample", "--model=tiny", "--prompt=Hello", "--num_samples=3",
                "--max_new_tokens=12", "--temperature=0.8", "--top_p=0.9")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("--- sample ") == 3
    assert "1 compilation(s)" in proc.stdout


def test_sample_from_a_checkpoint_directory_with_chat_template(tmp_path):
    fast = build_chatml_tokenizer(tmp_path)
    random_hf_model("qwen2", vocab_size=len(fast)).save_pretrained(str(tmp_path))
    proc = _run("launch.sample", f"--model={tmp_path}", "--prompt=hello world", "--chat",
                "--num_samples=2", "--max_new_tokens=8")
    assert proc.returncode == 0, proc.stderr
    assert f"model: {tmp_path} (qwen2" in proc.stdout
    assert proc.stdout.count("--- sample ") == 2


@pytest.mark.slow
def test_sampler_benchmark_writes_its_table_and_json(tmp_path):
    out = tmp_path / "sampler.json"
    proc = _run("launch.benchmark", "sampler", "--models=tiny", "--batches=4", "--new_tokens=6",
                "--repeats=1", "--floor_batch=4", f"--output={out}")
    assert proc.returncode == 0, proc.stderr
    assert "| tiny" in proc.stdout
    report = json.loads(out.read_text())
    rows = [r for r in report["results"] if "batch" in r]
    assert [r["batch"] for r in rows] == [4]
    assert rows[0]["jaxtree_tokens_per_s"] > 0 and rows[0]["transformers_tokens_per_s"] > 0
    assert 0 < rows[0]["fraction_of_floor"]
    assert report["copy_bandwidth_bytes_per_s"] > 0


@pytest.mark.slow
def test_environment_benchmark_writes_its_table_and_json(tmp_path):
    out = tmp_path / "envs.json"
    proc = _run("launch.benchmark", "envs", "--episodes=2", "--policy_seeds=3", f"--output={out}")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    names = {r["environment"] for r in report["results"]}
    assert names == {"frozen_lake", "sokoban", "countdown", "tictactoe", "sudoku", "minesweeper"}
    for row in report["results"]:
        assert row["step"] > 0 and row["clone"] > 0 and 0 <= row["oracle_success"] <= 1


@pytest.mark.parametrize("config", ["sokoban_sft", "countdown_sft", "tictactoe_sft",
                                    "sudoku4_sft", "minesweeper_sft"])
def test_every_environment_config_demonstrates_within_its_context(config):
    """Every warm-start config validates, and its noise-free oracle demonstrations play the whole
    episode within the configured context and train on exactly the oracle's answers (the SFT step itself is
    exercised end to end by test_sft_then_evaluate)."""
    import importlib.util

    import numpy as np

    from jaxtree.experiment import Experiment
    from jaxtree.rollout import conversation
    from jaxtree.rollout.demonstrations import demonstrate
    from jaxtree.tokenizers import ByteTokenizer

    spec = importlib.util.spec_from_file_location(config, f"configs/{config}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    exp = Experiment.from_config(module.get_config())
    tokenizer, env, replay = ByteTokenizer(), exp.env.factory()(), exp.env.factory()()
    for seed in range(3):
        demo = demonstrate(env, tokenizer, seed, 0.0, np.random.default_rng(seed),
                           exp.rollout.context_length)
        assert len(demo.tokens) <= exp.rollout.context_length
        replay.reset(seed)
        expected = []
        while not replay.done:
            text = replay.answer_text(replay.oracle_action())
            expected += conversation.action_tokens(tokenizer, text)
            replay.step(text)
        assert [t for t, m in zip(demo.tokens, demo.loss_mask) if m] == expected
        assert demo.success == replay.success and demo.num_turns == replay.num_steps


@pytest.mark.slow
def test_rollout_benchmark_reports_host_share(tmp_path):
    out = tmp_path / "rollout.json"
    proc = _run("launch.benchmark", "rollout", "--slots=8", "--rollout_episodes=8",
                "--action_tokens=4", f"--output={out}")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(out.read_text())["results"][0]
    assert row["episodes"] == 8 and row["env_turns_per_s"] > 0
    assert 0 < row["host_share"] < 1 and 0 < row["device_share"] <= 1


@pytest.mark.slow
def test_trees_benchmark_rebuilds_the_same_trees_by_re_prefilling(tmp_path, capsys):
    """Beam search forks every root before its first action, so even a random model's trees
    share prefixes (PATR's forks come after K turns, which a random model rarely reaches)."""
    from launch.benchmarks import trees
    trees.run("tiny", "frozen_lake", {"style": "compact"}, groups=1, group_size=2, num_slots=16,
              context_length=256, max_action_tokens=6, max_turns=4, interval=2, repeats=1,
              output=str(tmp_path / "trees.json"), methods=("beam",))
    results = {r["mode"]: r for r in json.loads((tmp_path / "trees.json").read_text())["results"]}
    assert set(results) == {"fork", "re-prefill", "independent"}
    fork, again = results["fork"], results["re-prefill"]
    # the same tree: same trajectories and generated tokens; each copy re-prefills the prompt
    assert fork["trajectories"] == again["trajectories"] == results["independent"]["trajectories"]
    assert fork["generated_tokens"] == again["generated_tokens"]
    assert again["prefilled_tokens"] > fork["prefilled_tokens"]
    assert "| beam   | re-prefill" in capsys.readouterr().out


def test_credit_and_mc_values_benchmarks_write_their_tables_and_json(tmp_path, capsys):
    from launch.benchmarks import credit, mc_values
    credit.run(rows=16, turns=4, group_size=4, seq_len=16, micro_batch=16, repeats=1,
               output=str(tmp_path / "credit.json"))
    report = json.loads((tmp_path / "credit.json").read_text())
    assert {r["part"] for r in report["results"]} >= {"rtmc host: signature_ids",
                                                      "rtmc device: table advantages"}
    assert 0 < report["rtmc_total_seconds"] and 0 < report["update_step_seconds"]
    mc_values.run("tiny", "frozen_lake", {"style": "compact"}, [2], groups=2, group_size=2,
                  context_length=256, max_action_tokens=6, repeats=1,
                  output=str(tmp_path / "mc.json"))
    (independent, forked) = json.loads((tmp_path / "mc.json").read_text())["results"]
    assert independent["continuation_steps"] == 0
    # m continuations from the state before each of the policy's actions
    assert forked["continuation_steps"] >= 2 * forked["main_steps"]
    out = capsys.readouterr().out
    assert "| rtmc total (host + device)" in out and "| mc_values m=2" in out
