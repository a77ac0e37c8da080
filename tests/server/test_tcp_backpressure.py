"""TCP backpressure (server/transport.py, issue 31): a client that never reads its
answers must not grow the server's memory without bound. Over a real loopback socket
whose reader stopped reading: the session stops reading its input once the unread
answers pass the high-water mark and drops the connection (with a log line) when the
client stays stalled, or at once when the unread answers reach the hard cap; the server
keeps listening for the next client.

The server runs in this process (serve_tcp on a thread, the fake engine) so the bounds
can be made small."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest
from fake_engine import FakeEngine
from lsp_frames import INITIALIZE_FAKE, frame

from midword.server import transport
from midword.server.lsp import create_server

INIT = INITIALIZE_FAKE
# An unknown method is answered with an error that names it: a request of ~100 KB gets an
# answer of ~100 KB, so a few hundred fill any socket buffer.
BIG_NAME = "x" * 100_000
REQUESTS = 400


def _read_message(sock: socket.socket, buf: bytearray, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        head, sep, rest = bytes(buf).partition(b"\r\n\r\n")
        if sep:
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            if len(rest) >= length:
                del buf[: len(head) + 4 + length]
                return json.loads(rest[:length])
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        assert chunk, "the connection closed"
        buf += chunk


@pytest.fixture
def server(monkeypatch):
    """(port, thread) of serve_tcp with the fake engine; stopped by a client's exit."""
    address: list = []
    ready = threading.Event()
    monkeypatch.setattr(transport, "CLOSE_DRAIN_S", 0.2)

    def run():
        transport.serve_tcp(
            lambda: create_server(FakeEngine),
            "127.0.0.1",
            0,
            ready=lambda a: (address.append(a), ready.set()),
        )

    thread = threading.Thread(target=run, name="test-serve-tcp", daemon=True)
    thread.start()
    assert ready.wait(30)
    port = address[0][1]
    yield port
    # A fresh client ends the server (shutdown, exit), proving it still listens.
    sock = _connect(port)
    buf = bytearray()
    sock.sendall(frame(INIT))
    assert "result" in _read_message(sock, buf)
    sock.sendall(frame({"jsonrpc": "2.0", "id": "s", "method": "shutdown", "params": None}))
    while _read_message(sock, buf).get("id") != "s":
        pass
    sock.sendall(frame({"jsonrpc": "2.0", "method": "exit", "params": None}))
    thread.join(30)
    sock.close()
    assert not thread.is_alive()


def _connect(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that holds little
    for _ in range(100):  # the previous client's connection may still be closing
        try:
            sock.connect(("127.0.0.1", port))
            return sock
        except ConnectionRefusedError:
            time.sleep(0.05)
    raise AssertionError("could not connect")


def _flood_without_reading(port: int) -> tuple[socket.socket, dict]:
    """Connects, initializes, then sends REQUESTS big requests from a thread and never
    reads; returns the socket and what the sender saw (requests sent, its error)."""
    sock = _connect(port)
    buf = bytearray()
    sock.sendall(frame(INIT))
    assert "result" in _read_message(sock, buf)
    sent = {"requests": 0, "error": None}

    def send():
        try:
            sock.settimeout(60)
            for i in range(REQUESTS):
                sock.sendall(frame({"jsonrpc": "2.0", "id": i, "method": BIG_NAME, "params": {}}))
                sent["requests"] += 1
        except OSError as e:
            sent["error"] = e

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sent["thread"] = sender
    return sock, sent


def _wait_for_log(caplog, text: str, timeout: float = 60.0) -> logging.LogRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in caplog.records:
            if text in record.getMessage():
                return record
        time.sleep(0.05)
    raise AssertionError(f"no log line with {text!r}")


def test_a_client_that_stops_reading_is_paused_then_dropped(server, monkeypatch, caplog):
    monkeypatch.setattr(transport, "WRITE_HIGH_WATER", 256 * 1024)
    monkeypatch.setattr(transport, "WRITE_STALL_S", 1.0)
    caplog.set_level(logging.ERROR, logger="midword.server.transport")
    sock, sent = _flood_without_reading(server)
    record = _wait_for_log(caplog, "has not read")
    assert "dropping the connection" in record.getMessage()
    sent["thread"].join(60)
    # The server stopped reading once the answers were unread: the sender could not get
    # its requests through (before the fix it sent all of them and the server queued
    # every answer in memory), and the dropped connection ended its sending.
    assert sent["requests"] < REQUESTS and sent["error"] is not None
    sock.close()


def test_unread_answers_past_the_cap_drop_the_connection(server, monkeypatch, caplog):
    monkeypatch.setattr(transport, "WRITE_HIGH_WATER", 1 << 40)  # never pause: the cap alone
    monkeypatch.setattr(transport, "MAX_WRITE_BUFFER_BYTES", 2 * 1024 * 1024)
    caplog.set_level(logging.ERROR, logger="midword.server.transport")
    sock, sent = _flood_without_reading(server)
    record = _wait_for_log(caplog, "bytes of answers unread")
    assert "limit 2097152" in record.getMessage()
    sent["thread"].join(60)
    assert sent["error"] is not None or sent["requests"] == REQUESTS
    sock.close()
