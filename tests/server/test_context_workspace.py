"""What the language server hands the engine as workspace context (server/workspace_context.py)
and the settings that steer it (`multiline`, `contextTokens`)."""

from __future__ import annotations

from lsprotocol import types

from midword.server.settings import Settings, parse_settings
from midword.server.workspace_context import EDIT_LINES, MAX_EDITS, WorkspaceContext


def _change(line: int, text: str = "x"):
    pos = types.Position(line=line, character=0)
    return types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=text)


def test_open_documents_and_edited_regions_become_chunks():
    clock = iter(range(100, 200))
    ctx = WorkspaceContext(clock=lambda: float(next(clock)))
    util = "".join(f"line {i}\n" for i in range(100))
    docs = [("file:///w/pkg/util.py", util), ("file:///w/pkg/main.py", "import util\n")]
    ctx.note_change("file:///w/pkg/util.py", [_change(50)])
    chunks = ctx.chunks(docs, "file:///w/pkg/main.py", "/w")
    doc = [c for c in chunks if c.kind == "document"]
    assert [(c.path, c.time) for c in doc] == [("pkg/util.py", 100.0)]  # not the document being completed
    (edit,) = [c for c in chunks if c.kind == "edit"]
    assert edit.path == "pkg/util.py" and edit.time == 100.0
    assert edit.text.startswith(f"line {50 - EDIT_LINES}\n") and f"line {50 + EDIT_LINES}\n" in edit.text
    # edits are read from the current text, one region per neighbourhood, newest last
    ctx.note_change("file:///w/pkg/util.py", [_change(51)])
    ctx.note_change("file:///w/pkg/main.py", [_change(0)])
    edits = [c for c in ctx.chunks(docs, "file:///w/other.py", "/w") if c.kind == "edit"]
    assert [(c.path, c.time) for c in edits] == [("pkg/util.py", 101.0), ("pkg/main.py", 102.0)]


def test_the_current_documents_own_edits_are_not_context():
    # Found in VS Code: the region around the cursor, half-typed word and line end
    # included, repeated before the document made the model stop instead of completing.
    ctx = WorkspaceContext()
    text = "def total(n, unit_price):\n    return n * unit_pr"
    ctx.note_change("file:///w/early.py", [_change(1)])
    assert ctx.chunks([("file:///w/early.py", text)], "file:///w/early.py", "/w") == ()
    (edit,) = ctx.chunks([("file:///w/early.py", text)], "file:///w/other.py", "/w")[1:]
    assert edit.kind == "edit" and edit.path == "early.py"


def test_edit_marks_are_bounded_and_forgotten_with_their_document():
    ctx = WorkspaceContext()
    for k in range(3 * MAX_EDITS):
        ctx.note_change("file:///w/a.py", [_change(k * EDIT_LINES * 3)])
    text = "".join(f"{i}\n" for i in range(3 * MAX_EDITS * EDIT_LINES * 3))
    assert len([c for c in ctx.chunks([("file:///w/a.py", text)], "file:///w/b.py") if c.kind == "edit"]) == MAX_EDITS
    ctx.forget("file:///w/a.py")
    assert [c.kind for c in ctx.chunks([("file:///w/a.py", text)], "file:///w/b.py")] == ["document"]


def test_settings_multiline_and_context_tokens():
    s, problems = parse_settings({"multiline": "always", "contextTokens": 0})
    assert (s.multiline, s.context_tokens, problems) == ("always", 0, [])
    assert (Settings().multiline, Settings().context_tokens) == ("auto", 1024)
    s, problems = parse_settings({"multiline": "sometimes", "contextTokens": -1})
    assert (s.multiline, s.context_tokens) == ("auto", 1024)
    assert any("multiline must be one of never, auto, always" in p for p in problems)
    assert any("contextTokens must be from 0 to 8192" in p for p in problems)
