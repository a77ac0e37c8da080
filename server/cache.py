"""Completions already computed, served again while the user types into them.

A completion computed for prefix P leads the document to a *target* text
T = P[:replace_start] + text. As long as the user types characters of that same
completion, the new prefix P' still satisfies `T.startswith(P')` with P' at least
as long as P, and the rest of T is still the model's answer for P': the server can
show it at once, with no model work. The text after the cursor must be unchanged
and the request must ask the same thing (grammar, mode, length). A multi-line entry
also serves a one-line request, cut at the end of the line: with greedy decoding the
first line of a multi-line answer is the one-line answer.

Prefetched completions are entries too: while the user is idle the server completes
several lines at the *end* of the shown completion (P' = T), so that accepting it,
pressing Enter and typing on finds the next completion already here.

Entries live per document, newest first, a few per document; editing anywhere
before the cursor simply stops them matching.

`answer_may_serve` asks the same question of a completion still being computed,
from the text it has produced so far: typing on while the model works does not make
its work worthless as long as the typed characters are the ones it predicts.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, replace

from midword.completion.types import Completion, CompletionRequest

from .editing import first_line, rebase

MAX_ENTRIES_PER_DOCUMENT = 8
MAX_DOCUMENTS = 32


def request_key(request: CompletionRequest) -> tuple:
    """What must agree, besides the text and line mode, for one answer to serve another."""
    return (request.language, request.grammar, request.max_tokens, request.temperature, request.mode, request.seed)


@dataclass(frozen=True)
class Entry:
    anchor_len: int  # len(prefix) when it was computed
    target: str
    suffix: str
    key: tuple
    single_line: bool
    origin: str  # "model", "keystroke" (a job an edit started) or "prefetch"


def answer_may_serve(
    job_request: CompletionRequest, partial: tuple[int, str] | None, prefix: str, suffix: str, *, ahead: bool = False
) -> bool:
    """Can the answer to `job_request`, of which `partial` = (replace_start, text so far)
    has been produced (None: nothing yet), still be served from the cache once the text
    before the cursor is `prefix` and after it `suffix`?

    That needs the same suffix, a prefix at least as long as the job's (the cache
    serves only forward), and typed characters that agree with the predicted text as
    far as both go. With `ahead` (a prefetch, whose prefix is text the user has not
    typed yet) a prefix that is still on the way to the job's is fine too."""
    if suffix != job_request.suffix:
        return False
    start = job_request.prefix
    if not prefix.startswith(start):
        return ahead and start.startswith(prefix)
    if job_request.single_line and ("\n" in prefix[len(start) :] or "\r" in prefix[len(start) :]):
        return False  # typed onto a new line, which a one-line answer cannot reach
    if partial is None:
        return True
    replace_start, text = partial
    if not 0 <= replace_start <= len(start):
        return False
    predicted = start[:replace_start] + text
    n = min(len(predicted), len(prefix))
    return predicted[:n] == prefix[:n]


_WORD_END = re.compile(r"[\w$]*\Z")
_EOL = re.compile(r"\r\n|\r|\n")


def first_words(
    job_request: CompletionRequest, partial: tuple[int, str] | None, request: CompletionRequest
) -> Completion | None:
    """The part of a completion still being decoded that can be shown for `request`
    already: of the text `partial` = (replace_start, text so far) predicts after
    `request`'s prefix, the whole words of its first line (the last word may go on in
    the next token, so it waits), or the whole first line once a line break is decoded,
    and never the text after the cursor typed again (the engine's suffix rule: the
    decoded text is not trimmed yet). Later lines wait for the whole answer, whose end
    the engine's block rules decide. None when that is nothing yet, or the prediction
    does not extend `request` (other text typed, other text after the cursor)."""
    if partial is None or request.suffix != job_request.suffix:
        return None
    replace_start, text = partial
    start = job_request.prefix
    if not 0 <= replace_start <= len(start):
        return None
    predicted = start[:replace_start] + text
    prefix = request.prefix
    if len(predicted) <= len(prefix) or not predicted.startswith(prefix):
        return None
    rest = predicted[len(prefix) :]
    line_end = _EOL.search(rest)
    if line_end is not None:
        rest = rest[: line_end.start()]
    else:
        word = _WORD_END.search(rest)
        assert word is not None  # the pattern matches the empty string at the end
        rest = rest[: word.start()]
    suffix_line = first_line(request.suffix).strip()
    if suffix_line:
        at = _suffix_at(rest, suffix_line)
        if at >= 0:
            rest = rest[:at]
    rest = rest.rstrip(" \t")
    if not rest.strip():
        return None
    completion = rebase(prefix + rest, prefix)
    return None if completion is None else replace(completion, stop_reason="partial")


def _suffix_at(text: str, suffix: str) -> int:
    """Where `text` starts typing `suffix` again outside its own brackets, or -1: the
    rule of `midword.completion.decode` (on text here; brackets are ASCII either way),
    kept apart so the server does not import the decoder's compiled kernels."""
    start = 0
    while (at := text.find(suffix, start)) >= 0:
        depth = 0
        for ch in text[:at]:
            depth += ch in "([{"
            depth -= ch in ")]}"
        if depth <= 0:
            return at
        start = at + 1
    return -1


class CompletionCache:
    def __init__(self, per_document: int = MAX_ENTRIES_PER_DOCUMENT, documents: int = MAX_DOCUMENTS):
        self._per_document = per_document
        self._documents = documents
        self._entries: OrderedDict[str, list[Entry]] = OrderedDict()

    def put(self, uri: str, request: CompletionRequest, completion: Completion, origin: str = "model") -> str | None:
        """Remember a completion; returns its target text, or None when it is not
        cacheable (empty, or its text does not re-spell what it replaces)."""
        prefix = request.prefix
        rs = completion.replace_start
        if not completion.text or not 0 <= rs <= len(prefix):
            return None
        target = prefix[:rs] + completion.text
        if len(target) <= len(prefix) or not target.startswith(prefix):
            return None
        entry = Entry(len(prefix), target, request.suffix, request_key(request), request.single_line, origin)
        entries = self._entries.pop(uri, [])
        entries = [e for e in entries if e != entry]
        entries.insert(0, entry)
        del entries[self._per_document :]
        self._entries[uri] = entries
        while len(self._entries) > self._documents:
            self._entries.popitem(last=False)
        return target

    def get(self, uri: str, request: CompletionRequest) -> tuple[Completion, Entry] | None:
        """A completion for `request` from an earlier answer, or None."""
        entries = self._entries.get(uri)
        if not entries:
            return None
        prefix = request.prefix
        key = request_key(request)
        for entry in entries:
            if entry.single_line and not request.single_line:
                continue
            if (
                len(prefix) >= entry.anchor_len
                and entry.key == key
                and entry.suffix == request.suffix
                and entry.target.startswith(prefix)
            ):
                target = entry.target
                if request.single_line and not entry.single_line:
                    target = prefix + first_line(target[len(prefix) :])
                completion = rebase(target, prefix)
                if completion is not None:
                    self._entries.move_to_end(uri)
                    return completion, entry
        return None

    def forget(self, uri: str | None = None) -> None:
        if uri is None:
            self._entries.clear()
        else:
            self._entries.pop(uri, None)

    def __len__(self) -> int:
        return sum(len(v) for v in self._entries.values())
