"""PATR's LLM judge on an inference server: the same chat as the in-process judge, sent to an
OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, `python -m launch.serve`, ...).

Each branch is one request (temperature 0) holding `judge.judge_messages` (PATR's system prompt
and phase prompt); the answer's score is read leniently (`parse_score`) and blended with the
environment's heuristic exactly as the in-process judge does (Eq. 8, `judge.blend_with_heuristic`).

Failure handling: the rollout never fails because of the judge. A request that times out, cannot
connect, or gets an HTTP 5xx (or a broken response) is tried again up to `retries` more times,
after a short pause; a 4xx is not retried (the same request would fail the same way), nor is an
answer without a score (temperature 0 repeats it). A branch without a valid score gets
`fallback_score` as its judge score, still blended with the heuristic. Every outcome is counted
(`HttpJudge.metrics`), and the first failure of each kind is logged once as a warning.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import logging
import math
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

import numpy as np

from jaxtree.rollout.episode import Episode
from jaxtree.scorers.judge import blend_with_heuristic, judge_messages

# The counts `metrics()` reports (per HTTP attempt, except `fallbacks`: per branch scored).
COUNTS = ("requests", "malformed", "timeouts", "unreachable", "http_errors", "fallbacks")

_SCORE_FIELD = re.compile(r'"score"\s*:\s*(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)')
_CODE_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_RETRY_PAUSE_S = 0.05  # doubled at each retry, at most 1 s: a restarting server gets a moment


def parse_score(text: str) -> float | None:
    """The score of a judge's answer, or None when it has none.

    Accepted: a JSON object with a numeric "score" (code fences around it allowed), else the
    first `"score": <number>` anywhere in the text. A score that is not a finite number in
    [0, 1] (a string, a bool, 1.5) counts as no score.
    """
    if not isinstance(text, str):
        return None
    stripped = _CODE_FENCE.sub("", text.strip())
    try:
        answer = json.loads(stripped)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and "score" in answer:
        value = answer["score"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
    else:
        match = _SCORE_FIELD.search(text)
        if match is None:
            return None
        value = float(match.group(1))
    value = float(value)
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def completions_url(url: str) -> str:
    """The chat-completions endpoint of a base URL ('http://h:p/v1' -> '.../v1/chat/completions');
    a URL already ending in /chat/completions is kept."""
    url = url.rstrip("/")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


class _Failure(Exception):
    """One failed attempt: `kind` (a COUNTS name), whether to try again, and what happened."""

    def __init__(self, kind: str, retry: bool, detail: str):
        super().__init__(detail)
        self.kind = kind
        self.retry = retry


def _classify(error: Exception) -> _Failure:
    """The failure kind of an exception raised by urllib while sending or reading a request.

    urllib wraps errors of connecting and sending in URLError (its `reason` is the socket error);
    errors while reading the response come unwrapped. `unreachable` is a failure to connect or
    send (refused, DNS, no route); a broken or cut-off response from a reached server is an
    `http_errors` like a 5xx, and is retried like one.
    """
    if isinstance(error, urllib.error.HTTPError):
        error.close()  # its body is not read; free the connection
        return _Failure("http_errors", error.code >= 500, f"HTTP {error.code} {error.reason}")
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, TimeoutError):  # socket.timeout is TimeoutError
        return _Failure("timeouts", True, "timed out")
    if isinstance(error, urllib.error.URLError) or isinstance(reason, socket.gaierror):
        return _Failure("unreachable", True, f"cannot connect: {reason}")
    return _Failure("http_errors", True, f"broken response: {error!r}")


class HttpJudge:
    """Scores branches by asking a judge served over HTTP (module docstring); call it with live
    episodes like `JudgeScorer`.

    Args:
      url: the server's base URL (e.g. 'http://127.0.0.1:8000/v1') or its chat-completions URL.
      served_model: the `model` field of each request.
      weight: lambda of Eq. 8 (the judge's share of the blend).
      recent_turns: turns of the partial trajectory shown to the judge.
      timeout_s: limit of each connect and each read of one attempt, in seconds.
      retries: extra attempts after a timeout, a connection failure or an HTTP 5xx.
      fallback_score: the judge score (in [0, 1]) of a branch without a valid answer.
      max_tokens: the answer's token budget.
      concurrency: requests in flight at once.
    """

    def __init__(self, url: str, served_model: str, weight: float, recent_turns: int,
                 timeout_s: float, retries: int, fallback_score: float, max_tokens: int,
                 concurrency: int):
        self.endpoint = completions_url(url)
        self.served_model = served_model
        self.weight = weight
        self.recent_turns = recent_turns
        self.timeout_s = timeout_s
        self.retries = retries
        self.fallback_score = fallback_score
        self.max_tokens = max_tokens
        self.concurrency = concurrency
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTS, 0)
        self._warned: set[str] = set()

    def metrics(self) -> dict[str, int]:
        """{count name: how many since the previous `metrics()` call} for every name in COUNTS
        (so each rollout step reports its own). `requests` counts HTTP attempts (retries
        included), as do `malformed` (answers without a valid score), `timeouts`, `unreachable`
        (connection refused, DNS) and `http_errors` (non-2xx, broken responses); `fallbacks`
        counts branches that got `fallback_score`."""
        with self._lock:
            counts, self._counts = self._counts, dict.fromkeys(COUNTS, 0)
        return counts

    def _count(self, kind: str, detail: str | None = None) -> None:
        with self._lock:
            self._counts[kind] += 1
            first = detail is not None and kind not in self._warned
            if first:
                self._warned.add(kind)
        if first:  # one line per failure kind, not per request: a dead server would flood
            logging.getLogger(__name__).warning(
                "judge server %s: %s (%s); those branches get the fallback judge score %g; "
                "further %s are counted in patr/judge_%s, not logged", self.endpoint, detail,
                kind, self.fallback_score, kind, kind)

    def _payload(self, messages: list[dict]) -> bytes:
        return json.dumps({"model": self.served_model, "messages": messages, "temperature": 0,
                           "max_tokens": self.max_tokens, "n": 1}).encode()

    def _attempt(self, payload: bytes) -> float:
        """One HTTP request; the score, or _Failure."""
        self._count("requests")
        request = urllib.request.Request(self.endpoint, data=payload, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except (OSError, http.client.HTTPException) as e:  # URLError and timeouts are OSErrors
            raise _classify(e) from None
        try:
            content = json.loads(body)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Failure("malformed", False, f"a response without choices[0].message."
                           f"content: {body[:120]!r}") from None
        score = parse_score(content)
        if score is None:
            raise _Failure("malformed", False, f"an answer without a score in [0, 1]: "
                           f"{str(content)[:120]!r}")
        return score

    def score_one(self, messages: list[dict]) -> float:
        """The judge score of one chat: its answer's score, else `fallback_score`."""
        payload = self._payload(messages)
        for attempt in range(self.retries + 1):
            try:
                return self._attempt(payload)
            except _Failure as failure:
                self._count(failure.kind, str(failure))
                if not failure.retry or attempt == self.retries:
                    break
                time.sleep(min(_RETRY_PAUSE_S * 2 ** attempt, 1.0))
        self._count("fallbacks")
        return self.fallback_score

    def judge_scores(self, episodes: Sequence[Episode]) -> np.ndarray:
        """s_judge of each episode (float64[n], in [0, 1]), `concurrency` requests at a time."""
        chats = [judge_messages(e, self.recent_turns) for e in episodes]
        if not chats:
            return np.zeros(0)
        workers = min(self.concurrency, len(chats))
        with concurrent.futures.ThreadPoolExecutor(workers, "judge-http") as pool:
            return np.asarray(list(pool.map(self.score_one, chats)), np.float64)

    def __call__(self, episodes: Sequence[Episode]) -> np.ndarray:
        return blend_with_heuristic(self.weight, self.judge_scores(episodes), episodes)
