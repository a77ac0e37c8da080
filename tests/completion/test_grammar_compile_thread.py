"""Grammar compilation off the model thread (completion/grammar_compiler.py): a cache by
text, owners whose leaving cancels a compile, cooperative cancellation and deadlines in
the engine's compile loops, and what a completion does while its grammar compiles."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fim_support import MiddleModel, fim_tokenizer

from midword.completion.engine import CompletionEngine
from midword.completion.grammar_compiler import GrammarCompiler
from midword.completion.types import CompletionRequest, GrammarSpec
from midword.engine import Grammar
from midword.engine.limits import (
    CompileBudget,
    CompileCancelled,
    CompileTimeExceeded,
    GrammarError,
    check_compile_budget,
    compile_budget,
)
from midword.engine.regex import charset


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")


def _spinning_build(started: threading.Event, gate: threading.Event | None = None):
    """A compile that runs until cancelled (or `gate` opens), checking its budget as the
    engine's compile loops do."""

    def build():
        started.set()
        while gate is None or not gate.is_set():
            check_compile_budget()
            time.sleep(0.001)
        return "compiled"

    return build


def test_result_is_none_while_compiling_then_handed_over_once():
    compiler = GrammarCompiler()
    started, gate = threading.Event(), threading.Event()
    try:
        assert compiler.result("k", _spinning_build(started, gate), owner="a", wait_s=0) is None
        assert started.wait(5)
        assert compiler.compiling("k")
        gate.set()
        assert compiler.result("k", _spinning_build(threading.Event()), owner="a", wait_s=30) == "compiled"
        assert compiler.compiled == 1 and not compiler.compiling("k")
    finally:
        compiler.close()


def test_an_unbounded_wait_outlasts_the_poll_interval():
    compiler = GrammarCompiler()

    def slow():
        time.sleep(0.3)  # several polls
        return "compiled"

    try:
        assert compiler.result("k", slow, owner="a", wait_s=float("inf")) == "compiled"
    finally:
        compiler.close()


def test_closing_the_only_owner_cancels_a_running_compile():
    compiler = GrammarCompiler()
    started = threading.Event()
    try:
        assert compiler.result("k", _spinning_build(started), owner="a", wait_s=0) is None
        assert started.wait(5)
        compiler.release("a")
        for _ in range(5000):  # the compile sees the cancel at its next budget check
            if not compiler.compiling("k"):
                break
            time.sleep(0.001)
        assert not compiler.compiling("k") and compiler.cancelled == 1 and compiler.compiled == 0
    finally:
        compiler.close()


def test_a_second_owner_keeps_the_compile_and_a_new_grammar_drops_the_old():
    compiler = GrammarCompiler()
    started, gate = threading.Event(), threading.Event()
    try:
        compiler.result("k", _spinning_build(started, gate), owner="a", wait_s=0)
        compiler.result("k", _spinning_build(started, gate), owner="b", wait_s=0)
        assert started.wait(5)
        compiler.release("a")
        assert compiler.compiling("k") and compiler.cancelled == 0  # b still wants it
        # b's document now asks for another grammar: nobody wants "k" any more, and "k2"
        # (queued behind it on the one compile thread) starts once "k" is cancelled.
        started2 = threading.Event()
        compiler.result("k2", _spinning_build(started2, gate), owner="b", wait_s=0)
        assert started2.wait(5)
        assert compiler.cancelled == 1
        gate.set()
        assert compiler.result("k2", _spinning_build(threading.Event()), owner="b", wait_s=30) == "compiled"
    finally:
        compiler.close()


def test_a_queued_compile_nobody_wants_never_starts():
    compiler = GrammarCompiler()
    started, gate = threading.Event(), threading.Event()
    queued = threading.Event()
    try:
        compiler.result("k", _spinning_build(started, gate), owner="a", wait_s=0)
        assert started.wait(5)
        compiler.result("k2", _spinning_build(queued, gate), owner="b", wait_s=0)
        compiler.release("b")
        gate.set()
        assert compiler.result("k", _spinning_build(threading.Event()), owner="a", wait_s=30) == "compiled"
        assert not queued.is_set() and compiler.cancelled == 1
    finally:
        compiler.close()


# A Unicode category the rest of the suite does not ask for: its table is built by a scan
# of every code point, the slowest single loop a schema can start.
_CATEGORY = "Pf"
SLOW_SCHEMA = {"type": "object", "patternProperties": {"^\\p{" + _CATEGORY + "}+$": {"type": "number"}}}


def test_a_real_schema_compile_is_cancelled_inside_its_loops():
    charset._category_cache.pop(_CATEGORY, None)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CompileCancelled):
        with compile_budget(CompileBudget(None, cancel)):
            Grammar.from_json_schema(SLOW_SCHEMA, lenient=True)
    assert _CATEGORY not in charset._category_cache  # nothing half-built was kept


def test_a_compile_past_its_deadline_is_refused_by_name():
    charset._category_cache.pop(_CATEGORY, None)
    with pytest.raises(CompileTimeExceeded, match="max_compile_seconds") as info:
        with compile_budget(CompileBudget(0.0)):
            Grammar.from_json_schema(SLOW_SCHEMA, lenient=True)
    assert isinstance(info.value, GrammarError)
    # Outside a budget the same schema compiles: the budget is per compile, not sticky.
    assert Grammar.from_json_schema(SLOW_SCHEMA, lenient=True) is not None


def _engine():
    tok = fim_tokenizer("plain")
    return CompletionEngine("middle", model_object=MiddleModel(tok, "1}", min(tok.eos_token_ids), lead_space=False))


def _request(document, grammar, wait_s, prefix='{"a": '):
    return CompletionRequest(
        prefix=prefix,
        language="json",
        mode="naive",
        grammar=grammar,
        max_tokens=8,
        document=document,
        grammar_wait_s=wait_s,
    )


def test_a_completion_does_not_wait_behind_another_documents_compile(monkeypatch):
    """Document A's schema is compiling (held on a gate): A's completion goes unconstrained
    with a note, B (no grammar to compile) completes meanwhile, and once A's compile is
    done A's next completion is constrained."""
    engine = _engine()
    gate, started = threading.Event(), threading.Event()
    real_compile = engine._compile

    def slow_compile(spec, language, request):
        if spec.kind == "json_schema":
            started.set()
            while not gate.is_set():
                check_compile_budget()
                gate.wait(0.001)
        return real_compile(spec, language, request)

    monkeypatch.setattr(engine, "_compile", slow_compile)
    schema = GrammarSpec(kind="json_schema", source=json.dumps({"type": "object", "properties": {"a": {"const": 7}}}))
    try:
        a = engine.complete(_request("file:///a.json", schema, 0.0))
        assert started.is_set()
        assert "still compiling" in a.note and "not constrained" in a.note
        b = engine.complete(_request("file:///b.json", GrammarSpec(kind="none"), 0.0, prefix="x = "))
        assert b.stop_reason and "compiling" not in b.note
        assert engine.compiler.compiling(next(iter(engine.compiler._running)))  # A's still runs
        gate.set()
        a2 = engine.complete(_request("file:///a.json", schema, None))
        assert a2.note == "" and a2.text.startswith("7")  # the schema's const, not the model's "1"
    finally:
        gate.set()
        engine.close()


def test_closing_the_document_cancels_its_compile(monkeypatch):
    engine = _engine()
    started = threading.Event()
    real_compile = engine._compile

    def endless(spec, language, request):
        if spec.kind == "lark":
            started.set()
            while True:
                check_compile_budget()
                time.sleep(0.001)
        return real_compile(spec, language, request)

    monkeypatch.setattr(engine, "_compile", endless)
    try:
        spec = GrammarSpec(kind="lark", source='start: "x"')
        c = engine.complete(_request("file:///a.txt", spec, 0.0, prefix=""))
        assert "still compiling" in c.note and started.wait(5)
        engine.release_document("file:///a.txt")
        for _ in range(5000):
            if engine.compiler.cancelled:
                break
            time.sleep(0.001)
        assert engine.compiler.cancelled == 1 and not engine.compiler._running
    finally:
        engine.close()
