"""GGUF import: logits parity with transformers' GGUF loader, the tokenizer and chat template read
from GGUF metadata, and clear errors for bad files.

The test files are written here with gguf.GGUFWriter the way llama.cpp's converter writes a Llama
model: 2-D weights quantized, 1-D norms in F32, and the Q/K projection rows permuted for ggml's
RoPE layout. transformers dequantizes with the same gguf routines, so quantized files must match as
closely as float ones.
"""

import functools
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from jaxtree import models
from jaxtree.models import CheckpointError
from jaxtree.tokenizers import HFTokenizer, load_tokenizer

ATOL = 1e-4
# Small Llama: grouped-query attention (4 query heads over 2 key/value heads), untied output.
# Rows are multiples of 32, the block size of the Q4/Q8 formats; FFN is one 256-value K-quant block.
HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 64, 256, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
# 'mixed' mixes types per tensor as llama.cpp's Q4_K_M files do: Q8_0 embeddings and output,
# Q6_K ffn_down, and here also Q4_0 attn_v and BF16 ffn_up, Q4_1 elsewhere.
QTYPES = ("F32", "F16", "Q8_0", "Q4_1", "mixed")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1 (BOS), 2 (EOS)
# Words the byte-level BPE learns whole ('Ġ' is the byte alphabet's space).
WORDS = ["user", "assistant", "system", "hello", "Ġworld", "Ġthe", "Ġcat", "Ġsat", "Ġon", "Ġmat",
         "ĊĊ"]
CHATML = ("{% for message in messages %}"
          "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHAT = [{"role": "system", "content": "the cat"},
        {"role": "user", "content": "hello world, the cat sat on the mat!"}]


# ----------------------------------------------------------------------------- writing GGUF files

def _byte_level_bpe():
    """(tokens, token types, merges) of a small GPT-2 style BPE: the specials, the 256 byte
    symbols, then one merge per prefix of each word in WORDS."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = SPECIALS + list(bytes_to_unicode().values())
    merges = []
    for word in WORDS:
        for end in range(2, len(word) + 1):
            if word[:end] not in tokens:
                merges.append(f"{word[:end - 1]} {word[end - 1]}")
                tokens.append(word[:end])
    token_types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))  # CONTROL, NORMAL
    return tokens, token_types, merges


def _random_weights(vocab: int, arch: str = "llama", head_dim: int = HEAD_DIM,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """Hugging Face-layout float32 weights ([out, in]) keyed by GGUF tensor name: a Llama, a
    Qwen2 (q/k/v biases) or a Qwen3 (q/k norms)."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.normal(0.0, 0.15, shape).astype(np.float32)  # noqa: E731
    norm = lambda n=HIDDEN: rng.uniform(0.5, 1.5, n).astype(np.float32)  # noqa: E731
    q_rows, kv_rows = HEADS * head_dim, KV_HEADS * head_dim
    weights = {"token_embd.weight": normal(vocab, HIDDEN), "output_norm.weight": norm(),
               "output.weight": normal(vocab, HIDDEN)}
    for i in range(LAYERS):
        weights.update({
            f"blk.{i}.attn_norm.weight": norm(), f"blk.{i}.ffn_norm.weight": norm(),
            f"blk.{i}.attn_q.weight": normal(q_rows, HIDDEN),
            f"blk.{i}.attn_k.weight": normal(kv_rows, HIDDEN),
            f"blk.{i}.attn_v.weight": normal(kv_rows, HIDDEN),
            f"blk.{i}.attn_output.weight": normal(HIDDEN, q_rows),
            f"blk.{i}.ffn_gate.weight": normal(FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": normal(FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": normal(HIDDEN, FFN)})
        if arch == "qwen2":
            weights.update({f"blk.{i}.attn_q.bias": normal(q_rows),
                            f"blk.{i}.attn_k.bias": normal(kv_rows),
                            f"blk.{i}.attn_v.bias": normal(kv_rows)})
        if arch == "qwen3":
            weights.update({f"blk.{i}.attn_q_norm.weight": norm(head_dim),
                            f"blk.{i}.attn_k_norm.weight": norm(head_dim)})
    return weights


def _rope_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter (LlamaModel.permute): within each head, the rows of the two rotated
    halves are interleaved, [x_0..x_{d/2-1}, y_0..y_{d/2-1}] -> [x_0, y_0, x_1, y_1, ...]."""
    halves = weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
    return halves.swapaxes(1, 2).reshape(weight.shape)


def _write_gguf(path, weights, qtype: str, arch: str = "llama", head_dim: int = HEAD_DIM,
                tensor_types=None, chat_template=CHATML) -> str:
    """Writes a GGUF file as llama.cpp's converter would; qtype quantizes every 2-D tensor,
    tensor_types overrides it per tensor name ({name: (raw array, ggml type)})."""
    import gguf

    tokens, token_types, merges = _byte_level_bpe()
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != HIDDEN // HEADS:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_freq_base(500.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    ggml_type = gguf.GGMLQuantizationType[qtype]
    for name, value in weights.items():
        if tensor_types and name in tensor_types:
            raw, raw_type = tensor_types[name]
            writer.add_tensor(name, raw, raw_dtype=raw_type)
            continue
        # Only the Llama converter permutes (Qwen uses ggml's NeoX RoPE, the HF layout).
        if arch == "llama" and name.endswith("attn_q.weight"):
            value = _rope_permute(value, HEADS)
        elif arch == "llama" and name.endswith("attn_k.weight"):
            value = _rope_permute(value, KV_HEADS)
        if value.ndim == 1:  # norms stay F32, as llama.cpp keeps them
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, gguf.quants.quantize(value, ggml_type), raw_dtype=ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


@pytest.fixture(scope="module")
def vocab_size():
    return len(_byte_level_bpe()[0])


@pytest.fixture(scope="module")
def weights(vocab_size):
    return _random_weights(vocab_size)


def _random_q6_k(rows: int, seed: int = 0) -> np.ndarray:
    """uint8[rows, 210]: one valid Q6_K block per row of 256 values (gguf-py cannot quantize to
    K-quants). A block is 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 sub-block scales and
    an fp16 scale."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 256, (rows, 192), dtype=np.uint8)
    scales = rng.integers(-4, 5, (rows, 16)).astype(np.int8).view(np.uint8)
    scale = np.full((rows, 1), 0.01, np.float16).view(np.uint8)
    return np.concatenate([bits, scales, scale], axis=1)


def _mixed_types(weights) -> dict:
    import gguf

    types = gguf.GGMLQuantizationType
    mixed = {name: (gguf.quants.quantize(weights[name], types.Q8_0), types.Q8_0)
             for name in ("token_embd.weight", "output.weight")}
    for i in range(LAYERS):
        mixed[f"blk.{i}.ffn_down.weight"] = (_random_q6_k(HIDDEN, seed=i), types.Q6_K)
        for name, qtype in [("attn_v", types.Q4_0), ("ffn_up", types.BF16)]:
            value = weights[f"blk.{i}.{name}.weight"]
            mixed[f"blk.{i}.{name}.weight"] = (gguf.quants.quantize(value, qtype), qtype)
    return mixed


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory, weights):
    """{quantization type: path} of the same random Llama written in each type."""
    directory = tmp_path_factory.mktemp("gguf")
    files = {q: _write_gguf(directory / f"tiny-{q}.gguf", weights, q) for q in QTYPES[:-1]}
    files["mixed"] = _write_gguf(directory / "tiny-mixed.gguf", weights, "Q4_1",
                                 tensor_types=_mixed_types(weights))
    return files


def _transformers_logits(path: str, tokens: np.ndarray) -> np.ndarray:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32,
        local_files_only=True).eval()
    with torch.no_grad():
        return model(torch.as_tensor(tokens, dtype=torch.long)).logits.float().numpy()


# ----------------------------------------------------------------------------- parity

@pytest.mark.parametrize("qtype", QTYPES)
def test_logits_match_transformers_gguf_loader(qtype, gguf_files, vocab_size):
    config, params = models.load_pretrained(gguf_files[qtype])
    assert (config.model_type, config.vocab_size, config.num_layers, config.num_heads,
            config.num_kv_heads, config.head_dim) == ("llama", vocab_size, LAYERS, HEADS, KV_HEADS,
                                                      HEAD_DIM)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 0)
    assert not config.tie_word_embeddings and config.rms_norm_eps == 1e-5
    tokens = np.random.default_rng(1).integers(0, vocab_size, size=(2, 11))
    # Every type gives the same config, so models.forward compiles once for all of them.
    ours = np.asarray(models.forward(config, params, jnp.asarray(tokens)))
    ref = _transformers_logits(gguf_files[qtype], tokens)
    print(f"{qtype}: max |jaxtree - transformers| = {np.abs(ours - ref).max():.2e}")
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch,qtype,head_dim", [
    ("qwen2", "Q8_0", HEAD_DIM),  # q/k/v biases
    # q/k norms; head_dim in attention.key_length. transformers' GGUF loader ignores that key and
    # takes Qwen3Config's default, 128, so only that width can be compared.
    ("qwen3", "Q4_1", 128)])
def test_qwen_files_match_transformers(arch, qtype, head_dim, vocab_size, tmp_path):
    weights = _random_weights(vocab_size, arch, head_dim, seed=3)
    path = _write_gguf(tmp_path / f"{arch}.gguf", weights, qtype, arch=arch, head_dim=head_dim)
    config, params = models.load_pretrained(path)
    assert (config.model_type, config.head_dim, config.qkv_bias, config.qk_norm) == (
        arch, head_dim, arch == "qwen2", arch == "qwen3")
    tokens = np.random.default_rng(4).integers(0, vocab_size, size=(2, 11))
    ours = np.asarray(models.forward(config, params, jnp.asarray(tokens)))
    ref = _transformers_logits(path, tokens)
    print(f"{arch} {qtype}: max |jaxtree - transformers| = {np.abs(ours - ref).max():.2e}")
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


def test_float32_file_restores_the_original_weights(gguf_files, weights):
    """Independent of transformers: the Q/K rows are put back in Hugging Face order."""
    _, params = models.load_gguf(gguf_files["F32"])
    layer = params["layers_1"]
    for ours, name in [(layer["attn"]["q_proj"]["kernel"], "attn_q"),
                       (layer["attn"]["k_proj"]["kernel"], "attn_k"),
                       (layer["mlp"]["down_proj"]["kernel"], "ffn_down")]:
        np.testing.assert_array_equal(np.asarray(ours), weights[f"blk.1.{name}.weight"].T)
    np.testing.assert_array_equal(np.asarray(params["embed"]["embedding"]),
                                  weights["token_embd.weight"])


def test_k_quant_tensor_is_dequantized_in_place(gguf_files):
    import gguf

    _, params = models.load_gguf(gguf_files["mixed"])
    want = gguf.quants.dequantize(_random_q6_k(HIDDEN, seed=1), gguf.GGMLQuantizationType.Q6_K)
    np.testing.assert_array_equal(np.asarray(params["layers_1"]["mlp"]["down_proj"]["kernel"]),
                                  want.T)


def test_config_only_and_bfloat16_params(gguf_files):
    config = models.load_config(gguf_files["Q8_0"], dtype="float32")
    assert config == models.load_gguf_config(gguf_files["Q8_0"], dtype="float32")
    config16, params16 = models.load_pretrained(gguf_files["Q4_1"], dtype="float32",
                                                param_dtype="bfloat16")
    assert config16.param_dtype == "bfloat16"
    assert params16["lm_head"]["kernel"].dtype == jnp.bfloat16


# ----------------------------------------------------------------------------- tokenizer

def test_tokenizer_and_chat_template_come_from_gguf_metadata(gguf_files, vocab_size):
    from transformers import AutoTokenizer

    path = gguf_files["Q8_0"]
    tok = load_tokenizer(path)
    assert isinstance(tok, HFTokenizer)
    assert tok.hf.chat_template == CHATML
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.end_of_turn_id) == (vocab_size, 1, 2, 2)
    vocab = tok.hf.get_vocab()
    # The merges apply: learned words are single tokens.
    assert tok.encode("hello world") == [vocab["hello"], vocab["Ġworld"]]
    text = "the cat sat, ok? système"
    assert tok.decode(tok.encode(text)) == text
    ref = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                        local_files_only=True)
    assert tok.encode(text) == ref.encode(text, add_special_tokens=False)
    ids = tok.apply_chat_template(CHAT)
    assert ids == list(ref.apply_chat_template(CHAT, tokenize=True, add_generation_prompt=True,
                                               return_dict=False))
    assert ids[0] == 1 and ids[-3:] == [1, vocab["assistant"], vocab["Ċ"]]
    assert tok.decode(ids, skip_special=False) == tok.hf.apply_chat_template(
        CHAT, tokenize=False, add_generation_prompt=True)


def test_file_without_chat_template_gives_a_plain_tokenizer(weights, tmp_path):
    tok = HFTokenizer(_write_gguf(tmp_path / "plain.gguf", weights, "F32", chat_template=None))
    assert not tok.hf.chat_template
    assert tok.encode("hello cat") == [tok.hf.get_vocab()["hello"], tok.hf.get_vocab()["Ġcat"]]
    with pytest.raises(ValueError, match="no chat_template"):
        tok.apply_chat_template(CHAT)


# ----------------------------------------------------------------------------- errors

def _expect_error(path: str, match: str):
    with pytest.raises(CheckpointError, match=match) as info:
        models.load_pretrained(path)
    assert str(path) in str(info.value)


def test_missing_and_non_gguf_files_raise(tmp_path):
    _expect_error(str(tmp_path / "absent.gguf"), "does not exist")
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b'{"this": "is json"}')
    _expect_error(str(not_gguf), "not a GGUF file")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    _expect_error(str(empty), "not a GGUF file")


@pytest.mark.parametrize("keep", [12, 2000, -100])  # cut in the header, metadata, tensor data
def test_truncated_file_raises(keep, gguf_files, tmp_path):
    path = tmp_path / "truncated.gguf"
    path.write_bytes(open(gguf_files["Q4_1"], "rb").read()[:keep])
    _expect_error(str(path), "truncated or corrupt")


def test_unsupported_architecture_raises(weights, tmp_path):
    path = _write_gguf(tmp_path / "gpt2.gguf", weights, "F32", arch="gpt2")
    _expect_error(path, "architecture 'gpt2' is not supported")


def test_unsupported_quantization_and_missing_tensor_raise(weights, tmp_path):
    import gguf

    # Q8_1 is a ggml type gguf-py cannot dequantize.
    block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1]
    raw = np.random.default_rng(0).integers(0, 256, (HIDDEN, FFN // block * block_bytes),
                                            dtype=np.uint8)
    path = _write_gguf(tmp_path / "q8_1.gguf", weights, "F32", tensor_types={
        "blk.1.ffn_down.weight": (raw, gguf.GGMLQuantizationType.Q8_1)})
    _expect_error(path, "'blk.1.ffn_down.weight' has quantization type Q8_1")

    partial = {k: v for k, v in weights.items() if k != "blk.1.ffn_up.weight"}
    path = _write_gguf(tmp_path / "missing.gguf", partial, "F32")
    _expect_error(path, r"missing tensors \['blk.1.ffn_up.weight'\]")


def test_directory_named_like_a_gguf_file_is_still_a_hf_directory(tmp_path):
    directory = tmp_path / "model.gguf"
    directory.mkdir()
    config = models.get_preset("tiny")
    (directory / "config.json").write_text(json.dumps(config.to_hf_dict()))
    assert models.load_config(str(directory)) == config


# ----------------------------------------------------------------------------- a released model

SMOLLM2 = os.path.join(os.environ.get("JAXTREE_MODEL_DIR",
                                      os.path.expanduser("~/.cache/jaxtree/models")),
                       "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.skipif(not os.path.isfile(SMOLLM2),
                    reason=f"{SMOLLM2} is not present ($JAXTREE_MODEL_DIR)")
def test_smollm2_q4_1_matches_transformers(monkeypatch):
    """The released SmolLM2-135M-Instruct Q4_1 file: tokenizer, chat template and logits.

    Tolerance: both sides compute in float32 from bit-identical dequantized weights and differ
    only in summation order, over 30 layers of width 576 with logits up to ~40: measured 1.2e-4
    here; 5e-4 leaves room for other CPUs' reduction orders (a real bug is off by >0.1).

    Both sides read the file with gguf.GGUFReader, four times in all (transformers' tokenizer,
    config and weights, then jaxtree's loader); parsing its metadata (a 49k-token vocabulary)
    costs seconds each time, so here every reader of the file is one parsed reader (read only).
    transformers also builds gguf's tensor-name map anew for each of the file's tensors (~400
    times, 6.6 s): here one map per architecture and depth, built once (read only as well).
    """
    import gguf
    readers, real_reader = {}, gguf.GGUFReader

    def shared_reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    monkeypatch.setattr(gguf, "GGUFReader", shared_reader)
    monkeypatch.setattr(gguf, "get_tensor_name_map",
                        functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map))
    chat = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    tok = HFTokenizer(SMOLLM2)
    # tok.hf is transformers' GGUF tokenizer (building a second one costs seconds); the checks are
    # that HFTokenizer's own rendering and encoding agree with transformers' paths.
    # The file's own ChatML template, which adds SmolLM's default system prompt.
    assert "You are a helpful AI assistant named SmolLM" in tok.hf.chat_template
    ids = tok.apply_chat_template(chat)
    assert ids == list(tok.hf.apply_chat_template(chat, tokenize=True, add_generation_prompt=True,
                                                  return_dict=False))
    assert tok.encode("Hello, world!") == tok.hf.encode("Hello, world!", add_special_tokens=False)
    assert (tok.bos_id, tok.eos_id, tok.end_of_turn_id) == (1, 2, 2)

    config, params = models.load_pretrained(SMOLLM2, dtype="float32")
    assert (config.num_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    assert config.tie_word_embeddings
    tokens = np.asarray([ids])
    ours = np.asarray(models.forward(config, params, jnp.asarray(tokens)))
    ref = _transformers_logits(SMOLLM2, tokens)
    diff = np.abs(ours - ref).max()
    print(f"SmolLM2 Q4_1: max |jaxtree - transformers| = {diff:.2e} "
          f"(max |logit| {np.abs(ref).max():.1f}, {tokens.shape[1]} tokens)")
    np.testing.assert_allclose(ours, ref, atol=5e-4, rtol=0)
