"""The one regex parser, with two dialects.

"python" is midword's own syntax (Lark terminals, `Grammar.from_regex`): Python `re`
syntax without backreferences, lookaround, conditionals or anchors, plus `&` and `~`
in extended mode. "ecma" is ECMA-262 as JSON Schema's `pattern` and `format` use it:
unanchored, with `^`, `$` and lookaheads, ECMA's escapes and classes.

The parser builds through a builder with ExprSet's constructors (`ExprSet` itself for
expressions over bytes; the JSON Schema front end passes one that keeps the anchors and
lookaheads it places itself)."""

from __future__ import annotations

import re as _re
import unicodedata

from ..limits import GrammarError
from . import charset
from .charset import MAX_CODE_POINT as _MAX_CODE_POINT
from .charset import SURROGATES as _SURROGATES
from .charset import CharSet
from .nodes import MAX_NESTING, MAX_REPEAT_COUNT

# What an escape or a class member reads: a code point, or a set (ranges, negated).
_Item = int | tuple[CharSet, bool]

# The largest ECMA repetition count taken; a bigger one is refused as too large.
ECMA_MAX_REPEAT = 100_000

_F_I, _F_S, _F_X = 1, 2, 4
_FLAG_BITS = {"i": _F_I, "s": _F_S, "x": _F_X, "m": 0, "u": 0, "a": 0}
_CLASS_ESCAPES = {
    "d": (charset.DIGIT, False),
    "D": (charset.DIGIT, True),
    "w": (charset.WORD, False),
    "W": (charset.WORD, True),
    "s": (charset.PY_SPACE, False),
    "S": (charset.PY_SPACE, True),
}
_ECMA_CLASS_ESCAPES = {
    "d": charset.DIGIT,
    "D": charset.complement(charset.DIGIT),
    "w": charset.WORD,
    "W": charset.complement(charset.WORD),
    "s": charset.ECMA_SPACE,
    "S": charset.complement(charset.ECMA_SPACE),
}
_ECMA_CHAR_ESCAPES = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
_CHAR_ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
_ANCHOR_ESCAPES = {"A": "anchor \\A", "Z": "anchor \\Z", "b": "word boundary \\b", "B": "word boundary \\B"}

_QUANT_BRACE = _re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_ECMA_QUANT_BRACE = _re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}")
_ECMA_HEX2 = _re.compile(r"[0-9A-Fa-f]{2}")
_ECMA_HEX4 = _re.compile(r"[0-9A-Fa-f]{4}")
_ECMA_BRACED_HEX = _re.compile(r"\{([0-9A-Fa-f]{1,6})\}")
_ECMA_LOW_SURROGATE = _re.compile(r"\\u([dD][c-fC-F][0-9A-Fa-f]{2})")
_GLOBAL_FLAGS = _re.compile(r"\(\?([a-zA-Z]+)\)")
_SCOPED_FLAGS = _re.compile(r"([a-zA-Z]*)(?:-([a-zA-Z]*))?(:|\))")
_NAMED_CHAR = _re.compile(r"\{([^}]*)\}")
_HEX = set("0123456789abcdefABCDEF")
_OCT = set("01234567")
_VERBOSE_SPACE = set(" \t\n\r\f\v")
# What a scan for matching parentheses must step over: escapes, classes (a ']' first in a
# class is a member), and runs of anything else.
_GROUP_TOKENS = _re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|[()]|[^\\\[()]+", _re.S)
_SCOPED_X = _re.compile(r"\(\?[a-zA-Z]*-?[a-zA-Z]*x")


def _scan_groups(pattern: str) -> dict[int, int]:
    """Offset of each '(' -> offset just past its ')', by a scan that knows escapes and
    classes but not the grammar; {} when the scan gets lost (the parser then decides)."""
    ends: dict[int, int] = {}
    opened: list[int] = []
    pos = 0
    for m in _GROUP_TOKENS.finditer(pattern):
        if m.start() != pos:
            return {}
        pos = m.end()
        c = m.group()
        if c == "(":
            opened.append(m.start())
        elif c == ")":
            if not opened:
                return {}
            ends[opened.pop()] = pos
    return ends if pos == len(pattern) else {}


# A run of printable ASCII characters that are literal in every mode we take the fast
# path in (no `i` or `x` flag): parsed as one literal instead of one piece each.
_PLAIN_RUN = _re.compile(r"[!\"%',\-/0-9:;<=>@A-Z_`a-z]{2,}")
# A group's whole body as plain words between bars, up to its ')': an object's key list.
_PLAIN_ALTERNATION = _re.compile(r"[!\"%',\-/0-9:;<=>@A-Z_`a-z]+(?:\|[!\"%',\-/0-9:;<=>@A-Z_`a-z]+)*\)")


class _Parser:
    """Recursive descent over the pattern, building through `es` directly.

    alt := inter ('|' inter)* ;  inter := seq ('&' seq)* (extended only) ;
    seq := piece* ;  piece := '~' piece (extended only) | anchor | lookahead | atom quantifier?
    (anchors and lookaheads in the "ecma" dialect only).

    `es` is an ExprSet, or for "ecma" any builder with the same constructors (`alt`,
    `concat`, `literal`, `char_class`, `repeat`) plus `anchor(kind)` and
    `look(negative, node)`; only an ExprSet shares group parses between patterns.
    """

    def __init__(
        self, es, pattern: str, flags: str = "", extended: bool = False, *, dialect: str = "python", where: str = ""
    ):
        if not isinstance(pattern, str):
            raise TypeError(f"regex pattern must be str, got {type(pattern).__name__}")
        if dialect not in ("python", "ecma"):
            raise ValueError(f"unknown regex dialect {dialect!r}")
        self.ecma = dialect == "ecma"
        if self.ecma and (flags or extended):
            raise ValueError("the ecma dialect takes no flags and no extended operators")
        self.where = where
        self.es = es
        self.p = pattern
        self.n = len(pattern)
        self.pos = 0
        self.extended = extended
        self.names: set[str] = set()
        self._group_ends: dict[int, int] | None = None
        self.flags = 0
        for c in flags:
            if c not in _FLAG_BITS:
                raise GrammarError(f"unknown regex flag {c!r} in flags {flags!r} (expected letters from 'imsux')")
            self.flags |= _FLAG_BITS[c]

    def error(self, msg: str, pos: int | None = None) -> GrammarError:
        pos = self.pos if pos is None else pos
        shown = self.p if len(self.p) <= 200 else self.p[:200] + "…"
        if self.ecma:
            return GrammarError(f"{msg} at offset {pos} of pattern {shown!r} at {self.where or '#'}")
        return GrammarError(f"{msg} at offset {pos} in regex {shown!r}")

    def parse(self):
        if self.ecma:
            r = self.alt(0, 0)
            if self.pos < self.n:
                raise self.error("unmatched ')'")
            return r
        flags = self.flags
        # Global inline flags `(?i)` are only allowed at the start, as in Python 3.11.
        while self.p.startswith("(?", self.pos):
            m = _GLOBAL_FLAGS.match(self.p, self.pos)
            if not m:
                break
            flags |= self._flag_letters(m.group(1), self.pos + 2)
            self.pos = m.end()
        r = self.alt(flags, 0)
        if self.pos < self.n:
            # Only an unmatched ')' stops the top level early.
            raise self.error("unbalanced parenthesis ')'")
        return r

    def _flag_letters(self, letters: str, at: int) -> int:
        out = 0
        for j, c in enumerate(letters):
            if c == "L":
                raise self.error("locale flag 'L' is not supported", at + j)
            if c not in _FLAG_BITS:
                raise self.error(f"unknown flag {c!r}", at + j)
            out |= _FLAG_BITS[c]
        return out

    # Whitespace, comments ---------------------------------------------------------
    def skip(self, flags: int) -> None:
        p, n = self.p, self.n
        while self.pos < n:
            c = p[self.pos]
            if flags & _F_X and c in _VERBOSE_SPACE:
                self.pos += 1
            elif flags & _F_X and c == "#":
                end = p.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            elif c == "(" and p.startswith("(?#", self.pos) and not self.ecma:
                end = p.find(")", self.pos)
                if end < 0:
                    raise self.error("missing ), unterminated comment", self.pos)
                self.pos = end + 1
            else:
                return

    # Grammar ----------------------------------------------------------------------
    def alt(self, flags: int, depth: int) -> int:
        branches = [self.inter(flags, depth)]
        while self.pos < self.n and self.p[self.pos] == "|":
            self.pos += 1
            branches.append(self.inter(flags, depth))
        return self.es.alt(*branches)

    def inter(self, flags: int, depth: int) -> int:
        first, count = self.seq(flags, depth)
        if not (self.extended and self.pos < self.n and self.p[self.pos] == "&"):
            return first
        if count == 0:
            raise self.error("missing left operand of '&'", self.pos)
        parts = [first]
        while self.pos < self.n and self.p[self.pos] == "&":
            amp = self.pos
            self.pos += 1
            part, count = self.seq(flags, depth)
            if count == 0:
                raise self.error("missing right operand of '&'", amp)
            parts.append(part)
        return self.es.and_(*parts)

    def seq(self, flags: int, depth: int) -> tuple[int, int]:
        items = []
        # Long alternations of names (object keys) are mostly plain text: take each run
        # of it at once. A run's last character stays behind when a quantifier follows.
        plain_runs = not flags & (_F_I | _F_X)
        p = self.p
        while True:
            self.skip(flags)
            if self.pos >= self.n:
                break
            c = p[self.pos]
            if c in "|)" or (c == "&" and self.extended):
                break
            if plain_runs:
                m = _PLAIN_RUN.match(p, self.pos)
                if m is not None:
                    end = m.end()
                    if end < self.n and p[end] in "*+?{":
                        end -= 1
                    if end - self.pos >= 2:
                        items.append(self.es.literal(p[self.pos : end].encode("ascii")))
                        self.pos = end
                        continue
            items.append(self.piece(flags, depth))
        return self.es.concat(*items), len(items)

    def _quantifier(self) -> tuple[int, int | None] | None:
        """Reads a quantifier at pos (advancing past it) or returns None."""
        if self.pos >= self.n:
            return None
        c = self.p[self.pos]
        if c == "*":
            self.pos += 1
            return 0, None
        if c == "+":
            self.pos += 1
            return 1, None
        if c == "?":
            self.pos += 1
            return 0, 1
        if c == "{" and self.ecma:
            m = _ECMA_QUANT_BRACE.match(self.p, self.pos)
            if not m:
                return None  # Annex B: a literal '{'
            lo = int(m.group(1))
            hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
            if hi is not None and hi < lo:
                raise self.error(f"bad repetition {m.group(0)}")
            if lo > ECMA_MAX_REPEAT or (hi is not None and hi > ECMA_MAX_REPEAT):
                raise self.error(f"repetition {m.group(0)} is too large")
            self.pos = m.end()
            return lo, hi
        if c == "{":
            m = _QUANT_BRACE.match(self.p, self.pos)
            if not m or m.group(0) == "{}":
                return None  # a literal '{', as in Python
            lo_s, comma, hi_s = m.groups()
            lo = int(lo_s) if lo_s else 0
            hi = (int(hi_s) if hi_s else None) if comma else lo
            if lo > MAX_REPEAT_COUNT or (hi is not None and hi > MAX_REPEAT_COUNT):
                raise self.error("the repetition number is too large", self.pos)
            if hi is not None and hi < lo:
                raise self.error(f"min repeat greater than max repeat in {m.group(0)}", self.pos)
            self.pos = m.end()
            return lo, hi
        return None

    def _at_quantifier(self) -> bool:
        save = self.pos
        q = self._quantifier()
        self.pos = save
        return q is not None

    def piece(self, flags: int, depth: int) -> int:
        start = self.pos
        c = self.p[self.pos]
        if self.extended and c == "~":
            if depth >= MAX_NESTING:
                raise self.error(f"regex nested more than {MAX_NESTING} levels deep")
            self.pos += 1
            self.skip(flags)
            if self.pos >= self.n or self.p[self.pos] in "|)&":
                raise self.error("'~' needs an operand", start)
            return self.es.not_(self.piece(flags, depth + 1))
        if self.ecma:
            if c in "^$":
                self.pos += 1
                return self.es.anchor("bol" if c == "^" else "eol")
            if self.p.startswith("(?=", start) or self.p.startswith("(?!", start):
                return self.lookahead(depth)
            if self.p.startswith("(?<=", start) or self.p.startswith("(?<!", start):
                raise self.error("lookbehind is not supported")
            if c == "\\" and self.pos + 1 < self.n and self.p[self.pos + 1] in "bB":
                raise self.error(f"word boundary \\{self.p[self.pos + 1]} is not supported")
        if self._at_quantifier():
            raise self.error(f"nothing to repeat before {c!r}")
        atom = self.atom(flags, depth)
        self.skip(flags)
        q = self._quantifier()
        if q is None:
            return atom
        # Lazy and possessive spellings mean the same under whole-string matching
        # (ECMA-262 has only the lazy one).
        if self.pos < self.n and self.p[self.pos] in ("?" if self.ecma else "?+"):
            self.pos += 1
        self.skip(flags)
        if self._at_quantifier():
            raise self.error("nothing to repeat" if self.ecma else "multiple repeat", self.pos)
        return self.es.repeat(atom, q[0], q[1])

    def lookahead(self, depth: int):
        """`(?=X)` or `(?!X)` (ecma): the builder places it; it cannot be quantified."""
        start = self.pos
        if depth >= MAX_NESTING:
            raise self.error(f"groups nested more than {MAX_NESTING} levels deep")
        negative = self.p[self.pos + 2] == "!"
        self.pos += 3
        inner = self.alt(0, depth + 1)
        if self.pos >= self.n or self.p[self.pos] != ")":
            raise self.error("missing ')'", start)
        self.pos += 1
        if self._at_quantifier():
            raise self.error("a quantified lookahead is not supported", start)
        return self.es.look(negative, inner)

    def atom(self, flags: int, depth: int) -> int:
        p = self.p
        c = p[self.pos]
        if c == "(":
            return self.group(flags, depth)
        if c == "[":
            return self.char_class(flags)
        if c == ".":
            self.pos += 1
            if self.ecma:
                return self.es.char_class(charset.ECMA_DOT)
            return self.es.char_class(charset.ALL if flags & _F_S else charset.PY_DOT)
        if c == "\\":
            val = self.escape(in_class=False)
            if isinstance(val, int):
                return self.char(val, flags)
            ranges, neg = val
            return self.es.char_class(ranges, negate=neg)
        if c in "^$":
            raise self.error(f"anchor {c!r} is not supported")
        self.pos += 1
        return self.char(self._check_cp(ord(c), self.pos - 1), flags)

    def _check_cp(self, cp: int, at: int) -> int:
        if _SURROGATES[0] <= cp <= _SURROGATES[1]:
            raise self.error(f"surrogate code point U+{cp:04X} cannot be matched in UTF-8", at)
        if cp > _MAX_CODE_POINT:
            raise self.error(f"code point {cp:#x} is above U+10FFFF", at)
        return cp

    def char(self, cp: int, flags: int) -> int:
        if flags & _F_I:
            folded = charset.case_fold(((cp, cp),))
            if folded != [(cp, cp)]:
                return self.es.char_class(folded)
        return self.es.literal(chr(cp).encode("utf-8"))

    def group(self, flags: int, depth: int) -> int:
        start = self.pos
        key = None if self.ecma else self._group_key(start, flags, depth)
        if key is not None:
            hit = self.es._groups.get(key)
            if hit is not None:
                self.pos = start + len(key[0])
                return hit
        r = self._group(flags, depth)
        # Stored only when the scan found the end the parse found, so a hit is always
        # the parse of exactly that text.
        if (
            key is not None
            and self.pos == start + len(key[0])
            and len(self.es._groups) < self.es.limits.max_regex_nodes
        ):
            self.es._groups[key] = r
        return r

    def _group_key(self, start: int, flags: int, depth: int) -> tuple | None:
        """(group text, flags, extended) for the group at `start`, the key under which
        its parse is shared by every pattern of the process: JSON Schema patterns repeat
        whole groups (the string body beside each object's own key list, format parts).
        None where the parse could depend on more than the text: named groups (their
        names must be unique in the pattern), comments and verbose mode (a '#' hides
        parentheses from the scan), or nesting that could reach MAX_NESTING."""
        ends = self._group_ends
        if ends is None:
            ends = self._group_ends = _scan_groups(self.p) if self._groups_cacheable() else {}
        end = ends.get(start)
        if end is None or flags & _F_X:
            return None
        text = self.p[start:end]
        if depth + text.count("(") + text.count("~") >= MAX_NESTING:
            return None
        return text, flags, self.extended

    def _groups_cacheable(self) -> bool:
        p = self.p
        return "#" not in p and "(?P" not in p and not self.flags & _F_X and _SCOPED_X.search(p) is None

    def _group(self, flags: int, depth: int) -> int:
        p = self.p
        start = self.pos
        if depth >= MAX_NESTING:
            raise self.error(f"groups nested more than {MAX_NESTING} levels deep")
        self.pos += 1
        inner_flags = flags
        if self.ecma and p.startswith("?", self.pos):
            if p.startswith("?:", self.pos):
                self.pos += 2
            elif p.startswith("?<", self.pos):
                end = p.find(">", self.pos)
                if end < 0:
                    raise self.error("unterminated group name", start)
                self.pos = end + 1
            else:
                raise self.error("unknown group syntax", start)
        elif p.startswith("?", self.pos):
            self.pos += 1
            c = p[self.pos] if self.pos < self.n else ""
            if c == ":":
                self.pos += 1
            elif c == "P":
                if p.startswith("P<", self.pos):
                    end = p.find(">", self.pos)
                    if end < 0:
                        raise self.error("missing >, unterminated name", self.pos + 2)
                    name = p[self.pos + 2 : end]
                    if not name.isidentifier():
                        raise self.error(f"bad character in group name {name!r}", self.pos + 2)
                    if name in self.names:
                        raise self.error(f"redefinition of group name {name!r}", self.pos + 2)
                    self.names.add(name)
                    self.pos = end + 1
                elif p.startswith("P=", self.pos):
                    raise self.error("backreferences (?P=name) are not supported", start)
                else:
                    raise self.error("unknown extension ?P", start)
            elif c in ("=", "!"):
                raise self.error(f"lookahead (?{c}...) is not supported", start)
            elif c == "<":
                if p.startswith("<=", self.pos) or p.startswith("<!", self.pos):
                    raise self.error(f"lookbehind (?{p[self.pos : self.pos + 2]}...) is not supported", start)
                raise self.error("unknown extension ?<", start)
            elif c == "(":
                raise self.error("conditional groups (?(...)...) are not supported", start)
            elif c == ">":
                raise self.error("atomic groups (?>...) are not supported", start)
            elif c == "#":
                raise self.error("comment group cannot be quantified", start)
            else:
                m = _SCOPED_FLAGS.match(p, self.pos)
                if not m or (m.group(2) is not None and not m.group(2)) or (not m.group(1) and m.group(2) is None):
                    if c.isascii() and c.isalpha() or c == "-":
                        raise self.error("missing -, : or ) after inline flags", start)
                    raise self.error(f"unknown extension ?{c}" if c else "unexpected end of pattern", start)
                on = self._flag_letters(m.group(1), m.start(1))
                off = self._flag_letters(m.group(2) or "", m.start(2) if m.group(2) else 0)
                if m.group(3) == ")":
                    if m.group(2) is not None:
                        raise self.error("flags can only be turned off in a scoped group (?-x:...)", start)
                    raise self.error("global flags not at the start of the expression", start)
                inner_flags = (flags | on) & ~off
                self.pos = m.end()
        if not inner_flags & (_F_I | _F_X):
            # Every schema with additional properties excludes its listed keys: a list of
            # words, each the literal its seq() would make, taken in one match.
            words = _PLAIN_ALTERNATION.match(p, self.pos)
            if words is not None:
                literal = self.es.literal
                r = self.es.alt(*[literal(w.encode("ascii")) for w in p[self.pos : words.end() - 1].split("|")])
                self.pos = words.end()
                return r
        r = self.alt(inner_flags, depth + 1)
        if self.pos >= self.n or p[self.pos] != ")":
            raise self.error("missing ), unterminated subpattern", start)
        self.pos += 1
        return r

    def escape(self, in_class: bool) -> _Item:
        """Reads `\\...` at pos. Returns a code point or a set (ranges, negated)."""
        if self.ecma:
            return self._ecma_escape(in_class)
        p = self.p
        start = self.pos
        self.pos += 1
        if self.pos >= self.n:
            raise self.error("bad escape (end of pattern)", start)
        c = p[self.pos]
        self.pos += 1
        if c in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[c]
        if c in _CHAR_ESCAPES:
            return _CHAR_ESCAPES[c]
        if c == "b" and in_class:
            return 8
        if c in _ANCHOR_ESCAPES and not in_class:
            raise self.error(f"{_ANCHOR_ESCAPES[c]} is not supported", start)
        if c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            digits = p[self.pos : self.pos + width]
            if len(digits) != width or not set(digits) <= _HEX:
                raise self.error(f"incomplete escape \\{c}{digits}", start)
            self.pos += width
            return self._check_cp(int(digits, 16), start)
        if c == "N":
            m = _NAMED_CHAR.match(p, self.pos)
            if not m:
                raise self.error("missing {...} after \\N", start)
            try:
                cp = ord(unicodedata.lookup(m.group(1)))
            except KeyError:
                raise self.error(f"undefined character name {m.group(1)!r}", start) from None
            self.pos = m.end()
            return self._check_cp(cp, start)
        if c == "0":
            digits = c
            while len(digits) < 3 and self.pos < self.n and p[self.pos] in _OCT:
                digits += p[self.pos]
                self.pos += 1
            return int(digits, 8)
        if c.isdigit() and c.isascii():
            if c in _OCT:
                more = p[self.pos : self.pos + 2]
                if in_class:
                    k = 0
                    while k < 2 and k < len(more) and more[k] in _OCT:
                        k += 1
                    more = more[:k]
                if in_class or (len(more) == 2 and set(more) <= _OCT):
                    value = int(c + more, 8)
                    if value > 0o377:
                        raise self.error(f"octal escape value \\{c + more} outside of range 0-0o377", start)
                    self.pos += len(more)
                    return value
            if in_class:
                raise self.error(f"bad escape \\{c}", start)
            raise self.error(f"backreference \\{c} is not supported", start)
        if c.isascii() and c.isalpha():
            raise self.error(f"bad escape \\{c}", start)
        return self._check_cp(ord(c), start + 1)

    def _ecma_escape(self, in_class: bool) -> _Item:
        """ECMA-262's escapes (Annex B leniency: an unknown escape is the character)."""
        p = self.p
        start = self.pos
        self.pos += 1
        if self.pos >= self.n:
            raise self.error("pattern ends with '\\'", start)
        c = p[self.pos]
        self.pos += 1
        if c in _ECMA_CLASS_ESCAPES:
            return (_ECMA_CLASS_ESCAPES[c], False)
        if c in _ECMA_CHAR_ESCAPES:
            return _ECMA_CHAR_ESCAPES[c]
        if c == "b" and in_class:
            return 8
        if c == "0" and not (self.pos < self.n and p[self.pos].isdigit()):
            return 0
        if c.isdigit():
            raise self.error("backreferences are not supported", start)
        if c == "k" and self.pos < self.n and p[self.pos] == "<":
            raise self.error("named backreferences are not supported", start)
        if c == "c" and self.pos < self.n and p[self.pos].isascii() and p[self.pos].isalpha():
            self.pos += 1
            return ord(p[self.pos - 1]) % 32
        if c == "x":
            m = _ECMA_HEX2.match(p, self.pos)
            if m:
                self.pos = m.end()
                return int(m.group(0), 16)
            return ord("x")
        if c == "u":
            return self._ecma_unicode_escape(start)
        if c in "pP" and self.pos < self.n and p[self.pos] == "{":
            end = p.find("}", self.pos)
            if end < 0:
                raise self.error("unterminated \\p{...}", start)
            name = p[self.pos + 1 : end]
            self.pos = end + 1
            key = name.split("=", 1)
            if len(key) == 2 and key[0] in ("General_Category", "gc"):
                name = key[1]
            elif len(key) == 2:
                raise self.error(f"unicode property {name!r} is not supported", start)
            s = charset.category_set(name)
            if s is None:
                raise self.error(f"unicode property {name!r} is not supported", start)
            return (s, c == "P")
        return self._check_cp(ord(c), start + 1)

    def _ecma_unicode_escape(self, start: int) -> int:
        """After `\\u`: `{hex}`, four hex digits (a surrogate pair as one code point), or
        a literal `u`."""
        p = self.p
        m = _ECMA_BRACED_HEX.match(p, self.pos)
        if m:
            self.pos = m.end()
            cp = int(m.group(1), 16)
            if cp > _MAX_CODE_POINT:
                raise self.error("code point above U+10FFFF", start)
            return self._check_cp(cp, start)
        m = _ECMA_HEX4.match(p, self.pos)
        if not m:
            return ord("u")
        self.pos = m.end()
        cp = int(m.group(0), 16)
        if 0xD800 <= cp <= 0xDBFF:
            low = _ECMA_LOW_SURROGATE.match(p, self.pos)
            if low:
                self.pos = low.end()
                return 0x10000 + ((cp - 0xD800) << 10) + (int(low.group(1), 16) - 0xDC00)
        if _SURROGATES[0] <= cp <= _SURROGATES[1]:
            raise self.error("a lone surrogate cannot occur in a JSON string's text", start)
        return cp

    def char_class(self, flags: int) -> int:
        p = self.p
        start = self.pos
        self.pos += 1
        negate = False
        if self.pos < self.n and p[self.pos] == "^":
            negate = True
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.pos >= self.n:
                raise self.error("unterminated character set", start)
            c = p[self.pos]
            if c == "]" and not (first and not self.ecma):
                self.pos += 1
                break
            first = False
            item_pos = self.pos
            lo = self._class_item()
            if self.pos + 1 < self.n and p[self.pos] == "-" and p[self.pos + 1] != "]":
                self.pos += 1
                hi = self._class_item()
                if not isinstance(lo, int) or not isinstance(hi, int):
                    if not self.ecma:
                        raise self.error("bad character range (a class escape cannot be a range end)", item_pos)
                    # Annex B: a class escape next to '-' makes the '-' literal.
                    for item in (lo, 0x2D, hi):
                        ranges.extend(self._item_ranges(item))
                    continue
                if hi < lo:
                    raise self.error(f"bad character range {chr(lo)!r}-{chr(hi)!r}", item_pos)
                ranges.append((lo, hi))
            else:
                ranges.extend(self._item_ranges(lo))
        norm = charset.normalize(ranges)
        if flags & _F_I:
            norm = charset.case_fold(norm)
        return self.es.char_class(norm, negate=negate)

    @staticmethod
    def _item_ranges(item: _Item) -> CharSet:
        if isinstance(item, int):
            return ((item, item),)
        set_ranges, neg = item
        return charset.complement(charset.normalize(set_ranges)) if neg else set_ranges

    def _class_item(self) -> _Item:
        c = self.p[self.pos]
        if c == "\\":
            return self.escape(in_class=True)
        self.pos += 1
        return self._check_cp(ord(c), self.pos - 1)
