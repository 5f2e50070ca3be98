"""Named architectures.

`tiny` and `small-25m` use the built-in byte vocabulary and start from random initialisation (the
embedded default is warm-started on the environments' oracle demonstrations). The `qwen*` presets
describe released checkpoints' architectures, for random-weight benchmarks and sharding tests; real
weights load from a local directory with `load_pretrained`.
"""

from __future__ import annotations

from jaxtree.models.config import ModelConfig, default_dtype
from jaxtree.tokenizers import ByteTokenizer
from jaxtree.utils import round_up

_BYTES = ByteTokenizer()
# Rounded up to a multiple of 8 for friendlier matmul shapes; the extra row is never produced
# by the tokenizer.
_BYTE_VOCAB = round_up(_BYTES.vocab_size, 8)
_BYTE_SPECIALS = dict(bos_token_id=_BYTES.bos_id, eos_token_id=_BYTES.eos_id,
                      pad_token_id=_BYTES.pad_id)

PRESETS: dict[str, ModelConfig] = {
    # ~1.0M parameters: fast enough to warm-start and RL-train on a 2-core CPU in minutes.
    "tiny": ModelConfig(model_type="llama", vocab_size=_BYTE_VOCAB, hidden_size=128,
                        intermediate_size=512, num_layers=4, num_heads=4, num_kv_heads=2,
                        head_dim=32, max_position_embeddings=4096, rope_theta=10000.0,
                        tie_word_embeddings=True, **_BYTE_SPECIALS),
    # ~24M parameters: the mid-size point of the sampler benchmark.
    "small-25m": ModelConfig(model_type="llama", vocab_size=_BYTE_VOCAB, hidden_size=512,
                             intermediate_size=1408, num_layers=8, num_heads=8, num_kv_heads=4,
                             head_dim=64, max_position_embeddings=4096, rope_theta=10000.0,
                             tie_word_embeddings=True, **_BYTE_SPECIALS),
    "qwen2.5-0.5b": ModelConfig(model_type="qwen2", vocab_size=151936, hidden_size=896,
                                intermediate_size=4864, num_layers=24, num_heads=14,
                                num_kv_heads=2, head_dim=64, max_position_embeddings=32768,
                                rope_theta=1_000_000.0, tie_word_embeddings=True, qkv_bias=True,
                                bos_token_id=151643, eos_token_id=151645),
    "qwen3-0.6b": ModelConfig(model_type="qwen3", vocab_size=151936, hidden_size=1024,
                              intermediate_size=3072, num_layers=28, num_heads=16, num_kv_heads=8,
                              head_dim=128, max_position_embeddings=40960,
                              rope_theta=1_000_000.0, tie_word_embeddings=True, qk_norm=True,
                              bos_token_id=151643, eos_token_id=151645),
}

BYTE_VOCAB_PRESETS = ("tiny", "small-25m")


def get_preset(name: str, dtype: str | None = None, param_dtype: str | None = None) -> ModelConfig:
    """The named architecture; dtype defaults to `default_dtype()`, param_dtype to dtype."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
    dtype = dtype or default_dtype()
    return PRESETS[name].replace(dtype=dtype, param_dtype=param_dtype or dtype)
