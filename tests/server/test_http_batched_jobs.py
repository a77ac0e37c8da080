"""Two HTTP clients at once, with an engine that batches decode steps
(completion/lean_batch.py): both requests run beside each other on the worker, their
steps share forwards, and each gets exactly the text it gets alone (greedy)."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import httpx
import pytest
from byte_tokenizer import byte_tokenizer
from fake_engine import FakeEngine

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
    # Both completions reach the engine before either takes it: on a loaded machine the
    # first could otherwise finish its eight tokens alone before the second request is
    # read, and nothing would be batched. The wait is on the job threads, not the loop.
    batcher = service.worker.engine.batcher
    together_at_the_door = threading.Barrier(len(DOCS), timeout=120)
    arrive = batcher.arrive

    def arrive_together() -> None:
        arrive()
        together_at_the_door.wait()

    batcher.arrive = arrive_together
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            together = await asyncio.gather(*(ask(http, doc) for doc in DOCS))
        assert list(together) == alone
        stats = service.worker.engine.batcher.stats
        assert stats.largest == 2, stats
    finally:
        service.close()


class _BesideFake(FakeEngine):
    """The fake engine as one whose completions run beside each other (the worker runs
    jobs on threads of their own when the engine has a batcher)."""

    batcher = "batches"


async def test_a_newer_request_for_a_running_document_stops_the_older():
    """With jobs beside each other, the worker no longer supersedes: the HTTP front end stops
    the running job of the same document (same file, same text after the cursor, lines
    above unchanged) when a newer request for it starts, and the older one answers empty;
    another document's job runs on."""
    app = create_app(lambda model: _BesideFake(model), HttpConfig(model="fake?step_ms=80", time_budget_s=60.0))
    service = app.state.service
    for _ in range(500):
        if service.state == "ready":
            break
        await asyncio.sleep(0.01)
    assert service.worker.batches
    doc = "userName = 1 + 2 + 3 + 4 + 5\nprint(userName + 2)\nx = userNa"
    other = "total = 3 + 4 + 5 + 6 + 7 + 8 + 9 + 10 + 11\nprint(total + 4)\ny = tot"

    def request(prefix: str) -> dict:
        return {"prefix": prefix, "suffix": "\n", "language": "python", "max_tokens": 40}

    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
            older = asyncio.ensure_future(http.post("/v1/midword/complete", json=request(doc)))
            elsewhere = asyncio.ensure_future(http.post("/v1/midword/complete", json=dict(request(other), path="b.py")))

            def older_job():
                jobs = [j for j, r in service._running_jobs.items() if r.prefix == doc]
                return jobs[0] if jobs else None

            def predicted() -> int:
                job = older_job()
                return len(job.partial[1]) if job is not None and job.partial else 0

            # Both running, the older past the typed word: a newer request that agrees with
            # what the older predicted so far would join it instead of stopping it.
            for _ in range(1000):
                if len(service._running_jobs) == 2 and predicted() >= len("userName "):
                    break
                await asyncio.sleep(0.01)
            assert len(service._running_jobs) == 2 and predicted() >= len("userName ")
            newer = await http.post("/v1/midword/complete", json=request(doc + "Q"))
            older_r, elsewhere_r = await older, await elsewhere
        assert newer.status_code == older_r.status_code == elsewhere_r.status_code == 200
        assert newer.json()["source"] != "superseded", newer.json()
        assert older_r.json()["text"] == "" and older_r.json()["source"] == "superseded", older_r.json()
        assert elsewhere_r.json()["text"], elsewhere_r.json()
        assert service.superseded == 1
    finally:
        service.close()
