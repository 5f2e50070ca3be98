"""The command-line jobs run end to end (small sizes)."""

import subprocess
import sys

import pytest

from hf_reference import build_chatml_tokenizer, random_hf_model


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_sample_with_the_tiny_preset_caps_max_new_tokens_to_the_context():
    from jaxtree.models.presets import PRESETS
    from jaxtree.tokenizers import ByteTokenizer
    proc = _run("launch.sample", "--model=tiny", "--prompt=Hello", "--num_samples=3",
                "--max_new_tokens=100000", "--temperature=0.8", "--top_p=0.9")
    assert proc.returncode == 0, proc.stderr
    context = PRESETS["tiny"].max_position_embeddings
    prompt = len(ByteTokenizer().encode("Hello", add_bos=True))
    assert proc.stdout.splitlines()[0] == (f"--max_new_tokens=100000 capped to "
                                           f"{context - prompt} (context {context} - prompt "
                                           f"{prompt})")
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
