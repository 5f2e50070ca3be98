"""The request queue of the policy server and the worker thread that samples it in batches.

    batcher = Batcher(policy, limits, seed=0, model="tiny")
    batcher.start()
    response = batcher.submit(request)      # from any thread; blocks until answered (or ApiError)
    batcher.stop()                          # queued requests get 503

Handler threads queue parsed requests; one worker thread takes the oldest, waits up to
`batch_wait_ms` for more, and samples up to `max_batch` rows (a request is `n` rows) in ONE
`Sampler.generate` call. Requests share a call when they sample alike (same temperature and
top_p; a greedy request ignores top_p). A sampled request with a `seed` runs in its own call with
the key `seed` (mod 2^32), so it is reproducible (row r uses fold_in(key, r)); other sampled
calls draw fresh keys from the server's `seed`. Greedy replies do not depend on keys. Each
distinct (temperature, top_p) compiles its own programs; the most recent 8 samplers are kept.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time

import jax

from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.sampling.sampler import Sampler
from jaxtree.serving.chat_request import ChatRequest
from jaxtree.serving.chat_response import completion_response
from jaxtree.serving.errors import ApiError
from jaxtree.serving.limits import ServerLimits

_log = logging.getLogger(__name__)
_SAMPLERS_KEPT = 8


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
