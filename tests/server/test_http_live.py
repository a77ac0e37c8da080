"""Behaviour tests of `midword serve --http` as a real uvicorn server on 127.0.0.1
(an ephemeral port; started by the test, stopped by PID): what ASGITransport cannot
show, a client that goes away mid-request, and the CLI's key handling. A slow test
runs the real default model through `/infill` mid-word, in process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE = "tests.fake_engine:FakeEngine"

CLASS = "class Account:\n    user_name = 'a guest with a rather long name for a default value'\n\n    def name(self):\n"
LINE = "        return self.user_na"
LONG_ANSWER = "me = 'a guest with a rather long name for a default value'"  # 21 fake tokens


class Server:
    def __init__(self, model: str, env: dict[str, str] | None = None, extra: list[str] | None = None):
        environ = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        environ.pop("MIDWORD_API_KEY", None)
        environ.update(env or {})
        cmd = [
            sys.executable,
            "-m",
            "midword",
            "serve",
            "--http",
            "127.0.0.1:0",
            "--engine",
            FAKE,
            "--model",
            model,
            *(extra or []),
        ]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"HTTP API on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self.url = f"http://127.0.0.1:{self.port}"
                return
        self.stop()
        raise AssertionError("the server did not start:\n" + "".join(self.lines))

    def wait_ready(self, headers=None) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if httpx.get(self.url + "/health", headers=headers).status_code == 200:
                return
            time.sleep(0.02)
        raise AssertionError("the engine did not load")

    def metrics(self, headers=None) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", headers=headers).text
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stderr.close()


@pytest.fixture
def start():
    servers: list[Server] = []

    def make(model: str, **kwargs) -> Server:
        server = Server(model, **kwargs)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def _raw_post(port: int, path: str, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


@pytest.mark.parametrize(
    "path,body",
    [
        ("/infill", {"input_prefix": CLASS, "input_suffix": "\n", "prompt": LINE, "n_predict": 64}),
        (
            "/v1/completions",
            {"prompt": "<fim_prefix>" + CLASS + LINE + "<fim_suffix>\n<fim_middle>", "max_tokens": 64, "stream": True},
        ),
    ],
)
def test_aborted_socket_stops_the_job_within_one_step(start, path, body, tmp_path):
    log = tmp_path / "calls.jsonl"
    server = start(f"fake?step_ms=400&log={log}")
    server.wait_ready()
    sock = _raw_post(server.port, path, body)
    time.sleep(0.1)
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text().strip()):  # the engine has started the job
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.01)
    # abort: RST, as a client process that is killed or cancels its request
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    deadline = time.monotonic() + 30
    while server.metrics().get("midword_engine_runs_total", 0) < 1:
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.05)
    m = server.metrics()
    assert m["midword_engine_stopped_runs_total"] == 1
    assert m["midword_http_cancellations_total"] == 1
    # the abort came during the first 400 ms step: that step completes, no other starts
    # (the whole answer is 21 steps)
    assert m["midword_tokens_generated_total"] <= 2
    # and the server keeps answering
    r = httpx.post(
        server.url + "/infill",
        json={**body, "prompt": LINE, "input_prefix": CLASS, "input_suffix": "\n", "n_predict": 2},
        timeout=30,
    )
    assert r.status_code == 200


def test_api_key_from_the_environment(start):
    server = start("fake", env={"MIDWORD_API_KEY": "k-123"})
    server.wait_ready()
    body = {"input_prefix": CLASS, "input_suffix": "\n", "prompt": LINE}
    assert httpx.post(server.url + "/infill", json=body).status_code == 401
    r = httpx.post(server.url + "/infill", json=body, headers={"Authorization": "Bearer k-123"})
    assert r.status_code == 200 and r.json()["content"] == LONG_ANSWER


@pytest.mark.slow
@pytest.mark.asyncio
async def test_real_model_completes_the_word_through_infill():
    from midword.server.http import HttpConfig, create_app, default_engine_factory

    app = create_app(default_engine_factory, HttpConfig(model="gemma3"))
    service = app.state.service
    try:
        for _ in range(6000):
            if service.state in ("ready", "error"):
                break
            await asyncio.sleep(0.1)
        assert service.state == "ready", service.worker.error
        prefix = (
            "class Account:\n"
            "    def __init__(self, user_name: str):\n"
            "        self.user_name = user_name\n"
            "\n"
            "    def display_name(self) -> str:\n"
        )
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://midword.test") as c:
            r = await c.post(
                "/infill",
                json={
                    "input_prefix": prefix,
                    "input_suffix": "\n",
                    "prompt": "        return self.user_na",
                    "n_predict": 16,
                },
                timeout=300,
            )
        assert r.status_code == 200
        content = r.json()["content"]
        assert ("user_na" + content).startswith("user_name"), content
    finally:
        service.close()


def test_next_request_joins_the_job_its_client_just_aborted(start, tmp_path):
    # llama.vim (autoload/llama.vim) stops the curl job in flight on every keystroke and
    # sends the next request at once: when the user typed what the model predicts, the
    # running job's answer serves it. The job is stopped only at a step boundary after
    # the grace, so a long first step leaves the next request ample time to join.
    log = tmp_path / "calls.jsonl"
    server = start(f"fake?step_ms=600&log={log}")
    server.wait_ready()
    doc = "class Account:\n    user_name = guest\n\n    def name(self):\n"
    body = {"input_prefix": doc, "input_suffix": "\n", "prompt": LINE, "n_predict": 64}
    with httpx.Client(timeout=60) as client:
        client.get(server.url + "/health")  # connected before the abort
        sock = _raw_post(server.port, "/infill", body)
        deadline = time.monotonic() + 30
        while not (log.exists() and log.read_text().strip()):
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.005)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        r = client.post(server.url + "/infill", json={**body, "prompt": LINE + "me"})
    assert r.status_code == 200
    assert r.headers["x-midword-source"] == "joined"
    assert r.json()["content"] == " = guest"
    assert len(log.read_text().splitlines()) == 1  # one engine run served both


@pytest.mark.parametrize("route", ["/completion", "/v1/completions"])
def test_stream_sends_each_piece_as_the_model_produces_it(start, route):
    # Continue (core/llm/llms/LlamaCpp.ts, OpenAI.ts) and tabby-agent show a stream's
    # text as it comes; llama.cpp's /completion has no [DONE], OpenAI's ends with it.
    server = start("fake?step_ms=60")
    server.wait_ready()
    if route == "/completion":
        body = {"prompt": "<PRE> " + CLASS + LINE + " <SUF>\n <MID>", "n_predict": 64, "stream": True}
    else:
        body = {
            "prompt": "<fim_prefix>" + CLASS + LINE + "<fim_suffix>\n<fim_middle>",
            "max_tokens": 64,
            "stream": True,
        }
    events, runs_at_first_piece = [], None
    with httpx.stream("POST", server.url + route, json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            events.append(line[len("data: ") :])
            if runs_at_first_piece is None:
                runs_at_first_piece = server.metrics().get("midword_engine_runs_total", 0)
    assert runs_at_first_piece == 0  # the first piece came while the model still worked
    if route == "/completion":
        parsed = [json.loads(e) for e in events]
        assert [e["stop"] for e in parsed] == [False] * (len(parsed) - 1) + [True]
        texts = [e["content"] for e in parsed]
    else:
        assert events[-1] == "[DONE]"
        parsed = [json.loads(e) for e in events[:-1]]
        assert all(len(e["choices"]) == 1 for e in parsed)
        assert [e["choices"][0]["finish_reason"] is not None for e in parsed] == [False] * (len(parsed) - 1) + [True]
        texts = [e["choices"][0]["text"] for e in parsed]
    assert "".join(texts) == LONG_ANSWER
    assert sum(1 for t in texts if t) > 10  # one piece per step (the answer is 21 steps)


def _accepted_nodelay(make_socket) -> int:
    """TCP_NODELAY on a connection asyncio accepted on the listening socket `make_socket()`."""

    async def run() -> int:
        seen: asyncio.Future = asyncio.get_running_loop().create_future()

        async def on_connect(reader, writer):
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listener = make_socket()
        server = await asyncio.start_server(on_connect, sock=listener)
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    return asyncio.run(run())


def test_answers_are_not_held_back_by_nagles_algorithm():
    """uvicorn writes an answer's head and body apart: with Nagle's algorithm on, the body
    waits for the client's delayed acknowledgement (about 40 ms on Linux). asyncio turns it
    off only for sockets whose protocol is TCP by number, which the server's socket is."""
    from midword.server.http import listening_socket

    assert _accepted_nodelay(lambda: listening_socket("127.0.0.1", 0)) == 1

    def plain() -> socket.socket:  # how the server made its socket before
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        return s

    assert _accepted_nodelay(plain) == 0


def test_a_port_in_use_is_refused_with_its_address(capsys):
    from midword.server.http import HttpConfig, listening_socket, serve_http

    taken = listening_socket("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        assert serve_http(lambda **kw: None, "127.0.0.1", port, HttpConfig()) == 2
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "in use" in err
