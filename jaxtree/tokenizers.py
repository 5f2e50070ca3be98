"""Tokenizers behind one protocol: a built-in byte tokenizer and a wrapper over transformers.

Both give token ids as Python lists of ints, expose the special ids the sampler and the agent loop
need (padding, BOS, EOS, end of turn), and turn a chat (a list of {'role', 'content'} messages) into
token ids ending with the prompt for the assistant's reply. `assistant_stop_sequences` are the token
sequences that end an assistant turn, for the sampler's per-row stop sequences.
"""

from __future__ import annotations

import os
from typing import Protocol, Sequence, runtime_checkable

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}


@runtime_checkable
class Tokenizer(Protocol):
    """What jaxtree needs of a tokenizer."""

    vocab_size: int
    pad_id: int
    bos_id: int | None
    eos_id: int
    end_of_turn_id: int

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of plain text (no special tokens are parsed from the text)."""

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of token ids; special tokens are dropped unless skip_special is False."""

    def apply_chat_template(self, messages: Sequence[Message],
                            add_generation_prompt: bool = True) -> list[int]:
        """Token ids of a chat, optionally ending with the assistant turn's opening."""

    def continue_chat(self, user_content: str) -> list[int]:
        """Tokens that follow an assistant turn's end-of-turn token to add a user message and open
        the next assistant reply: multi-turn episodes append these instead of re-rendering (and
        re-prefilling) the whole conversation."""

    @property
    def assistant_stop_sequences(self) -> list[list[int]]:
        """Token sequences that end an assistant turn."""


class ByteTokenizer:
    """UTF-8 bytes (ids 0-255) plus special tokens.

    Special tokens: <pad>, <bos>, <eos>, and the turn markers <|system|>, <|user|>, <|assistant|>,
    <|end|>. A chat renders as `<bos><|user|>text<|end|><|assistant|>` and the assistant ends its
    turn with <|end|>: compact enough for the tiny byte-level model.
    """

    SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>",
                      "<|end|>")

    def __init__(self):
        self.special_ids = {name: 256 + i for i, name in enumerate(self.SPECIAL_TOKENS)}
        self.vocab_size = 256 + len(self.SPECIAL_TOKENS)
        self.pad_id = self.special_ids["<pad>"]
        self.bos_id = self.special_ids["<bos>"]
        self.eos_id = self.special_ids["<eos>"]
        self.end_of_turn_id = self.special_ids["<|end|>"]
        self._role_ids = {role: self.special_ids[f"<|{role}|>"]
                          for role in ("system", "user", "assistant")}
        self._names = {i: name for name, i in self.special_ids.items()}

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_id] + ids if add_bos else ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        out, pending = [], bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < 256:
                pending.append(i)
                continue
            out.append(pending.decode("utf-8", errors="replace"))
            pending = bytearray()
            if not skip_special:
                out.append(self._names.get(i, f"<unk:{i}>"))
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def apply_chat_template(self, messages: Sequence[Message],
                            add_generation_prompt: bool = True) -> list[int]:
        ids = [self.bos_id]
        for message in messages:
            role = message["role"]
            if role not in self._role_ids:
                raise ValueError(f"unknown chat role {role!r}; expected one of {list(self._role_ids)}")
            ids += [self._role_ids[role]] + self.encode(message["content"]) + [self.end_of_turn_id]
        if add_generation_prompt:
            ids.append(self._role_ids["assistant"])
        return ids

    def continue_chat(self, user_content: str) -> list[int]:
        return ([self._role_ids["user"]] + self.encode(user_content)
                + [self.end_of_turn_id, self._role_ids["assistant"]])

    @property
    def assistant_stop_sequences(self) -> list[list[int]]:
        return [[self.end_of_turn_id], [self.eos_id]]


class HFTokenizer:
    """A `transformers.AutoTokenizer` loaded from a local directory or a llama.cpp `.gguf` file,
    behind the jaxtree protocol.

    The end-of-turn token is the chat template's turn terminator when the tokenizer has one of the
    common ones (`<|im_end|>` for Qwen, `<|eot_id|>` for Llama 3, `<|end|>`), else EOS.
    """

    _TURN_END_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")

    def __init__(self, path: str):
        gguf_file = _is_gguf_file(path)
        if not gguf_file and not os.path.isdir(path):
            raise FileNotFoundError(f"tokenizer directory or .gguf file {path!r} does not exist")
        from transformers import AutoTokenizer  # heavy import, only when a real tokenizer is used

        if gguf_file:
            # transformers rebuilds the tokenizer from the file's `tokenizer.ggml.*` metadata.
            self.hf = AutoTokenizer.from_pretrained(
                os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path),
                local_files_only=True)
            if not getattr(self.hf, "chat_template", None):
                self.hf.chat_template = _gguf_chat_template(path)
        else:
            self.hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.vocab_size = len(self.hf)
        if self.hf.eos_token_id is None:
            raise ValueError(f"tokenizer in {path!r} defines no eos_token")
        self.eos_id = int(self.hf.eos_token_id)
        self.bos_id = None if self.hf.bos_token_id is None else int(self.hf.bos_token_id)
        self.pad_id = int(self.hf.pad_token_id if self.hf.pad_token_id is not None else self.eos_id)
        vocab = self.hf.get_vocab()
        self.end_of_turn_id = next((vocab[t] for t in self._TURN_END_CANDIDATES if t in vocab),
                                   self.eos_id)
        self._frame: tuple[str, str] | None = None

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        # Plain text: a literal "<|im_end|>" in it is text, not the end-of-turn token.
        ids = self.hf.encode(text, add_special_tokens=False, split_special_tokens=True)
        if add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return list(ids)

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def apply_chat_template(self, messages: Sequence[Message],
                            add_generation_prompt: bool = True) -> list[int]:
        if not getattr(self.hf, "chat_template", None):
            raise ValueError("this tokenizer has no chat_template; use encode() for plain text")
        text = self.hf.apply_chat_template(list(messages), tokenize=False,
                                           add_generation_prompt=add_generation_prompt)
        # The rendered template already holds its special tokens (BOS included, where the template
        # writes one); adding them again would duplicate them. As in transformers, special-token
        # strings are parsed from the rendered text, message contents included.
        return list(self.hf.encode(text, add_special_tokens=False))

    def continue_chat(self, user_content: str) -> list[int]:
        before, after = self._turn_frame()
        return list(self.hf.encode(before + user_content + after, add_special_tokens=False))

    def _turn_frame(self) -> tuple[str, str]:
        """(text between an assistant's end-of-turn token and the next user content, text after
        that content up to the next assistant reply), read off the chat template once by rendering
        a probe conversation. Assumes, as ChatML and Llama 3 templates do, that every user turn is
        framed the same way."""
        if self._frame is None:
            if not getattr(self.hf, "chat_template", None):
                raise ValueError("this tokenizer has no chat_template; multi-turn chat needs one")
            user, reply, probe = "\u2063A\u2063", "\u2063B\u2063", "\u2063C\u2063"
            text = self.hf.apply_chat_template(
                [{"role": "user", "content": user}, {"role": "assistant", "content": reply},
                 {"role": "user", "content": probe}], tokenize=False, add_generation_prompt=True)
            end_of_turn = self.hf.convert_ids_to_tokens(self.end_of_turn_id)
            reply_end = text.index(reply) + len(reply)
            if not text.startswith(end_of_turn, reply_end):
                raise ValueError(f"the chat template does not close an assistant turn with "
                                 f"{end_of_turn!r}; cannot continue chats incrementally")
            start = text.index(probe)
            self._frame = (text[reply_end + len(end_of_turn):start], text[start + len(probe):])
        return self._frame

    @property
    def assistant_stop_sequences(self) -> list[list[int]]:
        ids = {self.end_of_turn_id, self.eos_id}
        return [[i] for i in sorted(ids)]


def _is_gguf_file(path: str) -> bool:
    return str(path).lower().endswith(".gguf") and os.path.isfile(path)


def _gguf_chat_template(path: str) -> str | None:
    """The `tokenizer.chat_template` metadata of a GGUF file, None when it has none."""
    import gguf  # only for GGUF files

    field = gguf.GGUFReader(path).get_field("tokenizer.chat_template")
    return None if field is None else field.contents()


def load_tokenizer(spec: str) -> Tokenizer:
    """'byte' -> ByteTokenizer; a directory or a `.gguf` file -> HFTokenizer."""
    if spec == "byte":
        return ByteTokenizer()
    return HFTokenizer(spec)
