"""End-to-end tests of `midword serve` over stdio with a real LSP client (pytest-lsp).

The server runs as a subprocess (`python -m midword.server`) with the deterministic
fake engine of tests/fake_engine.py, configured per test through the model name
(`fake?step_ms=..&load_s=..&fail=..&log=..`); `log` makes the fake write every
request it receives to a file, so tests can check what reached the engine. A slow
variant at the end runs the real engine.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time

import pytest
import pytest_lsp
from lsp_session import (
    ENV,
    FAKE,
    SERVER,
    apply_edit,
    capabilities,
    complete,
    inline,
    insert,
    open_doc,
    read_log,
    start,
    stats,
    wait_for,
    watch_status,
)
from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException, JsonRpcRequestCancelled
from pytest_lsp import ClientServerConfig, LanguageClient


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV))
async def client(lsp_client: LanguageClient):
    watch_status(lsp_client)
    yield
    await lsp_client.shutdown_session()


# -- initialize ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_capabilities(client: LanguageClient):
    result = await start(client)
    caps = result.capabilities
    assert caps.position_encoding == types.PositionEncodingKind.Utf16
    sync = caps.text_document_sync
    assert (
        sync if isinstance(sync, types.TextDocumentSyncKind) else sync.change
    ) == types.TextDocumentSyncKind.Incremental
    assert set(caps.completion_provider.trigger_characters) >= {".", '"', ":"}
    assert caps.inline_completion_provider is not None
    assert result.server_info.name == "midword"


@pytest.mark.asyncio
async def test_utf8_chosen_when_offered(client: LanguageClient):
    result = await start(
        client,
        encodings=[types.PositionEncodingKind.Utf32, types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16],
    )
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf8


@pytest.mark.asyncio
async def test_utf16_when_utf8_not_offered(client: LanguageClient):
    result = await start(client, encodings=[types.PositionEncodingKind.Utf32, types.PositionEncodingKind.Utf16])
    assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf16


# -- completion ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_midword_completion_replaces_the_typed_word(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?log={log}")
    text = "userName = 1\nprint(userNa)\n"
    open_doc(client, "file:///w/a.py", text)
    result = await complete(client, "file:///w/a.py", 1, 12)
    assert result.is_incomplete
    [item] = result.items
    edit = item.text_edit
    assert (edit.range.start.line, edit.range.start.character) == (1, 6)
    assert (edit.range.end.line, edit.range.end.character) == (1, 12)
    assert edit.new_text.startswith("userNa") and item.filter_text.startswith("userNa")
    assert apply_edit(text, edit.range, edit.new_text) == "userName = 1\nprint(userName = 1)\n"
    [call] = read_log(log)
    assert call["prefix"] == "userName = 1\nprint(userNa" and call["suffix"] == ")\n"
    assert call["grammar_kind"] == "auto" and call["language"] == "python" and call["single_line"]
    assert call["mode"] == "cpc"


@pytest.mark.asyncio
async def test_inline_completion_single_then_multi_line(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?log={log}")
    text = "def f(x):\n    return x\n\nresult = f(1)\nres\ndef f(x):\n"
    open_doc(client, "file:///w/b.py", text)
    single = await inline(client, "file:///w/b.py", 4, 3)  # after "res"
    multi = await inline(client, "file:///w/b.py", 5, 9)  # after "def f(x):"
    calls = read_log(log)
    assert [c["single_line"] for c in calls] == [True, False]
    [item] = single.items
    assert item.insert_text == "result = f(1)"
    assert (item.range.start, item.range.end) == (
        types.Position(line=4, character=0),
        types.Position(line=4, character=3),
    )
    [item] = multi.items
    assert item.range.start == item.range.end == types.Position(line=5, character=9)
    assert item.insert_text == "\n    return x\n"


@pytest.mark.asyncio
async def test_trigger_characters_are_per_language(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?log={log}")
    open_doc(client, "file:///w/c.py", 'x = "a"\ny = "')
    params = types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri="file:///w/c.py"),
        position=types.Position(line=1, character=5),
        context=types.CompletionContext(
            trigger_kind=types.CompletionTriggerKind.TriggerCharacter, trigger_character='"'
        ),
    )
    result = await client.text_document_completion_async(params)
    assert result.items == () and result.is_incomplete
    assert read_log(log) == []  # a quote is no trigger in Python: the model was not asked


# -- positions ------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
async def test_positions_with_emoji_and_cjk(client: LanguageClient, tmp_path, encoding):
    log = tmp_path / "calls.jsonl"
    offered = [types.PositionEncodingKind.Utf8] if encoding == "utf-8" else None
    result = await start(client, model=f"fake?log={log}", encodings=offered)
    assert result.capabilities.position_encoding == encoding
    text = 's = "😀中文"; userName = 1\nt = "😀😀中" + userNa\n'
    line1 = 't = "😀😀中" + userNa'

    def units(s: str) -> int:
        return len(s.encode("utf-16-le")) // 2 if encoding == "utf-16" else len(s.encode())

    open_doc(client, "file:///w/e.py", text)
    result = await complete(client, "file:///w/e.py", 1, units(line1))
    [item] = result.items
    assert item.text_edit.range.start.character == units('t = "😀😀中" + ')
    assert item.text_edit.range.end.character == units(line1)
    assert (
        apply_edit(text, item.text_edit.range, item.text_edit.new_text, encoding)
        == 's = "😀中文"; userName = 1\nt = "😀😀中" + userName = 1\n'
    )
    # an incremental edit placed after the emoji lands where the client meant it
    insert(client, "file:///w/e.py", 2, 1, units('t = "😀'), "🎉")
    await complete(client, "file:///w/e.py", 1, units('t = "😀🎉😀中" + userNa'))
    assert read_log(log)[-1]["prefix"] == 's = "😀中文"; userName = 1\nt = "😀🎉😀中" + userNa'


# -- grammars --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_json_schema_reaches_the_engine(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    schema = {"type": "object", "properties": {"port": {"type": "integer"}}}
    (tmp_path / "conf.schema.json").write_text(json.dumps(schema))
    await start(client, model=f"fake?log={log}", root=tmp_path)
    doc = tmp_path / "conf.json"
    open_doc(client, doc.as_uri(), '{"$schema": "./conf.schema.json", "po', language="json")
    await complete(client, doc.as_uri(), 0, 38)
    call = read_log(log)[-1]
    assert call["grammar_kind"] == "json_schema" and json.loads(call["grammar_source"]) == schema

    remote = tmp_path / "remote.json"
    open_doc(client, remote.as_uri(), '{"$schema": "https://example.com/s.json", "a": 1', language="json")
    await complete(client, remote.as_uri(), 0, 48)
    call = read_log(log)[-1]
    assert call["grammar_kind"] == "lark" and "%ignore" in call["grammar_source"]  # plain JSON
    await wait_for(lambda: any("never fetches" in m.message for m in client.log_messages), "remote schema log")

    pkg = tmp_path / "package.json"
    open_doc(client, pkg.as_uri(), '{"name": "x", "ver', language="json")
    await complete(client, pkg.as_uri(), 0, 18)
    call = read_log(log)[-1]
    assert call["grammar_kind"] == "json_schema" and "npm" in json.loads(call["grammar_source"])["title"]


@pytest.mark.asyncio
async def test_grammar_association_from_settings(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    (tmp_path / "ini.lark").write_text("start: LINE*\nLINE: /[a-z]+=[a-z]*\\n/\n")
    await start(client, model=f"fake?log={log}", root=tmp_path, options={"grammars": {"*.ini": "ini.lark"}})
    doc = tmp_path / "x.ini"
    open_doc(client, doc.as_uri(), "a=b\nc", language="ini")
    await complete(client, doc.as_uri(), 1, 1)
    call = read_log(log)[-1]
    assert call["grammar_kind"] == "lark" and "LINE" in call["grammar_source"]


# -- cancellation and stale versions ---------------------------------------------------------


LONG = "identifier_" + "x" * 200


@pytest.mark.asyncio
async def test_cancel_request_answers_request_cancelled(client: LanguageClient):
    await start(client, model="fake?step_ms=20")
    open_doc(client, "file:///w/f.py", f"{LONG} = 1\nprint(identifier_)\n")
    future = client.protocol.send_request(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri="file:///w/f.py"),
            position=types.Position(line=1, character=17),
        ),
        msg_id="to-cancel",
    )
    await wait_for(lambda: client.statuses[-1]["state"] == "busy", "the model working")
    started = time.monotonic()
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="to-cancel"))
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wrap_future(future)
    assert time.monotonic() - started < 1.0
    s = await stats(client)
    assert s["cancelled"] == 1 and s["model_completions"] == 0
    for _ in range(200):  # the engine hands back its (cancelled) run
        if (s := await stats(client))["model_calls"] == 1:
            break
        await asyncio.sleep(0.01)
    assert s["model_calls"] == 1 and s["tokens_generated"] < 20  # it stopped early (48 uncancelled)
    # the worker is free again: the next request is answered
    await wait_for(lambda: any(st["state"] == "ready" for st in client.statuses[-1:]), "worker idle")
    result = await complete(client, "file:///w/f.py", 1, 17)
    assert result.items and result.items[0].text_edit.new_text.startswith("identifier_xxx")


@pytest.mark.asyncio
async def test_edit_during_completion_answers_content_modified(client: LanguageClient):
    await start(client, model="fake?step_ms=20")
    open_doc(client, "file:///w/g.py", f"{LONG} = 1\nprint(identifier_)\n")
    first = asyncio.ensure_future(complete(client, "file:///w/g.py", 1, 17))
    await wait_for(lambda: client.statuses[-1]["state"] == "busy", "the model working")
    insert(client, "file:///w/g.py", 2, 1, 17, "x")
    with pytest.raises(JsonRpcException) as error:
        await first
    assert error.value.code == JsonRpcContentModified.CODE == -32801
    second = await complete(client, "file:///w/g.py", 1, 18)
    assert second.items[0].text_edit.new_text.startswith("identifier_x")
    s = await stats(client)
    assert s["content_modified"] == 1


@pytest.mark.asyncio
async def test_newest_request_wins(client: LanguageClient):
    await start(client, model="fake?step_ms=20")
    open_doc(client, "file:///w/h.py", f"{LONG} = 1\nidentifier_\nprint(identifier_)\n")
    older = asyncio.ensure_future(complete(client, "file:///w/h.py", 1, 11))
    await wait_for(lambda: client.statuses[-1]["state"] == "busy", "the model working")
    newer = await complete(client, "file:///w/h.py", 2, 17)
    assert (await older).items == ()  # superseded at the same version: empty and incomplete
    assert newer.items and newer.items[0].text_edit.range.start.line == 2
    s = await stats(client)
    assert s["superseded"] == 1


@pytest.mark.asyncio
async def test_identical_requests_share_one_model_call(client: LanguageClient):
    await start(client, model="fake?step_ms=50")
    open_doc(client, "file:///w/i.py", "userName = 1\nprint(userNa)\n")
    popup, ghost = await asyncio.gather(
        complete(client, "file:///w/i.py", 1, 12), inline(client, "file:///w/i.py", 1, 12)
    )
    assert popup.items[0].text_edit.new_text == ghost.items[0].insert_text == "userName = 1"
    assert (await stats(client))["model_calls"] == 1


# -- type-through cache and prefetch ---------------------------------------------------------


@pytest.mark.asyncio
async def test_typing_into_a_completion_is_served_from_cache(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?log={log}")
    open_doc(client, "file:///w/j.py", "userName = 1\nprint(userNa)\n")
    first = await complete(client, "file:///w/j.py", 1, 12)
    assert first.items[0].text_edit.new_text == "userName = 1"
    insert(client, "file:///w/j.py", 2, 1, 12, "m")  # the user types the next character of it
    second = await complete(client, "file:///w/j.py", 1, 13)
    [item] = second.items
    assert item.text_edit.new_text == "userName = 1" and item.text_edit.range.start.character == 6
    insert(client, "file:///w/j.py", 3, 1, 13, "e ")  # past the word: the rest is still shown
    third = await inline(client, "file:///w/j.py", 1, 15)
    assert third.items[0].insert_text == "= 1" and third.items[0].range.start.character == 15
    s = await stats(client)
    assert s["cache_hits"] == 2 and s["model_calls"] == 1 and len(read_log(log)) == 1
    insert(client, "file:///w/j.py", 4, 1, 15, "!")  # typed something else: the model is asked
    await complete(client, "file:///w/j.py", 1, 16)
    assert len(read_log(log)) == 2


@pytest.mark.asyncio
async def test_a_request_joining_the_edits_job_takes_its_empty_answer(client: LanguageClient, tmp_path):
    # The edit starts a job for the cursor it leaves; the editor's request for that very
    # cursor arrives while it runs and joins it. The model has nothing to say there: that
    # is the answer, not a reason to ask the model a second time.
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?first_ms=300&log={log}")
    open_doc(client, "file:///w/q.py", "userName = 1\nprint(userNa)\n")
    await complete(client, "file:///w/q.py", 1, 12)
    insert(client, "file:///w/q.py", 2, 1, 12, "!")
    answer = await complete(client, "file:///w/q.py", 1, 13)
    assert not answer.items
    calls = read_log(log)
    assert [c["prefix"][-7:] for c in calls] == ["(userNa", "userNa!"]
    s = await stats(client)
    assert s["keystroke_starts"] == 1


@pytest.mark.asyncio
async def test_prefetch_while_idle(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?log={log}", options={"prefetch": True, "prefetchDelayMs": 30})
    text = "a = compute(1)\nb = compute(2)\nc = comp"
    open_doc(client, "file:///w/k.py", text)
    first = await complete(client, "file:///w/k.py", 2, 8)
    assert first.items[0].text_edit.new_text == "compute(1)"

    def prefetched() -> bool:
        # The server stores the prefetched completion before it reports the model idle again.
        seen = [(status.get("state"), status.get("message")) for status in client.statuses]
        return ("busy", "prefetching") in seen and ("ready", "ready") in seen[seen.index(("busy", "prefetching")) :]

    await wait_for(prefetched, "the prefetch to end", timeout=120)
    calls = read_log(log)
    assert len(calls) == 2
    prefetch_call = calls[1]
    assert (
        prefetch_call["prefix"] == "a = compute(1)\nb = compute(2)\nc = compute(1)" and not prefetch_call["single_line"]
    )
    assert (await stats(client))["prefetches"] == 1
    # the user accepts the completion and presses Enter: the next line comes from the prefetch
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri="file:///w/k.py", version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(
                        start=types.Position(line=2, character=4), end=types.Position(line=2, character=8)
                    ),
                    text="compute(1)\n",
                )
            ],
        )
    )
    result = await inline(client, "file:///w/k.py", 3, 0)
    assert result.items[0].insert_text == "b = compute(2)"
    s = await stats(client)
    assert s["prefetch_hits"] == 1
    # The hit itself asked the model nothing. It schedules the next prefetch (after the end of
    # the line it served), which a slow CI may start before the stats request is read.
    later_calls = read_log(log)[2:]
    assert 1 <= s["prefetches"] <= 1 + len(later_calls)
    assert all(call["prefix"].endswith("c = compute(1)\nb = compute(2)") for call in later_calls)


# -- typing on while the model works ---------------------------------------------------------


async def _type_while_running(client: LanguageClient, uri: str, typed: str):
    """The editor's order on a keystroke: cancel the open request, then send the edit."""
    first = client.protocol.send_request(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=1, character=17)
        ),
        msg_id="first",
    )
    await wait_for(lambda: client.statuses[-1]["state"] == "busy", "the model working")
    await asyncio.sleep(0.1)  # a few of the fake's steps: part of the answer exists (none is fine too)
    # Back to back, as an editor sends them: the server must not take the cancel alone
    # (without the edit that explains it) for the user's giving up on the completion.
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="first"))
    insert(client, uri, 2, 1, 17, typed)
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wrap_future(first)
    return await complete(client, uri, 1, 17 + len(typed))


@pytest.mark.asyncio
async def test_typing_what_the_model_predicts_keeps_its_work(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    # the edit must not start a run of its own (test_lsp_keystroke.py tests that): this is the join
    await start(client, model=f"fake?step_ms=20&log={log}", options={"startOnKeystroke": False})
    uri = "file:///w/t.py"
    open_doc(client, uri, f"{LONG} = 1\nprint(identifier_)\n")
    # the fake predicts identifier_xxx...: typing "xx" agrees with it
    result = await _type_while_running(client, uri, "xx")
    # the fake's whole answer, cut at max_tokens (48 steps of 3 characters)
    assert result.items and result.items[0].text_edit.new_text == LONG[: 48 * 3]
    # the edit replaces the typed part of the word, which now ends two characters later
    assert result.items[0].text_edit.range.end.character == 19
    s = await stats(client)
    assert s["joined"] == 1 and s["model_calls"] == 1 and len(read_log(log)) == 1
    assert s["tokens_generated"] == 48  # one run to the end: nothing was stopped or redone


@pytest.mark.asyncio
async def test_typing_something_else_stops_the_running_job(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?step_ms=20&log={log}", options={"startOnKeystroke": False})
    uri = "file:///w/u.py"
    open_doc(client, uri, f"{LONG} = 1\nprint(identifier_)\n")
    result = await _type_while_running(client, uri, "q")
    assert result.items == () or not result.items[0].text_edit.new_text.startswith(LONG)
    for _ in range(200):
        if (s := await stats(client))["model_calls"] == 2:
            break
        await asyncio.sleep(0.01)
    assert s["joined"] == 0 and s["model_calls"] == 2
    # the first run stopped at the divergent keystroke instead of spelling all 204 characters
    assert s["tokens_generated"] < 40
    assert [c["prefix"].rsplit("(", 1)[1] for c in read_log(log)] == ["identifier_", "identifier_q"]


# -- start-up, settings and failures ---------------------------------------------------------


@pytest.mark.asyncio
async def test_requests_while_loading_wait_for_the_model(client: LanguageClient):
    # Editors do not ask again for a position that got an empty answer: a request sent
    # while the model loads is held and answered once it is ready.
    await start(client, model="fake?load_s=3", wait_ready=False)
    open_doc(client, "file:///w/l.py", "userName = 1\nprint(userNa)\n")
    early = asyncio.ensure_future(inline(client, "file:///w/l.py", 1, 12))
    await wait_for(lambda: any(s["state"] == "loading" for s in client.statuses), "loading status")
    await wait_for(lambda: any(r for r in client.progress_reports.values()), "progress begin")
    [reports] = client.progress_reports.values()
    assert isinstance(reports[0], types.WorkDoneProgressBegin)
    assert not early.done()
    result = await asyncio.wait_for(early, 15)
    assert [item.insert_text for item in result.items] == ["userName = 1"]
    assert any(s["state"] == "ready" for s in client.statuses)
    await wait_for(lambda: isinstance(reports[-1], types.WorkDoneProgressEnd), "progress end")
    assert any(isinstance(r, types.WorkDoneProgressReport) for r in reports)


@pytest.mark.asyncio
async def test_requests_held_during_load_can_be_cancelled_or_outdated(client: LanguageClient):
    await start(client, model="fake?load_s=3", wait_ready=False)
    open_doc(client, "file:///w/c.py", "userName = 1\nprint(userNa)\n")
    await wait_for(lambda: any(s["state"] == "loading" for s in client.statuses), "loading status")
    held = client.protocol.send_request(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri="file:///w/c.py"),
            position=types.Position(line=1, character=12),
        ),
        msg_id="held",
    )
    await asyncio.sleep(0.2)
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="held"))
    with pytest.raises(JsonRpcRequestCancelled):
        await asyncio.wrap_future(held)
    assert client.statuses[-1]["state"] == "loading", "the cancel is answered without waiting for the model"
    # Typing while a request waits: its answer would be for text that is gone.
    outdated = asyncio.ensure_future(inline(client, "file:///w/c.py", 1, 12))
    await asyncio.sleep(0.2)
    insert(client, "file:///w/c.py", 2, 1, 12, "m")
    with pytest.raises(JsonRpcException) as error:
        await asyncio.wait_for(outdated, 15)
    assert error.value.code == JsonRpcContentModified.CODE
    result = await inline(client, "file:///w/c.py", 1, 13)
    assert [item.insert_text for item in result.items] == ["userName = 1"]


@pytest.mark.asyncio
async def test_bad_settings_show_a_message_and_keep_serving(client: LanguageClient):
    await start(client, options={"maxTokens": "lots", "mode": "bogus", "nope": 1})
    await wait_for(lambda: len(client.messages) >= 3, "three messages")
    text = "\n".join(m.message for m in client.messages)
    assert "midword.maxTokens must be an integer" in text and '"lots"' in text
    assert "midword.mode must be one of" in text and "midword.nope is not a setting" in text
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(
            settings={"midword": {"model": "fake", "prefetch": False, "temperature": 7, "grammars": ["x"]}}
        )
    )
    await wait_for(lambda: any("temperature" in m.message for m in client.messages), "temperature message")
    await wait_for(lambda: any("grammars must be an object" in m.message for m in client.messages), "grammars message")
    open_doc(client, "file:///w/m.py", "userName = 1\nprint(userNa)\n")
    result = await complete(client, "file:///w/m.py", 1, 12)
    assert result.items[0].text_edit.new_text == "userName = 1"


@pytest.mark.asyncio
async def test_engine_exception_is_logged_and_answered_empty(client: LanguageClient):
    await start(client, model="fake?fail=complete")
    open_doc(client, "file:///w/n.py", "userName = 1\nprint(userNa)\n")
    for _ in range(2):  # the server survives and keeps answering
        result = await complete(client, "file:///w/n.py", 1, 12)
        assert result.items == ()
    errors = [m for m in client.log_messages if m.type == types.MessageType.Error]
    assert len(errors) == 2 and "fake engine failure while completing" in errors[0].message


@pytest.mark.asyncio
async def test_engine_that_fails_to_load(client: LanguageClient):
    await start(client, model="fake?fail=load", wait_ready=False)
    await wait_for(lambda: any(s["state"] == "error" for s in client.statuses), "error status")
    assert any("not available" in m.message and m.type == types.MessageType.Error for m in client.messages)
    open_doc(client, "file:///w/o.py", "userName = 1\nprint(userNa)\n")
    assert (await complete(client, "file:///w/o.py", 1, 12)).items == ()
    # a settings change to a working model recovers
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"midword": {"model": "fake", "prefetch": False}})
    )
    await wait_for(lambda: client.statuses[-1]["state"] == "ready", "ready after model change")
    assert (await complete(client, "file:///w/o.py", 1, 12)).items


@pytest.mark.asyncio
async def test_disabled_answers_empty(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?log={log}", options={"enable": False})
    open_doc(client, "file:///w/p.py", "userName = 1\nprint(userNa)\n")
    assert (await complete(client, "file:///w/p.py", 1, 12)).items == ()
    assert read_log(log) == []


# -- transports and command line -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _frame(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_message(sock_file) -> dict:
    length = None
    while True:
        line = sock_file.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(sock_file.read(length))


def test_tcp_transport():
    port = _free_port()
    # through the `midword` command itself (python -m midword serve)
    proc = subprocess.Popen(
        [sys.executable, "-m", "midword", "serve", "--engine", FAKE, "--tcp", f"127.0.0.1:{port}"],
        env=ENV,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        with sock, sock.makefile("rb") as f:
            sock.sendall(
                _frame(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {"processId": None, "rootUri": None, "capabilities": {}},
                    }
                )
            )
            reply = _read_message(f)
            assert reply["id"] == 1 and reply["result"]["capabilities"]["positionEncoding"] == "utf-16"
            sock.sendall(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
            while _read_message(f).get("id") != 2:
                pass
            sock.sendall(_frame({"jsonrpc": "2.0", "method": "exit"}))
    finally:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_bad_engine_option_is_a_clear_error():
    out = subprocess.run(
        [sys.executable, "-m", "midword.server", "--engine", "no_such_module:X"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2 and "cannot import no_such_module" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "midword.server", "--tcp", "nohost"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2 and "HOST:PORT" in out.stderr


# -- the real engine -------------------------------------------------------------------------

REAL_SERVER = [sys.executable, "-m", "midword.server"]


@pytest_lsp.fixture(config=ClientServerConfig(server_command=REAL_SERVER, server_env=ENV))
async def real_client(lsp_client: LanguageClient):
    watch_status(lsp_client)
    yield
    await lsp_client.shutdown_session()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_real_engine_completes_a_cut_word(real_client: LanguageClient):
    client = real_client
    await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities(),
            # a whole answer, so that asking again finds that very text in the cache
            initialization_options={"midword": {"prefetch": False, "firstAnswerMs": 60000}},
        )
    )
    await wait_for(lambda: any(s.get("state") in ("ready", "error") for s in client.statuses), "engine", timeout=900)
    assert client.statuses[-1]["state"] == "ready", client.statuses[-1]
    text = (
        "class Account:\n    def __init__(self, userName):\n        self.userName = userName\n\n"
        "    def greet(self):\n        return 'Hello, ' + self.userNa\n"
    )
    open_doc(client, "file:///w/account.py", text)
    result = await complete(client, "file:///w/account.py", 5, 38)
    [item] = result.items
    assert item.text_edit.range.start == types.Position(line=5, character=32)
    assert item.text_edit.new_text.startswith("userName"), item.text_edit.new_text
    assert "\n" not in item.text_edit.new_text
    # the same request again while nothing changed is answered without the model
    again = await complete(client, "file:///w/account.py", 5, 38)
    assert again.items[0].text_edit.new_text == item.text_edit.new_text
    assert (await stats(client))["cache_hits"] == 1
