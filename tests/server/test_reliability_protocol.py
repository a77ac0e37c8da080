"""The server answers whatever bytes a client sends (issue 31, items 3, 7, 8 and 12):
params that fail validation and requests after `shutdown` get a JSON-RPC error, a
frame with a wrong, missing or huge Content-Length is answered without losing the
stream (or, when huge, the session is closed, never a MemoryError), `exit` without
`shutdown` exits 1, and over TCP a second client is refused, a client that leaves does
not end the server and an HTTP request is answered 400 and closed.

The server runs as a subprocess with the fake engine (tests/fake_engine.py) and is
driven with raw frames."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsp_frames import INITIALIZE_FAKE, INITIALIZED, frame

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
SERVER = [sys.executable, "-m", "midword.server", "--engine", "fake_engine:FakeEngine"]


class Reader:
    """Reads frames from a byte stream with a deadline (never hangs a test)."""

    def __init__(self, fileno: int, recv):
        self.fileno = fileno
        self.recv = recv
        self.buf = b""

    def _fill(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no message within the deadline; have {self.buf[:200]!r}")
        ready, _, _ = select.select([self.fileno], [], [], left)
        if not ready:
            return self._fill(deadline)
        chunk = self.recv(65536)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def message(self, timeout: float = 20.0) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if sep:
                length = int(
                    [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1]
                )
                if len(rest) >= length:
                    self.buf = rest[length:]
                    return json.loads(rest[:length])
            if not self._fill(deadline):
                return None

    def reply(self, msg_id, timeout: float = 20.0) -> dict:
        """The response to request `msg_id` (notifications in between are skipped)."""
        while True:
            msg = self.message(timeout)
            assert msg is not None, f"stream ended before the reply to {msg_id!r}"
            if "method" not in msg and msg.get("id") == msg_id:
                return msg

    def errors(self, n: int, timeout: float = 20.0) -> list[dict]:
        out = []
        while len(out) < n:
            msg = self.message(timeout)
            assert msg is not None
            if "error" in msg:
                out.append(msg)
        return out


INIT = INITIALIZE_FAKE


def stats(n) -> dict:
    return {"jsonrpc": "2.0", "id": f"stats{n}", "method": "midword/stats", "params": {}}


@pytest.fixture
def stdio():
    proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    reader = Reader(proc.stdout.fileno(), lambda n: os.read(proc.stdout.fileno(), n))

    def send(data: bytes) -> None:
        proc.stdin.write(data)
        proc.stdin.flush()

    proc.send = send
    proc.reader = reader
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _start(p) -> None:
    p.send(frame(INIT))
    assert "result" in p.reader.reply("init")
    p.send(frame(INITIALIZED))


def test_invalid_params_are_answered(stdio):
    _start(stdio)
    bad = [
        (
            "neg",
            "textDocument/completion",
            {"textDocument": {"uri": "file:///x.py"}, "position": {"line": -1, "character": -5}},
        ),
        ("types", "textDocument/completion", {"textDocument": {"uri": 5}, "position": {"line": "a", "character": 0}}),
        ("list", "textDocument/completion", [1, 2]),
        ("inline", "textDocument/inlineCompletion", {"position": None}),
    ]
    for msg_id, method, params in bad:
        stdio.send(frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}))
    for msg_id, method, _ in bad:
        reply = stdio.reader.reply(msg_id)
        assert reply["error"]["code"] == -32602 and method in reply["error"]["message"], reply
    # a custom method without params is answered (JSON-RPC lets params be left out)
    stdio.send(frame({"jsonrpc": "2.0", "id": "bare", "method": "midword/stats"}))
    assert "result" in stdio.reader.reply("bare")
    # an unknown method: MethodNotFound
    stdio.send(frame({"jsonrpc": "2.0", "id": "unknown", "method": "no/such", "params": {}}))
    assert stdio.reader.reply("unknown")["error"]["code"] == -32601


def test_not_json_rpc_is_answered(stdio):
    _start(stdio)
    stdio.send(frame(b"{not json"))
    stdio.send(frame([1, 2]))
    stdio.send(frame({"jsonrpc": "1.0", "id": 7, "method": "x"}))
    stdio.send(frame({"jsonrpc": "2.0", "id": [1], "method": "x"}))
    codes = [e["error"]["code"] for e in stdio.reader.errors(4)]
    assert codes == [-32700, -32600, -32600, -32600]
    stdio.send(frame(stats(1)))
    assert "result" in stdio.reader.reply("stats1")


def test_requests_after_shutdown_are_answered_and_exit_code(stdio):
    _start(stdio)
    stdio.send(frame({"jsonrpc": "2.0", "id": "down", "method": "shutdown"}))
    assert stdio.reader.reply("down").get("result", "missing") is None
    stdio.send(frame(stats(1)))
    reply = stdio.reader.reply("stats1")
    assert reply["error"]["code"] == -32600 and "shut down" in reply["error"]["message"]
    stdio.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    assert stdio.wait(timeout=20) == 0


def test_exit_without_shutdown_exits_1(stdio):
    _start(stdio)
    stdio.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    assert stdio.wait(timeout=20) == 1


def test_wrong_or_missing_content_length_does_not_desynchronise(stdio):
    _start(stdio)
    body = json.dumps(stats("short")).encode()
    stdio.send(b"Content-Length: %d\r\n\r\n" % (len(body) - 10) + body)  # too short
    stdio.send(frame(stats(1)))
    body = json.dumps(stats("long")).encode()
    stdio.send(b"Content-Length: %d\r\n\r\n" % (len(body) + 30) + body)  # too long: eats the next header
    stdio.send(frame(stats(2)))
    stdio.send(frame(stats(3)))
    stdio.send(b"Content-Type: application/json\r\n\r\n" + json.dumps(stats("nolength")).encode() + b"\r\n")
    stdio.send(b"Content-Length: abc\r\n\r\n")
    stdio.send(frame(stats(4)))
    stdio.send(frame(stats(5)))
    answered = set()
    errors = 0
    while not {"stats1", "stats3", "stats4", "stats5"} <= answered:
        msg = stdio.reader.message()
        assert msg is not None
        if "method" in msg:
            continue
        if "error" in msg:
            errors += 1
        else:
            answered.add(msg["id"])
    assert errors >= 3  # the short body, the long one, the missing and the bad length each answered


def test_huge_content_length_is_refused_without_allocating(stdio):
    _start(stdio)
    stdio.send(b"Content-Length: 1000000000000000\r\n\r\n{}")
    err = stdio.reader.errors(1)[0]
    assert err["error"]["code"] == -32700 and "over the limit" in err["error"]["message"]
    assert stdio.wait(timeout=20) == 1  # the session is closed: the body can be neither read nor skipped


# -- TCP ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tcp():
    port = _free_port()
    proc = subprocess.Popen(SERVER + ["--tcp", f"127.0.0.1:{port}"], env=ENV, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.05)
    proc.port = port
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


class Client:
    def __init__(self, port: int):
        # the probe connection of the fixture may still be closing: retry a refused second client
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.reader = Reader(self.sock.fileno(), self.sock.recv)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


def _connect(port: int) -> Client:
    for _ in range(50):
        c = Client(port)
        c.send(frame(INIT))
        msg = c.reader.message()
        if msg is not None and msg.get("id") == "init":
            return c
        c.close()
        time.sleep(0.1)
    raise AssertionError("could not connect")


def test_tcp_second_client_is_refused_not_cross_wired(tcp):
    a = _connect(tcp.port)
    a.send(frame(INITIALIZED))
    b = Client(tcp.port)
    b.send(frame(stats("b")))
    msg = b.reader.message()
    assert msg is not None and "another client" in msg["error"]["message"]
    assert b.reader.message() is None  # closed
    b.close()
    # the first client still gets its own answers
    a.send(frame(stats("a")))
    assert "result" in a.reader.reply("stats" + "a")
    a.close()


def test_tcp_disconnect_keeps_the_server_and_sessions_are_fresh(tcp):
    a = _connect(tcp.port)
    a.send(frame(INITIALIZED))
    a.send(
        frame(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {
                        "uri": "file:///w/a.py",
                        "languageId": "python",
                        "version": 1,
                        "text": "abc = 1\nab",
                    }
                },
            }
        )
    )
    a.send(frame(stats(1)))
    a.reader.reply("stats1")
    a.close()  # leaves without shutdown or exit
    time.sleep(0.3)
    assert tcp.poll() is None
    b = _connect(tcp.port)  # a fresh session: it must initialize again and sees no document of a
    b.send(frame(INITIALIZED))
    b.send(
        frame(
            {
                "jsonrpc": "2.0",
                "id": "c",
                "method": "textDocument/completion",
                "params": {"textDocument": {"uri": "file:///w/a.py"}, "position": {"line": 1, "character": 2}},
            }
        )
    )
    reply = b.reader.reply("c")
    assert reply["result"]["items"] == []
    b.send(frame({"jsonrpc": "2.0", "id": "down", "method": "shutdown"}))
    b.reader.reply("down")
    b.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    assert tcp.wait(timeout=20) == 0


def test_tcp_http_request_is_answered_400_and_closed(tcp):
    for _ in range(50):  # the fixture's probe connection may still count as the live client
        c = Client(tcp.port)
        c.send(b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        data = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            chunk = c.sock.recv(4096)
            if not chunk:
                break
            data += chunk
        if b"another client" not in data:
            break
        c.close()
        time.sleep(0.1)
    assert data.startswith(b"HTTP/1.1 400") and b"Language Server Protocol" in data
    c.close()
    assert tcp.poll() is None


def test_inline_trigger_kind_as_vscode_languageclient_sends_it(stdio):
    """vscode-languageclient 9.0.1 (lib/common/codeConverter.js, asInlineCompletionParams)
    passes VS Code's InlineCompletionTriggerKind through: an explicit trigger arrives as 0."""
    _start(stdio)
    text = "def total(count, unit_price):\n    return count * unit_pr"
    stdio.send(
        frame(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {
                    "textDocument": {"uri": "file:///w/t.py", "languageId": "python", "version": 1, "text": text}
                },
            }
        )
    )

    def ask(msg_id: str, kind) -> dict:
        params = {
            "textDocument": {"uri": "file:///w/t.py"},
            "position": {"line": 1, "character": len("    return count * unit_pr")},
            "context": {"triggerKind": kind},
        }
        stdio.send(frame({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/inlineCompletion", "params": params}))
        return stdio.reader.reply(msg_id)

    for msg_id, kind in (("invoke", 0), ("invoked", 1), ("automatic", 2)):
        reply = ask(msg_id, kind)
        assert "error" not in reply, reply
        assert reply["result"]["items"], reply
    for msg_id, kind in (("unknown", 3), ("negative", -1), ("boolean", False), ("text", "0")):
        reply = ask(msg_id, kind)
        assert reply["error"]["code"] == -32602 and "trigger_kind" in reply["error"]["message"], reply
