"""Serves a policy over an OpenAI-compatible HTTP API (`jaxtree.serving`), e.g. as PATR's judge.

    python -m launch.serve --model=tiny --port=8000
    python -m launch.serve --model=/path/to/hf_checkpoint --max_batch=32 --max_tokens=512

    curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 32,
           "temperature": 0}'

--model is what `load_policy` takes: a preset (random init), a jaxtree checkpoint or a local
Hugging Face directory. Once the server accepts connections the job prints one line,
`serving <source> at http://HOST:PORT/v1` (--port=0 picks a free port; read it from that line).
Endpoints: POST /v1/chat/completions, GET /v1/models, GET /health (request and batch counts).
SIGTERM or SIGINT (Ctrl-C) stops it: queued requests get 503, the batch in progress finishes,
exit status 0. A bad flag, an unusable --model or a port that cannot be bound ends the job with
one line (exit status 2).
"""

from __future__ import annotations

import errno
import signal
import socket
import threading

from absl import flags

from jaxtree.config import ConfigError
from jaxtree.policy import load_policy
from jaxtree.serving import PolicyServer, ServerLimits
from launch.common import fail, load_named_policy, run_app

_MODEL = flags.DEFINE_string("model", "tiny", "A preset, a jaxtree checkpoint or a local Hugging "
                             "Face checkpoint directory.")
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on (0.0.0.0: every "
                            "interface).")
_PORT = flags.DEFINE_integer("port", 8000, "Port to listen on; 0 picks a free one.")
_MAX_BATCH = flags.DEFINE_integer("max_batch", 16, "Most rows (prompts x n) in one device call.")
_BATCH_WAIT_MS = flags.DEFINE_float("batch_wait_ms", 5.0, "How long a request waits for others "
                                    "to share its batch, in ms.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 256, "Most tokens of a reply (larger requests "
                                   "are capped).")
_CONTEXT_LENGTH = flags.DEFINE_integer("context_length", 0, "Prompt + reply tokens at most; 0 = "
                                       "the model's max_position_embeddings.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the sampling keys of unseeded requests.")


def server_limits() -> ServerLimits:
    """The limit flags; an invalid value ends the job naming its flag."""
    try:
        return ServerLimits(max_batch=_MAX_BATCH.value, batch_wait_ms=_BATCH_WAIT_MS.value,
                            max_tokens=_MAX_TOKENS.value,
                            default_max_tokens=min(64, _MAX_TOKENS.value),
                            context_length=_CONTEXT_LENGTH.value)
    except ConfigError as e:
        fail(f"--{e.path}={getattr(flags.FLAGS, e.path)}: {e.message}")


def bind(policy, limits: ServerLimits) -> PolicyServer:
    """The server listening on --host:--port; a port in use or a bad host ends the job."""
    try:
        return PolicyServer(policy, limits, host=_HOST.value, port=_PORT.value, seed=_SEED.value,
                            model=_MODEL.value)
    except ConfigError as e:
        fail(f"--{e.path}: {e.message}")
    except socket.gaierror as e:
        fail(f"--host={_HOST.value}: {e.strerror or e}")
    except OSError as e:
        flag = "--port" if e.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
        fail(f"{flag}: cannot listen on {_HOST.value}:{_PORT.value}: {e.strerror or e}")


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    if not 0 <= _PORT.value <= 65535:
        fail(f"--port={_PORT.value}: must be in [0, 65535]")
    limits = server_limits()
    policy = load_named_policy("--model", lambda: load_policy(_MODEL.value))
    server = bind(policy, limits)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    server.start()
    print(f"serving {policy.source} at {server.url}", flush=True)
    # A timed wait: the signal handlers run between waits, whatever the platform's lock waits do.
    while not stopping.wait(0.5):
        pass
    server.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    run_app(main)
