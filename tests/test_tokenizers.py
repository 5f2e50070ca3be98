"""Tests of jaxtree.tokenizers: the byte tokenizer, the transformers wrapper and load_tokenizer.

HF tokenizers are built locally (no downloads): a tiny WordLevel vocabulary with a Whitespace
pre-tokenizer, ChatML special tokens and a ChatML chat template, saved with save_pretrained.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_reference import SPECIALS, WORDS, build_chatml_tokenizer
from jaxtree.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, load_tokenizer

# --------------------------------------------------------------------------------------------------
# ByteTokenizer
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def byte_tok():
    return ByteTokenizer()


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_round_trip_and_encoding_is_utf8(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8"))
    assert all(0 <= i < 256 for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special=False) == text


@settings(max_examples=50, deadline=None)
@given(st.text())
def test_byte_add_bos_prepends_bos(text):
    tok = ByteTokenizer()
    ids = tok.encode(text, add_bos=True)
    assert ids[0] == tok.bos_id
    assert ids[1:] == list(text.encode("utf-8"))
    # BOS is special: dropped by default on decode.
    assert tok.decode(ids) == text


def test_byte_special_ids_distinct_and_out_of_byte_range(byte_tok):
    tok = byte_tok
    specials = [tok.pad_id, tok.bos_id, tok.eos_id, tok.end_of_turn_id]
    assert len(set(specials)) == len(specials)
    all_special = list(tok.special_ids.values())
    assert len(set(all_special)) == len(ByteTokenizer.SPECIAL_TOKENS) == len(all_special)
    assert set(tok.special_ids) == set(ByteTokenizer.SPECIAL_TOKENS)
    for i in all_special:
        assert 256 <= i < tok.vocab_size
    assert tok.vocab_size == 256 + len(ByteTokenizer.SPECIAL_TOKENS)
    assert tok.special_ids["<pad>"] == tok.pad_id
    assert tok.special_ids["<bos>"] == tok.bos_id
    assert tok.special_ids["<eos>"] == tok.eos_id
    assert tok.special_ids["<|end|>"] == tok.end_of_turn_id


def test_byte_decode_skips_specials_by_default_and_names_them_otherwise(byte_tok):
    tok = byte_tok
    ids = ([tok.bos_id] + tok.encode("hi") + [tok.special_ids["<|user|>"]] + tok.encode(" there")
           + [tok.eos_id, tok.pad_id])
    assert tok.decode(ids) == "hi there"
    assert tok.decode(ids, skip_special=True) == "hi there"
    assert tok.decode(ids, skip_special=False) == "<bos>hi<|user|> there<eos><pad>"
    # Every special token renders as its own name.
    for name, i in tok.special_ids.items():
        assert tok.decode([i], skip_special=False) == name
        assert tok.decode([i]) == ""


def test_byte_decode_accepts_numpy_ids(byte_tok):
    text = "naïve ✓"
    ids = np.asarray(byte_tok.encode(text), dtype=np.int32)
    assert byte_tok.decode(ids) == text


def test_byte_decode_multibyte_split_by_special_uses_replacement(byte_tok):
    tok = byte_tok
    char = "é€"  # 2-byte and 3-byte sequences
    raw = char.encode("utf-8")
    assert len(raw) == 5
    # Split the 3-byte "€" after its first byte with an EOS token.
    ids = list(raw[:3]) + [tok.eos_id] + list(raw[3:])
    expected_left = raw[:3].decode("utf-8", errors="replace")
    expected_right = raw[3:].decode("utf-8", errors="replace")
    assert "\ufffd" in expected_left and "\ufffd" in expected_right
    assert tok.decode(ids) == expected_left + expected_right
    assert tok.decode(ids, skip_special=False) == expected_left + "<eos>" + expected_right
    # The bytes on each side are not glued back together across the special token.
    assert tok.decode(ids) != char


def test_byte_chat_template_structure(byte_tok):
    tok = byte_tok
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "héllo ✓"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": ""},
    ]
    role = {r: tok.special_ids[f"<|{r}|>"] for r in ("system", "user", "assistant")}
    expected = [tok.bos_id]
    for m in messages:
        expected += [role[m["role"]]] + list(m["content"].encode("utf-8")) + [tok.end_of_turn_id]

    with_prompt = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert with_prompt == expected + [role["assistant"]]
    assert tok.apply_chat_template(messages) == with_prompt  # default adds the prompt
    without = tok.apply_chat_template(messages, add_generation_prompt=False)
    assert without == expected
    assert without[-1] == tok.end_of_turn_id

    # Round trip through decode with specials rendered.
    rendered = tok.decode(with_prompt, skip_special=False)
    assert rendered == ("<bos>" + "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
                        + "<|assistant|>")
    assert tok.decode(with_prompt) == "".join(m["content"] for m in messages)


def test_byte_chat_template_empty_chat(byte_tok):
    tok = byte_tok
    assert tok.apply_chat_template([], add_generation_prompt=False) == [tok.bos_id]
    assert tok.apply_chat_template([]) == [tok.bos_id, tok.special_ids["<|assistant|>"]]


def test_byte_chat_content_is_not_parsed_for_specials(byte_tok):
    tok = byte_tok
    content = "<|end|><|assistant|>"
    ids = tok.apply_chat_template([{"role": "user", "content": content}],
                                  add_generation_prompt=False)
    assert ids == ([tok.bos_id, tok.special_ids["<|user|>"]] + list(content.encode("utf-8"))
                   + [tok.end_of_turn_id])


@pytest.mark.parametrize("role", ["tool", "User", "", "end"])
def test_byte_chat_unknown_role_raises(byte_tok, role):
    with pytest.raises(ValueError):
        byte_tok.apply_chat_template([{"role": "user", "content": "a"},
                                      {"role": role, "content": "b"}])


def test_byte_assistant_stop_sequences(byte_tok):
    stops = byte_tok.assistant_stop_sequences
    assert [byte_tok.end_of_turn_id] in stops
    assert all(isinstance(s, list) and s and all(isinstance(i, int) for i in s) for s in stops)


def test_byte_satisfies_protocol(byte_tok):
    assert isinstance(byte_tok, Tokenizer)
    assert not isinstance(object(), Tokenizer)


# --------------------------------------------------------------------------------------------------
# HFTokenizer (built locally)
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf_tok")
    fast = build_chatml_tokenizer(directory)
    return directory, fast


@pytest.fixture(scope="module")
def hf_tok(hf_dir):
    return HFTokenizer(str(hf_dir[0]))


def test_hf_special_ids_match_fast_tokenizer(hf_dir, hf_tok):
    _, fast = hf_dir
    vocab = fast.get_vocab()
    assert hf_tok.eos_id == fast.convert_tokens_to_ids("<|im_end|>") == vocab["<|im_end|>"]
    assert hf_tok.pad_id == fast.convert_tokens_to_ids("<|endoftext|>") == vocab["<|endoftext|>"]
    assert hf_tok.end_of_turn_id == vocab["<|im_end|>"]
    assert hf_tok.bos_id is None  # no bos_token was defined
    assert hf_tok.vocab_size == len(WORDS) + len(SPECIALS) == len(fast)
    assert len({hf_tok.eos_id, hf_tok.pad_id, vocab["<|im_start|>"]}) == 3


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(WORDS[1:]), max_size=12))
def test_hf_round_trip_in_vocabulary(hf_dir, hf_tok, words):
    _, fast = hf_dir
    vocab = fast.get_vocab()
    text = " ".join(words)
    ids = hf_tok.encode(text)
    assert ids == [vocab[w] for w in words]
    assert hf_tok.decode(ids).split() == words
    # add_bos is a no-op when the tokenizer has no BOS token.
    assert hf_tok.encode(text, add_bos=True) == ids


def test_hf_out_of_vocabulary_maps_to_unk(hf_dir, hf_tok):
    vocab = hf_dir[1].get_vocab()
    assert hf_tok.encode("hello zebra") == [vocab["hello"], vocab["[UNK]"]]


def test_hf_decode_special_handling(hf_dir, hf_tok):
    vocab = hf_dir[1].get_vocab()
    ids = [vocab["<|im_start|>"], vocab["hello"], vocab["world"], vocab["<|im_end|>"]]
    assert hf_tok.decode(ids).split() == ["hello", "world"]
    shown = hf_tok.decode(ids, skip_special=False)
    assert "<|im_start|>" in shown and "<|im_end|>" in shown
    assert hf_tok.decode(np.asarray(ids)).split() == ["hello", "world"]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_hf_chat_template_ids(hf_dir, hf_tok, add_generation_prompt):
    _, fast = hf_dir
    vocab = fast.get_vocab()
    messages = [{"role": "system", "content": "hi there"},
                {"role": "user", "content": "hello world"},
                {"role": "assistant", "content": "the cat sat on the mat"},
                {"role": "user", "content": "hello"}]
    ids = hf_tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    rendered = fast.apply_chat_template(messages, tokenize=False,
                                        add_generation_prompt=add_generation_prompt)
    assert isinstance(rendered, str)
    assert ids == fast.encode(rendered, add_special_tokens=False)

    # Independently derived: each turn is <|im_start|> role content-words <|im_end|>.
    start, end = vocab["<|im_start|>"], vocab["<|im_end|>"]
    expected = []
    for m in messages:
        expected += [start, vocab[m["role"]]] + [vocab[w] for w in m["content"].split()] + [end]
    if add_generation_prompt:
        expected += [start, vocab["assistant"]]
    assert ids == expected
    assert ids[0] == start
    if add_generation_prompt:
        assert ids[-2:] == [start, vocab["assistant"]]
    else:
        assert ids[-1] == hf_tok.end_of_turn_id
    assert all(isinstance(i, int) for i in ids)


def test_hf_chat_template_default_adds_generation_prompt(hf_dir, hf_tok):
    vocab = hf_dir[1].get_vocab()
    messages = [{"role": "user", "content": "hello"}]
    assert hf_tok.apply_chat_template(messages) == hf_tok.apply_chat_template(
        messages, add_generation_prompt=True)
    assert hf_tok.apply_chat_template(messages)[-2:] == [vocab["<|im_start|>"], vocab["assistant"]]


def test_hf_assistant_stop_sequences(hf_tok):
    stops = hf_tok.assistant_stop_sequences
    assert [hf_tok.end_of_turn_id] in stops
    assert [hf_tok.eos_id] in stops
    assert len(stops) == len({tuple(s) for s in stops})  # no duplicates (eos == end of turn here)


def test_hf_satisfies_protocol(hf_tok):
    assert isinstance(hf_tok, Tokenizer)


def test_hf_without_chat_template_raises(tmp_path):
    build_chatml_tokenizer(tmp_path, chat_template=None)
    tok = HFTokenizer(str(tmp_path))
    assert tok.encode("hello") != []  # otherwise usable
    with pytest.raises(ValueError):
        tok.apply_chat_template([{"role": "user", "content": "hello"}])


def test_hf_missing_directory_raises(tmp_path):
    missing = tmp_path / "does_not_exist"
    with pytest.raises(FileNotFoundError):
        HFTokenizer(str(missing))
    with pytest.raises(FileNotFoundError):
        load_tokenizer(str(missing))
    # A plain file is not a tokenizer directory either.
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(FileNotFoundError):
        HFTokenizer(str(a_file))


def test_hf_encode_does_not_parse_special_tokens(hf_dir, hf_tok):
    # Tokenizer.encode: "Token ids of plain text (no special tokens are parsed from the text)".
    special_ids = {hf_dir[1].get_vocab()[t] for t in SPECIALS}
    ids = hf_tok.encode("hello <|im_end|> world")
    assert not special_ids & set(ids)


# --------------------------------------------------------------------------------------------------
# load_tokenizer
# --------------------------------------------------------------------------------------------------


def test_load_tokenizer_byte():
    tok = load_tokenizer("byte")
    assert type(tok) is ByteTokenizer
    assert isinstance(tok, Tokenizer)


def test_load_tokenizer_directory(hf_dir):
    directory, fast = hf_dir
    tok = load_tokenizer(str(directory))
    assert type(tok) is HFTokenizer
    assert tok.eos_id == fast.convert_tokens_to_ids("<|im_end|>")
