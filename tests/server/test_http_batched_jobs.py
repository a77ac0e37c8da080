"""Two HTTP clients at once, with an engine that batches decode steps
(completion/lean_batch.py): both requests run beside each other on the worker, their
steps share forwards, and each gets exactly the text it gets alone (greedy)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest
from byte_tokenizer import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# the tiny random Gemma 3 models of the lean tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "completion"))
from test_lean_gemma3 import pair  # noqa: E402

from midword.completion.engine import CompletionEngine  # noqa: E402
from midword.server.http import HttpConfig, create_app  # noqa: E402

pytestmark = pytest.mark.asyncio

DOCS = (
    "# file a\ndef fibonacci(n):\n    if n <= 1:\n        return n\n    return fib",
    "# file b\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y",
)


@pytest.fixture(scope="module")
def lean():
    return pair(byte_tokenizer(), int8=True, seed=3)[2]


def body(doc: str) -> dict:
    return {"prefix": doc, "suffix": "\n", "language": "python", "mode": "naive", "max_tokens": 8}


async def serve(lean, window_s: float):
    def factory(model: str):
        return CompletionEngine(model, model_object=lean, mode="naive")

    app = create_app(factory, HttpConfig(model="tiny", time_budget_s=60.0))
    service = app.state.service
    for _ in range(30000):  # (a cold numba cache compiles the batched step at load)
        if service.state == "ready":
            break
        await asyncio.sleep(0.01)
    assert service.state == "ready" and service.worker.batches
    service.worker.engine.batcher.window_s = window_s
    return app, service


async def ask(http: httpx.AsyncClient, doc: str) -> str:
    r = await http.post("/v1/midword/complete", json=body(doc))
    assert r.status_code == 200, r.text
    return r.json()["text"]


async def test_two_clients_at_once_get_what_each_gets_alone(lean):
    alone = []
    for doc in DOCS:
        lean.reset()
        app, service = await serve(lean, 0.0)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            alone.append(await ask(http, doc))
        service.close()
    assert all(alone)
    lean.reset()
    app, service = await serve(lean, 30.0)  # a step waits for the other's: all batched
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            together = await asyncio.gather(*(ask(http, doc) for doc in DOCS))
        assert list(together) == alone
        stats = service.worker.engine.batcher.stats
        assert stats.largest == 2, stats
    finally:
        service.close()
