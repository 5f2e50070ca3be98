"""An OpenAI-compatible chat-completions server over a jaxtree policy; concurrent requests share
one batched device call.

    server = PolicyServer(load_policy("tiny"), ServerLimits(max_batch=16), port=0)
    server.start()                 # background threads; server.port is the bound port
    ...                            # POST f"{server.url}/chat/completions"
    server.stop()

Endpoints (JSON in, JSON out):
  POST /v1/chat/completions  `messages` ({role, content} list), optional `model` (any name: one
                             policy is served), `max_tokens` (or `max_completion_tokens`; default
                             `default_max_tokens`, capped at `max_tokens` and at what the context
                             leaves after the prompt), `temperature` (0 = greedy, <= 2), `top_p`,
                             `n` (choices, 1..max_batch), `seed`, `stop` (a string or a list,
                             cut from the decoded text). Unknown fields are ignored.
  GET  /v1/models            the served model, in OpenAI's list shape.
  GET  /health, /v1/stats    status and counts: requests answered, batches (device calls), rows,
                             failed requests, rejected requests, queued requests, largest batch.

The prompt is the tokenizer's chat template with the assistant's generation prompt; a reply ends
at the template's end of turn or EOS (finish_reason 'stop'), at a `stop` string ('stop'), or at
its token budget or the end of the context ('length').

Batching: handler threads queue parsed requests; one worker thread takes the oldest, waits up to
`batch_wait_ms` for more, and samples up to `max_batch` rows (a request is `n` rows) in ONE
`Sampler.generate` call. Requests share a call when they sample alike (same temperature and
top_p; a greedy request ignores top_p). A sampled request with a `seed` runs in its own call with
the key `seed` (mod 2^32), so it is reproducible (row r uses fold_in(key, r)); other sampled
calls draw fresh keys from the server's `seed`. Greedy replies do not depend on keys. Each
distinct (temperature, top_p) compiles its own programs; the most recent 8 samplers are kept.

Errors use OpenAI's shape, {"error": {"message", "type", "param", "code"}}: 400 for malformed
JSON, missing or mistyped fields and values out of range (`param` names the field) and for a
prompt that fills the context; 404 for an unknown path, 405 for a wrong method; 500 when a
generation fails (the worker answers that batch's requests and keeps serving); 503 for requests
still queued when the server stops.
"""

from __future__ import annotations

import collections
import dataclasses
import http.server
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import jax

from jaxtree.config import ConfigError, Section, between, option, positive
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.sampling.sampler import Sampler
from jaxtree.tokenizers import Tokenizer

_log = logging.getLogger(__name__)
_SAMPLERS_KEPT = 8
_MAX_STOP_STRINGS = 16


@dataclasses.dataclass(frozen=True)
class ServerLimits(Section):
    """What the server allows and how it batches (the flags of `launch.serve`)."""

    max_batch: int = option(16, "most rows (prompts x n) sampled in one device call",
                            check=positive())
    batch_wait_ms: float = option(5.0, "how long the first queued request waits for others to "
                                  "share its batch, in ms", check=between(0, 60_000))
    max_tokens: int = option(256, "most tokens a reply may have (a request asking more is "
                             "capped)", check=positive())
    default_max_tokens: int = option(64, "a reply's budget when the request names none",
                                     check=positive())
    context_length: int = option(0, "prompt + reply tokens at most (0 = the model's "
                                 "max_position_embeddings)", check=between(0))
    max_request_bytes: int = option(8 << 20, "largest request body accepted", check=positive())


class ApiError(Exception):
    """An error answered in OpenAI's shape: HTTP `status`, the message, the offending field."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


# ----------------------------------------------------------------------------- requests

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


# ----------------------------------------------------------------------------- responses

def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """(text up to the earliest stop string, whether one occurred)."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def completion_response(request: ChatRequest, replies: Sequence[Sequence[int]],
                        reasons: Sequence[str], tokenizer: Tokenizer, model: str) -> dict:
    """OpenAI's chat.completion object for one request's `n` replies (token ids, stop token
    included) and the sampler's finish reasons."""
    choices = []
    for index, (tokens, reason) in enumerate(zip(replies, reasons)):
        text, stopped = cut_at_stop(tokenizer.decode(tokens), request.stop)
        ended = stopped or reason in ("eos", "stop_sequence")
        choices.append({"index": index, "message": {"role": "assistant", "content": text},
                        "logprobs": None, "finish_reason": "stop" if ended else "length"})
    completion_tokens = sum(len(t) for t in replies)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": model, "choices": choices,
            "usage": {"prompt_tokens": len(request.prompt),
                      "completion_tokens": completion_tokens,
                      "total_tokens": len(request.prompt) + completion_tokens}}


# ----------------------------------------------------------------------------- batching

class Batcher:
    """The request queue and the worker thread that samples batches of it (module docstring)."""

    def __init__(self, policy, limits: ServerLimits, seed: int, model: str):
        self.policy = policy
        self.limits = limits
        self.model = model
        self._key = jax.random.key(seed)
        self._queue: collections.deque[ChatRequest] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._samplers: collections.OrderedDict[SamplingConfig, Sampler] = (
            collections.OrderedDict())
        self._counts = {"requests": 0, "batches": 0, "rows": 0, "failed": 0,
                        "largest_batch": 0}
        self._calls = itertools.count()  # device calls made: each unseeded call's key
        self._thread = threading.Thread(target=self._work, name="batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finishes the batch in progress; requests still queued get 503."""
        with self._cond:
            self._stopping = True
            pending, self._queue = list(self._queue), collections.deque()
            self._cond.notify_all()
        for request in pending:
            request.finish(error=ApiError(503, "the server is shutting down", kind="server_error",
                                          code="shutting_down"))
        if self._thread.is_alive():
            self._thread.join()

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {**self._counts, "queued": len(self._queue)}

    def submit(self, request: ChatRequest) -> dict:
        """Queues the request and waits for its response; ApiError when it fails."""
        with self._cond:
            if self._stopping:
                raise ApiError(503, "the server is shutting down", kind="server_error",
                               code="shutting_down")
            self._queue.append(request)
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.response

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._serve(batch)

    def _next_batch(self) -> list[ChatRequest] | None:
        """The oldest request and the compatible ones that arrive within `batch_wait_ms` (at most
        `max_batch` rows); None once the server stops."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            batch = [self._queue.popleft()]
            if batch[0].runs_alone:
                return batch
            deadline = time.monotonic() + self.limits.batch_wait_ms / 1000
            while True:
                self._take_compatible(batch)
                left = deadline - time.monotonic()
                rows = sum(r.n for r in batch)
                if rows >= self.limits.max_batch or left <= 0 or self._stopping:
                    return batch
                self._cond.wait(left)

    def _take_compatible(self, batch: list[ChatRequest]) -> None:
        """Moves queued requests that sample like batch[0] and fit into `batch` (called with the
        lock held); the others keep their order."""
        rows = sum(r.n for r in batch)
        kept = collections.deque()
        for request in self._queue:
            if (not request.runs_alone and request.sampling == batch[0].sampling
                    and rows + request.n <= self.limits.max_batch):
                batch.append(request)
                rows += request.n
            else:
                kept.append(request)
        self._queue = kept

    def _sampler(self, sampling: SamplingConfig) -> Sampler:
        if sampling in self._samplers:
            self._samplers.move_to_end(sampling)
        else:
            tok = self.policy.tokenizer
            self._samplers[sampling] = Sampler(self.policy.config, sampling,
                                               self.limits.max_tokens, pad_id=tok.pad_id,
                                               eos_ids=[tok.eos_id])
            if len(self._samplers) > _SAMPLERS_KEPT:
                self._samplers.popitem(last=False)
        return self._samplers[sampling]

    def _serve(self, batch: list[ChatRequest]) -> None:
        """Samples every row of `batch` in one call and answers each request."""
        tok = self.policy.tokenizer
        prompts = [r.prompt for r in batch for _ in range(r.n)]
        budgets = [r.max_tokens for r in batch for _ in range(r.n)]
        rng = (jax.random.key(batch[0].seed) if batch[0].runs_alone
               else jax.random.fold_in(self._key, next(self._calls)))
        try:
            result = self._sampler(batch[0].sampling).generate(
                self.policy.params, prompts, rng, max_new_tokens=budgets,
                stop_sequences=[tok.assistant_stop_sequences] * len(prompts))
        except Exception as e:  # noqa: BLE001 - answer the batch with 500, keep serving
            _log.exception("serving: generation of a batch of %d rows failed", len(prompts))
            with self._cond:
                self._counts["failed"] += len(batch)
            for request in batch:
                request.finish(error=ApiError(500, f"generation failed: {e!r}",
                                              kind="server_error", code="generation_failed"))
            return
        with self._cond:
            self._counts["batches"] += 1
            self._counts["rows"] += len(prompts)
            self._counts["requests"] += len(batch)
            self._counts["largest_batch"] = max(self._counts["largest_batch"], len(prompts))
        row = 0
        for request in batch:
            rows = slice(row, row + request.n)
            request.finish(completion_response(request, result.tokens[rows],
                                               result.finish_reasons[rows], tok, self.model))
            row += request.n


# ----------------------------------------------------------------------------- HTTP

class _Handler(http.server.BaseHTTPRequestHandler):
    """Routes requests to the PolicyServer (`self.server.app`) and writes JSON answers."""

    protocol_version = "HTTP/1.1"  # keep-alive for clients that pool connections
    server_version = "jaxtree-serve"

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def log_message(self, format, *args):  # http.server's access log, at debug level
        _log.debug("serving: %s " + format, self.address_string(), *args)

    def _body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True  # the body's end is unknown
            raise ApiError(411, "a request body needs a Content-Length header")
        if int(length) > self.server.app.limits.max_request_bytes:
            self.close_connection = True  # the unread body must not be parsed as a request
            raise ApiError(413, f"the request body has {length} bytes; the limit is "
                           f"{self.server.app.limits.max_request_bytes}")
        return self.rfile.read(int(length))

    def _dispatch(self, method: str) -> None:
        app = self.server.app
        path = urlsplit(self.path).path.rstrip("/") or "/"
        try:
            # Read before routing: on a kept-alive connection an unread body would be taken
            # for the next request.
            raw = self._body() if method == "POST" or self.headers.get("Content-Length") else b""
            routes = app.routes.get(path)
            if routes is None:
                raise ApiError(404, f"unknown path {path!r}; served: {sorted(app.routes)}",
                               code="not_found")
            if method not in routes:
                raise ApiError(405, f"{path} takes {' or '.join(routes)}, not {method}",
                               code="method_not_allowed")
            status, payload = 200, routes[method](raw)
        except ApiError as e:
            status, payload = e.status, e.body()
            app.count_rejected(e.status)
        except Exception as e:  # noqa: BLE001 - a bug answers 500; the server keeps serving
            _log.exception("serving: %s %s failed", method, path)
            status, payload = 500, ApiError(500, f"internal error: {e!r}",
                                            kind="server_error").body()
        self._send(status, payload)

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left (e.g. it timed out); nothing to do


class PolicyServer:
    """Serves a policy (`jaxtree.policy.Policy`: config, params, tokenizer, source) on
    host:port (port 0 = a free port; `port` holds the bound one). The socket listens from
    construction; `start()` begins answering, `stop()` ends it (also as a context manager).

    Raises ConfigError (a ValueError) naming `context_length` when it exceeds the model's
    positions, OSError when host:port cannot be bound.
    """

    def __init__(self, policy, limits: ServerLimits | None = None, host: str = "127.0.0.1",
                 port: int = 0, seed: int = 0, model: str | None = None):
        self.limits = limits or ServerLimits()
        positions = policy.config.max_position_embeddings
        if self.limits.context_length > positions:
            raise ConfigError("context_length", f"{self.limits.context_length} exceeds the "
                              f"model's {positions} positions")
        self.context_length = self.limits.context_length or positions
        self.policy = policy
        self.model = model or policy.source
        self.created = int(time.time())
        self.batcher = Batcher(policy, self.limits, seed, self.model)
        self.routes = {
            "/v1/chat/completions": {"POST": self.chat_completions},
            "/v1/models": {"GET": lambda _: self.models()},
            "/health": {"GET": lambda _: self.health()},
            "/v1/stats": {"GET": lambda _: self.health()},
        }
        self._rejected = 0
        self._lock = threading.Lock()
        self._httpd = http.server.ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True  # a stuck client connection never blocks stop()
        self._httpd.app = self
        self.host, self.port = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http",
                                        daemon=True)

    @property
    def url(self) -> str:
        """The API's base URL, e.g. 'http://127.0.0.1:8000/v1'."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> PolicyServer:
        self.batcher.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops accepting requests, answers the queued ones with 503, finishes the batch in
        progress and closes the socket."""
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()
        self.batcher.stop()

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def count_rejected(self, status: int) -> None:
        if 400 <= status < 500:
            with self._lock:
                self._rejected += 1

    def chat_completions(self, raw: bytes) -> dict:
        request = parse_chat_request(raw, self.policy.tokenizer, self.limits,
                                     self.context_length)
        return self.batcher.submit(request)

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model, "object": "model",
                                            "created": self.created, "owned_by": "jaxtree"}]}

    def health(self) -> dict:
        with self._lock:
            rejected = self._rejected
        return {"status": "ok", "model": self.model, "source": self.policy.source,
                "context_length": self.context_length, "max_batch": self.limits.max_batch,
                **self.batcher.stats(), "rejected": rejected}
