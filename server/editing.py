"""Where a completion lands in the document: the typed word, the line, how many lines.

A `Completion` replaces `prefix[replace_start:]` (the part of the current word the
user already typed) with `text`. The protocol wants that replaced span on the
cursor's line (a completion item's edit must be single-line), so a completion whose
span starts on an earlier line is moved to the line start when its text re-spells
what it would replace, and refused when it does not.

Single- or multi-line: ghost text is one line by default, and several lines right
after a block opener, where the user is about to write a body: the line before the
cursor ends with `:`, `{`, `(`, `[`, `=>` or `->` (or the cursor sits on a blank line
that follows such a line), and nothing but closing brackets follows the cursor on its
line (an editor's auto-closed `{|}` still opens a block; `x = {|"a": 1}` does not).
"""

from __future__ import annotations

import re
from dataclasses import replace

from midword.completion.types import Completion

_WORD_TAIL = re.compile(r"[\w$]*\Z")
_EOL = re.compile(r"\r\n|\r|\n")
BLOCK_OPENERS = (":", "{", "(", "[", "=>", "->")
WORD_SEARCH_CHARS = 256


def word_start(prefix: str) -> int:
    """Start of the word the cursor (at the end of `prefix`) is in, or len(prefix)."""
    # Searched from near the end: the pattern is anchored at the end, but a search of the
    # whole prefix would try every offset of a large document.
    start = max(0, len(prefix) - WORD_SEARCH_CHARS)
    found = _WORD_TAIL.search(prefix, start)
    assert found is not None  # the pattern matches the empty string at the end
    while found.start() == start and start > 0:  # a word longer than the stretch searched
        start = max(0, start - WORD_SEARCH_CHARS)
        found = _WORD_TAIL.search(prefix, start)
        assert found is not None
    return found.start()


def line_start(text: str, offset: int | None = None) -> int:
    """Offset of the start of the line containing `offset` (default: the end of text)."""
    end = len(text) if offset is None else offset
    return max(text.rfind("\n", 0, end), text.rfind("\r", 0, end)) + 1


def wants_multiline(prefix: str, suffix: str = "") -> bool:
    rest = re.split(r"\r\n|\r|\n", suffix, maxsplit=1)[0]
    if rest.strip(" \t)]}"):
        return False
    start = line_start(prefix)
    line = prefix[start:]
    if not line.strip() and start > 0:
        # a blank line: look at the line above (skipping its end-of-line)
        before = prefix[:start].rstrip("\r\n")
        line = before[line_start(before) :]
    return line.rstrip().endswith(BLOCK_OPENERS)


def fit_to_line(completion: Completion, prefix: str, *, single_line: bool = False) -> Completion | None:
    """The completion with its replaced span on the cursor's line, or None if it
    cannot be (its text would not re-spell the earlier lines it replaces). With
    `single_line`, its text is cut at its first line break, whichever of `\n`, `\r\n`
    or `\r` (a CRLF or CR-only file must not get a stray `\r` or a second line)."""
    if single_line:
        cut = _EOL.search(completion.text)
        if cut is not None:
            completion = replace(completion, text=completion.text[: cut.start()])
    rs = max(0, min(completion.replace_start, len(prefix)))
    ls = line_start(prefix)
    if rs >= ls:
        return completion if rs == completion.replace_start else replace(completion, replace_start=rs)
    head = prefix[rs:ls]
    if not completion.text.startswith(head):
        return None
    return replace(completion, text=completion.text[len(head) :], replace_start=ls)


def rebase(target: str, prefix: str) -> Completion | None:
    """A completion that turns `prefix` into `target` (which extends it), replacing
    the typed part of the current word; None when nothing would remain to insert."""
    if len(target) <= len(prefix) or not target.startswith(prefix):
        return None
    rs = word_start(prefix)
    return Completion(text=target[rs:], replace_start=rs, stop_reason="cache")


def first_line(text: str) -> str:
    return re.split(r"\r\n|\r|\n", text, maxsplit=1)[0]
