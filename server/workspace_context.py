"""The context the language server hands the engine: its other open documents and the
regions the user edited last (see completion/context.py for what the engine does with
them).

The server tells `WorkspaceContext` about every change (`note_change`) and asks it for
the chunks of a completion (`chunks`). Edited regions are kept as (document, line)
marks, newest last, and read from the document's current text when asked, so they are
never stale; marks within `EDIT_LINES` of each other are one region.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Iterable

from midword.completion.types import ContextChunk

from .grammar_choice import uri_to_path

MAX_EDITS = 16  # edited regions remembered
EDIT_LINES = 10  # lines shown on each side of an edit
MAX_DOCUMENTS = 32  # open documents offered, most recently edited first
MAX_DOCUMENT_CHARS = 500_000  # larger documents are left out


class WorkspaceContext:
    def __init__(self, clock=time.time):
        self._clock = clock
        self._edits: OrderedDict[tuple[str, int], tuple[int, float]] = OrderedDict()
        self._touched: dict[str, float] = {}

    def note_change(self, uri: str, changes) -> None:
        """Records the lines an LSP `didChange` touched (whole-document changes mark the
        document as edited, without a region)."""
        now = self._clock()
        self._touched[uri] = now
        for change in changes or ():
            rng = getattr(change, "range", None)
            if rng is None:
                continue
            line = rng.start.line + getattr(change, "text", "").count("\n")
            key = (uri, line // EDIT_LINES)
            self._edits.pop(key, None)
            self._edits[key] = (line, now)
        while len(self._edits) > MAX_EDITS:
            self._edits.popitem(last=False)

    def path_of(self, uri: str, root: str | None = None) -> str:
        """The document's path as the prompt names it (relative to the workspace root)."""
        return _relative(uri, root)

    def forget(self, uri: str) -> None:
        self._touched.pop(uri, None)
        for key in [k for k in self._edits if k[0] == uri]:
            del self._edits[key]

    def chunks(
        self, documents: Iterable[tuple[str, str]], current: str, root: str | None = None
    ) -> tuple[ContextChunk, ...]:
        """Chunks for a completion in `current`, from the open `documents` ((uri, text) pairs)."""
        texts = dict(documents)
        out = []
        others = [u for u in texts if u != current and len(texts[u]) <= MAX_DOCUMENT_CHARS]
        others.sort(key=lambda u: -self._touched.get(u, float("-inf")))
        for uri in others[:MAX_DOCUMENTS]:
            out.append(
                ContextChunk(texts[uri], path=_relative(uri, root), time=self._touched.get(uri), kind="document")
            )
        for (uri, _), (line, when) in self._edits.items():
            text = texts.get(uri)
            # The current document is in the prompt already; its own edit regions would
            # repeat the lines at the cursor, half-typed word and line end included, and
            # the model copies that stop instead of completing the word.
            if text is None or uri == current:
                continue
            lines = text.split("\n")
            lo, hi = max(0, line - EDIT_LINES), min(len(lines), line + EDIT_LINES + 1)
            region = "\n".join(lines[lo:hi])
            if region.strip():
                out.append(ContextChunk(region + "\n", path=_relative(uri, root), time=when, kind="edit"))
        return tuple(out)


def _relative(uri: str, root: str | None) -> str:
    path = uri_to_path(uri) or uri
    if root:
        try:
            rel = os.path.relpath(path, root)
        except ValueError:
            return path
        if not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return path
