"""Tiny random transformers models used as the reference implementation in parity tests."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer as RawTokenizer
from tokenizers import models as tokenizer_models
from tokenizers import pre_tokenizers
from transformers import PreTrainedTokenizerFast

FAMILIES = {
    # Llama with tied embeddings and grouped-query attention.
    "llama": lambda **kw: transformers.LlamaConfig(**{
        "vocab_size": 101, "hidden_size": 64, "intermediate_size": 112, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
        "rope_theta": 500.0, "rms_norm_eps": 1e-5, **kw}),
    # Qwen2: q/k/v biases, untied embeddings, 4 query heads per key/value head.
    "qwen2": lambda **kw: transformers.Qwen2Config(**{
        "vocab_size": 101, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "tie_word_embeddings": False,
        "rope_theta": 10000.0, **kw}),
    # Qwen3: q/k RMSNorm and an explicit head_dim that differs from hidden / heads.
    "qwen3": lambda **kw: transformers.Qwen3Config(**{
        "vocab_size": 101, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
        "tie_word_embeddings": False, "rope_theta": 1_000_000.0, **kw}),
}


def random_hf_model(family: str, seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A float32 transformers model whose every parameter (biases and norm scales included, which
    transformers initialises to 0 and 1) is drawn at random, so every weight is exercised."""
    torch.manual_seed(seed)
    config = FAMILIES[family](**overrides)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            else:
                param.normal_(0.0, 0.15)
    return model


def hf_logits(model, tokens) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.float().numpy()


WORDS = ["[UNK]", "hello", "world", "the", "cat", "sat", "on", "mat", "user", "assistant",
         "system", "hi", "there"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
CHATML = ("{% for message in messages %}"
          "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_chatml_tokenizer(directory, chat_template=CHATML):
    """A WordLevel tokenizer over WORDS with ChatML special tokens and template, saved to directory."""
    raw = RawTokenizer(tokenizer_models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="[UNK]")
    if chat_template is not None:
        fast.chat_template = chat_template
    fast.save_pretrained(str(directory))
    return fast
