"""Parsing a chat-completions request body into a validated ChatRequest for the batch worker.

    request = parse_chat_request(raw_body, tokenizer, limits, context_length)  # or ApiError 400

Fields read: `messages` ({role, content} list; content a string or a list of text parts),
optional `model` (any name: one policy is served), `max_tokens` (or `max_completion_tokens`;
default `default_max_tokens`, capped at `max_tokens` and at what the context leaves after the
prompt), `temperature` (0 = greedy, <= 2), `top_p`, `n` (choices, 1..max_batch), `seed`, `stop`
(a string or a list, cut from the decoded text). Unknown fields are ignored; `stream` is refused.
The prompt is the tokenizer's chat template with the assistant's generation prompt.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any

from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.serving.errors import ApiError
from jaxtree.serving.limits import ServerLimits
from jaxtree.tokenizers import Tokenizer

_MAX_STOP_STRINGS = 16


@dataclasses.dataclass
class ChatRequest:
    """One validated chat request, queued for the batch worker.

    prompt: the chat's token ids (generation prompt included); max_tokens: this request's reply
    budget (already capped); stop: strings cut from the decoded replies.
    """

    prompt: list[int]
    n: int
    max_tokens: int
    sampling: SamplingConfig
    seed: int | None
    stop: tuple[str, ...]
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    response: dict | None = None
    error: ApiError | None = None

    @property
    def runs_alone(self) -> bool:
        """A seeded sampled request: its own call, so its draws depend on its seed only."""
        return self.seed is not None and not self.sampling.greedy

    def finish(self, response: dict | None = None, error: ApiError | None = None) -> None:
        self.response, self.error = response, error
        self.done.set()


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int_field(body: dict, name: str, default: int | None, low: int,
               high: int | None = None) -> int | None:
    """body[name] as an int in [low, high] (default when absent or null), else ApiError 400."""
    value = body.get(name)
    if value is None:
        return default
    if not _is_int(value) or value < low or (high is not None and value > high):
        allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise ApiError(400, f"'{name}' must be {allowed}; got {value!r}", name)
    return int(value)


def _number_field(body: dict, name: str, default: float, ok: Callable[[float], bool],
                  allowed: str) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not _is_number(value) or not ok(float(value)):
        raise ApiError(400, f"'{name}' must be {allowed}; got {value!r}", name)
    return float(value)


def _message_text(content: Any, where: str) -> str:
    """A message's content: a string, or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return "".join(p["text"] for p in content)
    raise ApiError(400, f"'{where}.content' must be a string or a list of text parts; got "
                   f"{content!r:.80}", f"{where}.content")


def _messages(body: dict) -> list[dict]:
    """The chat as [{'role', 'content'}] with string contents, else ApiError 400."""
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "'messages' is required", "messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, f"'messages' must be a non-empty list of {{role, content}} objects; "
                       f"got {messages!r:.80}", "messages")
    chat = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"'{where}' must be an object with 'role' and 'content'", where)
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ApiError(400, f"'{where}.role' must be a non-empty string; got {role!r}",
                           f"{where}.role")
        chat.append({"role": role, "content": _message_text(message.get("content"), where)})
    return chat


def _stop_strings(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (not isinstance(stops, list) or len(stops) > _MAX_STOP_STRINGS
            or not all(isinstance(s, str) and s for s in stops)):
        raise ApiError(400, f"'stop' must be a non-empty string or a list of at most "
                       f"{_MAX_STOP_STRINGS} of them; got {stop!r:.80}", "stop")
    return tuple(stops)


def _sampling(body: dict) -> SamplingConfig:
    temperature = _number_field(body, "temperature", 1.0, lambda v: 0 <= v <= 2, "in [0, 2]")
    top_p = _number_field(body, "top_p", 1.0, lambda v: 0 < v <= 1, "in (0, 1]")
    # Greedy ignores top_p: every greedy request shares one sampler (and its compilations).
    return SamplingConfig(temperature=temperature, top_k=0,
                          top_p=1.0 if temperature == 0 else top_p)


def parse_chat_request(raw: bytes, tokenizer: Tokenizer, limits: ServerLimits,
                       context_length: int) -> ChatRequest:
    """A chat-completions request body (bytes) as a ChatRequest; ApiError 400 naming the field
    for anything malformed, and for a prompt that leaves no room in the context."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object; got {type(body).__name__}")
    if body.get("stream"):
        raise ApiError(400, "streaming is not supported; send 'stream': false", "stream")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, f"'model' must be a string; got {model!r}", "model")
    chat = _messages(body)
    budget_field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _int_field(body, budget_field, limits.default_max_tokens, 1)
    n = _int_field(body, "n", 1, 1, limits.max_batch)
    seed = _int_field(body, "seed", None, -(2 ** 63), 2 ** 63 - 1)
    sampling = _sampling(body)
    stop = _stop_strings(body)
    try:
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - any refusal of the template (jinja's included)
        raise ApiError(400, f"the chat template refuses these messages: {e}", "messages") from None
    room = context_length - len(prompt)
    if room < 1:
        raise ApiError(400, f"the prompt has {len(prompt)} tokens, which leaves no room for a "
                       f"reply in the context of {context_length} tokens", "messages",
                       "context_length_exceeded")
    return ChatRequest(prompt, n, min(max_tokens, limits.max_tokens, room), sampling,
                       None if seed is None else seed % 2 ** 32, stop)
