"""A real LSP session with `midword serve` for the stdio tests: the server command on the
fake engine, the handshake, and the client-side calls a test makes (open, type, ask,
read the counters and the fake's call log).

Each test module declares its own `client` fixture with `SERVER`/`ENV` and calls
`watch_status(lsp_client)` in it, so that `start` can wait for the ready status.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
FAKE = "tests.fake_engine:FakeEngine"
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
SERVER = [sys.executable, "-m", "midword.server", "--engine", FAKE]


def watch_status(lsp_client: LanguageClient) -> None:
    """Collect the server's midword/status notifications in `lsp_client.statuses`."""
    lsp_client.statuses = []

    @lsp_client.feature("midword/status")
    def on_status(ls, params):
        ls.statuses.append(plain(params))


def plain(value):
    """Custom notification params as plain Python values."""
    if isinstance(value, dict):
        return value
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    return value


def capabilities(encodings=None, progress=True) -> types.ClientCapabilities:
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
        window=types.WindowClientCapabilities(work_done_progress=progress),
        text_document=types.TextDocumentClientCapabilities(
            completion=types.CompletionClientCapabilities(
                completion_item=types.ClientCompletionItemOptions(snippet_support=False),
            ),
            inline_completion=types.InlineCompletionClientCapabilities(),
        ),
    )


async def start(
    client: LanguageClient, *, model="fake", options=None, encodings=None, root=None, wait_ready=True, progress=True
) -> types.InitializeResult:
    # whole answers: the first-words answers have tests of their own (test_lsp_keystroke.py)
    settings = {"model": model, "prefetch": False, "firstAnswerMs": 60000}
    settings.update(options or {})
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities(encodings, progress),
            initialization_options={"midword": settings},
            root_uri=Path(root).as_uri() if root else None,
        )
    )
    if wait_ready:
        await wait_for(lambda: any(s.get("state") == "ready" for s in client.statuses), "engine ready")
    return result


async def wait_for(predicate, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def open_doc(client: LanguageClient, uri: str, text: str, language: str = "python", version: int = 1):
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)
        )
    )


def insert(client: LanguageClient, uri: str, version: int, line: int, character: int, text: str):
    pos = types.Position(line=line, character=character)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=text)],
        )
    )


async def complete(client: LanguageClient, uri: str, line: int, character: int) -> types.CompletionList:
    return await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character)
        )
    )


async def inline(client: LanguageClient, uri: str, line: int, character: int) -> types.InlineCompletionList:
    return await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
        )
    )


async def stats(client: LanguageClient) -> dict:
    return plain(await client.protocol.send_request_async("midword/stats", {}))


def apply_edit(text: str, edit_range: types.Range, new_text: str, encoding: str = "utf-16") -> str:
    """Apply one edit the way an editor does, converting columns independently of the
    server (by encoding each line)."""
    lines = text.split("\n")

    def offset(pos: types.Position) -> int:
        line = lines[pos.line]
        units = line.encode(encoding.replace("utf-16", "utf-16-le"))
        width = 2 if encoding == "utf-16" else 1
        prefix = units[: pos.character * width].decode(encoding.replace("utf-16", "utf-16-le"))
        return sum(len(line) + 1 for line in lines[: pos.line]) + len(prefix)

    return text[: offset(edit_range.start)] + new_text + text[offset(edit_range.end) :]


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
