"""The start after a fresh install (completion/engine.py `warm_up`): when numba's cache
lacks the batched decode step, warm_up runs the kernels a completion needs, then leaves
the batched step compiling on a thread. Until that compile ends the engine has no
batcher (completions take turns, each with the model's own step, and give the same
text); afterwards completions running at once are batched again; a failed compile
leaves batching off for good. On a tiny random int8 Gemma 3 (test_lean_gemma3.pair).
"""

from __future__ import annotations

import threading

import pytest
from byte_tokenizer import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_lean_batch import DOCS, _alone, _request, _together  # noqa: E402
from test_lean_gemma3 import pair  # noqa: E402

from midword.completion import engine as engine_module  # noqa: E402
from midword.completion import lean_batch  # noqa: E402
from midword.completion.engine import CompletionEngine  # noqa: E402


@pytest.fixture(scope="module")
def byte_tok():
    return byte_tokenizer()


@pytest.fixture
def uncached_batch_step(monkeypatch):
    """lean_batch as after a fresh install: not in numba's cache; its compile waits for
    `release` (or raises `fail`), and records the model it was given."""
    state = {"release": threading.Event(), "fail": None, "models": []}

    def warm_up(model, in_child=False):
        assert in_child  # compiled in a child process, away from this process's compile lock
        state["models"].append(model)
        assert state["release"].wait(60)
        if state["fail"] is not None:
            raise state["fail"]

    monkeypatch.setattr(lean_batch, "cached", lambda: False)
    monkeypatch.setattr(lean_batch, "warm_up", warm_up)
    return state


def test_batching_waits_for_the_batched_step_compiled_after_ready(byte_tok, uncached_batch_step, monkeypatch):
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    alone = _alone(lean, "naive")
    lean.reset()
    ran = []
    real = engine_module._warm_first_request_kernels
    monkeypatch.setattr(engine_module, "_warm_first_request_kernels", lambda m: (ran.append(m), real(m)))
    engine = CompletionEngine("tiny", model_object=lean, mode="naive")
    engine.warm_up()
    # warm_up returned with the compile still running: the first-request kernels ran before it.
    assert ran == [lean] and uncached_batch_step["models"] == [lean]
    assert "first_request_kernels" in engine.warm_up_seconds
    assert not engine.wait_batched_step(timeout=0.05)
    assert engine.batcher is None
    # The probes ran on the model's own cache and reset it: answers are as before.
    first, second = _together(engine, "naive")
    assert [first.text, second.text] == alone
    uncached_batch_step["release"].set()
    assert engine.wait_batched_step(timeout=30)
    batcher = engine.batcher
    assert batcher is not None and engine.batch_steps
    batcher.window_s = 30.0  # every step of the two jobs is batched
    # Else the slots parked by the first round hold every step of the answers already.
    engine.slots.clear()
    lean.reset()
    together = _together(engine, "naive")
    assert [c.text for c in together] == alone
    assert batcher.stats.largest == 2


def test_a_failed_batched_step_compile_leaves_batching_off(byte_tok, uncached_batch_step):
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    alone = _alone(lean, "naive")
    lean.reset()
    engine = CompletionEngine("tiny", model_object=lean, mode="naive")
    uncached_batch_step["fail"] = RuntimeError("no compiler")
    engine.warm_up()
    uncached_batch_step["release"].set()
    assert engine.wait_batched_step(timeout=30)
    assert engine.batcher is None and not engine.batch_steps
    assert engine.complete(_request(DOCS[0], "naive")).text == alone[0]


def test_a_cached_batched_step_is_not_compiled_at_start(byte_tok, monkeypatch):
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    calls = []
    monkeypatch.setattr(lean_batch, "cached", lambda: True)
    monkeypatch.setattr(lean_batch, "warm_up", calls.append)
    monkeypatch.setattr(engine_module, "_warm_first_request_kernels", calls.append)
    engine = CompletionEngine("tiny", model_object=lean, mode="naive")
    engine.warm_up()
    assert calls == [] and engine.wait_batched_step(timeout=0) and engine.batcher is not None
    assert "first_request_kernels" not in engine.warm_up_seconds
