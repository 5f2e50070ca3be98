"""Batched sampling with a KV cache; per-row keys and draws in `jaxtree.sampling.randomness`; the
LATR kernel is the package `jaxtree.sampling.latr`, its on-device edit distance
`jaxtree.sampling.edit_distance`. The HTTP server over the sampler is `jaxtree.serving`."""

from jaxtree.sampling.logits_processing import SamplingConfig, sample_tokens, sampling_log_probs
from jaxtree.sampling.sampler import (CACHE_FULL, EOS, FINISH_REASONS, MAX_TOKENS, STOP_SEQUENCE,
                                      DecodeOutput, Sampler, SampleResult, bucket_batch,
                                      bucket_length, decode, decode_jit, decode_with_uniforms,
                                      generate, generate_jit, half_step_bucket)

__all__ = [
    "CACHE_FULL", "EOS", "FINISH_REASONS", "MAX_TOKENS", "STOP_SEQUENCE", "DecodeOutput",
    "SampleResult", "Sampler", "SamplingConfig", "bucket_batch", "bucket_length", "decode",
    "decode_jit", "decode_with_uniforms", "generate", "generate_jit", "half_step_bucket",
    "sample_tokens", "sampling_log_probs",
]
