"""Model configuration: one frozen dataclass for the Llama, Qwen2 and Qwen3 families.

`ModelConfig` is hashable so it can be a static argument of `jax.jit`. It converts to and from the
Hugging Face `config.json` dictionary (transformers v4 top-level `rope_theta` / `rope_scaling` and
transformers v5 `rope_parameters` are both read).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")

# RoPE variants whose inverse frequencies we reproduce exactly; anything else fails loudly at load
# time instead of silently producing different logits.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def default_dtype() -> str:
    """'float32' on CPU (no fast bfloat16 arithmetic there), 'bfloat16' on GPU and TPU."""
    return "float32" if jax.default_backend() == "cpu" else "bfloat16"


def dtype_from_name(name: str | Any) -> Any:
    """Maps 'float32' / 'bfloat16' / 'float16' (or a jnp dtype) to a jnp dtype."""
    if not isinstance(name, str):
        return jnp.dtype(name).type
    if name not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; expected one of {sorted(_DTYPES)}")
    return _DTYPES[name]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of a decoder-only transformer.

    Attributes:
      model_type: 'llama', 'qwen2' or 'qwen3'; decides the Hugging Face export format.
      vocab_size: rows of the embedding table (V).
      hidden_size: model width (D).
      intermediate_size: SwiGLU hidden width (F).
      num_layers: number of decoder blocks (L).
      num_heads: query heads (H).
      num_kv_heads: key/value heads (K); H must be a multiple of K (grouped-query attention).
      head_dim: per-head width (Dh); Qwen3 sets it explicitly, otherwise D // H.
      max_position_embeddings: longest context the model was trained for (informational; RoPE has no
        table, so longer caches work but quality is the checkpoint's business).
      rope_theta: RoPE base wavelength.
      rope_type: 'default', 'linear' or 'llama3'.
      rope_scaling: extra RoPE parameters as sorted (key, value) pairs (hashable), e.g. 'factor'.
      rms_norm_eps: epsilon of every RMSNorm.
      tie_word_embeddings: the output projection reuses the embedding table.
      qkv_bias: q/k/v projections have biases (Qwen2; Llama/Qwen3 with attention_bias).
      o_bias: output projection has a bias (Llama/Qwen3 with attention_bias).
      mlp_bias: SwiGLU projections have biases (Llama mlp_bias).
      qk_norm: RMSNorm over head_dim on queries and keys before RoPE (Qwen3).
      bos_token_id, eos_token_id, pad_token_id: carried into the exported config.json.
      dtype: computation dtype ('float32' on CPU, 'bfloat16' on accelerators).
      param_dtype: storage dtype of parameters.
    """

    model_type: str = "llama"
    vocab_size: int = 264
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rope_type: str = "default"
    rope_scaling: tuple[tuple[str, float], ...] = ()
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    dtype: str = "float32"
    param_dtype: str = "float32"

    def __post_init__(self):
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"ModelConfig.model_type={self.model_type!r} is not supported; "
                f"expected one of {SUPPORTED_MODEL_TYPES}")
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"ModelConfig.rope_type={self.rope_type!r} is not supported; "
                f"expected one of {SUPPORTED_ROPE_TYPES}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads={self.num_heads} must be a multiple of "
                f"num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim={self.head_dim} must be even for RoPE")
        dtype_from_name(self.dtype)
        dtype_from_name(self.param_dtype)
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))

    @property
    def compute_dtype(self):
        return dtype_from_name(self.dtype)

    @property
    def weight_dtype(self):
        return dtype_from_name(self.param_dtype)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        if isinstance(self.eos_token_id, int):
            return (self.eos_token_id,)
        return tuple(self.eos_token_id)

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (checkpoint metadata); `from_dict` inverts it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelConfig":
        data = dict(data)
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown ModelConfig fields {sorted(unknown)}")
        data["rope_scaling"] = tuple(tuple(pair) for pair in data.get("rope_scaling", ()))
        return cls(**data)

    def num_params(self) -> int:
        """Number of parameters, counted from the architecture (no arrays needed)."""
        d, f, h, k, dh = (self.hidden_size, self.intermediate_size, self.num_heads,
                          self.num_kv_heads, self.head_dim)
        attn = d * h * dh * 2 + d * k * dh * 2
        attn += (h * dh + 2 * k * dh) * self.qkv_bias + d * self.o_bias + 2 * dh * self.qk_norm
        mlp = 3 * d * f + (2 * f + d) * self.mlp_bias
        per_layer = attn + mlp + 2 * d
        total = self.num_layers * per_layer + self.vocab_size * d + d
        if not self.tie_word_embeddings:
            total += self.vocab_size * d
        return total

    # ------------------------------------------------------------------ Hugging Face conversion

    @classmethod
    def from_hf_dict(cls, hf: Mapping[str, Any], *, dtype: str | None = None,
                     param_dtype: str | None = None) -> "ModelConfig":
        """Builds a config from a Hugging Face `config.json` dictionary.

        dtype defaults to `default_dtype()` (float32 on CPU, bfloat16 on accelerators) and
        param_dtype to dtype.

        Raises:
          ValueError: naming the field, for an unsupported model_type, activation, RoPE type or
            attention layout (e.g. sliding-window layers).
        """
        if not isinstance(hf, Mapping):
            raise ValueError(f"config.json must be a JSON object, got {type(hf).__name__}")
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"config.json model_type={model_type!r} is not supported; "
                f"jaxtree loads {', '.join(SUPPORTED_MODEL_TYPES)}")
        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"config.json hidden_act={act!r} is not supported (only 'silu')")
        if hf.get("use_sliding_window", False):
            raise ValueError("config.json use_sliding_window=true is not supported "
                             "(only full attention)")
        layer_types = hf.get("layer_types")
        if layer_types and any(t != "full_attention" for t in layer_types):
            raise ValueError(f"config.json layer_types={layer_types!r}: only 'full_attention' "
                             "layers are supported")
        if hf.get("pretraining_tp", 1) not in (1, None):
            raise ValueError("config.json pretraining_tp > 1 is not supported")

        hidden, heads = _positive_int(hf, "hidden_size"), _positive_int(hf, "num_attention_heads")
        head_dim = _positive_int(hf, "head_dim") if hf.get("head_dim") is not None else hidden // heads
        kv_heads = (_positive_int(hf, "num_key_value_heads")
                    if hf.get("num_key_value_heads") is not None else heads)
        theta, rope_type, scaling = _read_rope(hf)
        attention_bias = bool(hf.get("attention_bias", False))
        if model_type == "qwen2":
            qkv_bias, o_bias = True, False
        else:
            qkv_bias, o_bias = attention_bias, attention_bias
        eos = hf.get("eos_token_id")
        return cls(
            model_type=model_type,
            vocab_size=_positive_int(hf, "vocab_size"),
            hidden_size=hidden,
            intermediate_size=_positive_int(hf, "intermediate_size"),
            num_layers=_positive_int(hf, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
            rope_theta=float(theta),
            rope_type=rope_type,
            rope_scaling=scaling,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)) if model_type == "llama" else False,
            qk_norm=model_type == "qwen3",
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            pad_token_id=hf.get("pad_token_id"),
            dtype=dtype or default_dtype(),
            param_dtype=param_dtype or dtype or default_dtype(),
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """The `config.json` dictionary transformers (v4 and v5) loads for this architecture."""
        if self.model_type == "qwen2" and (not self.qkv_bias or self.o_bias or self.mlp_bias):
            raise ValueError("a qwen2 config must have qkv_bias=True, o_bias=False, mlp_bias=False")
        if self.model_type != "qwen2" and self.qkv_bias != self.o_bias:
            raise ValueError(f"{self.model_type} has one attention_bias flag: qkv_bias and o_bias "
                             "must be equal")
        if self.qk_norm != (self.model_type == "qwen3"):
            raise ValueError("qk_norm is exactly the qwen3 family")
        architectures = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                         "qwen3": "Qwen3ForCausalLM"}
        rope_parameters = {"rope_type": self.rope_type, "rope_theta": self.rope_theta,
                           **dict(self.rope_scaling)}
        hf = {
            "architectures": [architectures[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            # v5 reads rope_parameters; v4 reads rope_theta / rope_scaling.
            "rope_theta": self.rope_theta,
            "rope_parameters": rope_parameters,
            "rope_scaling": None if self.rope_type == "default" else rope_parameters,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": (list(self.eos_token_id) if isinstance(self.eos_token_id, tuple)
                             else self.eos_token_id),
            "pad_token_id": self.pad_token_id,
            "use_cache": True,
            "dtype": self.param_dtype,
            "torch_dtype": self.param_dtype,
        }
        if self.model_type != "qwen2":
            hf["attention_bias"] = self.qkv_bias
        if self.model_type == "llama":
            hf["mlp_bias"] = self.mlp_bias
        else:
            hf["use_sliding_window"] = False
        return hf


def _positive_int(hf: Mapping[str, Any], name: str) -> int:
    """hf[name] as a positive int; a KeyError names a missing field, a ValueError a bad value."""
    value = hf[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or value <= 0:
        raise ValueError(f"config.json {name}={value!r} must be a positive integer")
    return int(value)


def _read_rope(hf: Mapping[str, Any]) -> tuple[float, str, tuple[tuple[str, float], ...]]:
    """Returns (rope_theta, rope_type, extra scaling parameters) from either config layout."""
    params = hf.get("rope_parameters") or {}
    legacy = hf.get("rope_scaling") or {}
    if params and "rope_type" not in params and "rope_theta" not in params:
        raise ValueError("config.json rope_parameters per layer type is not supported")
    theta = params.get("rope_theta", hf.get("rope_theta"))
    if theta is None:
        theta = 10000.0  # the transformers default for all three families
    merged = {**legacy, **params}
    rope_type = merged.pop("rope_type", merged.pop("type", "default"))
    merged.pop("rope_theta", None)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(f"config.json rope type {rope_type!r} is not supported; "
                         f"expected one of {SUPPORTED_ROPE_TYPES}")
    if merged.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("config.json partial_rotary_factor != 1 is not supported")
    merged.pop("partial_rotary_factor", None)
    required = {"default": (), "linear": ("factor",),
                "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                           "original_max_position_embeddings")}[rope_type]
    missing = [k for k in required if k not in merged]
    if missing:
        raise ValueError(f"config.json rope type {rope_type!r} is missing {missing}")
    scaling = tuple(sorted((k, float(merged[k])) for k in required))
    return float(theta), rope_type, scaling
