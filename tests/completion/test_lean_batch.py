"""Decode steps of several sequences in one forward (completion/lean_batch.py).

On tiny random int8 Gemma 3 models (a 4-token sliding window that the prompts cross,
grouped-query attention): a batched step's rows equal the steps of each sequence alone
(compiled and plain-Python twin), and completions running at once through the engine,
their steps batched, give exactly the text each gives alone; cancelling one leaves the
other's text as it was. A slow test does the batched step on the real default model.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from byte_tokenizer import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_lean_gemma3 import PROMPT, pair  # noqa: E402

from midword.completion import lean_batch  # noqa: E402
from midword.completion.engine import CompletionEngine  # noqa: E402
from midword.completion.types import CompletionRequest  # noqa: E402

TOL = 1e-4
TEXTS = (
    PROMPT,
    "import os\nprint(os.getcwd())",
    "x = [i * i for i in range(10)]\ny = sum(x)",
)
DOCS = (
    "# file a\ndef fibonacci(n):\n    if n <= 1:\n        return n\n    return fib",
    "# file b\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y",
)


@pytest.fixture(scope="module")
def byte_tok():
    return byte_tokenizer()


def _states(lean, seqs):
    out = []
    for s in seqs:
        lean.reset()
        lean.prefill(s[:-1])
        out.append(lean.swap_state(None))
    return out


def _head(lean, rows):
    return lean._head(rows, None)


@pytest.mark.parametrize("python", [True, False])
@pytest.mark.parametrize("kwargs", [{}, {"heads": 2, "kv_heads": 1}])
def test_batched_step_equals_single_steps(byte_tok, python, kwargs):
    _, _, lean = pair(byte_tok, int8=True, seed=3, **kwargs)
    assert lean_batch.supports(lean)
    seqs = [lean.encode_prompt(t) for t in TEXTS]
    assert len({len(s) for s in seqs}) == len(seqs)  # each sequence at its own position
    states = _states(lean, seqs)
    rows = lean_batch.step_states(lean, states, [s[-1] for s in seqs], python=python)
    got = _head(lean, rows)
    for r, s in enumerate(seqs):
        lean.reset()
        np.testing.assert_allclose(got[r], lean.next_logits(s), atol=TOL)
        # The state now holds the whole sequence: its next step goes on from there.
        assert states[r].tokens.tolist() == s and states[r].fields["_cache"].filled == len(s)
        assert states[r].fields["_hidden"].shape[0] == len(s)
    # A second batched step over the grown states still equals steps alone.
    more = [s + [s[-1]] for s in seqs]
    got = _head(lean, lean_batch.step_states(lean, states, [s[-1] for s in more], python=python))
    for r, s in enumerate(more):
        lean.reset()
        np.testing.assert_allclose(got[r], lean.next_logits(s), atol=TOL)


def test_a_state_whose_cache_does_not_match_is_refused(byte_tok):
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    (state,) = _states(lean, [lean.encode_prompt(TEXTS[1])])
    state.fields["_cache"].filled -= 1
    with pytest.raises(ValueError, match="caches"):
        lean_batch.step_states(lean, [state], [5], python=True)
    with pytest.raises(ValueError, match="states for"):
        lean_batch.step_states(lean, [state], [5, 6], python=True)


def test_a_batch_gives_each_step_its_own_head(byte_tok):
    """Steps handed in together come back as logits: the full head for those that want the
    whole vocabulary (one product for all of them), the rows of their ids for the others,
    each what its sequence alone gives."""
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    seqs = [lean.encode_prompt(t) for t in TEXTS]
    states = _states(lean, seqs)
    wanted = [None, np.array([7, 3, 120, 64], dtype=np.int64), None]
    baton = threading.Lock()
    batcher = lean_batch.StepBatcher(lean, baton, window_s=30.0)  # the batch waits for all three
    for _ in seqs:
        batcher.enter()
    got: list = [None] * len(seqs)

    def run(r: int) -> None:
        with baton:
            got[r] = batcher.step(states[r], seqs[r][-1], wanted[r])

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(seqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert batcher.stats.batches == 1 and batcher.stats.largest == 3
    for r, s in enumerate(seqs):
        lean.reset()
        alone = lean.next_logits(s)
        expect = alone if wanted[r] is None else alone[wanted[r]]
        assert got[r].shape == expect.shape
        np.testing.assert_allclose(got[r], expect, atol=TOL)
        assert states[r].tokens.tolist() == s


def test_a_step_already_run_takes_only_its_head_in_the_batch(byte_tok):
    """A job whose next position is cached (a draft, an earlier answer) hands in a head
    only: its logits are those of the cached row, and its state does not grow."""
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    seqs = [lean.encode_prompt(t) for t in TEXTS[:2]]
    states = _states(lean, [s + [s[-1]] for s in seqs])  # each holds its sequence and one more
    baton = threading.Lock()
    batcher = lean_batch.StepBatcher(lean, baton, window_s=30.0)
    batcher.enter()
    batcher.enter()
    got: list = [None, None]

    def run(r: int) -> None:
        with baton:
            if r == 0:  # a head after the first len(seq) tokens it holds
                got[r] = batcher.step(states[r], None, None, cached=len(seqs[r]))
            else:  # a step
                got[r] = batcher.step(states[r], seqs[r][-1])

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert batcher.stats.batches == 1 and batcher.stats.largest == 2
    lean.reset()
    np.testing.assert_allclose(got[0], lean.next_logits(seqs[0]), atol=TOL)
    assert states[0].tokens.tolist() == seqs[0]  # unchanged: nothing ran
    lean.reset()
    np.testing.assert_allclose(got[1], lean.next_logits(seqs[1] + [seqs[1][-1]]), atol=TOL)
    with pytest.raises(ValueError, match="a head after"):
        batcher.step(states[0], None, None, cached=len(seqs[0]) + 5)


def test_a_batch_of_several_steps_runs_on_the_batch_threads(byte_tok, monkeypatch):
    """A batch of several jobs' steps takes every core (its jobs wait for it, nothing else
    of theirs runs meanwhile); a batch of one keeps the model's own thread count."""
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    seen: list[int | None] = []
    real = lean_batch.step_states

    def recording(model, states, tokens, *, python=False, threads=None):
        seen.append(threads)
        return real(model, states, tokens, python=python, threads=threads)

    monkeypatch.setattr(lean_batch, "step_states", recording)
    seqs = [lean.encode_prompt(t) for t in TEXTS[:2]]
    for jobs in (2, 1):
        states = _states(lean, seqs[:jobs])
        baton = threading.Lock()
        batcher = lean_batch.StepBatcher(lean, baton, window_s=30.0, threads=lean.threads + 2)
        for _ in range(jobs):
            batcher.enter()

        def run(r: int, batcher=batcher, states=states, baton=baton) -> None:
            with baton:
                batcher.step(states[r], seqs[r][-1])

        threads = [threading.Thread(target=run, args=(r,)) for r in range(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert batcher.stats.batches == 1
    assert seen == [lean.threads + 2, lean.threads]


def test_batch_threads_follow_the_environment(monkeypatch):
    import os

    from midword.completion.model import batch_threads

    monkeypatch.setenv("MIDWORD_THREADS", "3")
    assert batch_threads() == 3
    monkeypatch.delenv("MIDWORD_THREADS")
    assert batch_threads() == len(os.sched_getaffinity(0))


def _request(doc: str, mode: str) -> CompletionRequest:
    return CompletionRequest(
        prefix=doc, language="python", max_tokens=10, mode=mode, single_line=False, time_budget_s=60
    )


def _alone(lean, mode: str) -> list[str]:
    out = []
    for doc in DOCS:
        engine = CompletionEngine("tiny", model_object=lean, mode=mode)
        engine.batch_steps = False
        lean.reset()
        out.append(engine.complete(_request(doc, mode)).text)
    return out


def _together(engine, mode: str, cancelled=(None, None)) -> list:
    out: list = [None, None]

    def run(i: int) -> None:
        out[i] = engine.complete(_request(DOCS[i], mode), cancelled=cancelled[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    batcher = engine.batcher
    if batcher is None:  # completions take turns: nothing to meet
        for t in threads:
            t.start()
    else:
        # Both jobs queue at the engine's lock before either runs: else, under load, the
        # first could finish alone before the second arrives, and nothing would be batched.
        with engine._lock:
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while batcher._arriving < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
    for t in threads:
        t.join(120)
    return out


@pytest.mark.parametrize("mode", ["naive", "cpc"])
def test_completions_at_once_give_the_text_each_gives_alone(byte_tok, mode):
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    alone = _alone(lean, mode)
    lean.reset()
    engine = CompletionEngine("tiny", model_object=lean, mode=mode)
    batcher = engine.batcher
    assert batcher is not None
    batcher.window_s = 30.0  # a step waits for the other job's: every step is batched
    together = _together(engine, mode)
    assert [c.text for c in together] == alone
    assert batcher.stats.largest == 2 and batcher.stats.batches < batcher.stats.rows
    assert batcher.active == 0
    # Each says where it waited for the other (the bench's per-phase breakdown): whichever
    # step came first waited in the window for the other job's.
    waits = [c.timings.waits for c in together]
    assert all(set(w) == {"lock", "window", "baton", "model"} and min(w.values()) >= 0 for w in waits), waits
    assert sum(w["window"] for w in waits) > 0, waits
    # Each document's slot was parked again: the next request finds its prompt cached.
    again = engine.complete(_request(DOCS[0], mode))
    assert again.text == alone[0] and again.timings.cached_tokens >= again.timings.prompt_tokens - 1


def test_one_completion_alone_does_not_wait_for_the_window(byte_tok):
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    alone = _alone(lean, "naive")
    engine = CompletionEngine("tiny", model_object=lean, mode="naive")
    engine.batcher.window_s = 3600.0  # a wait would hang the test
    lean.reset()  # (else every step of the answer is in the cache already)
    got = engine.complete(_request(DOCS[1], "naive"))
    assert got.text == alone[1], (got.text, alone, got.timings)
    # Alone, its steps are the model's own (a batch of one is slower): no batch ran.
    assert engine.batcher.stats.batches == 0


def test_cancelling_one_completion_leaves_the_other_alone(byte_tok):
    _, _, lean = pair(byte_tok, int8=True, seed=3)
    alone = _alone(lean, "naive")
    lean.reset()
    engine = CompletionEngine("tiny", model_object=lean, mode="naive")
    engine.batcher.window_s = 30.0
    polls = {"n": 0}

    def cancel_soon() -> bool:
        polls["n"] += 1
        return polls["n"] > 3

    first, second = _together(engine, "naive", cancelled=(cancel_soon, None))
    assert first.stop_reason == "cancelled" and len(first.text) < len(alone[0])
    assert second.text == alone[1] and second.stop_reason != "cancelled"
    assert engine.batcher.active == 0


@pytest.mark.slow
def test_batched_step_on_the_real_model_equals_single_steps():
    from midword.completion.model import load_model

    model = load_model("gemma3", dtype="int8")
    assert lean_batch.supports(model)
    source = (
        "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(",
        "import json\n\n\ndef load(path):\n    with open(path) as f:\n        return json.",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.",
        "# a comment line\nprint('hello')\n",
    )
    seqs = [model.encode_prompt(t) for t in source]
    states = _states(model, seqs)
    got = _head(model, lean_batch.step_states(model, states, [s[-1] for s in seqs]))
    for r, s in enumerate(seqs):
        model.reset()
        np.testing.assert_allclose(got[r], model.next_logits(s), atol=TOL)
