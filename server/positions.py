"""LSP positions and Python string offsets, converted exactly.

An LSP `Position` is a zero-based line and a column counted in the *code units* of
the encoding the client and server agreed on at `initialize`: UTF-16 (the protocol's
default, so a character outside the Basic Multilingual Plane such as 😀 counts 2),
UTF-8 (bytes: é counts 2, 中 counts 3, 😀 counts 4) or UTF-32 (code points, which
is what Python's `str` indexes). Lines end at `\\n`, `\\r\\n` or `\\r` and nowhere
else; Python's `str.splitlines` also breaks at form feeds, `\\x1c`-`\\x1e`, NEL and
U+2028/U+2029, which would shift every line after one of them.

The protocol leaves two cases to the server: a column past the end of its line
means the end of the line (the spec says so), and a column that falls inside one
character (half a surrogate pair, the middle of a UTF-8 sequence) is taken to mean
the start of that character, so a cursor never splits a character.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from typing import Iterable

UTF8 = "utf-8"
UTF16 = "utf-16"
UTF32 = "utf-32"
ENCODINGS = (UTF8, UTF16, UTF32)

_EOL = re.compile(r"\r\n|\r|\n")


def choose_encoding(offered: Iterable[str] | None) -> str:
    """The position encoding to use: UTF-8 when the client offers it (no conversion
    from the bytes editors store), else UTF-16, which every client must support."""
    if offered and UTF8 in [str(getattr(e, "value", e)) for e in offered]:
        return UTF8
    return UTF16


def _check(encoding: str) -> str:
    encoding = str(getattr(encoding, "value", encoding))
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown position encoding {encoding!r} (expected one of {', '.join(ENCODINGS)})")
    return encoding


def code_units(text: str, encoding: str) -> int:
    """Length of `text` in the code units of `encoding`."""
    encoding = _check(encoding)
    if encoding == UTF32 or text.isascii():
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _unit_width(ch: str, encoding: str) -> int:
    cp = ord(ch)
    if encoding == UTF16:
        return 2 if cp > 0xFFFF else 1
    if encoding == UTF8:
        return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4
    return 1


def index_of_column(line: str, column: int, encoding: str) -> int:
    """Index into `line` (a line without its end-of-line) of an LSP column."""
    encoding = _check(encoding)
    if column <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(column, len(line))
    units = 0
    for i, ch in enumerate(line):
        units += _unit_width(ch, encoding)
        if units > column:  # the column falls inside (or at the start of) this character
            return i
        if units == column:
            return i + 1
    return len(line)


class LineIndex:
    """The line starts of one text, for converting between LSP positions and offsets.

    Build one per text version (construction is one regex scan); each conversion then
    costs a binary search plus the length of one line.
    """

    __slots__ = ("text", "starts")

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        self.starts.extend(m.end() for m in _EOL.finditer(text))

    @classmethod
    def _of(cls, text: str, starts: list[int]) -> "LineIndex":
        index = cls.__new__(cls)
        index.text = text
        index.starts = starts
        return index

    def edited(self, new_text: str, start: int, end: int, inserted: int) -> "LineIndex":
        """The index of `new_text`, which is this text with [start, end) replaced by
        `inserted` characters. Line starts before the edit are kept, those from two
        characters past it are shifted (a line break there depends only on characters
        the edit left alone), and only the few in between are scanned again, so a
        keystroke costs a splice, not a scan of the whole text."""
        starts = self.starts
        head = starts[: bisect_right(starts, start - 1)]
        if not head:
            head = [0]
        stop = start + inserted + 1  # new line starts up to here are scanned
        for m in _EOL.finditer(new_text, max(0, start - 1), min(len(new_text), stop + 1)):
            if start <= m.end() <= stop:
                head.append(m.end())
        delta = inserted - (end - start)
        tail_from = bisect_left(starts, end + 2)
        if tail_from < len(starts):
            head.extend([s + delta for s in starts[tail_from:]] if delta else starts[tail_from:])
        return LineIndex._of(new_text, head)

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_end(self, line: int) -> int:
        """Offset of the end of `line`'s content (before its end-of-line)."""
        if line + 1 < len(self.starts):
            end = self.starts[line + 1]
            text = self.text
            if text[end - 1] == "\n":
                end -= 2 if end >= 2 and text[end - 2] == "\r" else 1
            else:  # a lone "\r"
                end -= 1
            return end
        return len(self.text)

    def line_text(self, line: int) -> str:
        return self.text[self.starts[line] : self.line_end(line)]

    def offset(self, line: int, character: int, encoding: str) -> int:
        """Offset into the text of the position (line, character). A line past the last
        one means the end of the text; a negative line the start."""
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        start = self.starts[line]
        return start + index_of_column(self.text[start : self.line_end(line)], character, encoding)

    def position(self, offset: int, encoding: str) -> tuple[int, int]:
        """The (line, character) of an offset into the text (clamped to the text). An
        offset between the `\\r` and `\\n` of one end-of-line is the end of that line."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        end = min(offset, self.line_end(line))
        return line, code_units(self.text[start:end], encoding)

    def line_of(self, offset: int) -> int:
        return bisect_right(self.starts, max(0, min(offset, len(self.text)))) - 1


def lsp_lines(text: str) -> list[str]:
    """The lines of `text` as the protocol counts them, each with its end-of-line."""
    idx = LineIndex(text)
    starts = idx.starts + [len(text)]
    lines = [text[starts[i] : starts[i + 1]] for i in range(len(idx.starts))]
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()  # a text ending in an end-of-line has no extra (empty) last line to store
    return lines if text else []
