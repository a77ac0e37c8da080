"""Faults a document or a client brings, through a real LSP client (pytest-lsp) and the
server with the fake engine (tests/fake_engine.py) (issue 31, items 1, 4, 5, 9, 10, 11):
a `$schema` naming a device or a file outside the workspace, a second `initialized`,
CRLF and CR-only files, settings of Infinity, a lone surrogate, a schema whose
compilation fails, and a model thread that dies."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsp_session import wait_for
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
SERVER = [sys.executable, "-m", "midword.server", "--engine", "fake_engine:FakeEngine"]


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV))
async def client(lsp_client: LanguageClient):
    lsp_client.statuses = []

    @lsp_client.feature("midword/status")
    def on_status(ls, params):
        ls.statuses.append(
            params if isinstance(params, dict) else {k: getattr(params, k) for k in ("state", "message")}
        )

    yield
    await lsp_client.shutdown_session()


async def start(client: LanguageClient, *, model="fake", options=None, root=None, wait_ready=True):
    settings = {"model": model, "prefetch": False}
    settings.update(options or {})
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=False)),
            initialization_options={"midword": settings},
            root_uri=Path(root).as_uri() if root else None,
            workspace_folders=[types.WorkspaceFolder(uri=Path(root).as_uri(), name="ws")] if root else None,
        )
    )
    if wait_ready:
        await wait_for(lambda: any(s.get("state") == "ready" for s in client.statuses), "engine ready")
    return result


def open_doc(client, uri, text, language="python"):
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
        )
    )


async def complete(client, uri, line, character):
    return await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character)
        )
    )


async def stats(client) -> dict:
    value = await client.protocol.send_request_async("midword/stats", {})
    return value if isinstance(value, dict) else value._asdict()


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.asyncio
async def test_schema_device_and_outside_file(client: LanguageClient, tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "x.json").write_text('{"enum": ["SECRET"]}')
    log = tmp_path / "calls.jsonl"
    await start(client, model=f"fake?log={log}", root=ws)
    for n, ref in enumerate(["/dev/zero", "../outside/x.json", "/proc/self/fd/0"]):
        uri = (ws / f"d{n}.json").as_uri()
        text = '{"$schema": "%s", "a": ' % ref
        open_doc(client, uri, text, language="json")
        started = time.monotonic()
        result = await complete(client, uri, 0, len(text))
        assert time.monotonic() - started < 10
        assert all("SECRET" not in item.text_edit.new_text for item in result.items)
        assert read_log(log)[-1]["grammar_kind"] == "lark"  # plain JSON
    await wait_for(lambda: any("/dev/zero" in m.message for m in client.log_messages), "refusal of /dev/zero")
    await wait_for(lambda: any("outside the workspace" in m.message for m in client.log_messages), "outside")
    assert not any("SECRET" in m.message for m in client.log_messages)


@pytest.mark.asyncio
async def test_second_initialized_loads_no_second_model(client: LanguageClient, tmp_path):
    await start(client)
    loads = sum(s.get("state") == "loading" for s in client.statuses)
    client.protocol.notify(types.INITIALIZED, types.InitializedParams())
    await wait_for(lambda: any("second `initialized`" in m.message for m in client.log_messages), "the warning")
    await asyncio.sleep(0.5)
    assert sum(s.get("state") == "loading" for s in client.statuses) == loads


@pytest.mark.asyncio
@pytest.mark.parametrize("eol", ["\r\n", "\r"])
async def test_single_line_completions_in_crlf_and_cr_files(client: LanguageClient, eol):
    await start(client)
    uri = f"file:///w/eol{len(eol)}.py"
    lines = ["total = compute(1)", "other = 2", "result = 3", "tot"]
    open_doc(client, uri, eol.join(lines))
    result = await complete(client, uri, 3, 3)
    text = result.items[0].text_edit.new_text
    assert text == "total = compute(1)" and "\r" not in text and "\n" not in text


@pytest.mark.asyncio
async def test_infinite_settings_are_named_not_fatal(client: LanguageClient):
    # json.dumps writes Infinity, as a JavaScript client's JSON.stringify would not but a hostile one may
    result = await start(
        client, options={"maxTokens": float("inf"), "prefetchDelayMs": float("inf"), "timeBudgetMs": float("-inf")}
    )
    assert result.capabilities.completion_provider is not None
    await wait_for(lambda: sum("Infinity" in m.message for m in client.log_messages) >= 3, "three messages")
    assert any("midword.maxTokens" in m.message for m in client.log_messages)


@pytest.mark.asyncio
async def test_lone_surrogate_before_the_cursor_keeps_completion(client: LanguageClient):
    await start(client)
    uri = "file:///w/s.py"
    open_doc(client, uri, 'x = "\ud800"\nvalue_one = 1\nvalue_')
    result = await complete(client, uri, 2, 6)
    assert result.items and result.items[0].text_edit.new_text.startswith("value_one"), (
        [m.message for m in client.log_messages],
        await stats(client),
    )
    assert (await stats(client))["errors"] == 0


@pytest.mark.asyncio
async def test_schema_compilation_failure_falls_back_to_plain_json(client: LanguageClient, tmp_path):
    log = tmp_path / "calls.jsonl"
    (tmp_path / "deep.json").write_text('{"type": "object"}')
    await start(client, model=f"fake?fail=schema&log={log}", root=tmp_path)
    uri = (tmp_path / "d.json").as_uri()
    text = '{"$schema": "./deep.json", "alpha": 1, "al'
    open_doc(client, uri, text, language="json")
    result = await complete(client, uri, 0, len(text))
    kinds = [c["grammar_kind"] for c in read_log(log)]
    assert kinds == ["json_schema", "lark"], (
        kinds,
        [m.message for m in client.log_messages],
    )  # failed once, then plain JSON
    assert result.items and result.items[0].text_edit.new_text.startswith("alpha")
    await wait_for(
        lambda: any("could not be used" in m.message and "RecursionError" in m.message for m in client.messages),
        "the message",
    )
    await complete(client, uri, 0, len(text))
    assert "json_schema" not in [c["grammar_kind"] for c in read_log(log)][2:]  # not tried again


@pytest.mark.asyncio
async def test_a_crashed_model_thread_is_reported_and_restarted(client: LanguageClient):
    await start(client, model="fake?fail=crash")
    uri = "file:///w/c.py"
    open_doc(client, uri, "CRASH\nvalue_one = 1\nvalue_")
    result = await asyncio.wait_for(complete(client, uri, 2, 6), 20)  # answered, not hung
    assert not result.items
    await wait_for(lambda: any("crashed" in m.message for m in client.messages), "showMessage")
    await wait_for(
        lambda: any(s.get("state") == "error" and "crashed" in s.get("message", "") for s in client.statuses),
        "the error status",
    )
    # restarted: the model is loaded again and completes a document that does not crash it
    await wait_for(lambda: client.statuses[-1].get("state") == "ready", "ready again")
    uri2 = "file:///w/ok.py"
    open_doc(client, uri2, "value_one = 1\nvalue_")
    result = await complete(client, uri2, 1, 6)
    assert result.items and result.items[0].text_edit.new_text.startswith("value_one")
