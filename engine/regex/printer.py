"""Regex text: what `ExprSet.to_str` prints for an expression, and the escapes other
modules need to write a pattern (a literal, a code point, a class, a repetition)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import charset
from .nodes import AND as _AND
from .nodes import BYTES as _BYTES
from .nodes import CONCAT as _CONCAT
from .nodes import EPS as _EPS
from .nodes import EXCL as _EXCL
from .nodes import FULL as _FULL
from .nodes import NOT as _NOT
from .nodes import NOTHING as _NOTHING
from .nodes import OR as _OR
from .nodes import popcount as _popcount

if TYPE_CHECKING:
    from .exprset import ExprSet


def to_str(self: "ExprSet", expr: int, max_chars: int = 2000) -> str:
    """A readable regex-like rendering (bytes >= 0x80 as \\xNN), cut at max_chars."""
    out: list[str] = []
    budget = [max_chars]

    class _Full(Exception):
        pass

    def emit(s: str) -> None:
        out.append(s)
        budget[0] -= len(s)
        if budget[0] < 0:
            raise _Full

    def lit_run(a: tuple) -> bool:
        inner, lo, hi = a
        m = self._args[inner][0] if self._kind[inner] == _BYTES else 0
        return lo == hi and lo <= 3 and m & (m - 1) == 0 and m != 0

    # Precedence: 0 alternation, 1 intersection, 2 concatenation, 3 postfix/prefix, 4 atom.
    def go(e: int, prec: float) -> None:
        k = self._kind[e]
        a = self._args[e]
        if k == _NOTHING:
            emit("∅")
        elif k == _EPS:
            emit("ε" if prec < 4 else "()")
        elif k == _BYTES:
            emit(_render_byte_set(a[0]))
        elif e in self._class_of:
            emit(_render_class(self._class_of[e]))
        elif k == _CONCAT:
            wrap = prec > 2
            emit("(" if wrap else "")
            # 2.5: concatenation items, where a spelled-out run needs no parentheses
            go(a[0], 2.5)
            x = a[1]
            while self._kind[x] == _CONCAT:
                go(self._args[x][0], 2.5)
                x = self._args[x][1]
            go(x, 2.5)
            emit(")" if wrap else "")
        elif k == _OR and a[0] == 1:
            # R|ε, printed as the optional it came from
            wrap = prec > 3
            emit("(" if wrap else "")
            rest = self._repeat_view(e)[0]
            if len(a) == 2:
                go(a[1], 4)
            elif rest in self._class_of:
                emit(_render_class(self._class_of[rest]))
            else:
                emit("(")
                for j, m in enumerate(a[1:]):
                    if j:
                        emit("|")
                    go(m, 1)
                emit(")")
            emit("?")
            emit(")" if wrap else "")
        elif k in (_OR, _AND):
            my = 0 if k == _OR else 1
            wrap = prec > my
            emit("(" if wrap else "")
            for j, m in enumerate(a):
                if j:
                    emit("|" if k == _OR else "&")
                go(m, my + 1)
            emit(")" if wrap else "")
        elif k == _NOT:
            wrap = prec > 3
            emit("(~" if wrap else "~")
            go(a[0], 3)
            emit(")" if wrap else "")
        elif k == _EXCL:
            # The intersection it stands for: R&~(w1|w2|...).
            wrap = prec > 1
            emit("(" if wrap else "")
            go(a[0], 2)
            emit("&~(")
            for j, w in enumerate(a[1]):
                emit(("|" if j else "") + ("".join(_render_byte(c, False) for c in w) if w else "()"))
            emit(")")
            emit(")" if wrap else "")
        elif lit_run(a):
            # short runs of one byte (merged by concat) read better spelled out
            wrap = prec > 2.5
            emit("(" if wrap else "")
            emit(_render_byte_set(self._args[a[0]][0]) * a[1])
            emit(")" if wrap else "")
        else:
            inner, lo, hi = a
            wrap = prec > 3
            emit("(" if wrap else "")
            go(inner, 4)
            if (lo, hi) == (0, None):
                emit("*")
            elif (lo, hi) == (1, None):
                emit("+")
            elif (lo, hi) == (0, 1):
                emit("?")
            elif lo == hi:
                emit(f"{{{lo}}}")
            else:
                emit(f"{{{lo},{'' if hi is None else hi}}}")
            emit(")" if wrap else "")

    try:
        go(expr, 0)
    except _Full:
        return "".join(out)[:max_chars] + "…"
    return "".join(out)


_PRINTABLE_SAFE = set(range(0x20, 0x7F)) - set(b"\\[]^-.|&~()*+?{}$#")


def _render_cp(cp: int) -> str:
    if cp < 0x80:
        return _render_byte(cp, True)
    ch = chr(cp)
    if ch.isprintable() and not ch.isspace():
        return ch
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _render_class(ranges: tuple) -> str:
    """Code point ranges as a class, negated when that is shorter."""
    ranges = charset.normalize(ranges)
    neg = charset.complement(ranges)
    if not neg:
        return "(?s:.)"
    if neg == ((10, 10),):
        return "."
    negate = len(neg) < len(ranges)
    body = "".join(
        _render_cp(lo) if lo == hi else _render_cp(lo) + ("" if hi == lo + 1 else "-") + _render_cp(hi)
        for lo, hi in (neg if negate else ranges)
    )
    return "[" + ("^" if negate else "") + body + "]"


def _render_byte(b: int, in_class: bool) -> str:
    if b in _PRINTABLE_SAFE:
        return chr(b)
    if 0x20 < b < 0x7F and (not in_class or chr(b) in "\\]^-"):
        return "\\" + chr(b)
    if in_class and 0x20 <= b < 0x7F:
        return chr(b)
    return f"\\x{b:02x}"


def _render_byte_set(mask: int) -> str:
    if mask & (mask - 1) == 0:
        return _render_byte(mask.bit_length() - 1, False)
    neg = _popcount(mask) > 128
    m = (_FULL ^ mask) if neg else mask
    parts = []
    b = 0
    while b < 256:
        if (m >> b) & 1:
            e = b
            while e + 1 < 256 and (m >> (e + 1)) & 1:
                e += 1
            if e == b:
                parts.append(_render_byte(b, True))
            elif e == b + 1:
                parts.append(_render_byte(b, True) + _render_byte(e, True))
            else:
                parts.append(_render_byte(b, True) + "-" + _render_byte(e, True))
            b = e + 1
        else:
            b += 1
    return "[" + ("^" if neg else "") + "".join(parts) + "]"


def regex_escape_bytes(data: bytes) -> str:
    """A regex (midword syntax) matching exactly `data`.

    Printable ASCII is escaped when special, control characters become \\xNN.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Not text: the lexer matches `Lexeme.literal` byte for byte; this string only names it.
        return "(?#bytes:" + data.hex() + ")"
    return text.translate(_ESCAPE_TABLE)


# What regex_escape_bytes writes for each ASCII character that is not a word character
# (everything else stands for itself); str.translate applies it without a Python loop.
_ESCAPE_TABLE = {
    o: ("\\" + chr(o) if 0x20 < o < 0x7F else f"\\x{o:02x}")
    for o in range(0x80)
    if not (chr(o).isalnum() or chr(o) == "_")
}


# Writing patterns ----------------------------------------------------------------------


def escape_cp(cp: int, in_class: bool) -> str:
    """One code point in midword regex syntax (also valid Python `re` syntax)."""
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    if cp >= 0x80:
        return chr(cp)
    ch = chr(cp)
    if ch.isalnum() or ch == "_" or ch == " ":
        return ch
    if in_class and ch not in "\\]^-[&~|":
        return ch
    return "\\" + ch


def class_regex(s: tuple) -> str:
    """A regex atom matching exactly the code points of `s` (non-empty)."""
    if len(s) == 1 and s[0][0] == s[0][1]:
        return escape_cp(s[0][0], False)
    comp = charset.complement(s)
    negate = len(comp) < len(s) and comp
    rs = comp if negate else s
    parts = []
    for lo, hi in rs:
        if lo == hi:
            parts.append(escape_cp(lo, True))
        elif hi == lo + 1:
            parts.append(escape_cp(lo, True) + escape_cp(hi, True))
        else:
            parts.append(escape_cp(lo, True) + "-" + escape_cp(hi, True))
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def repeat_suffix(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{'' if hi is None else hi}}}"
