"""The policy model: a Flax decoder-only transformer (Llama / Qwen2 / Qwen3), KV cache, HF I/O."""

from jaxtree.models.apply import extend_cache, forward, hidden_states, init_params, num_params
from jaxtree.models.config import SUPPORTED_MODEL_TYPES, ModelConfig, default_dtype
from jaxtree.models.gguf_io import load_gguf, load_gguf_config
from jaxtree.models.hf_io import CheckpointError, load_config, load_pretrained, save_pretrained
from jaxtree.models.kv_cache import KVCache, copy_rows, init_cache, write_chunk
from jaxtree.models.presets import PRESETS, get_preset
from jaxtree.models.transformer import Transformer

__all__ = [
    "CheckpointError", "KVCache", "ModelConfig", "PRESETS", "SUPPORTED_MODEL_TYPES", "Transformer",
    "copy_rows", "default_dtype", "extend_cache", "forward", "get_preset", "hidden_states",
    "init_cache", "init_params", "load_config", "load_gguf", "load_gguf_config", "load_pretrained",
    "num_params", "save_pretrained", "write_chunk",
]
