"""LSP base-protocol frames for tests that speak to the server as raw bytes, and the
handshake that starts a session on the fake engine (no model, no prefetch)."""

from __future__ import annotations

import json


def frame(payload) -> bytes:
    """One message with its Content-Length header; bytes are framed as they are (malformed
    JSON included), anything else is JSON-encoded."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


INITIALIZE_FAKE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {
        "processId": None,
        "rootUri": None,
        "capabilities": {},
        "initializationOptions": {"midword": {"model": "fake", "prefetch": False}},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "initialized", "params": {}}
