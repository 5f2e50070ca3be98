"""GGUF import: a llama.cpp model file (one `*.gguf`) as a ModelConfig and a parameter pytree.

The file is read with the `gguf` package (llama.cpp's own reader). Quantized tensors are
dequantized on the host with `gguf.quants.dequantize`, the same routine transformers' GGUF loader
uses, so both load identical float32 weights: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and
the K-quants (Q2_K ... Q6_K) among others.

Two conversions differ from the safetensors path:
- GGUF lists dimensions innermost first (`ne`); the reader already reverses them, so a 2-D tensor
  arrives as numpy `[out, in]`, the Hugging Face layout, and kernels are transposed as in hf_io.
- llama.cpp's converter reorders the rows of Llama-family Q and K projections (weights and biases)
  from the rotate-half RoPE layout of Hugging Face to ggml's interleaved-pairs layout; the rows are
  put back here. Qwen2/Qwen3 files use ggml's NeoX RoPE and are stored unpermuted.
"""

from __future__ import annotations

import os
import re
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxtree.models.checkpoint_layout import CheckpointError, param_paths, unflatten
from jaxtree.models.config import ModelConfig, default_dtype

GGUF_SUFFIX = ".gguf"
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")

_MAGIC = b"GGUF"
# Per-leaf names of the GGUF tensors (one decoder block: `blk.N.<name>`).
_BLOCK_NAMES = {
    ("input_norm", "scale"): "attn_norm.weight",
    ("post_attention_norm", "scale"): "ffn_norm.weight",
    ("attn", "q_norm", "scale"): "attn_q_norm.weight",
    ("attn", "k_norm", "scale"): "attn_k_norm.weight",
}
_PROJECTIONS = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
                "o_proj": "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up",
                "down_proj": "ffn_down"}
_TOP_NAMES = {("embed", "embedding"): "token_embd.weight",
              ("final_norm", "scale"): "output_norm.weight",
              ("lm_head", "kernel"): "output.weight"}


def is_gguf_path(path: str) -> bool:
    """Whether `path` names a GGUF file (by its suffix; it need not exist)."""
    return str(path).lower().endswith(GGUF_SUFFIX) and not os.path.isdir(path)


# ----------------------------------------------------------------------------- name mapping

def _gguf_name(path: tuple[str, ...]) -> str:
    """Our parameter path -> GGUF tensor name, e.g. ('layers_3', 'attn', 'q_proj', 'kernel') ->
    'blk.3.attn_q.weight'. Kernels are stored transposed ([out, in]), like Hugging Face's."""
    if path in _TOP_NAMES:
        return _TOP_NAMES[path]
    match = re.fullmatch(r"layers_(\d+)", path[0])
    if match is None:
        raise KeyError(f"no GGUF name for parameter {'/'.join(path)}")
    rest = path[1:]
    if rest in _BLOCK_NAMES:
        name = _BLOCK_NAMES[rest]
    else:
        name = _PROJECTIONS[rest[-2]] + (".bias" if rest[-1] == "bias" else ".weight")
    return f"blk.{match.group(1)}.{name}"


def _unpermute_rope_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's Q/K row permutation.

    The row Hugging Face keeps at `h*Dh + i*Dh/2 + j` (head h, half i in {0, 1}, j < Dh/2) is
    stored at `h*Dh + 2*j + i`: the two rows RoPE rotates together sit next to each other, as
    ggml's interleaved RoPE expects.

    Args:
      weight: [heads * Dh, ...] as stored in the file (a [out, in] weight or an [out] bias).
      heads: query heads for Q, key/value heads for K.

    Returns:
      The same shape in Hugging Face row order.
    """
    half = weight.shape[0] // heads // 2
    split = weight.reshape(heads, half, 2, *weight.shape[1:])
    return split.swapaxes(1, 2).reshape(weight.shape)


# ----------------------------------------------------------------------------- reading

def _open(path: str):
    """A gguf.GGUFReader over `path`, every failure a CheckpointError naming the file."""
    if not os.path.exists(path):
        raise CheckpointError(f"GGUF file {path!r} does not exist")
    if not os.path.isfile(path):
        raise CheckpointError(f"GGUF path {path!r} is not a file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != _MAGIC:
        raise CheckpointError(
            f"{path}: not a GGUF file (starts with {magic!r}, expected {_MAGIC!r})")
    import gguf  # only when a GGUF file is read

    try:
        return gguf.GGUFReader(path)
    # The reader slices a memory map and reshapes: a truncated or corrupt file surfaces as any of
    # these, with messages that do not name the file.
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"{path}: truncated or corrupt GGUF file ({type(e).__name__}: {e})") from e


def _metadata(reader, path: str, key: str, default: Any = KeyError) -> Any:
    """The value of metadata `key` (a Python scalar, string or list); `default` when absent,
    a CheckpointError when absent and no default is given."""
    field = reader.get_field(key)
    if field is None:
        if default is KeyError:
            raise CheckpointError(f"{path}: missing GGUF metadata key {key!r}")
        return default
    value = field.contents()
    if isinstance(value, float):
        # Stored as float32: 1e-5 reads back as 9.99999974e-06. The shortest decimal that rounds
        # to the same float32 is the value the converter was given.
        value = float(str(np.float32(value)))
    return value


def _per_layer_constant(reader, path: str, key: str) -> int:
    """A per-model integer that some files store as a per-layer list (all equal here)."""
    value = _metadata(reader, path, key)
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise CheckpointError(f"{path}: {key} differs across layers ({value}); jaxtree "
                                  "models have one value for every layer")
        value = value[0]
    return int(value)


def _config_from_reader(reader, path: str, dtype: str | None,
                        param_dtype: str | None) -> ModelConfig:
    arch = _metadata(reader, path, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise CheckpointError(f"{path}: GGUF architecture {arch!r} is not supported; jaxtree "
                              f"loads {', '.join(SUPPORTED_ARCHITECTURES)}")
    tensors = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise CheckpointError(f"{path}: missing tensor 'token_embd.weight'")
    if "rope_freqs.weight" in tensors:
        raise CheckpointError(f"{path}: per-dimension RoPE frequency factors (rope_freqs.weight, "
                              "Llama 3.1-style scaling) are not supported")
    hidden = int(_metadata(reader, path, f"{arch}.embedding_length"))
    heads = _per_layer_constant(reader, path, f"{arch}.attention.head_count")
    kv_heads = (_per_layer_constant(reader, path, f"{arch}.attention.head_count_kv")
                if reader.get_field(f"{arch}.attention.head_count_kv") is not None else heads)
    head_dim = int(_metadata(reader, path, f"{arch}.attention.key_length", hidden // heads))
    rope_dims = int(_metadata(reader, path, f"{arch}.rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise CheckpointError(f"{path}: partial rotary embeddings ({arch}.rope.dimension_count="
                              f"{rope_dims}, head dim {head_dim}) are not supported")
    rope_type, scaling = _rope_scaling(reader, path, arch)
    # Layer 0's bias tensors decide the bias flags; the other layers must agree (a tensor missing
    # or left over is an error when the tensors are matched against the config's parameters).
    has = lambda name: f"blk.0.{name}" in tensors  # noqa: E731
    qkv_bias = arch == "qwen2" or has("attn_q.bias")
    eos = _metadata(reader, path, "tokenizer.ggml.eos_token_id", None)
    try:
        return ModelConfig(
            model_type=arch,
            vocab_size=int(tensors["token_embd.weight"].shape[1]),  # ne = [D, V]
            hidden_size=hidden,
            intermediate_size=_per_layer_constant(reader, path, f"{arch}.feed_forward_length"),
            num_layers=int(_metadata(reader, path, f"{arch}.block_count")),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            max_position_embeddings=int(_metadata(reader, path, f"{arch}.context_length", 4096)),
            rope_theta=float(_metadata(reader, path, f"{arch}.rope.freq_base", 10000.0)),
            rope_type=rope_type,
            rope_scaling=scaling,
            rms_norm_eps=float(_metadata(reader, path, f"{arch}.attention.layer_norm_rms_epsilon")),
            tie_word_embeddings="output.weight" not in tensors,
            qkv_bias=qkv_bias,
            o_bias=has("attn_output.bias"),
            mlp_bias=has("ffn_gate.bias"),
            qk_norm=arch == "qwen3",
            bos_token_id=_metadata(reader, path, "tokenizer.ggml.bos_token_id", None),
            eos_token_id=eos,
            pad_token_id=_metadata(reader, path, "tokenizer.ggml.padding_token_id", None),
            dtype=dtype or default_dtype(),
            param_dtype=param_dtype or dtype or default_dtype(),
        )
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from e


def _rope_scaling(reader, path: str, arch: str) -> tuple[str, tuple[tuple[str, float], ...]]:
    """(rope_type, scaling parameters) from `{arch}.rope.scaling.*`; linear scaling or none."""
    kind = _metadata(reader, path, f"{arch}.rope.scaling.type", "none")
    factor = _metadata(reader, path, f"{arch}.rope.scaling.factor", 1.0)
    if kind == "none" or (kind == "linear" and factor == 1.0):
        return "default", ()
    if kind == "linear":
        return "linear", (("factor", float(factor)),)
    raise CheckpointError(f"{path}: RoPE scaling {arch}.rope.scaling.type={kind!r} is not "
                          "supported (only 'none' and 'linear')")


def _dequantized(tensor, path: str) -> np.ndarray:
    """float32 numpy array of a GGUF tensor in numpy dimension order ([out, in] for weights)."""
    from gguf.quants import dequantize

    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as e:
        raise CheckpointError(f"{path}: tensor {tensor.name!r} has quantization type "
                              f"{tensor.tensor_type.name}, which gguf cannot dequantize") from e
    return np.asarray(values, dtype=np.float32)


# ----------------------------------------------------------------------------- public API

def load_gguf_config(path: str, dtype: str | None = None,
                     param_dtype: str | None = None) -> ModelConfig:
    """The ModelConfig a GGUF file describes (metadata and tensor table only; no weights read).

    dtype defaults to `default_dtype()`, param_dtype to dtype.
    """
    return _config_from_reader(_open(path), path, dtype, param_dtype)


def load_gguf(path: str, dtype: str | None = None,
              param_dtype: str | None = None) -> tuple[ModelConfig, dict]:
    """Loads a Llama / Qwen2 / Qwen3 model from a llama.cpp GGUF file.

    Args:
      path: the `.gguf` file (a single file; split `-00001-of-0000N.gguf` files are not read).
      dtype: computation dtype of the returned config; defaults to float32 on CPU, bfloat16 on
        accelerators.
      param_dtype: storage dtype of the returned parameters; defaults to dtype. Quantized weights
        are dequantized to float32 first, then cast.

    Returns:
      (config, params), params a pytree of jax arrays in param_dtype, laid out as `load_pretrained`
      returns them (kernels [in, out], embedding [V, D]).

    Raises:
      CheckpointError (a ValueError) naming the file and the problem: missing file, not GGUF,
      truncated, unsupported architecture or quantization type, missing, unexpected or misshapen
      tensors.
    """
    reader = _open(path)
    config = _config_from_reader(reader, path, dtype, param_dtype)
    expected = param_paths(config)
    by_name = {_gguf_name(p): p for p in expected}
    permute_heads = ({"attn_q": config.num_heads, "attn_k": config.num_kv_heads}
                     if config.model_type == "llama" else {})

    loaded = {}
    unexpected = []
    for tensor in reader.tensors:
        our_path = by_name.get(tensor.name)
        if our_path is None:
            unexpected.append(tensor.name)
            continue
        want = tuple(expected[our_path].shape)
        transposed = our_path[-1] == "kernel"
        got = tuple(int(d) for d in tensor.shape[::-1])  # ne is innermost first
        if (got[::-1] if transposed else got) != want:
            raise CheckpointError(
                f"{path}: tensor {tensor.name!r} has shape {got}, the metadata implies "
                f"{want[::-1] if transposed else want}")
        value = _dequantized(tensor, path).reshape(got)
        kind = tensor.name.split(".")[-2]  # 'blk.N.attn_q.weight' -> 'attn_q'
        if kind in permute_heads:
            value = _unpermute_rope_rows(value, permute_heads[kind])
        loaded[our_path] = jnp.asarray(value.T if transposed else value, dtype=config.weight_dtype)
    if unexpected:
        raise CheckpointError(
            f"{path}: tensors not used by the {config.model_type} architecture: "
            f"{sorted(unexpected)[:8]}{' ...' if len(unexpected) > 8 else ''}")
    missing = [_gguf_name(p) for p in expected if p not in loaded]
    if missing:
        raise CheckpointError(f"{path}: missing tensors {missing[:8]}"
                              f"{' ...' if len(missing) > 8 else ''}")
    return config, unflatten(loaded)
