"""Multi-line completions: when to complete a block, and where a block ends.

Inside a line the user wants the rest of that line; after a block opener (`def f(x):`,
`if (a) {`) or on an empty line they want the block that belongs there. A block ends
at the first line indented less than the block (its first line sets the indentation:
for an opener, a body line must be indented deeper than the opener's line), or after
`MAX_LINES` lines, or at the token cap; a cut-off last line is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINES = 16
# A line break as editors read them: CRLF, a lone CR (classic Mac files) or LF.
LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_LINE_BREAK_STR = re.compile(r"\r\n|\r|\n")
BLOCK_OPENERS = (":", "{", "(", "[", "=>", "->", " do", " then")
_CLOSERS = " \t)]}"


@dataclass(frozen=True)
class Block:
    """Where a block completion starts: the cursor line's text before the cursor, and the
    least indentation a body line may have (lines less indented end the block)."""

    line_before: str
    min_indent: int
    max_lines: int = MAX_LINES


def indent(line: str | bytes) -> int:
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip(" "))


def plan(prefix: str, suffix: str, multiline: str, single_line: bool) -> tuple[bool, Block | None]:
    """(single_line, block) for a request's `multiline` setting (see types.py)."""
    if multiline == "never":
        return single_line, None
    line_before = prefix[max(prefix.rfind("\n"), prefix.rfind("\r")) + 1 :]
    rest = first_line(suffix)
    opener = line_before.rstrip().endswith(BLOCK_OPENERS) and not rest.strip(_CLOSERS)
    empty = not line_before.strip() and not rest.strip()
    if multiline == "auto" and not (opener or empty):
        return True, None
    if opener:
        return False, Block(line_before, indent(line_before) + 1)
    if empty:
        return False, Block(line_before, 0)
    return False, Block(line_before, indent(line_before))


def first_line(text: str) -> str:
    """`text` up to its first line break (CRLF, CR or LF)."""
    m = _LINE_BREAK_STR.search(text)
    return text if m is None else text[: m.start()]


def block_end(text: bytes, block: Block) -> int:
    """The byte offset where the block ends in the generated `text` (the line break
    before the first line that leaves it, or where `max_lines` are full), or -1."""
    before = block.line_before.encode("utf-8")
    at_line_start = not before.strip()
    level = None
    start, prev_break = 0, 0  # where line k starts; where the break before it starts
    breaks = list(LINE_BREAK.finditer(text))
    for k in range(len(breaks) + 1):
        if k >= block.max_lines:
            return prev_break
        end = breaks[k].start() if k < len(breaks) else len(text)
        line = text[start:end]
        full = before + line if k == 0 else line
        if full.strip() and (k > 0 or at_line_start):
            ind = indent(full)
            if ind < block.min_indent or (level is not None and ind < level):
                return prev_break
            if level is None:
                level = ind
        if k < len(breaks):
            prev_break, start = breaks[k].start(), breaks[k].end()
    return -1


def trim_block(text: bytes, block: Block, cut_off: bool) -> bytes:
    """The block's text: up to its end, without trailing blank lines, and without a last
    line the token cap or the time budget cut off (`cut_off`) when there are others."""
    end = block_end(text, block)
    if end >= 0:
        text = text[:end]
    elif cut_off:
        breaks = list(LINE_BREAK.finditer(text.rstrip()))
        if breaks:
            text = text[: breaks[-1].start()]
    return text.rstrip(b" \t\r\n") if LINE_BREAK.search(text) else text
