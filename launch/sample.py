"""Prints samples from a policy.

    python -m launch.sample --model=tiny --prompt="Hello" --num_samples=4
    python -m launch.sample --model=/path/to/hf_checkpoint --prompt="2+2=" --chat --temperature=0.7

A bad flag value or an unknown or unusable --model ends the job with one line (exit status 2; a
damaged jaxtree checkpoint, a fault: 1); --max_new_tokens beyond the model's context is capped,
saying so.
"""

from __future__ import annotations

import time

import jax
import numpy as np
from absl import flags, logging

from jaxtree.config import ConfigError
from jaxtree.policy import load_policy
from jaxtree.sampling import Sampler, SamplingConfig
from launch.common import fail, load_named_policy, run_app

_MODEL = flags.DEFINE_string("model", "tiny", "A preset, a released model's name "
                             "(smollm2-135m-instruct), a .gguf file, or a jaxtree or Hugging Face "
                             "checkpoint directory.")
_PROMPT = flags.DEFINE_string("prompt", "Hello", "The prompt text.")
_NUM_SAMPLES = flags.DEFINE_integer("num_samples", 4, "Samples to draw for the prompt.")
_MAX_NEW_TOKENS = flags.DEFINE_integer("max_new_tokens", 64, "Tokens to generate at most.")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Sampling temperature; 0 is greedy.")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Top-k cut-off; 0 disables it.")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Top-p (nucleus) mass; 1 disables it.")
_CHAT = flags.DEFINE_boolean("chat", False, "Wrap the prompt in the tokenizer's chat template and "
                             "stop at the end of the assistant's turn.")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
_INIT_SEED = flags.DEFINE_integer("init_seed", 0, "Parameter seed for presets (random init).")
_DTYPE = flags.DEFINE_enum("dtype", None, ["float32", "bfloat16"],
                           "Computation dtype (default: float32 on CPU, bfloat16 on accelerators).")


def sampling_config() -> SamplingConfig:
    """--temperature, --top_k and --top_p; an invalid value ends the job naming its flag."""
    try:
        return SamplingConfig(_TEMPERATURE.value, _TOP_K.value, _TOP_P.value)
    except ConfigError as e:
        fail(f"--{e.path}: {e.message}")


def fit_context(max_new_tokens: int, prompt_length: int, context: int) -> int:
    """--max_new_tokens, capped (saying so) to what the model's context leaves after the prompt:
    a longer cache would be allocated and compiled for positions the model was never trained
    on."""
    room = context - prompt_length
    if room < 1:
        fail(f"--prompt: its {prompt_length} tokens fill the model's context of {context}")
    if max_new_tokens > room:
        print(f"--max_new_tokens={max_new_tokens} capped to {room} (context {context} - prompt "
              f"{prompt_length})")
        return room
    return max_new_tokens


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    for flag in (_NUM_SAMPLES, _MAX_NEW_TOKENS):
        if flag.value < 1:
            fail(f"--{flag.name}={flag.value}: must be at least 1")
    sampling = sampling_config()
    policy = load_named_policy("--model", lambda: load_policy(
        _MODEL.value, dtype=_DTYPE.value, seed=_INIT_SEED.value))
    tok = policy.tokenizer
    if _CHAT.value:
        try:
            prompt = tok.apply_chat_template([{"role": "user", "content": _PROMPT.value}])
        except ValueError as e:  # a tokenizer without a chat template
            fail(f"--chat: {e}")
        stops = tok.assistant_stop_sequences
    else:
        prompt = tok.encode(_PROMPT.value, add_bos=True)
        stops = []
    max_new_tokens = fit_context(_MAX_NEW_TOKENS.value, len(prompt),
                                 policy.config.max_position_embeddings)
    sampler = Sampler(policy.config, sampling, max_new_tokens, pad_id=tok.pad_id,
                      eos_ids=[tok.eos_id])
    start = time.perf_counter()
    result = sampler.generate(policy.params, [prompt] * _NUM_SAMPLES.value,
                              jax.random.key(_SEED.value), stop_sequences=[stops] * _NUM_SAMPLES.value)
    seconds = time.perf_counter() - start
    print(f"model: {policy.source} ({policy.config.model_type}, "
          f"{policy.config.num_params() / 1e6:.2f}M params)")
    print(f"prompt ({len(prompt)} tokens): {_PROMPT.value!r}")
    for i, (tokens, logp, reason) in enumerate(zip(result.tokens, result.policy_logprobs,
                                                   result.finish_reasons)):
        print(f"--- sample {i}: {len(tokens)} tokens, stop={reason}, "
              f"log p = {float(np.sum(logp)):.2f}")
        print(tok.decode(tokens))
    events = sampler.compile_events
    print(f"--- {sum(len(t) for t in result.tokens)} tokens in {seconds:.2f}s "
          f"({len(events)} compilation(s), {sum(e.seconds for e in events):.2f}s compiling)")
    logging.info("compilations: %s", [(e.key, round(e.seconds, 2)) for e in events])


if __name__ == "__main__":
    run_app(main)
