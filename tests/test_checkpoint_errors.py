"""Broken checkpoints fail loudly: every error is a ValueError (CheckpointError for a missing,
incomplete or corrupt checkpoint) whose message names the offending file, field or tensor."""

import json
import os
import re
import shutil
import struct

import chex
import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from hf_reference import random_hf_model
from jaxtree import models
from jaxtree.models import CheckpointError, ModelConfig

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
CONFIG = "config.json"


# ----------------------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def hf_llama_dir(tmp_path_factory):
    """A pristine transformers-written tiny Llama checkpoint (tied embeddings), built once."""
    path = tmp_path_factory.mktemp("hf_llama")
    random_hf_model("llama").save_pretrained(str(path))
    return path


@pytest.fixture
def ckpt(hf_llama_dir, tmp_path):
    """A private copy of the Llama checkpoint that a test may break."""
    path = tmp_path / "ckpt"
    shutil.copytree(hf_llama_dir, path)
    return path


def _read_config(path):
    with open(path / CONFIG) as f:
        return json.load(f)


def _write_config(path, hf):
    with open(path / CONFIG, "w") as f:
        json.dump(hf, f)


def _edit_config(path, **changes):
    hf = _read_config(path)
    for key, value in changes.items():
        if value is _DELETE:
            hf.pop(key, None)
        else:
            hf[key] = value
    _write_config(path, hf)


_DELETE = object()


def _tensors(path):
    return load_file(str(path / WEIGHTS))


def _write_tensors(path, tensors):
    save_file(tensors, str(path / WEIGHTS), metadata={"format": "pt"})


def _q(text):
    """Regex matching `text` literally."""
    return re.escape(text)


# ----------------------------------------------------------------------------- sanity

def test_pristine_checkpoint_loads(ckpt):
    config, params = models.load_pretrained(str(ckpt))
    assert config.model_type == "llama"
    assert config.tie_word_embeddings
    assert params["embed"]["embedding"].shape == (101, 64)


# ----------------------------------------------------------------------------- directory / config

def test_missing_directory(tmp_path):
    missing = tmp_path / "no_such_checkpoint"
    with pytest.raises(CheckpointError, match=_q(str(missing)) + ".*does not exist"):
        models.load_pretrained(str(missing))
    with pytest.raises(CheckpointError, match="does not exist"):
        models.load_config(str(missing))


def test_path_is_a_file_not_a_directory(tmp_path):
    file = tmp_path / "weights.bin"
    file.write_bytes(b"x")
    with pytest.raises(CheckpointError, match=_q(str(file))):
        models.load_pretrained(str(file))


def test_missing_config_json(ckpt):
    os.remove(ckpt / CONFIG)
    with pytest.raises(CheckpointError, match="missing config.json"):
        models.load_pretrained(str(ckpt))


def test_config_json_not_valid_json(ckpt):
    (ckpt / CONFIG).write_text('{"model_type": "llama", "hidden_size": 64,')
    with pytest.raises(CheckpointError, match=_q(CONFIG) + ".*not valid JSON"):
        models.load_pretrained(str(ckpt))


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads", "vocab_size",
                                   "intermediate_size", "num_hidden_layers"])
def test_config_json_missing_required_field(ckpt, field):
    _edit_config(ckpt, **{field: _DELETE})
    with pytest.raises(CheckpointError, match=f"missing field '{field}'"):
        models.load_config(str(ckpt))
    with pytest.raises(CheckpointError, match=f"missing field '{field}'"):
        models.load_pretrained(str(ckpt))


# ----------------------------------------------------------------------------- unsupported architectures

@pytest.mark.parametrize("model_type", ["gpt2", "mistral"])
def test_unsupported_model_type(ckpt, model_type):
    _edit_config(ckpt, model_type=model_type)
    with pytest.raises(ValueError, match=f"model_type='{model_type}' is not supported"):
        models.load_pretrained(str(ckpt))


def test_missing_model_type(ckpt):
    _edit_config(ckpt, model_type=_DELETE)
    with pytest.raises(ValueError, match="model_type=None is not supported"):
        models.load_pretrained(str(ckpt))


def test_unsupported_hidden_act(ckpt):
    _edit_config(ckpt, hidden_act="gelu")
    with pytest.raises(ValueError, match="hidden_act='gelu' is not supported"):
        models.load_pretrained(str(ckpt))


def test_sliding_window_rejected(ckpt):
    _edit_config(ckpt, model_type="qwen2", use_sliding_window=True, sliding_window=16)
    with pytest.raises(ValueError, match="use_sliding_window"):
        models.load_config(str(ckpt))


def test_sliding_attention_layer_types_rejected(ckpt):
    _edit_config(ckpt, layer_types=["full_attention", "sliding_attention"])
    with pytest.raises(ValueError, match="layer_types.*sliding_attention"):
        models.load_config(str(ckpt))


def test_pretraining_tp_rejected(ckpt):
    _edit_config(ckpt, pretraining_tp=2)
    with pytest.raises(ValueError, match="pretraining_tp"):
        models.load_config(str(ckpt))


@pytest.mark.parametrize("layout", ["rope_parameters", "rope_scaling"])
def test_unsupported_rope_type(ckpt, layout):
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
    if layout == "rope_parameters":
        _edit_config(ckpt, rope_parameters={**yarn, "rope_theta": 500.0})
    else:  # transformers v4 layout, legacy 'type' key
        _edit_config(ckpt, rope_parameters=_DELETE, rope_theta=500.0,
                     rope_scaling={"type": "yarn", "factor": 4.0})
    with pytest.raises(ValueError, match="rope type 'yarn' is not supported"):
        models.load_pretrained(str(ckpt))


def test_llama3_rope_missing_required_key(ckpt):
    _edit_config(ckpt, rope_parameters={"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0})
    with pytest.raises(ValueError,
                       match=r"rope type 'llama3' is missing \['original_max_position_embeddings'\]"):
        models.load_pretrained(str(ckpt))


def test_linear_rope_missing_factor(ckpt):
    _edit_config(ckpt, rope_parameters={"rope_type": "linear", "rope_theta": 500.0})
    with pytest.raises(ValueError, match=r"rope type 'linear' is missing \['factor'\]"):
        models.load_config(str(ckpt))


def test_complete_llama3_rope_is_accepted(ckpt):
    _edit_config(ckpt, rope_parameters={"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 64})
    config = models.load_config(str(ckpt))
    assert config.rope_type == "llama3"
    assert dict(config.rope_scaling)["original_max_position_embeddings"] == 64.0


def test_partial_rotary_factor_rejected(ckpt):
    _edit_config(ckpt, rope_parameters={"rope_type": "default", "rope_theta": 500.0,
                                        "partial_rotary_factor": 0.5})
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        models.load_config(str(ckpt))


# ----------------------------------------------------------------------------- weight files

def test_no_weights_file(ckpt):
    os.remove(ckpt / WEIGHTS)
    with pytest.raises(CheckpointError,
                       match="no weights found.*" + _q(WEIGHTS) + ".*" + _q(INDEX)):
        models.load_pretrained(str(ckpt))


@pytest.fixture
def sharded(tiny, tmp_path):
    """A jaxtree-written checkpoint of the tiny preset, sharded into several files."""
    config, params = tiny
    path = tmp_path / "sharded"
    models.save_pretrained(str(path), config, params, max_shard_bytes=400_000)
    return path


def test_sharded_checkpoint_roundtrips(sharded, tiny):
    config, params = tiny
    assert (sharded / INDEX).exists() and not (sharded / WEIGHTS).exists()
    loaded_config, loaded = models.load_pretrained(str(sharded))
    assert loaded_config == config
    chex.assert_trees_all_equal(loaded, params)


def test_index_lists_missing_shard(sharded):
    with open(sharded / INDEX) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    assert len(shards) > 1
    os.remove(sharded / shards[1])
    with pytest.raises(CheckpointError, match=f"shard '{_q(shards[1])}'.*missing"):
        models.load_pretrained(str(sharded))


def test_corrupt_index_json(sharded):
    (sharded / INDEX).write_text('{"weight_map": {"model.norm.weight": ')
    with pytest.raises(CheckpointError, match=_q(INDEX) + ".*corrupt index"):
        models.load_pretrained(str(sharded))


def test_index_without_weight_map(sharded):
    (sharded / INDEX).write_text('{"metadata": {"total_size": 1}}')
    with pytest.raises(CheckpointError, match=_q(INDEX) + ".*corrupt index.*weight_map"):
        models.load_pretrained(str(sharded))


def test_truncated_safetensors_data_section(ckpt):
    file = ckpt / WEIGHTS
    raw = file.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    data_start = 8 + header_len
    assert len(raw) - data_start > 1000
    file.write_bytes(raw[:data_start + (len(raw) - data_start) // 2])  # cut mid-data
    with pytest.raises(CheckpointError, match=_q(str(file)) + r".*tensor '[\w.]+' data is truncated"):
        models.load_pretrained(str(ckpt))


def test_safetensors_truncated_inside_header(ckpt):
    file = ckpt / WEIGHTS
    raw = file.read_bytes()
    file.write_bytes(raw[:40])
    with pytest.raises(CheckpointError, match=_q(str(file)) + ".*corrupt safetensors header"):
        models.load_pretrained(str(ckpt))


def test_empty_safetensors_file(ckpt):
    file = ckpt / WEIGHTS
    file.write_bytes(b"")
    with pytest.raises(CheckpointError, match=_q(str(file)) + ".*truncated safetensors file"):
        models.load_pretrained(str(ckpt))


def test_garbage_safetensors_header_length(ckpt):
    file = ckpt / WEIGHTS
    file.write_bytes(b"\xde\xad\xbe\xef" * 1024)
    with pytest.raises(CheckpointError, match=_q(str(file)) + ".*corrupt safetensors header"):
        models.load_pretrained(str(ckpt))


def test_garbage_safetensors_header_json(ckpt):
    file = ckpt / WEIGHTS
    garbage = b"\x00not json at all\xff\xfe" * 4
    file.write_bytes(struct.pack("<Q", len(garbage)) + garbage + b"\x00" * 64)
    with pytest.raises(CheckpointError, match=_q(str(file)) + ".*corrupt safetensors header"):
        models.load_pretrained(str(ckpt))


def test_unsupported_tensor_dtype(ckpt):
    tensors = _tensors(ckpt)
    tensors["model.norm.weight"] = tensors["model.norm.weight"].astype(np.complex64)
    _write_tensors(ckpt, tensors)
    with pytest.raises(CheckpointError, match="tensor 'model.norm.weight' has unsupported dtype"):
        models.load_pretrained(str(ckpt))


# ----------------------------------------------------------------------------- tensors vs config

def test_config_intermediate_size_disagrees_with_tensors(ckpt):
    _edit_config(ckpt, intermediate_size=_read_config(ckpt)["intermediate_size"] + 16)
    with pytest.raises(CheckpointError,
                       match=r"tensor 'model\.layers\.\d+\.mlp\.(gate|up|down)_proj\.weight' "
                             r"has shape \(\d+, \d+\), config\.json implies"):
        models.load_pretrained(str(ckpt))


def test_tensor_with_wrong_shape(ckpt):
    tensors = _tensors(ckpt)
    name = "model.layers.1.self_attn.k_proj.weight"
    assert tensors[name].shape == (32, 64)
    tensors[name] = np.zeros((48, 64), np.float32)
    _write_tensors(ckpt, tensors)
    with pytest.raises(CheckpointError,
                       match=_q(f"tensor '{name}' has shape (48, 64), config.json implies (32, 64)")):
        models.load_pretrained(str(ckpt))


def test_norm_with_wrong_shape(ckpt):
    tensors = _tensors(ckpt)
    tensors["model.norm.weight"] = np.ones((63,), np.float32)
    _write_tensors(ckpt, tensors)
    with pytest.raises(CheckpointError, match=_q("tensor 'model.norm.weight' has shape (63,)")):
        models.load_pretrained(str(ckpt))


def test_missing_tensor(ckpt):
    tensors = _tensors(ckpt)
    name = "model.layers.0.mlp.up_proj.weight"
    del tensors[name]
    _write_tensors(ckpt, tensors)
    with pytest.raises(CheckpointError, match=r"missing tensors \[" + _q(f"'{name}'") + r"\]"):
        models.load_pretrained(str(ckpt))


def test_untied_checkpoint_without_lm_head(ckpt):
    _edit_config(ckpt, tie_word_embeddings=False)
    with pytest.raises(CheckpointError, match="missing tensors.*'lm_head.weight'"):
        models.load_pretrained(str(ckpt))


def test_unexpected_extra_tensor(ckpt):
    tensors = _tensors(ckpt)
    name = "model.layers.0.self_attn.q_proj.bias"
    tensors[name] = np.zeros((64,), np.float32)
    _write_tensors(ckpt, tensors)
    with pytest.raises(CheckpointError, match=r"tensors not used by the llama architecture.*"
                                              + _q(f"'{name}'")):
        models.load_pretrained(str(ckpt))


def test_unexpected_tensor_in_sharded_checkpoint(sharded):
    with open(sharded / INDEX) as f:
        index = json.load(f)
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "extra.safetensors"
    with open(sharded / INDEX, "w") as f:
        json.dump(index, f)
    save_file({"model.layers.9.mlp.up_proj.weight": np.zeros((4, 4), np.float32)},
              str(sharded / "extra.safetensors"))
    with pytest.raises(CheckpointError, match=_q("'model.layers.9.mlp.up_proj.weight'")):
        models.load_pretrained(str(sharded))


def test_tied_checkpoint_with_lm_head_still_loads(ckpt, hf_llama_dir):
    tensors = _tensors(ckpt)
    assert "lm_head.weight" not in tensors
    # A deliberately different matrix: it must be ignored, not loaded.
    tensors["lm_head.weight"] = np.full_like(tensors["model.embed_tokens.weight"], 7.0)
    _write_tensors(ckpt, tensors)
    config, params = models.load_pretrained(str(ckpt))
    assert config.tie_word_embeddings
    assert "lm_head" not in params
    _, reference = models.load_pretrained(str(hf_llama_dir))
    chex.assert_trees_all_equal(params, reference)


def test_rotary_inv_freq_tensors_are_ignored(ckpt, hf_llama_dir):
    tensors = _tensors(ckpt)
    for layer in range(2):
        tensors[f"model.layers.{layer}.self_attn.rotary_emb.inv_freq"] = np.ones((8,), np.float32)
    tensors["model.rotary_emb.inv_freq"] = np.ones((8,), np.float32)
    _write_tensors(ckpt, tensors)
    _, params = models.load_pretrained(str(ckpt))
    _, reference = models.load_pretrained(str(hf_llama_dir))
    chex.assert_trees_all_equal(params, reference)


# ----------------------------------------------------------------------------- save_pretrained

def test_save_pretrained_missing_param(tiny, tmp_path):
    config, params = tiny
    broken = jax.tree_util.tree_map(lambda x: x, params)
    del broken["layers_0"]["mlp"]["up_proj"]
    with pytest.raises(ValueError, match="params do not match config: missing.*up_proj"):
        models.save_pretrained(str(tmp_path / "out"), config, broken)


def test_save_pretrained_extra_param(tiny, tmp_path):
    config, params = tiny
    broken = jax.tree_util.tree_map(lambda x: x, params)
    broken["lm_head"] = {"kernel": np.zeros((config.hidden_size, config.vocab_size), np.float32)}
    with pytest.raises(ValueError, match="params do not match config.*extra.*lm_head"):
        models.save_pretrained(str(tmp_path / "out"), config, broken)


def test_save_pretrained_wrong_shape(tiny, tmp_path):
    config, params = tiny
    broken = jax.tree_util.tree_map(lambda x: x, params)
    broken["layers_1"]["attn"]["q_proj"]["kernel"] = np.zeros((128, 96), np.float32)
    with pytest.raises(ValueError, match=_q("param layers_1/attn/q_proj/kernel has shape (128, 96)")):
        models.save_pretrained(str(tmp_path / "out"), config, broken)


def test_save_pretrained_params_of_another_config(tiny, tmp_path):
    config, params = tiny
    with pytest.raises(ValueError, match="params do not match config"):
        models.save_pretrained(str(tmp_path / "out"), config.replace(num_layers=5), params)


# ----------------------------------------------------------------------------- ModelConfig validation

def test_config_heads_not_multiple_of_kv_heads():
    with pytest.raises(ValueError, match="num_heads=6 must be a multiple of num_kv_heads=4"):
        ModelConfig(num_heads=6, num_kv_heads=4)


def test_config_odd_head_dim():
    with pytest.raises(ValueError, match="head_dim=33 must be even"):
        ModelConfig(head_dim=33)


def test_config_unknown_model_type():
    with pytest.raises(ValueError, match="model_type='mistral' is not supported"):
        ModelConfig(model_type="mistral")


def test_config_unknown_rope_type():
    with pytest.raises(ValueError, match="rope_type='yarn' is not supported"):
        ModelConfig(rope_type="yarn")


@pytest.mark.parametrize("field", ["vocab_size", "hidden_size", "num_kv_heads", "head_dim"])
def test_config_non_positive_size(field):
    with pytest.raises(ValueError, match=f"ModelConfig.{field} must be positive"):
        ModelConfig(**{field: 0})


def test_config_unknown_dtype():
    with pytest.raises(ValueError, match="unsupported dtype 'float8'"):
        ModelConfig(dtype="float8")


def test_config_json_heads_not_multiple_of_kv_heads(ckpt):
    _edit_config(ckpt, num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="num_heads=4 must be a multiple of num_kv_heads=3"):
        models.load_config(str(ckpt))


# ----------------------------------------------------------------------------- malformed JSON
# Files that parse as JSON but have the wrong structure fail with a CheckpointError naming the file
# or field, not a TypeError / AttributeError / KeyError / ZeroDivisionError from deep inside.


def test_malformed_config_json_not_an_object(ckpt):
    (ckpt / CONFIG).write_text("[]")
    with pytest.raises(ValueError, match=_q(CONFIG)):
        models.load_pretrained(str(ckpt))


def test_malformed_config_json_null_field(ckpt):
    _edit_config(ckpt, hidden_size=None)
    with pytest.raises(ValueError, match="hidden_size"):
        models.load_pretrained(str(ckpt))


def test_malformed_config_json_zero_heads_without_head_dim(ckpt):
    _edit_config(ckpt, num_attention_heads=0, head_dim=_DELETE)
    with pytest.raises(ValueError, match="num_heads|num_attention_heads"):
        models.load_pretrained(str(ckpt))


def test_malformed_index_not_an_object(sharded):
    (sharded / INDEX).write_text("[]")
    with pytest.raises(CheckpointError, match=_q(INDEX)):
        models.load_pretrained(str(sharded))


def test_malformed_index_weight_map_not_an_object(sharded):
    (sharded / INDEX).write_text('{"weight_map": []}')
    with pytest.raises(CheckpointError, match=_q(INDEX)):
        models.load_pretrained(str(sharded))


def test_malformed_safetensors_header_not_an_object(ckpt):
    file = ckpt / WEIGHTS
    file.write_bytes(struct.pack("<Q", 2) + b"[]")
    with pytest.raises(CheckpointError, match=_q(str(file))):
        models.load_pretrained(str(ckpt))


def test_malformed_safetensors_entry_without_offsets(ckpt):
    file = ckpt / WEIGHTS
    header = json.dumps({"model.norm.weight": {"dtype": "F32", "shape": [64]}}).encode()
    file.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 256)
    with pytest.raises(CheckpointError, match="model.norm.weight"):
        models.load_pretrained(str(ckpt))
