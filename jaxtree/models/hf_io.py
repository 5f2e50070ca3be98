"""Hugging Face checkpoint import/export: `config.json` + one or sharded `*.safetensors` files.

Safetensors files are read with a small header parser over a memory map instead of
`safetensors.numpy`, which cannot represent bfloat16 (the dtype of most released checkpoints);
`ml_dtypes` supplies the numpy bfloat16 type.
"""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Iterator

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from jaxtree.models import gguf_io
from jaxtree.models.checkpoint_layout import CheckpointError, param_paths, unflatten
from jaxtree.models.config import ModelConfig

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_,
}

# Tensors some exporters write that carry no learned state.
_IGNORED = re.compile(r".*rotary_emb\.inv_freq$")


# ----------------------------------------------------------------------------- name mapping

def _hf_name(path: tuple[str, ...]) -> tuple[str, bool]:
    """Our parameter path -> (Hugging Face tensor name, whether the array is transposed)."""
    parts = []
    for part in path[:-1]:
        match = re.fullmatch(r"layers_(\d+)", part)
        if match:
            parts += ["model", "layers", match.group(1)]
        else:
            parts.append({"embed": "model.embed_tokens", "final_norm": "model.norm",
                          "attn": "self_attn", "input_norm": "input_layernorm",
                          "post_attention_norm": "post_attention_layernorm"}.get(part, part))
    leaf = path[-1]
    parts.append("bias" if leaf == "bias" else "weight")
    return ".".join(parts), leaf == "kernel"


# ----------------------------------------------------------------------------- safetensors reading

def _read_header(path: str) -> tuple[dict, int]:
    """Returns (tensor table, byte offset of the data section) of a safetensors file."""
    try:
        with open(path, "rb") as f:
            raw_len = f.read(8)
            if len(raw_len) != 8:
                raise CheckpointError(f"{path}: truncated safetensors file (no header)")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > os.path.getsize(path) - 8:
                raise CheckpointError(f"{path}: corrupt safetensors header length {header_len}")
            header = json.loads(f.read(header_len))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    header.pop("__metadata__", None)
    for name, entry in header.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("shape"), list)
                and isinstance(entry.get("data_offsets"), list)
                and len(entry["data_offsets"]) == 2):
            raise CheckpointError(f"{path}: corrupt safetensors header entry for tensor {name!r}")
    return header, 8 + header_len


def _iter_safetensors(path: str) -> Iterator[tuple[str, np.ndarray]]:
    header, data_start = _read_header(path)
    size = os.path.getsize(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    for name, entry in header.items():
        dtype = _ST_DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {entry.get('dtype')!r}")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if end - begin != expected or data_start + end > size:
            raise CheckpointError(f"{path}: tensor {name!r} data is truncated or corrupt")
        yield name, mapped[data_start + begin:data_start + end].view(dtype).reshape(shape)


def _checkpoint_files(directory: str) -> list[str]:
    index_path = os.path.join(directory, INDEX_FILE)
    single_path = os.path.join(directory, SINGLE_FILE)
    if os.path.exists(index_path):
        try:
            with open(index_path) as f:
                weight_map = json.load(f)["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not a JSON object")
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index_path}: corrupt index file ({e!r})") from e
        files = sorted(set(weight_map.values()))
        for name in files:
            if not os.path.exists(os.path.join(directory, name)):
                raise CheckpointError(f"{directory}: shard {name!r} listed in {INDEX_FILE} is missing")
        return [os.path.join(directory, name) for name in files]
    if os.path.exists(single_path):
        return [single_path]
    raise CheckpointError(f"{directory}: no weights found (expected {SINGLE_FILE} or {INDEX_FILE})")


# ----------------------------------------------------------------------------- public API

def load_config(path: str, dtype: str | None = None, param_dtype: str | None = None) -> ModelConfig:
    """Reads `config.json` of a checkpoint directory (or a `.gguf` file's metadata) into a
    ModelConfig."""
    if gguf_io.is_gguf_path(path):
        return gguf_io.load_gguf_config(path, dtype, param_dtype)
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint directory {path!r} does not exist")
    if not os.path.isdir(path):
        raise CheckpointError(f"checkpoint path {path!r} is not a directory")
    config_path = os.path.join(path, CONFIG_FILE)
    if not os.path.exists(config_path):
        raise CheckpointError(f"{path}: missing {CONFIG_FILE}")
    try:
        with open(config_path) as f:
            hf = json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{config_path}: not valid JSON ({e})") from e
    try:
        return ModelConfig.from_hf_dict(hf, dtype=dtype, param_dtype=param_dtype)
    except KeyError as e:
        raise CheckpointError(f"{config_path}: missing field {e.args[0]!r}") from e
    except ValueError as e:
        raise CheckpointError(f"{config_path}: {e}") from e


def load_pretrained(path: str, dtype: str | None = None,
                    param_dtype: str | None = None) -> tuple[ModelConfig, dict]:
    """Loads a Llama / Qwen2 / Qwen3 checkpoint from a local Hugging Face directory or GGUF file.

    Args:
      path: directory with `config.json` and `model.safetensors` or sharded files plus
        `model.safetensors.index.json`; or a llama.cpp `*.gguf` file (see `gguf_io.load_gguf`).
      dtype: computation dtype of the returned config ('float32' or 'bfloat16'); defaults to
        float32 on CPU and bfloat16 on accelerators.
      param_dtype: storage dtype of the returned parameters; defaults to dtype.

    Returns:
      (config, params) with params a pytree of jax arrays in param_dtype.

    Raises:
      CheckpointError (a ValueError) naming the problem: missing directory, config or shard,
      corrupt file, missing or unexpected tensor, shape mismatch. ValueError for an unsupported
      architecture.
    """
    if gguf_io.is_gguf_path(path):
        return gguf_io.load_gguf(path, dtype, param_dtype)
    config = load_config(path, dtype, param_dtype)
    expected = param_paths(config)
    by_hf_name = {}
    for our_path in expected:
        hf_name, transposed = _hf_name(our_path)
        by_hf_name[hf_name] = (our_path, transposed)

    loaded: dict[tuple[str, ...], jax.Array] = {}
    unexpected = []
    for file in _checkpoint_files(path):
        for name, array in _iter_safetensors(file):
            if name not in by_hf_name:
                if _IGNORED.match(name) or (name == "lm_head.weight" and config.tie_word_embeddings):
                    continue
                unexpected.append(name)
                continue
            our_path, transposed = by_hf_name[name]
            want = expected[our_path].shape
            got = array.shape[::-1] if transposed else array.shape
            if tuple(got) != tuple(want):
                want_hf = tuple(want[::-1]) if transposed else tuple(want)
                raise CheckpointError(
                    f"{file}: tensor {name!r} has shape {tuple(array.shape)}, config.json implies "
                    f"{want_hf}")
            value = array.T if transposed else array
            loaded[our_path] = jnp.asarray(np.asarray(value), dtype=config.weight_dtype)
    if unexpected:
        raise CheckpointError(
            f"{path}: tensors not used by the {config.model_type} architecture in config.json: "
            f"{sorted(unexpected)[:8]}{' ...' if len(unexpected) > 8 else ''}")
    missing = [_hf_name(p)[0] for p in expected if p not in loaded]
    if missing:
        raise CheckpointError(f"{path}: missing tensors {missing[:8]}"
                              f"{' ...' if len(missing) > 8 else ''}")
    return config, unflatten(loaded)


def save_pretrained(path: str, config: ModelConfig, params: dict,
                    max_shard_bytes: int = 2 * 1024**3) -> None:
    """Writes `config.json` and safetensors weights that transformers' `from_pretrained` loads.

    Weights are stored in config.param_dtype, sharded into files of at most max_shard_bytes
    (a single tensor larger than that gets a file of its own) with an index file when more than
    one file is needed.
    """
    os.makedirs(path, exist_ok=True)
    expected = param_paths(config)
    flat = {tuple(k.key for k in p): leaf
            for p, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
    if set(flat) != set(expected):
        raise ValueError(f"params do not match config: missing {sorted(set(expected) - set(flat))}, "
                         f"extra {sorted(set(flat) - set(expected))}")
    store_dtype = ml_dtypes.bfloat16 if config.param_dtype == "bfloat16" else np.dtype(
        config.weight_dtype)
    tensors = {}
    for our_path, leaf in flat.items():
        if tuple(leaf.shape) != tuple(expected[our_path].shape):
            raise ValueError(f"param {'/'.join(our_path)} has shape {leaf.shape}, config implies "
                             f"{expected[our_path].shape}")
        hf_name, transposed = _hf_name(our_path)
        array = np.asarray(jax.device_get(leaf)).astype(store_dtype)
        tensors[hf_name] = np.ascontiguousarray(array.T if transposed else array)

    shards: list[dict[str, np.ndarray]] = [{}]
    shard_bytes = 0
    for name in sorted(tensors):
        nbytes = tensors[name].nbytes
        if shards[-1] and shard_bytes + nbytes > max_shard_bytes:
            shards.append({})
            shard_bytes = 0
        shards[-1][name] = tensors[name]
        shard_bytes += nbytes

    for stale in (SINGLE_FILE, INDEX_FILE):
        if os.path.exists(os.path.join(path, stale)):
            os.remove(os.path.join(path, stale))
    if len(shards) == 1:
        save_file(shards[0], os.path.join(path, SINGLE_FILE), metadata={"format": "pt"})
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, os.path.join(path, name), metadata={"format": "pt"})
            weight_map.update({tensor: name for tensor in shard})
        index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
                 "weight_map": weight_map}
        with open(os.path.join(path, INDEX_FILE), "w") as f:
            json.dump(index, f, indent=2)
    with open(os.path.join(path, CONFIG_FILE), "w") as f:
        json.dump(config.to_hf_dict(), f, indent=2)
