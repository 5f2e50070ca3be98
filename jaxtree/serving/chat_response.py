"""OpenAI's chat.completion object for one request's sampled replies.

    response = completion_response(request, replies, finish_reasons, tokenizer, model_name)

A reply ends at the template's end of turn or EOS (finish_reason 'stop'), at one of the request's
`stop` strings (the text is cut there; 'stop'), or at its token budget or the end of the context
('length').
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from jaxtree.serving.chat_request import ChatRequest
from jaxtree.tokenizers import Tokenizer


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
