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


def test_sample_rejects_an_unknown_model_clearly(tmp_path):
    proc = _run("launch.sample", f"--model={tmp_path / 'missing'}")
    assert proc.returncode != 0
    assert "neither a preset" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_sampler_benchmark_writes_its_table_and_json(tmp_path):
    out = tmp_path / "sampler.json"
    proc = _run("launch.benchmark", "sampler", "--models=tiny", "--batches=1,4", "--new_tokens=6",
                "--repeats=1", "--floor_batch=4", f"--output={out}")
    assert proc.returncode == 0, proc.stderr
    assert "| tiny" in proc.stdout
    report = json.loads(out.read_text())
    rows = [r for r in report["results"] if "batch" in r]
    assert [r["batch"] for r in rows] == [1, 4]
    for row in rows:
        assert row["jaxtree_tokens_per_s"] > 0 and row["transformers_tokens_per_s"] > 0
    assert 0 < rows[1]["fraction_of_floor"]
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
