"""Logits parity with transformers' PyTorch models (the reference implementation)."""

import json
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from hf_reference import FAMILIES, hf_logits, random_hf_model
from jaxtree import models

ATOL = 1e-4


def _export(model, tmp_path, name="hf"):
    path = str(tmp_path / name)
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_full_forward_matches_transformers(family, tmp_path):
    model = random_hf_model(family)
    config, params = models.load_pretrained(_export(model, tmp_path))
    assert config.model_type == family
    tokens = np.random.default_rng(1).integers(0, config.vocab_size, size=(3, 13))
    ours = np.asarray(models.forward(config, params, jnp.asarray(tokens)))
    ref = hf_logits(model, tokens)
    assert ours.shape == ref.shape == (3, 13, config.vocab_size)
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family,capacity,prompt_lengths,second_lengths", [
    (family, 32, [5, 9, 2, 7], [3, 0, 4, 1]) for family in sorted(FAMILIES)] + [
    # A capacity with several attention spans; rows cross the span boundaries at different steps.
    ("qwen3", 512, [100, 130, 5, 1], [40, 0, 260, 2])])
def test_ragged_prefill_then_decode_matches_transformers(family, capacity, prompt_lengths,
                                                         second_lengths, tmp_path):
    """Rows of different lengths are prefilled in one padded chunk, extended by a second ragged chunk
    (one row appends nothing) and then decoded token by token; every logit must match the reference
    run on each row's own unpadded sequence."""
    model = random_hf_model(family, seed=2)
    config, params = models.load_pretrained(_export(model, tmp_path))
    rng = np.random.default_rng(3)
    prompt_lengths, second_lengths = np.array(prompt_lengths), np.array(second_lengths)
    decode_steps = 6
    batch = len(prompt_lengths)
    total = prompt_lengths + second_lengths + decode_steps
    sequences = [rng.integers(0, config.vocab_size, size=n) for n in total]

    cache = models.init_cache(config, batch, capacity=capacity)

    # both ragged chunks padded to one width: one prefill program (and one decode program)
    prefill_width = int(max(prompt_lengths.max(), second_lengths.max()))

    def chunk(starts, lengths):
        width = prefill_width if lengths.max() > 1 else 1
        out = np.zeros((batch, width), np.int32)
        for b in range(batch):
            out[b, :lengths[b]] = sequences[b][starts[b]:starts[b] + lengths[b]]
        return jnp.asarray(out)

    got = [[] for _ in range(batch)]  # our logits per row, per real position
    starts = np.zeros(batch, int)
    schedule = [prompt_lengths, second_lengths] + [np.ones(batch, int)] * decode_steps
    for lengths in schedule:
        logits, cache = models.extend_cache(config, params, cache, chunk(starts, lengths),
                                            jnp.asarray(lengths, jnp.int32))
        logits = np.asarray(logits)
        for b in range(batch):
            got[b].extend(logits[b, :lengths[b]])
        starts = starts + lengths
    np.testing.assert_array_equal(np.asarray(cache.lengths), total)

    for b in range(batch):
        ref = hf_logits(model, sequences[b][None])[0]
        np.testing.assert_allclose(np.stack(got[b]), ref, atol=ATOL, rtol=0)


def test_last_only_logits_pick_each_rows_last_token(tmp_path):
    model = random_hf_model("qwen2", seed=4)
    config, params = models.load_pretrained(_export(model, tmp_path))
    tokens = np.random.default_rng(5).integers(0, config.vocab_size, size=(3, 8))
    lengths = np.array([8, 3, 1])
    cache = models.init_cache(config, 3, capacity=16)
    last, _ = models.extend_cache(config, params, cache, jnp.asarray(tokens, jnp.int32),
                                  jnp.asarray(lengths, jnp.int32), last_only=True)
    for b, n in enumerate(lengths):
        ref = hf_logits(model, tokens[b:b + 1, :n])[0, -1]
        np.testing.assert_allclose(np.asarray(last[b]), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_save_pretrained_round_trips_through_transformers(family, tmp_path):
    """Our export loads in transformers with the same logits, and reloads in jaxtree bit-exactly."""
    model = random_hf_model(family, seed=6)
    config, params = models.load_pretrained(_export(model, tmp_path))
    out_dir = str(tmp_path / "exported")
    models.save_pretrained(out_dir, config, params)
    reloaded_hf = transformers.AutoModelForCausalLM.from_pretrained(out_dir).eval()
    tokens = np.random.default_rng(7).integers(0, config.vocab_size, size=(2, 10))
    np.testing.assert_allclose(hf_logits(reloaded_hf, tokens), hf_logits(model, tokens),
                               atol=1e-6, rtol=0)
    config2, params2 = models.load_pretrained(out_dir)
    assert config2 == config
    chex.assert_trees_all_equal(params2, params)


def test_preset_exports_load_in_transformers_with_same_logits(tiny, tmp_path):
    config, params = tiny
    models.save_pretrained(str(tmp_path), config, params)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    tokens = np.random.default_rng(8).integers(0, 256, size=(2, 12))
    np.testing.assert_allclose(np.asarray(models.forward(config, params, jnp.asarray(tokens))),
                               hf_logits(hf, tokens), atol=ATOL, rtol=0)


def test_sharded_checkpoint_with_index_loads(tmp_path):
    model = random_hf_model("llama", seed=9)
    config, params = models.load_pretrained(_export(model, tmp_path))
    out_dir = tmp_path / "sharded"
    models.save_pretrained(str(out_dir), config, params, max_shard_bytes=20_000)
    shards = sorted(p.name for p in out_dir.glob("model-*.safetensors"))
    assert len(shards) > 2
    index = json.loads((out_dir / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    _, params2 = models.load_pretrained(str(out_dir))
    chex.assert_trees_all_equal(params2, params)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out_dir)).eval()
    tokens = np.arange(12)[None] % config.vocab_size
    np.testing.assert_allclose(hf_logits(hf, tokens), hf_logits(model, tokens), atol=1e-6)


@pytest.mark.parametrize("overrides", [
    # Llama 3 style RoPE scaling, explicit head_dim, attention and MLP biases.
    dict(rope_parameters={"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 16}),
    dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
    dict(head_dim=8, attention_bias=True, mlp_bias=True, tie_word_embeddings=False),
    dict(num_key_value_heads=4),  # plain multi-head attention
])
def test_llama_variants_match_transformers(overrides, tmp_path):
    model = random_hf_model("llama", seed=10, **overrides)
    config, params = models.load_pretrained(_export(model, tmp_path))
    tokens = np.random.default_rng(11).integers(0, config.vocab_size, size=(2, 40))
    np.testing.assert_allclose(np.asarray(models.forward(config, params, jnp.asarray(tokens))),
                               hf_logits(model, tokens), atol=ATOL, rtol=0)


def test_legacy_top_level_rope_theta_is_read(tmp_path):
    """transformers v4 checkpoints keep rope_theta at the top level, with no rope_parameters."""
    model = random_hf_model("qwen2", seed=12, rope_theta=777.0)
    path = _export(model, tmp_path)
    with open(os.path.join(path, "config.json")) as f:
        hf = json.load(f)
    hf.pop("rope_parameters", None)
    hf["rope_theta"] = 777.0
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf, f)
    config, params = models.load_pretrained(path)
    assert config.rope_theta == 777.0
    tokens = np.random.default_rng(13).integers(0, config.vocab_size, size=(1, 30))
    np.testing.assert_allclose(np.asarray(models.forward(config, params, jnp.asarray(tokens))),
                               hf_logits(model, tokens), atol=ATOL, rtol=0)


def test_bfloat16_checkpoint_loads_and_stays_close(tmp_path):
    model = random_hf_model("qwen3", seed=14)
    model.to(torch.bfloat16).save_pretrained(str(tmp_path / "bf16"))
    config, params = models.load_pretrained(str(tmp_path / "bf16"), dtype="bfloat16")
    assert config.dtype == "bfloat16"
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves(params))
    tokens = np.random.default_rng(15).integers(0, config.vocab_size, size=(2, 9))
    ours = np.asarray(models.forward(config, params, jnp.asarray(tokens)))
    assert ours.dtype == np.float32
    # The same bf16-rounded weights, run in float32 (reloaded: casting `model` itself would also
    # round its RoPE frequency buffer).
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "bf16"),
                                                                  dtype=torch.float32).eval()
    ref = hf_logits(ref_model, tokens)
    assert np.abs(ours - ref).max() < 0.1 * np.abs(ref).max()
    # Loading the bf16 file in float32 is exact.
    config32, params32 = models.load_pretrained(str(tmp_path / "bf16"))
    np.testing.assert_allclose(
        np.asarray(models.forward(config32, params32, jnp.asarray(tokens))), ref, atol=ATOL)
