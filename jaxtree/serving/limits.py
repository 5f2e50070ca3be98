"""ServerLimits: what the policy server allows (batch rows, reply tokens, context, request size)
and how long a request waits for others to share its batch; the flags of `launch.serve`.

    limits = ServerLimits(max_batch=32, max_tokens=512)   # a ConfigError names a bad field
    PolicyServer(policy, limits)
"""

from __future__ import annotations

import dataclasses

from jaxtree.config import Section, between, option, positive


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
