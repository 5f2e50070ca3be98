"""`launch.serve`'s OpenAI-compatible server (a subprocess, shared by the tests of this file) and
the HTTP backend of PATR's judge, against that server and against small fake servers."""

from __future__ import annotations

import http.server
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import jax
import numpy as np
import pytest

from jaxtree import models
from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment, default_config, set_path
from jaxtree.policy import Policy
from jaxtree.rollout.stats import RolloutStats
from jaxtree.scorers.judge_http import COUNTS, HttpJudge, parse_score
from jaxtree.scorers import JudgeConfig
from jaxtree.rollout.strategies import build_strategy
from jaxtree.serving import PolicyServer, ServerLimits
from test_patr import TOK, ScriptedEngine, played_episode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTEXT = 1024  # the served model's context: PATR's judge prompts (~850 bytes) fit
# A chat of the judge prompts' length bucket (513-1024 tokens): the server compiles one program
# per batch size and prompt-length bucket, and compiling dominates this file's time.
HELLO = [{"role": "user", "content": "Hello, " * 80}]


# ----------------------------------------------------------------------------- helpers

def call(url: str, payload=None, timeout: float = 120) -> tuple[int, dict]:
    """(HTTP status, JSON body) of a GET (payload None) or a POST (a dict, or raw bytes)."""
    data = payload if isinstance(payload, bytes) or payload is None else json.dumps(
        payload).encode()
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class FakeJudgeServer:
    """A stand-in OpenAI-compatible judge: request i (counted from 0) is answered after
    `reply(i) = (status, content, delay_s)` with a chat.completion holding `content`."""

    def __init__(self, reply):
        self.requests = 0
        lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    index, outer.requests = outer.requests, outer.requests + 1
                status, content, delay = reply(index)
                time.sleep(delay)
                body = json.dumps({"object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}]} if status == 200 else
                    {"error": {"message": "down"}}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def http_judge(url, **overrides) -> HttpJudge:
    settings = {"served_model": "judge", "weight": 0.7, "recent_turns": 4, "timeout_s": 60.0,
                "retries": 0, "fallback_score": 0.5, "max_tokens": 8, "concurrency": 4}
    return HttpJudge(url, **{**settings, **overrides})


def heuristic(episodes):
    return np.array([e.env.process_score() for e in episodes])


@pytest.fixture(scope="module")
def episodes():
    """Two FrozenLake branches with different heuristics (0 and 0.5)."""
    return [played_episode(0, episode_id=0), played_episode(3, episode_id=1)]


@pytest.fixture(scope="module", autouse=True)
def server_process(tmp_path_factory):
    """`launch.serve` on a free port, started with the module so that it loads while the tests
    that need no server run; stopped by the last test (killed here if a test failed first)."""
    log = open(tmp_path_factory.mktemp("serve") / "stderr.txt", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch.serve", "--model=tiny", "--host=127.0.0.1", "--port=0",
         "--max_batch=2", "--batch_wait_ms=100", "--max_tokens=8",
         f"--context_length={CONTEXT}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
    proc.log = log
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="module")
def server(server_process) -> str:
    """The served API's base URL, read from the job's `serving ... at URL` line."""
    lines = queue.Queue()
    server_process.reader = threading.Thread(
        target=lambda: [lines.put(line) for line in server_process.stdout], daemon=True)
    server_process.reader.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if server_process.poll() is not None:
                break
            continue
        if line.startswith("serving "):
            server_process.lines = lines
            return line.split(" at ")[-1].strip()
    server_process.log.seek(0)
    pytest.fail(f"launch.serve did not start: {server_process.log.read()[-2000:]}")


# ----------------------------------------------------------------------------- the judge client

def test_parse_score_is_lenient_about_the_wrapping_and_strict_about_the_value():
    assert parse_score('{"score": 0.8}') == 0.8
    assert parse_score('```json\n{"score": 1}\n```') == 1.0
    assert parse_score('I think {"score": 0.25, "why": "close"} fits') == 0.25
    assert parse_score('"score":0.3 and "score": 0.9') == 0.3
    for bad in ['{"score": 1.5}', '{"score": "0.8"}', '{"score": true}', '{"score": -0.1}',
                '{"value": 0.8}', "0.8", "", "[[[[", '{"score": NaN}']:
        assert parse_score(bad) is None, bad


def test_http_backend_settings_are_validated_naming_the_field():
    with pytest.raises(ConfigError, match=r"judge\.url: '' with backend='http'"):
        JudgeConfig.from_config({"backend": "http"}, "rollout.patr.judge")
    with pytest.raises(ConfigError, match=r"judge\.backend: 'grpc' is not one of"):
        JudgeConfig.from_config({"backend": "grpc"}, "rollout.patr.judge")
    with pytest.raises(ConfigError, match=r"judge\.fallback_score: 1.5 is not in \[0, 1\]"):
        JudgeConfig.from_config({"fallback_score": 1.5}, "rollout.patr.judge")
    with pytest.raises(ConfigError, match=r"judge\.url: 'localhost:8000' is not"):
        JudgeConfig.from_config({"url": "localhost:8000"}, "rollout.patr.judge")


def test_a_valid_answer_is_blended_with_the_heuristic(episodes):
    with FakeJudgeServer(lambda i: (200, '{"score": 0.8}', 0)) as fake:
        judge = http_judge(fake.url)
        scores = judge(episodes)
    np.testing.assert_allclose(scores, 0.7 * 0.8 + 0.3 * heuristic(episodes), rtol=0,
                               atol=1e-12)
    assert judge.metrics() == {**dict.fromkeys(COUNTS, 0), "requests": 2}
    assert judge.metrics() == dict.fromkeys(COUNTS, 0)  # counts since the previous call


def test_a_slow_server_times_out_retries_then_falls_back(episodes):
    with FakeJudgeServer(lambda i: (200, '{"score": 0.9}', 2.0)) as fake:
        judge = http_judge(fake.url, timeout_s=0.2, retries=1)
        start = time.monotonic()
        scores = judge(episodes[1:])
        seconds = time.monotonic() - start
        assert fake.requests == 2  # 1 + retries attempts
    np.testing.assert_allclose(scores, 0.7 * 0.5 + 0.3 * 0.5, atol=1e-12)
    counts = judge.metrics()
    assert counts["timeouts"] == 2 and counts["requests"] == 2 and counts["fallbacks"] == 1
    assert seconds < 1.5


def test_nobody_listening_falls_back_at_once(episodes):
    with socket.socket() as probe:  # a port that was free a moment ago: nobody listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    judge = http_judge(f"http://127.0.0.1:{port}/v1", retries=1, timeout_s=5.0)
    start = time.monotonic()
    scores = judge(episodes)
    assert time.monotonic() - start < 1.0
    np.testing.assert_allclose(scores, 0.7 * 0.5 + 0.3 * heuristic(episodes), atol=1e-12)
    counts = judge.metrics()
    assert counts["unreachable"] == 4 and counts["fallbacks"] == 2 and counts["requests"] == 4


class ScriptedEngineWithStats(ScriptedEngine):
    """test_patr's scripted engine (a scripted policy over real FrozenLake environments, no
    model) with the slot engine's `stats`, which `Patr.sample` reports."""

    stats = RolloutStats()


def test_a_patr_rollout_goes_on_when_the_judge_misbehaves():
    """Every third answer is garbage and every third an HTTP 500: the tree still grows, the
    failed branches get the fallback score, and the step's metrics carry the judge's counts."""
    replies = [(200, '{"score": 0.8}', 0), (200, "no idea", 0), (500, None, 0)]
    with FakeJudgeServer(lambda i: replies[i % 3]) as fake:
        config = default_config()
        for path, value in {"env.name": "frozen_lake", "env.options": {"style": "compact"},
                            "rollout.strategy": "patr", "rollout.num_slots": 16,
                            "rollout.patr.interval": 2, "rollout.patr.max_branches": 8,
                            "rollout.patr.scorer": "judge",
                            "rollout.patr.judge": {"backend": "http", "url": fake.url,
                                                   "retries": 0, "timeout_s": 10.0}}.items():
            set_path(config, path, value)
        exp = Experiment.from_config(config)
        strategy = build_strategy(exp.rollout, models.get_preset("tiny"), TOK,
                                  exp.env.factory())
        strategy.engine = ScriptedEngineWithStats(num_slots=16)
        batch, metrics = strategy.sample(None, jax.random.key(1), [2, 4], step=0)
        assert fake.requests == metrics["patr/judge_requests"] > 0
    assert len(batch) >= 8 and metrics["patr/scoring_points"] > 0
    assert metrics["patr/judge_malformed"] > 0 and metrics["patr/judge_http_errors"] > 0
    assert metrics["patr/judge_malformed"] + metrics["patr/judge_http_errors"] == (
        metrics["patr/judge_fallbacks"])
    assert metrics["patr/judge_timeouts"] == metrics["patr/judge_unreachable"] == 0


def test_a_failing_generation_answers_500_and_the_server_keeps_serving():
    # no parameters: generation fails while tracing, before any compilation
    broken = Policy(models.get_preset("tiny"), {}, TOK, "no parameters")
    with PolicyServer(broken, ServerLimits(max_tokens=4, batch_wait_ms=0)) as server:
        for _ in range(2):
            status, body = call(f"{server.url}/chat/completions", {"messages": HELLO})
            assert status == 500 and body["error"]["type"] == "server_error"
        status, health = call(server.url.replace("/v1", "/health"))
    assert status == 200 and health["failed"] == 2 and health["requests"] == 0


# ----------------------------------------------------------------------------- the server

def test_a_chat_completion_has_openai_s_shape_and_greedy_is_deterministic(server):
    request = {"model": "tiny", "messages": HELLO, "max_tokens": 6, "temperature": 0}
    status, body = call(f"{server}/chat/completions", request)
    assert status == 200
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "tiny" and isinstance(body["created"], int)
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(TOK.apply_chat_template(HELLO))
    assert 1 <= usage["completion_tokens"] <= 6
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if choice["finish_reason"] == "length":
        assert usage["completion_tokens"] == 6
    # greedy: the same answer again, and for every choice
    status, again = call(f"{server}/chat/completions", request)
    assert again["choices"][0]["message"] == choice["message"]
    status, two = call(f"{server}/chat/completions", {**request, "n": 2})
    assert status == 200 and [c["index"] for c in two["choices"]] == [0, 1]
    assert two["choices"][0]["message"] == two["choices"][1]["message"]
    assert two["usage"]["prompt_tokens"] == usage["prompt_tokens"]
    # a budget beyond the server's limit is capped; a stop string cuts the text
    status, capped = call(f"{server}/chat/completions", {**request, "max_tokens": 1000})
    assert status == 200 and capped["usage"]["completion_tokens"] <= 8
    text = capped["choices"][0]["message"]["content"]
    if text:
        status, cut = call(f"{server}/chat/completions", {**request, "stop": [text[-1]]})
        assert cut["choices"][0]["message"]["content"] == text[:text.index(text[-1])]
        assert cut["choices"][0]["finish_reason"] == "stop"
    status, models = call(f"{server}/models")
    assert status == 200 and models["object"] == "list" and models["data"][0]["id"] == "tiny"


def test_concurrent_requests_share_batches(server):
    health = server.replace("/v1", "/health")
    before = call(health)[1]
    start, results = threading.Barrier(4), []

    def ask():
        start.wait()
        results.append(call(f"{server}/chat/completions",
                            {"messages": HELLO, "max_tokens": 4, "temperature": 0}))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = call(health)[1]
    assert [status for status, _ in results] == [200] * 4
    assert after["requests"] - before["requests"] == 4
    assert after["batches"] - before["batches"] < 4 and after["largest_batch"] == 2


@pytest.mark.parametrize("payload, status, param, says", [
    (b"{not json", 400, None, "not valid JSON"),
    ({"max_tokens": 4}, 400, "messages", "'messages' is required"),
    ({"messages": []}, 400, "messages", "non-empty list"),
    ({"messages": [{"role": "user", "content": 3}]}, 400, "messages[0].content", "string"),
    ({"messages": HELLO, "n": 0}, 400, "n", "[1, 2]"),
    ({"messages": HELLO, "n": 3}, 400, "n", "[1, 2]"),
    ({"messages": HELLO, "max_tokens": "ten"}, 400, "max_tokens", "integer"),
    ({"messages": HELLO, "temperature": -1}, 400, "temperature", "[0, 2]"),
    ({"messages": HELLO, "stop": 5}, 400, "stop", "string"),
    ({"messages": [{"role": "user", "content": "x" * CONTEXT}]}, 400, "messages",
     "no room for a reply in the context of 1024"),
])
def test_bad_requests_get_400_naming_the_field(server, payload, status, param, says):
    got, body = call(f"{server}/chat/completions", payload)
    error = body["error"]
    assert got == status and error["type"] == "invalid_request_error"
    assert error["param"] == param and says in error["message"]


def test_unknown_paths_get_404_and_the_server_still_answers(server):
    status, body = call(f"{server}/completions", {"prompt": "x"})
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = call(f"{server}/chat/completions", {"messages": HELLO, "max_tokens": 2,
                                                       "temperature": 0})
    assert status == 200 and body["choices"][0]["message"]["role"] == "assistant"
    status, health = call(server.replace("/v1", "/health"))
    assert status == 200 and health["rejected"] >= 1 and health["queued"] == 0


def test_the_judge_falls_back_on_the_random_model_s_garbage(server, episodes):
    judge = http_judge(server, concurrency=1)
    scores = judge(episodes)
    np.testing.assert_allclose(scores, 0.7 * 0.5 + 0.3 * heuristic(episodes), atol=1e-12)
    counts = judge.metrics()
    assert counts["requests"] == counts["malformed"] == counts["fallbacks"] == 2
    assert counts["http_errors"] == counts["timeouts"] == counts["unreachable"] == 0


def test_sigterm_stops_the_server(server, server_process):
    server_process.terminate()
    assert server_process.wait(timeout=60) == 0
    server_process.reader.join(timeout=10)  # the job's last lines
    assert "stopped\n" in list(server_process.lines.queue)
    with pytest.raises(urllib.error.URLError):
        call(f"{server}/models", timeout=5)
