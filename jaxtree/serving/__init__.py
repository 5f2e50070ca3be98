"""Serving a policy over an OpenAI-compatible HTTP API (`launch.serve`), e.g. as PATR's judge.

    from jaxtree.serving import PolicyServer, ServerLimits

    with PolicyServer(load_policy("tiny"), ServerLimits(max_batch=16), port=0) as server:
        ...                        # POST f"{server.url}/chat/completions"

The package, request to reply:

  server.py         PolicyServer: the HTTP endpoints, routing, JSON answers
  chat_request.py   parse_chat_request: a request body -> a validated ChatRequest
  batcher.py        Batcher: the request queue; one worker samples batches in one device call
  chat_response.py  completion_response: sampled replies -> OpenAI's chat.completion object
  errors.py         ApiError: errors in OpenAI's shape, with their HTTP statuses
  limits.py         ServerLimits: batch size, reply budget, context, request size (the flags)
"""

from jaxtree.serving.batcher import Batcher
from jaxtree.serving.chat_request import ChatRequest, parse_chat_request
from jaxtree.serving.chat_response import completion_response, cut_at_stop
from jaxtree.serving.errors import ApiError
from jaxtree.serving.limits import ServerLimits
from jaxtree.serving.server import PolicyServer

__all__ = ["ApiError", "Batcher", "ChatRequest", "PolicyServer", "ServerLimits",
           "completion_response", "cut_at_stop", "parse_chat_request"]
