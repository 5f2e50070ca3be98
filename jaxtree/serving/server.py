"""PolicyServer: an OpenAI-compatible chat-completions server over a jaxtree policy, on the
standard library's threading HTTP server; concurrent requests share one batched device call
(`batcher.Batcher`).

    server = PolicyServer(load_policy("tiny"), ServerLimits(max_batch=16), port=0)
    server.start()                 # background threads; server.port is the bound port
    ...                            # POST f"{server.url}/chat/completions"
    server.stop()

Endpoints (JSON in, JSON out):
  POST /v1/chat/completions  a chat (`chat_request` lists the fields) -> a chat.completion
                             (`chat_response`).
  GET  /v1/models            the served model, in OpenAI's list shape.
  GET  /health, /v1/stats    status and counts: requests answered, batches (device calls), rows,
                             failed requests, rejected requests, queued requests, largest batch.
Errors are answered in OpenAI's shape (`errors.ApiError`).
"""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
from urllib.parse import urlsplit

from jaxtree.config import ConfigError
from jaxtree.serving.batcher import Batcher
from jaxtree.serving.chat_request import parse_chat_request
from jaxtree.serving.errors import ApiError
from jaxtree.serving.limits import ServerLimits

_log = logging.getLogger(__name__)


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
