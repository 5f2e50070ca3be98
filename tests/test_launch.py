"""The command-line jobs run end to end (small sizes)."""

import pytest

from hf_reference import build_chatml_tokenizer, random_hf_model
from toy_run import one_layer_policy, run_module_jobs

# The context of the policy the capping test samples from: a random policy rarely ends a sample,
# so the samples run to the cap (the tiny preset's 4,096 positions cost ~9 s of decoding).
SHORT_CONTEXT = 96


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """{'short': job, 'checkpoint': job, 'checkpoint_dir': path}: the `launch.sample` jobs of the
    tests below, run together (forked from one process that imported their libraries once); the
    first samples a one-block jaxtree checkpoint of SHORT_CONTEXT positions, the second a random
    qwen2 checkpoint with a ChatML tokenizer."""
    short_model = one_layer_policy(str(tmp_path_factory.mktemp("short")), context=SHORT_CONTEXT)
    checkpoint = tmp_path_factory.mktemp("hf")
    fast = build_chatml_tokenizer(checkpoint)
    random_hf_model("qwen2", vocab_size=len(fast)).save_pretrained(str(checkpoint))
    short, from_checkpoint = run_module_jobs(
        ("-m", "launch.sample", f"--model={short_model}", "--prompt=Hello", "--num_samples=3",
         "--max_new_tokens=100000", "--temperature=0.8", "--top_p=0.9"),
        ("-m", "launch.sample", f"--model={checkpoint}", "--prompt=hello world", "--chat",
         "--num_samples=2", "--max_new_tokens=8"))
    return {"short": short, "checkpoint": from_checkpoint, "checkpoint_dir": checkpoint}


def test_sample_caps_max_new_tokens_to_the_models_context(samples):
    from jaxtree.tokenizers import ByteTokenizer
    proc = samples["short"]
    assert proc.returncode == 0, proc.stderr
    context = SHORT_CONTEXT
    prompt = len(ByteTokenizer().encode("Hello", add_bos=True))
    assert proc.stdout.splitlines()[0] == (f"--max_new_tokens=100000 capped to "
                                           f"{context - prompt} (context {context} - prompt "
                                           f"{prompt})")
    assert proc.stdout.count("--- sample ") == 3
    assert "1 compilation(s)" in proc.stdout


def test_sample_from_a_checkpoint_directory_with_chat_template(samples):
    proc = samples["checkpoint"]
    assert proc.returncode == 0, proc.stderr
    assert f"model: {samples['checkpoint_dir']} (qwen2" in proc.stdout
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


_CACHE_PROBE = """
import json, os, sys
import jax
import jax.numpy as jnp
from launch import common

chosen, unusable, out = sys.argv[1], sys.argv[2], {}
jax.config.update("jax_compilation_cache_dir", "/the/users/own")   # JAX_COMPILATION_CACHE_DIR
out["jax_own"] = common.use_compilation_cache()
for name, value in [("default", None), ("off", "off"), ("unusable", unusable),
                    ("chosen", chosen)]:
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_compilation_cache_max_size", -1)
    os.environ.pop(common.COMPILATION_CACHE_ENV, None)
    if value is not None:
        os.environ[common.COMPILATION_CACHE_ENV] = value
    out[name] = [common.use_compilation_cache(), jax.config.jax_compilation_cache_max_size]
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.jit(lambda x: jnp.sin(x) * 2)(jnp.ones(3)).block_until_ready()   # the first compilation
print(json.dumps(out))
"""


def test_jobs_keep_compiled_programs_where_the_environment_says(tmp_path):
    """launch.common.use_compilation_cache (every job but the benchmarks calls it): JAX's own
    JAX_COMPILATION_CACHE_DIR wins; else $JAXTREE_COMPILATION_CACHE, 'off' to disable, default
    ~/.cache/jaxtree/xla, capped in size; a directory that cannot be made is said in one line
    and the job compiles without it; the first compilation afterwards is written there. In a
    fresh interpreter without the test session's cache."""
    import json
    import os
    import subprocess
    import sys

    from launch.common import COMPILATION_CACHE_MAX_BYTES
    from toy_run import ROOT

    home, chosen = tmp_path / "home", tmp_path / "chosen"
    (tmp_path / "a_file").write_text("")
    unusable = tmp_path / "a_file" / "cache"
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_COMPILATION_CACHE_DIR", "JAXTREE_COMPILATION_CACHE")}
    proc = subprocess.run([sys.executable, "-c", _CACHE_PROBE, str(chosen), str(unusable)],
                          cwd=ROOT, env={**env, "HOME": str(home)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["jax_own"] == "/the/users/own"
    assert out["default"] == [str(home / ".cache" / "jaxtree" / "xla"),
                              COMPILATION_CACHE_MAX_BYTES]
    assert out["off"] == [None, -1]
    assert out["unusable"] == [None, -1]
    assert proc.stderr.count(f"note: compiled programs are not kept: cannot use {unusable} as "
                             "the compilation cache") == 1, proc.stderr
    assert out["chosen"] == [str(chosen), COMPILATION_CACHE_MAX_BYTES]
    assert os.listdir(chosen), "the first compilation was not written to the chosen directory"
