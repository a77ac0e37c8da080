"""Open documents as the protocol sees them, kept in pygls's workspace.

pygls stores each open document and applies incremental edits itself, but it splits
lines with `str.splitlines`, which also breaks at form feeds, NEL and U+2028; a
Python file with a `\\f` or a JavaScript string with a U+2028 would then have every
later edit land on the wrong line. `Document` applies edits with the protocol's own
line breaks and the negotiated position encoding (`server.positions`), keeps its line
index up to date edit by edit, replaces lone surrogates (`scrub`), and
`DocumentWorkspace` makes the workspace create such documents. The workspace stays
the one place where document text and versions live.
"""

from __future__ import annotations

import re
from typing import Sequence

from lsprotocol import types
from pygls.workspace import TextDocument, Workspace

from .positions import UTF16, LineIndex, lsp_lines

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD. A client may send `\\ud800`
    alone in JSON; no encoder takes it, and one in a document would fail every
    completion there. One for one, in every position encoding's units too (a lone
    surrogate and U+FFFD are both one UTF-16 unit, three bytes), so positions stay."""
    if text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


class Document(TextDocument):
    """A pygls text document whose lines and edits follow the protocol exactly."""

    _index: LineIndex | None = None

    @property
    def encoding(self) -> str:
        enc = self.position_codec.encoding
        return str(getattr(enc, "value", enc) or UTF16)

    @property
    def lines(self) -> Sequence[str]:
        return tuple(lsp_lines(self.source))

    @property
    def index(self) -> LineIndex:
        """Line index of the current text (updated by each incremental edit; rebuilt
        when the text was replaced another way)."""
        source = self.source
        if self._index is None or self._index.text is not source:
            self._index = LineIndex(source)
        return self._index

    def offset_of(self, position: types.Position) -> int:
        return self.index.offset(position.line, position.character, self.encoding)

    def position_of(self, offset: int) -> types.Position:
        line, character = self.index.position(offset, self.encoding)
        return types.Position(line=line, character=character)

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        index = self.index
        start = index.offset(change.range.start.line, change.range.start.character, self.encoding)
        end = index.offset(change.range.end.line, change.range.end.character, self.encoding)
        if end < start:  # a reversed range still names the same span
            start, end = end, start
        source = index.text
        inserted = scrub(change.text)
        new = source[:start] + inserted + source[end:]
        self._source = new
        # The edit moves the line starts after it and changes those around it: splice
        # them rather than rescan the whole text on every keystroke.
        self._index = index.edited(new, start, end, len(inserted))

    def _apply_full_change(self, change) -> None:
        self._source = scrub(change.text)


class DocumentWorkspace(Workspace):
    """pygls's workspace, holding `Document`s."""

    def _create_text_document(self, doc_uri, source=None, version=None, language_id=None):
        return Document(
            doc_uri,
            source=None if source is None else scrub(source),
            version=version,
            language_id=language_id,
            sync_kind=self._sync_kind,
            position_codec=self.position_codec,
        )
