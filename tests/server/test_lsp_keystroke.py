"""The time from a keystroke to a shown completion: stale work stops at the next step,
an edit starts the model before the editor asks, typing what was predicted needs no
model run, and a request gets the first whole words while the model decodes the rest.

The worker tests hold the fake engine at a chosen step (a gate on its `partial`
callback), so what happens at that step does not depend on timing; the LSP tests
run `midword serve` with the fake engine and wait on its call log and counters.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import pytest_lsp
from fake_engine import FakeEngine
from lsp_session import ENV, SERVER, complete, insert, open_doc, read_log, start, stats, wait_for, watch_status
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from midword.completion.types import CompletionRequest
from midword.server.cache import first_words
from midword.server.worker import ModelWorker

LONG = "identifier_" + "x" * 200


# -- the worker: a stale job stops at its next step ----------------------------------------


class GatedEngine(FakeEngine):
    """The fake engine, held before step `at_step` of its first completion until `go`."""

    def __init__(self, at_step: int, **settings):
        super().__init__(**settings)
        self.at_step = at_step
        self.reached = threading.Event()
        self.go = threading.Event()

    def complete(self, request, *, cancelled=None, partial=None):
        steps = 0

        def gated(text: str, replace_start: int) -> None:
            nonlocal steps
            if partial is not None:
                partial(text, replace_start)
            if steps == self.at_step and not self.go.is_set():
                self.reached.set()
                assert self.go.wait(30), "the test never let the engine go on"
            steps += 1

        return super().complete(request, cancelled=cancelled, partial=gated)


def _gated_worker(at_step: int, keep_alive) -> tuple[ModelWorker, GatedEngine]:
    engines: list[GatedEngine] = []
    ready = threading.Event()

    def factory(**settings):
        engines.append(GatedEngine(at_step, **settings))
        return engines[-1]

    worker = ModelWorker(factory, lambda e: e.kind == "ready" and ready.set(), keep_alive=keep_alive)
    worker.load("fake")
    assert ready.wait(30)
    return worker, engines[0]


def _request(prefix: str) -> CompletionRequest:
    return CompletionRequest(prefix=prefix, suffix=")\n", max_tokens=48)


def test_an_edit_stops_a_stale_job_at_its_next_step():
    typed_else = threading.Event()
    # the server's keep_alive: the answer is useful until the user types something it does not predict
    worker, engine = _gated_worker(5, keep_alive=lambda job: not typed_else.is_set())
    try:
        job = worker.submit("file:///a.py", 1, _request(f"{LONG} = 1\nprint(identifier_"))
        assert engine.reached.wait(30)
        typed_else.set()
        worker.cancel_stale("file:///a.py", 2)
        engine.go.set()
        outcome = job.future.result(timeout=30)
        assert outcome.status == "cancelled" and job.reason == "stale"
        assert outcome.completion.timings.tokens_generated == 5  # not one step more
    finally:
        worker.close(timeout=5)


def test_a_newer_keystroke_supersedes_the_running_job_at_its_next_step():
    worker, engine = _gated_worker(3, keep_alive=lambda job: True)
    try:
        old = worker.submit("file:///a.py", 1, _request(f"{LONG} = 1\nprint(identifier_"))
        assert engine.reached.wait(30)
        new = worker.submit("file:///a.py", 2, _request(f"{LONG} = 1\nprint(identifier_q"))
        engine.go.set()
        outcome = old.future.result(timeout=30)
        assert outcome.status == "superseded" and outcome.completion.timings.tokens_generated == 3
        assert new.future.result(timeout=30).status == "done"
        assert [r.prefix[-12:] for r in engine.calls] == ["(identifier_", "identifier_q"]
    finally:
        worker.close(timeout=5)


# -- first words of an answer still decoding -------------------------------------------------


def test_first_words_waits_for_the_end_of_a_word():
    job = CompletionRequest(prefix="x = 1\nprint(userNa", suffix=")\n", single_line=True)
    rs = len(job.prefix) - len("userNa")
    assert first_words(job, None, job) is None
    assert first_words(job, (rs, "userNam"), job) is None  # "userNam" may go on
    got = first_words(job, (rs, "userName = "), job)
    assert got is not None and (got.text, got.replace_start, got.stop_reason) == ("userName =", rs, "partial")
    # a later keystroke that typed what it predicts gets the same words, from its own cursor
    later = CompletionRequest(prefix=job.prefix + "me", suffix=")\n", single_line=True)
    assert first_words(job, (rs, "userName = "), later).text == "userName ="
    # typed something else, or the text after the cursor changed: nothing to show
    assert first_words(job, (rs, "userName = "), CompletionRequest(prefix=job.prefix + "x", suffix=")\n")) is None
    assert first_words(job, (rs, "userName = "), CompletionRequest(prefix=job.prefix, suffix="]\n")) is None
    # a one-line answer whose line break is decoded: the whole line
    assert first_words(job, (rs, "userName\nfoo"), job).text == "userName"
    # the text after the cursor typed again (not trimmed yet while decoding) is never shown
    assert first_words(job, (rs, "userName) + 1"), job).text == "userName"
    assert first_words(job, (rs, "userName(x) + "), job).text == "userName(x) +"  # its own brackets stay
    # a block: its first line only; the engine's block rules decide where the rest ends
    block = CompletionRequest(prefix="def f():\n    return g", suffix="", single_line=False)
    grown = (len(block.prefix) - 1, "go(1)\n\nclass")
    assert first_words(block, grown, block).text == "go(1)"


# -- through a real LSP session ---------------------------------------------------------------


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV))
async def client(lsp_client: LanguageClient):
    watch_status(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def _start(client: LanguageClient, model: str, **options) -> None:
    await start(client, model=model, options=options)


def _data(result: types.CompletionList) -> dict:
    data = result.items[0].data
    return data if isinstance(data, dict) else data._asdict()


@pytest.mark.asyncio
async def test_an_edit_starts_the_model_before_the_editor_asks(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await _start(client, f"fake?log={log}", firstAnswerMs=60000)
    uri = "file:///w/k1.py"
    open_doc(client, uri, "userName = 1\nuserId = 2\nprint(user)\n")
    first = await complete(client, uri, 2, 10)
    assert first.items[0].text_edit.new_text == "userName = 1"
    insert(client, uri, 2, 2, 10, "I")  # not what was shown: the edit itself starts the model
    await wait_for(lambda: len(read_log(log)) == 2, "the model run the edit started", timeout=60)
    assert read_log(log)[1]["prefix"].endswith("print(userI")
    second = await complete(client, uri, 2, 11)
    assert second.items[0].text_edit.new_text == "userId = 2" and _data(second)["source"] == "model"
    s = await stats(client)
    assert s["keystroke_starts"] == 1 and s["model_calls"] == 2 and len(read_log(log)) == 2  # no run of its own


@pytest.mark.asyncio
async def test_typing_what_was_shown_runs_no_model(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await _start(client, f"fake?log={log}", firstAnswerMs=60000)
    uri = "file:///w/k2.py"
    open_doc(client, uri, "userName = 1\nuserId = 2\nprint(user)\n")
    await complete(client, uri, 2, 10)
    insert(client, uri, 2, 2, 10, "N")  # the next character of "userName = 1"
    typed = await complete(client, uri, 2, 11)
    assert typed.items[0].text_edit.new_text == "userName = 1" and _data(typed)["source"] == "cache"
    s = await stats(client)
    assert s["keystroke_starts"] == 0 and s["model_calls"] == 1 and len(read_log(log)) == 1


@pytest.mark.asyncio
async def test_the_first_words_come_before_the_whole_answer(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    # four steps of 200 ms: "use", "rNa", "me ", "= 1"
    await _start(client, f"fake?step_ms=200&log={log}", firstAnswerMs=0)
    uri = "file:///w/k3.py"
    open_doc(client, uri, "userName = 1\nprint(userNa)\n")
    first = await complete(client, uri, 1, 12)
    assert first.items[0].text_edit.new_text == "userName" and _data(first)["partial"] is True
    assert _data(first)["source"] == "model"
    # the job went on to the whole answer, which the next keystroke is served from the cache
    deadline = time.monotonic() + 60
    while (await stats(client))["model_calls"] < 1:
        assert time.monotonic() < deadline, "the model run did not end"
        await asyncio.sleep(0.01)
    insert(client, uri, 2, 1, 12, "m")
    rest = await complete(client, uri, 1, 13)
    assert rest.items[0].text_edit.new_text == "userName = 1" and _data(rest)["source"] == "cache"
    s = await stats(client)
    assert s["first_answers"] == 1 and s["model_calls"] == 1 and len(read_log(log)) == 1
