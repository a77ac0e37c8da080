"""Position encodings (server/positions.py) and document edits (server/documents.py).

Columns are checked against an independent count: encoding the line's text with
Python's codecs. Documents are checked by applying random edits through pygls's
workspace and through plain string slicing.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types

from midword.server.documents import DocumentWorkspace
from midword.server.positions import (
    UTF8,
    UTF16,
    UTF32,
    LineIndex,
    choose_encoding,
    code_units,
    index_of_column,
    lsp_lines,
)

# Characters of 1, 2, 3 and 4 UTF-8 bytes, astral ones (2 UTF-16 units), line breaks of
# all three kinds, and the characters str.splitlines breaks at but LSP does not.
ALPHABET = st.sampled_from(list("ab_ é中文😀🎉𝕏") + ["\n", "\r\n", "\r", "\x0c", "\u2028", "\x85", "\x1c"])
TEXTS = st.lists(ALPHABET, max_size=40).map("".join)


def brute_units(text: str, encoding: str) -> int:
    if encoding == UTF8:
        return len(text.encode("utf-8"))
    if encoding == UTF16:
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def brute_lines(text: str) -> list[str]:
    """Lines by the protocol's rule, written independently of LineIndex."""
    lines, cur, i = [], "", 0
    while i < len(text):
        if text.startswith("\r\n", i):
            lines.append(cur)
            cur, i = "", i + 2
        elif text[i] in "\r\n":
            lines.append(cur)
            cur, i = "", i + 1
        else:
            cur += text[i]
            i += 1
    lines.append(cur)
    return lines


def test_choose_encoding():
    assert choose_encoding(None) == UTF16
    assert choose_encoding([]) == UTF16
    assert choose_encoding(["utf-32", "utf-16"]) == UTF16
    assert choose_encoding(["utf-16", "utf-8"]) == UTF8
    assert choose_encoding([types.PositionEncodingKind.Utf8]) == UTF8


def test_code_units_examples():
    assert code_units("a😀", UTF16) == 3 and code_units("a😀", UTF8) == 5 and code_units("a😀", UTF32) == 2
    assert code_units("中", UTF8) == 3 and code_units("é", UTF8) == 2 and code_units("中", UTF16) == 1
    with pytest.raises(ValueError, match="unknown position encoding 'utf-7'"):
        code_units("a", "utf-7")


def test_column_inside_a_character_rounds_down():
    line = "a😀b"
    assert index_of_column(line, 1, UTF16) == 1
    assert index_of_column(line, 2, UTF16) == 1  # between the two halves of the surrogate pair
    assert index_of_column(line, 3, UTF16) == 2
    assert index_of_column(line, 3, UTF8) == 1  # inside the 4-byte sequence
    assert index_of_column(line, 5, UTF8) == 2
    assert index_of_column(line, 99, UTF8) == 3  # past the end: the end of the line
    assert index_of_column(line, -1, UTF16) == 0


def test_lines_break_only_where_lsp_says():
    text = "a\x0cb\u2028c\x85d\re\r\nf\ng"
    idx = LineIndex(text)
    assert [idx.line_text(i) for i in range(idx.line_count)] == ["a\x0cb\u2028c\x85d", "e", "f", "g"]
    assert lsp_lines(text) == ["a\x0cb\u2028c\x85d\r", "e\r\n", "f\n", "g"]
    assert lsp_lines("x\n") == ["x\n"] and lsp_lines("") == []


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.sampled_from([UTF8, UTF16, UTF32]))
def test_positions_round_trip(text, encoding):
    idx = LineIndex(text)
    lines = brute_lines(text)
    assert idx.line_count == len(lines)
    assert [idx.line_text(i) for i in range(len(lines))] == lines
    starts = [0]
    for m in lines[:-1]:
        nxt = starts[-1] + len(m)
        nxt += 2 if text.startswith("\r\n", nxt) else 1
        starts.append(nxt)
    for line_no, line in enumerate(lines):
        for i in range(len(line) + 1):
            offset = starts[line_no] + i
            column = brute_units(line[:i], encoding)
            assert idx.position(offset, encoding) == (line_no, column)
            assert idx.offset(line_no, column, encoding) == offset
    assert idx.offset(len(lines) + 3, 0, encoding) == len(text)


@settings(max_examples=200, deadline=None)
@given(TEXTS, st.data())
def test_document_incremental_edits_match_string_edits(text, data):
    encoding = data.draw(st.sampled_from([UTF8, UTF16, UTF32]))
    ws = DocumentWorkspace(None, types.TextDocumentSyncKind.Incremental, None, encoding)
    ws.put_text_document(types.TextDocumentItem(uri="file:///t.txt", language_id="plaintext", version=1, text=text))
    expected = text
    for version in range(2, 5):
        idx = LineIndex(expected)
        a = data.draw(st.integers(0, len(expected)))
        b = data.draw(st.integers(a, len(expected)))
        if expected[a - 1 : a + 1] == "\r\n" and a:  # an offset inside an end-of-line is not a position
            a -= 1
        if expected[b - 1 : b + 1] == "\r\n" and b:
            b -= 1
        insert = data.draw(TEXTS)
        (l1, c1), (l2, c2) = idx.position(a, encoding), idx.position(b, encoding)
        change = types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=l1, character=c1), end=types.Position(line=l2, character=c2)),
            text=insert,
        )
        ws.update_text_document(types.VersionedTextDocumentIdentifier(uri="file:///t.txt", version=version), change)
        expected = expected[:a] + insert + expected[b:]
        doc = ws.get_text_document("file:///t.txt")
        assert doc.source == expected and doc.version == version


def test_document_offsets_and_positions_use_the_negotiated_encoding():
    ws = DocumentWorkspace(None, types.TextDocumentSyncKind.Incremental, None, UTF16)
    ws.put_text_document(
        types.TextDocumentItem(uri="file:///t.py", language_id="python", version=1, text="x = '😀'\ny")
    )
    doc = ws.get_text_document("file:///t.py")
    assert doc.offset_of(types.Position(line=0, character=7)) == 6  # after the emoji
    assert doc.position_of(6) == types.Position(line=0, character=7)
    assert doc.position_of(len(doc.source)) == types.Position(line=1, character=1)
