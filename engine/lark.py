"""Lark grammar text -> midword's grammar IR (`Grammar`).

Lark (and llguidance's Lark dialect) splits a grammar in two layers, which map
directly onto the lexer/parser split of the engine:

* TERMINALS (`UPPER: ...`) are regular. Each terminal definition becomes ONE lexeme:
  the terminals it references are inlined as `(?:...)` groups, strings are escaped,
  so the derivative lexer sees a single regex per terminal.
* rules (`lower: ...`) are context free. Their EBNF operators (`*`, `+`, `?`, `[ ]`,
  `{m,n}`, `~ m..n`, groups) are desugared into plain BNF with fresh nonterminals by
  the `GrammarBuilder` helpers; strings and regexes written directly in a rule become
  anonymous lexemes.

Supported: `rule:`/`?rule:`/`!rule:`, `TERM:` (with an ignored `.priority`), `"lit"`,
`"lit"i`, `/re/flags` (i s m x u), `"a".."z"`, `|`, `( )`, `[ ]`, `* + ?`, `{m}`, `{m,n}`,
`{m,}`, `~ m`, `~ m..n`, `-> alias` (ignored), `%ignore`, `%import common.X [-> Y]`,
`%import common (X, Y)`, `%llguidance {"allow_initial_skip": true}` (let `%ignore`d text
precede the first lexeme; off by default, as in llguidance), `//` and `#` comments. `%declare`, `%override`, `%extend` and
templates are rejected with a "not supported" error.

Errors are `GrammarError`s whose message starts with `line:column`, says what was
expected and what was found, and quotes the offending source line with a caret; the
exception also carries `.line` and `.column`.
"""

from __future__ import annotations

import difflib
import json
import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Union

from .grammar import Grammar, GrammarBuilder, regex_escape_bytes
from .limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits, check_compile_budget
from .regex import ExprSet

# Parenthesis nesting in one definition. The parser and the desugaring recurse on it,
# so it must stay well inside Python's recursion limit.
MAX_NESTING = 64

# Regex flags Lark accepts. `m` only changes anchors, which lexemes cannot use, and `u`
# is Python 3's default; both are accepted and dropped.
_LARK_FLAGS = "imsux"
_KEPT_FLAGS = "isx"

# `%llguidance {...}` options this front end honours.
_GRAMMAR_OPTIONS = ("allow_initial_skip",)


# ---------------------------------------------------------------------------------------
# Positions and errors


class _Source:
    """A grammar text with fast offset -> (line, column) mapping for error messages."""

    def __init__(self, text: str, name: str = "grammar"):
        self.text = text
        self.name = name
        self.line_starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.line_starts.append(i + 1)

    def loc(self, pos: int) -> tuple[int, int]:
        pos = max(0, min(pos, len(self.text)))
        line = bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def error(self, pos: int, message: str) -> GrammarError:
        line, col = self.loc(pos)
        start = self.line_starts[line - 1]
        end = self.text.find("\n", start)
        src_line = self.text[start : end if end >= 0 else len(self.text)]
        where = f"{line}:{col}" if self.name == "grammar" else f"{self.name} {line}:{col}"
        caret = " " * (col - 1) + "^"
        return GrammarError(f"{where}: {message}\n    {src_line}\n    {caret}", line=line, column=col)


# ---------------------------------------------------------------------------------------
# Tokens


@dataclass(frozen=True)
class _Tok:
    kind: str  # RULE TERM STRING REGEXP NUMBER DIRECTIVE OP NL EOF
    value: str  # decoded text for STRING, pattern body for REGEXP, else the source text
    pos: int
    end: int
    flags: str = ""


def _describe(tok: _Tok, src: _Source) -> str:
    raw = src.text[tok.pos : tok.end]
    if tok.kind == "NL":
        return "end of line"
    if tok.kind == "EOF":
        return "end of input"
    if tok.kind == "RULE":
        return f"rule name {tok.value!r}"
    if tok.kind == "TERM":
        return f"terminal name {tok.value!r}"
    if tok.kind == "STRING":
        return f"string {raw}"
    if tok.kind == "REGEXP":
        return f"regex {raw}"
    if tok.kind == "NUMBER":
        return f"number {tok.value}"
    if tok.kind == "DIRECTIVE":
        return f"%{tok.value}"
    if tok.kind == "JSON":
        return "a JSON object"
    return repr(tok.value)


_NAME_START = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NAME_CHARS = _NAME_START | set("0123456789")
_SIMPLE_OPS = set(":|()[]*+?{},~!")
_HEX = set("0123456789abcdefABCDEF")


def _tokenize(src: _Source) -> list[_Tok]:
    text = src.text
    n = len(text)
    toks: list[_Tok] = []
    i = 0
    while i < n:
        c = text[i]
        if c in " \t\f\r\v":
            i += 1
        elif c == "\n":
            toks.append(_Tok("NL", "\n", i, i + 1))
            i += 1
        elif c == "#" or text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == '"':
            i = _lex_string(src, i, toks)
        elif c == "/":
            i = _lex_regex(src, i, toks)
        elif c in _NAME_START:
            j = i + 1
            while j < n and text[j] in _NAME_CHARS:
                j += 1
            name = text[i:j]
            toks.append(_Tok(_classify_name(src, name, i), name, i, j))
            i = j
        elif c.isdigit() or (c == "-" and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            toks.append(_Tok("NUMBER", text[i:j], i, j))
            i = j
        elif c == "%":
            j = i + 1
            while j < n and text[j] in _NAME_CHARS:
                j += 1
            if j == i + 1:
                raise src.error(i, "expected a directive name after '%', found " + _char_desc(text, j))
            toks.append(_Tok("DIRECTIVE", text[i + 1 : j], i, j))
            i = j
            if toks[-1].value == "llguidance":
                i = _lex_json(src, i, toks)
        elif text.startswith("..", i):
            toks.append(_Tok("OP", "..", i, i + 2))
            i += 2
        elif text.startswith("->", i):
            toks.append(_Tok("OP", "->", i, i + 2))
            i += 2
        elif c == "." or c in _SIMPLE_OPS:
            toks.append(_Tok("OP", c, i, i + 1))
            i += 1
        else:
            raise src.error(i, f"unexpected character {c!r}")
    toks.append(_Tok("EOF", "", n, n))
    return toks


def _lex_json(src: _Source, i: int, toks: list[_Tok]) -> int:
    """The JSON object after `%llguidance` (it may span lines)."""
    text = src.text
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    if i >= len(text) or text[i] != "{":
        raise src.error(i, f"expected a JSON object after %llguidance, found {_char_desc(text, i)}")
    try:
        _value, end = json.JSONDecoder().raw_decode(text, i)
    except json.JSONDecodeError as err:
        raise src.error(err.pos, f"bad JSON after %llguidance: {err.msg}") from None
    toks.append(_Tok("JSON", text[i:end], i, end))
    return end


def _char_desc(text: str, i: int) -> str:
    if i >= len(text):
        return "end of input"
    if text[i] == "\n":
        return "end of line"
    return repr(text[i])


def _classify_name(src: _Source, name: str, pos: int) -> str:
    core = name.lstrip("_")
    if not core:
        raise src.error(pos, f"name {name!r} has no letters")
    if core[0].isdigit():
        raise src.error(pos, f"name {name!r}: a name cannot start with a digit after '_'")
    if core == core.lower():
        return "RULE"
    if core == core.upper():
        return "TERM"
    raise src.error(
        pos, f"name {name!r} mixes upper and lower case: rule names are lowercase, terminal names uppercase"
    )


def _lex_string(src: _Source, start: int, toks: list[_Tok]) -> int:
    """A double-quoted Lark string, decoded the way Lark decodes it.

    `\\n \\t \\r \\f \\xHH \\uHHHH \\UHHHHHHHH`, `\\\\` and `\\"` are escapes; any other
    backslash pair is kept as written (so `"\\d"` is a backslash and a d, as in Lark).
    """
    text = src.text
    n = len(text)
    out: list[str] = []
    i = start + 1
    while True:
        if i >= n or text[i] == "\n":
            raise src.error(start, f"unterminated string: expected '\"' to close it, found {_char_desc(text, i)}")
        c = text[i]
        if c == '"':
            i += 1
            break
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n or text[i + 1] == "\n":
            raise src.error(i, "unterminated string: a backslash ends the line")
        d = text[i + 1]
        simple = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "\\": "\\", '"': '"'}
        if d in simple:
            out.append(simple[d])
            i += 2
        elif d in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[d]
            digits = text[i + 2 : i + 2 + width]
            if len(digits) != width or not set(digits) <= _HEX:
                raise src.error(i, f"bad escape \\{d}: expected {width} hex digits, found {digits!r}")
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise src.error(i, f"bad escape \\{d}{digits}: not a Unicode code point")
            out.append(chr(code))
            i += 2 + width
        else:
            out.append("\\" + d)
            i += 2
    flags = ""
    if i < n and text[i] == "i" and not (i + 1 < n and text[i + 1] in _NAME_CHARS):
        flags = "i"
        i += 1
    toks.append(_Tok("STRING", "".join(out), start, i, flags))
    return i


def _lex_regex(src: _Source, start: int, toks: list[_Tok]) -> int:
    """A `/pattern/flags` literal; the pattern is kept verbatim so regex error offsets map back."""
    text = src.text
    n = len(text)
    i = start + 1
    newline_at = -1
    while True:
        if i >= n:
            where = newline_at if newline_at >= 0 else i
            raise src.error(start, f"unterminated regex: expected '/' to close it, found {_char_desc(text, where)}")
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] == "\n" and newline_at < 0:
                newline_at = i + 1
            i += 2
            continue
        if c == "\n" and newline_at < 0:
            newline_at = i
        if c == "/":
            break
        i += 1
    close = i
    j = close + 1
    while j < n and text[j] in _NAME_CHARS:
        j += 1
    flags = text[close + 1 : j]
    for k, f in enumerate(flags):
        if f not in _LARK_FLAGS:
            raise src.error(close + 1 + k, f"unknown regex flag {f!r}: expected one of {', '.join(_LARK_FLAGS)}")
    if newline_at >= 0 and "x" not in flags:
        raise src.error(
            start,
            "unterminated regex: expected '/' before end of line, found end of line "
            "(a regex may span lines only with the x flag)",
        )
    toks.append(_Tok("REGEXP", text[start + 1 : close], start, j, flags))
    return j


# ---------------------------------------------------------------------------------------
# Syntax tree


@dataclass
class _Lit:
    text: str
    flags: str
    pos: int


@dataclass
class _Re:
    pattern: str
    flags: str
    pos: int  # offset of the opening '/'


@dataclass
class _Range:
    lo: str
    hi: str
    pos: int


@dataclass
class _Name:
    name: str
    pos: int


@dataclass
class _Seq:
    items: list


@dataclass
class _Alt:
    alts: list


@dataclass
class _Repeat:
    item: _Node
    lo: int
    hi: int | None
    pos: int


@dataclass
class _Import:
    """Body of `%import common.X`: terminal X of the common library, in its own namespace."""

    name: str
    pos: int


_Node = Union[_Lit, _Re, _Range, _Name, _Seq, _Alt, _Repeat, _Import]


@dataclass
class _Def:
    name: str
    kind: str  # "rule" | "term"
    body: _Node
    pos: int
    src: _Source


# ---------------------------------------------------------------------------------------
# Parser


class _Parser:
    def __init__(self, src: _Source, limits: Limits):
        self.src = src
        self.limits = limits
        self.toks = _tokenize(src)
        self.i = 0
        self.defs: list[_Def] = []
        self.ignores: list[tuple[_Node, int]] = []
        self.imports: list[tuple[str, str, int]] = []  # (common name, local name, pos)
        self.options: dict[str, object] = {}

    # Token access ---------------------------------------------------------------
    def peek(self, depth: int = 0) -> _Tok:
        # Inside brackets a newline means nothing, so `(a\n | b)` reads as one group.
        if depth > 0:
            while self.toks[self.i].kind == "NL":
                self.i += 1
        return self.toks[self.i]

    def next(self, depth: int = 0) -> _Tok:
        tok = self.peek(depth)
        if tok.kind != "EOF":
            self.i += 1
        return tok

    def is_op(self, tok: _Tok, *ops: str) -> bool:
        return tok.kind == "OP" and tok.value in ops

    def fail(self, tok: _Tok, expected: str) -> GrammarError:
        return self.src.error(tok.pos, f"expected {expected}, found {_describe(tok, self.src)}")

    def expect_op(self, op: str, depth: int, context: str = "") -> _Tok:
        tok = self.peek(depth)
        if not self.is_op(tok, op):
            raise self.fail(tok, f"'{op}'{context}")
        return self.next(depth)

    def expect_line_end(self, what: str) -> None:
        tok = self.peek()
        if tok.kind not in ("NL", "EOF"):
            raise self.fail(tok, f"end of line after {what}")

    # File -------------------------------------------------------------------------
    def parse(self) -> None:
        while True:
            check_compile_budget()
            tok = self.peek()
            if tok.kind == "NL":
                self.next()
            elif tok.kind == "EOF":
                return
            elif tok.kind == "DIRECTIVE":
                self.directive()
            elif tok.kind in ("RULE", "TERM") or self.is_op(tok, "?", "!"):
                self.definition()
            else:
                raise self.fail(tok, "a rule or terminal definition or a %directive")

    def definition(self) -> None:
        tok = self.next()
        start = tok.pos
        if tok.kind == "OP":  # ?rule / !rule: tree-shaping modifiers, meaningless for a recognizer
            modifier = tok
            tok = self.next()
            if tok.kind != "RULE":
                raise self.fail(tok, f"a rule name after '{modifier.value}'")
        name = tok.value
        kind = "rule" if tok.kind == "RULE" else "term"
        nxt = self.peek()
        if self.is_op(nxt, "{"):
            raise self.src.error(nxt.pos, f"templates are not supported (in the definition of {name!r})")
        if self.is_op(nxt, "."):
            self.next()
            num = self.next()
            if num.kind != "NUMBER":
                raise self.fail(num, f"a priority number after '{name}.'")
        colon = self.peek()
        if not self.is_op(colon, ":"):
            raise self.fail(colon, f"':' after the {'rule' if kind == 'rule' else 'terminal'} name {name!r}")
        self.next()
        body = self.expansions(0, kind)
        self.expect_line_end(f"the definition of {name!r}")
        self.defs.append(_Def(name, kind, body, start, self.src))

    def directive(self) -> None:
        tok = self.next()
        name = tok.value
        if name == "ignore":
            body = self.expansions(0, "term")
            self.expect_line_end("%ignore")
            self.ignores.append((body, tok.pos))
        elif name == "import":
            self.import_directive(tok)
        elif name == "llguidance":
            self.grammar_options(self.next())
        elif name in ("declare", "override", "extend"):
            raise self.src.error(tok.pos, f"%{name} is not supported by midword's Lark front end")
        else:
            raise self.src.error(tok.pos, f"unknown directive %{name}: expected %ignore, %import or %llguidance")

    def grammar_options(self, tok: _Tok) -> None:
        """`%llguidance {...}`: grammar-wide options, as in llguidance's Lark."""
        options = json.loads(tok.value)
        if not isinstance(options, dict):
            raise self.src.error(tok.pos, "expected a JSON object of options after %llguidance")
        for key, value in options.items():
            if key not in _GRAMMAR_OPTIONS:
                raise self.src.error(
                    tok.pos, f"unsupported %llguidance option {key!r}: expected one of {', '.join(_GRAMMAR_OPTIONS)}"
                )
            if not isinstance(value, bool):
                raise self.src.error(tok.pos, f"%llguidance option {key!r} must be true or false, found {value!r}")
            self.options[key] = value
        self.expect_line_end("%llguidance")

    def import_directive(self, tok: _Tok) -> None:
        mod = self.next()
        if mod.kind != "RULE" or mod.value != "common":
            raise self.src.error(mod.pos, f"only '%import common' is supported, found {_describe(mod, self.src)}")
        sep = self.next()
        if self.is_op(sep, "."):
            name_tok = self.next()
            if name_tok.kind not in ("RULE", "TERM"):
                raise self.fail(name_tok, "a terminal name after 'common.'")
            local = name_tok.value
            if self.is_op(self.peek(), "->"):
                self.next()
                alias = self.next()
                if alias.kind != name_tok.kind:
                    raise self.fail(alias, f"a {'terminal' if name_tok.kind == 'TERM' else 'rule'} name after '->'")
                local = alias.value
            self.imports.append((name_tok.value, local, name_tok.pos))
        elif self.is_op(sep, "("):
            while True:
                name_tok = self.next(1)
                if name_tok.kind not in ("RULE", "TERM"):
                    raise self.fail(name_tok, "a terminal name in the %import list")
                self.imports.append((name_tok.value, name_tok.value, name_tok.pos))
                sep2 = self.next(1)
                if self.is_op(sep2, ")"):
                    break
                if not self.is_op(sep2, ","):
                    raise self.fail(sep2, "',' or ')' in the %import list")
        else:
            raise self.fail(sep, "'.' or '(' after '%import common'")
        self.expect_line_end("%import")

    # Expressions -------------------------------------------------------------------
    def expansions(self, depth: int, kind: str) -> _Node:
        alts = [self.alias(depth, kind)]
        while True:
            tok = self.peek(depth)
            if self.is_op(tok, "|"):
                self.next(depth)
                alts.append(self.alias(depth, kind))
                continue
            if depth == 0 and tok.kind == "NL":
                # A definition goes on when its next line starts with '|'.
                j = self.i
                while self.toks[j].kind == "NL":
                    j += 1
                if self.is_op(self.toks[j], "|"):
                    self.i = j + 1
                    alts.append(self.alias(depth, kind))
                    continue
            break
        return alts[0] if len(alts) == 1 else _Alt(alts)

    def alias(self, depth: int, kind: str) -> _Node:
        expansion = self.expansion(depth, kind)
        tok = self.peek(depth)
        if self.is_op(tok, "->"):
            if kind == "term":
                raise self.src.error(tok.pos, "aliases ('->') are not allowed in terminal definitions")
            self.next(depth)
            name = self.next(depth)
            if name.kind != "RULE":
                raise self.fail(name, "a lowercase alias name after '->'")
        return expansion

    def expansion(self, depth: int, kind: str) -> _Node:
        items = []
        while True:
            tok = self.peek(depth)
            if tok.kind in ("STRING", "REGEXP", "RULE", "TERM") or self.is_op(tok, "(", "["):
                items.append(self.expr(depth, kind))
            else:
                break
        return items[0] if len(items) == 1 else _Seq(items)

    def expr(self, depth: int, kind: str) -> _Node:
        atom = self.atom(depth, kind)
        tok = self.peek(depth)
        lo: int
        hi: int | None
        if self.is_op(tok, "*", "+", "?"):
            self.next(depth)
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[tok.value]
            return _Repeat(atom, lo, hi, tok.pos)
        if self.is_op(tok, "~"):
            self.next(depth)
            lo = self.number(depth, "a repetition count after '~'")
            hi = lo
            if self.is_op(self.peek(depth), ".."):
                self.next(depth)
                hi = self.number(depth, "a maximum repetition count after '..'")
            return self.repeat(atom, lo, hi, tok)
        if self.is_op(tok, "{"):
            self.next(depth + 1)
            first = self.peek(depth + 1)
            if first.kind in ("RULE", "TERM"):
                raise self.src.error(tok.pos, "templates are not supported")
            lo = 0
            if not self.is_op(first, ","):
                lo = self.number(depth + 1, "a repetition count after '{'")
            hi = lo
            if self.is_op(self.peek(depth + 1), ","):
                self.next(depth + 1)
                hi = None
                if self.peek(depth + 1).kind == "NUMBER":
                    hi = self.number(depth + 1, "a maximum repetition count")
            self.expect_op("}", depth + 1, " to close the repetition")
            return self.repeat(atom, lo, hi, tok)
        return atom

    def number(self, depth: int, expected: str) -> int:
        tok = self.next(depth)
        if tok.kind != "NUMBER" or tok.value.startswith("-"):
            raise self.fail(tok, expected)
        if len(tok.value) > 9 or int(tok.value) > self.limits.max_grammar_size:
            raise LimitExceeded(
                "max_grammar_size",
                self.limits.max_grammar_size,
                f"repetition count {tok.value} at {'%d:%d' % self.src.loc(tok.pos)}",
            )
        return int(tok.value)

    def repeat(self, atom: _Node, lo: int, hi: int | None, tok: _Tok) -> _Node:
        if hi is not None and hi < lo:
            raise self.src.error(tok.pos, f"bad repetition: the maximum {hi} is below the minimum {lo}")
        return _Repeat(atom, lo, hi, tok.pos)

    def atom(self, depth: int, kind: str) -> _Node:
        tok = self.next(depth)
        if self.is_op(tok, "(", "["):
            if depth + 1 > MAX_NESTING:
                line, col = self.src.loc(tok.pos)
                raise LimitExceeded("lark_nesting_depth", MAX_NESTING, f"brackets nested too deeply at {line}:{col}")
            inner = self.expansions(depth + 1, kind)
            close = ")" if tok.value == "(" else "]"
            end = self.peek(depth + 1)
            if not self.is_op(end, close):
                line, col = self.src.loc(tok.pos)
                raise self.fail(end, f"'{close}' to close the '{tok.value}' at {line}:{col}")
            self.next(depth + 1)
            return inner if close == ")" else _Repeat(inner, 0, 1, tok.pos)
        if tok.kind == "STRING":
            if self.is_op(self.peek(depth), ".."):
                self.next(depth)
                hi = self.next(depth)
                if hi.kind != "STRING":
                    raise self.fail(hi, "a string after '..' in a character range")
                for t in (tok, hi):
                    if len(t.value) != 1:
                        raise self.src.error(
                            t.pos, f"a character range needs one-character strings, found {_describe(t, self.src)}"
                        )
                    if t.flags:
                        raise self.src.error(t.pos, "flags are not allowed on the ends of a character range")
                if ord(hi.value) < ord(tok.value):
                    raise self.src.error(tok.pos, f"empty character range {tok.value!r}..{hi.value!r}")
                return _Range(tok.value, hi.value, tok.pos)
            return _Lit(tok.value, tok.flags, tok.pos)
        if tok.kind == "REGEXP":
            return _Re(tok.value, tok.flags, tok.pos)
        if tok.kind in ("RULE", "TERM"):
            nxt = self.peek(depth)
            if self.is_op(nxt, "{"):
                after = self.toks[self.i + 1]
                if after.kind in ("RULE", "TERM", "STRING", "REGEXP"):
                    raise self.src.error(tok.pos, f"templates are not supported ({tok.value}{{...}})")
            return _Name(tok.value, tok.pos)
        raise self.fail(tok, "a rule, terminal, string, regex, '(' or '['")


# ---------------------------------------------------------------------------------------
# Lark's common terminals, written in Lark syntax and compiled by this same front end.
# Regex-only formulations replace Lark's lazy quantifiers and lookbehind.

COMMON_LARK = r"""
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER

// A double-quoted string; a backslash escapes the next character (not a newline).
// As llguidance defines it: unlike Python Lark, a raw newline may be in the body.
ESCAPED_STRING: "\"" (/[^"\\]/ | /\\./)* "\""

LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*

WS_INLINE: (" " | /\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+

SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: /\/\*(?:[^*]|\*+[^*\/])*\*+\//
SQL_COMMENT: /--[^\n]*/
"""

_common_defs: dict[str, _Def] | None = None


def _common() -> dict[str, _Def]:
    global _common_defs
    if _common_defs is None:
        p = _Parser(_Source(COMMON_LARK, "common.lark"), DEFAULT_LIMITS)
        p.parse()
        _common_defs = {d.name: d for d in p.defs}
    return _common_defs


def common_terminals() -> list[str]:
    """Names `%import common.X` accepts."""
    return sorted(n for n in _common() if not n.startswith("_"))


# ---------------------------------------------------------------------------------------
# Regex checks


def _unsupported_construct(pattern: str, flags: str) -> tuple[int, str] | None:
    """The first Python-only construct in `pattern` (lookaround, backreference, anchor)."""
    n = len(pattern)
    verbose = "x" in flags
    i = 0
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            d = pattern[i + 1] if i + 1 < n else ""
            if not in_class:
                if d in "123456789":
                    return i, f"backreference \\{d} is not supported (lexemes are regular)"
                if d in "AZzbBG":
                    return i, f"anchor \\{d} is not supported (a lexeme is matched as a whole, without anchors)"
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":  # a leading ']' is a literal
                i += 1
            continue
        if verbose and c == "#":
            j = pattern.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in "^$":
            return i, f"anchor {c} is not supported (a lexeme is matched as a whole, without anchors)"
        if pattern.startswith("(?", i):
            rest = pattern[i + 2 : i + 4]
            for prefix, what in (
                ("=", "lookahead (?=...)"),
                ("!", "negative lookahead (?!...)"),
                ("<=", "lookbehind (?<=...)"),
                ("<!", "negative lookbehind (?<!...)"),
                ("P=", "named backreference (?P=...)"),
                ("(", "conditional group (?(...)...)"),
                (">", "atomic group (?>...)"),
            ):
                if rest.startswith(prefix):
                    return i, f"{what} is not supported (lexemes are regular; the lexer has no lookaround)"
        i += 1
    return None


_OFFSET_RE = re.compile(r" at offset (\d+) in regex .*$", re.S)


def _error_offset(err: Exception) -> int | None:
    off = getattr(err, "offset", None)
    if isinstance(off, int):
        return off
    m = _OFFSET_RE.search(str(err))
    return int(m.group(1)) if m else None


def _error_text(err: Exception) -> str:
    """The regex parser's message without its offset suffix (we give line:column instead)."""
    return _OFFSET_RE.sub("", str(err)).split("\n", 1)[0]


class _Checker:
    """Validates lexeme regexes with the engine's regex parser and rejects empty lexemes."""

    def __init__(self, limits: Limits):
        self.exprs = ExprSet(limits)

    def check(self, regex: str, flags: str, fail: Callable[[int | None, str], GrammarError], what: str) -> None:
        """Syntax: Python-only constructs first (clearer messages), then the engine's parser."""
        bad = _unsupported_construct(regex, flags)
        if bad is not None:
            raise fail(bad[0], f"in {what}: {bad[1]}")
        try:
            self.exprs.parse(regex, flags)
        except GrammarError as err:
            raise fail(_error_offset(err), f"in {what}: {_error_text(err)}") from None

    def check_lexeme(self, regex: str, flags: str, fail: Callable[[int | None, str], GrammarError], what: str) -> None:
        """A whole lexeme must be valid and must not match the empty string (Lark refuses
        zero-width terminals too: the lexer could never end one)."""
        self.check(regex, flags, fail, what)
        if regex == "" or self.exprs.nullable(self.exprs.parse(regex, flags)):
            raise fail(
                None,
                f"{what} matches the empty string; lexemes must consume input "
                "(make it non-empty and mark its use optional with ? or [ ])",
            )


# ---------------------------------------------------------------------------------------
# Terminals -> one regex each


@dataclass(frozen=True)
class _Rx:
    regex: str
    prec: int  # 0: may contain a top-level '|'; 1: a concatenation; 2: one atom (quantifiable)
    literal: str | None = None  # the exact text when the terminal is a flag-free string
    flags: str = ""  # flags of a lone flagged string/regex, not yet scoped into the regex


_ALT, _CAT, _ATOM = 0, 1, 2


def _norm_flags(flags: str) -> str:
    return "".join(f for f in _KEPT_FLAGS if f in flags)


def _wrap(rx: _Rx, need: int) -> str:
    if rx.flags:
        return f"(?{rx.flags}:{rx.regex})"
    if rx.prec < need:
        return f"(?:{rx.regex})"
    return rx.regex


def _class_char(ch: str) -> str:
    o = ord(ch)
    if o < 0x80 and (ch.isalnum() or ch == "_"):
        return ch
    if o < 0x80:
        return f"\\x{o:02x}"
    return ch


def _literal_rx(text: str, flags: str) -> _Rx:
    regex = regex_escape_bytes(text.encode("utf-8"))
    prec = _ATOM if len(text) == 1 else _CAT
    flags = _norm_flags(flags)
    return _Rx(regex, prec, None if flags else text, flags)


def _regex_prec(pattern: str, flags: str) -> int:
    """How tightly a user regex binds, so inlining adds `(?:...)` only where needed."""
    if "x" in flags:
        return _ALT
    n = len(pattern)
    depth = 0
    in_class = False
    top_alt = False
    atoms = 0  # top-level atoms seen (a quantifier keeps the count, but makes it no atom)
    quantified = False
    i = 0
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            if depth == 0 and not in_class:
                atoms += 1
            continue
        if in_class:
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            if depth == 0:
                atoms += 1
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            continue
        if c == "(":
            if depth == 0:
                atoms += 1
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            if c == "|":
                top_alt = True
            elif c in "*+?{":
                quantified = True
            else:
                atoms += 1
        i += 1
    if top_alt:
        return _ALT
    return _ATOM if atoms == 1 and not quantified else _CAT


def _quantifier(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if hi is None:
        return f"{{{lo},}}"
    if hi == lo:
        return f"{{{lo}}}"
    return f"{{{lo},{hi}}}"


# ---------------------------------------------------------------------------------------
# Compiler


class _Compiler:
    def __init__(self, parser: _Parser, start: str, limits: Limits):
        self.src = parser.src
        self.limits = limits
        self.start = start
        self.checker = _Checker(limits)
        self.builder = GrammarBuilder(limits)
        self.rules: dict[str, _Def] = {}
        self.terms: dict[str, _Def] = {}
        for d in parser.defs:
            self._add(d)
        common = None
        for cname, local, pos in parser.imports:
            common = common or _common()
            if cname not in common or cname.startswith("_"):
                close = difflib.get_close_matches(cname, common_terminals(), n=1)
                hint = f"; did you mean {close[0]}?" if close else f"; it has {', '.join(common_terminals())}"
                raise self.src.error(pos, f"'common' has no terminal {cname}{hint}")
            self._add(_Def(local, "term", _Import(cname, pos), pos, self.src))
        self.ignores = parser.ignores
        self.builder.allow_initial_skip = bool(parser.options.get("allow_initial_skip", False))
        self.term_rx: dict[tuple[str, str], _Rx] = {}  # (namespace, name) -> compiled regex
        self.lexeme_checked: set[str] = set()

    def _add(self, d: _Def) -> None:
        table = self.rules if d.kind == "rule" else self.terms
        prev = table.get(d.name)
        if prev is not None:
            line, col = prev.src.loc(prev.pos)
            raise d.src.error(d.pos, f"{d.name} is defined twice (first at {line}:{col})")
        table[d.name] = d

    # Names ----------------------------------------------------------------------------
    def undefined(self, name: str, pos: int, src: _Source, used_in: str) -> GrammarError:
        is_term = name.lstrip("_")[:1].isupper()
        close = difflib.get_close_matches(name, list(self.terms if is_term else self.rules), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        kind = "terminal" if is_term else "rule"
        return src.error(pos, f"undefined {kind} {name!r} (used in {used_in}){hint}")

    def check_names(self) -> None:
        """Every name used anywhere is defined, and terminals only use terminals."""
        for d in list(self.rules.values()) + list(self.terms.values()):
            for node in _walk(d.body):
                if isinstance(node, _Name):
                    if node.name in self.rules:
                        if d.kind == "term":
                            raise d.src.error(
                                node.pos,
                                f"terminal {d.name} uses rule {node.name!r}: terminals may only use "
                                "terminals, strings and regexes (make it a rule instead)",
                            )
                    elif node.name not in self.terms:
                        used_in = f"terminal {d.name}" if d.kind == "term" else f"rule {d.name!r}"
                        raise self.undefined(node.name, node.pos, d.src, used_in)
        for body, _pos in self.ignores:
            for node in _walk(body):
                if isinstance(node, _Name):
                    if node.name in self.rules:
                        raise self.src.error(node.pos, f"%ignore takes terminals, not the rule {node.name!r}")
                    if node.name not in self.terms:
                        raise self.undefined(node.name, node.pos, self.src, "%ignore")

    # Terminals ------------------------------------------------------------------------
    def order_terminals(self) -> list[tuple[str, _Def]]:
        """Terminals (user and imported common ones) with dependencies first; rejects recursion."""
        common = _common()
        order: list[tuple[str, _Def]] = []
        state: dict[tuple[str, str], int] = {}  # 1: on the DFS stack, 2: done

        def deps(ns: str, d: _Def) -> list[tuple[str, str, int]]:
            out = []
            for node in _walk(d.body):
                if isinstance(node, _Import):
                    out.append(("common", node.name, node.pos))
                elif isinstance(node, _Name):
                    out.append((ns, node.name, node.pos))
            return out

        def lookup(ns: str, name: str) -> _Def:
            return common[name] if ns == "common" else self.terms[name]

        roots = [("", name) for name in self.terms]
        for root in roots:
            if root in state:
                continue
            # Iterative DFS: terminal chains can be long and Python recursion is shallow.
            stack = [(root, iter(deps(root[0], lookup(*root))))]
            path = [root]
            state[root] = 1
            while stack:
                check_compile_budget()
                key, it = stack[-1]
                step = next(it, None)
                if step is None:
                    stack.pop()
                    path.pop()
                    state[key] = 2
                    order.append((key[0], lookup(*key)))
                    continue
                ns, name, pos = step
                child = (ns, name)
                if state.get(child) == 1:
                    cycle = [k[1] for k in path[path.index(child) :]] + [name]
                    d = lookup(*key)
                    raise d.src.error(
                        pos,
                        f"terminal {name} is recursive ({' -> '.join(cycle)}); terminals must be regular, "
                        "use a rule for recursive structure",
                    )
                if child not in state:
                    state[child] = 1
                    path.append(child)
                    stack.append((child, iter(deps(ns, lookup(*child)))))
        return order

    def compile_terminals(self) -> None:
        for ns, d in self.order_terminals():
            rx = self.term_expr(d.body, ns, d)
            if len(rx.regex) > self.limits.max_regex_nodes:
                raise LimitExceeded(
                    "max_regex_nodes", self.limits.max_regex_nodes, f"terminal {d.name} inlines to a huge regex"
                )
            self.term_rx[(ns, d.name)] = rx
            self.checker.check(rx.regex, rx.flags, self._def_fail(d), f"terminal {d.name}")

    def _def_fail(self, d: _Def) -> Callable[[int | None, str], GrammarError]:
        def fail(_offset: int | None, message: str) -> GrammarError:
            return d.src.error(d.pos, message)

        return fail

    def _atom_fail(self, src: _Source, pos: int) -> Callable[[int | None, str], GrammarError]:
        # The pattern of a /regex/ starts one character after its '/', verbatim.
        def fail(offset: int | None, message: str) -> GrammarError:
            return src.error(pos + 1 + offset if offset is not None else pos, message)

        return fail

    def term_expr(self, node: _Node, ns: str, d: _Def) -> _Rx:
        if isinstance(node, _Lit):
            return _literal_rx(node.text, node.flags)
        if isinstance(node, _Re):
            where = f"terminal {d.name}" if d.kind == "term" else f"rule {d.name!r}"
            self.checker.check(node.pattern, node.flags, self._atom_fail(d.src, node.pos), f"the regex of {where}")
            return _Rx(node.pattern, _regex_prec(node.pattern, node.flags), None, _norm_flags(node.flags))
        if isinstance(node, _Range):
            return _Rx(f"[{_class_char(node.lo)}-{_class_char(node.hi)}]", _ATOM)
        if isinstance(node, _Import):
            return self.term_rx[("common", node.name)]
        if isinstance(node, _Name):
            return self.term_rx[(ns, node.name)]
        if isinstance(node, _Seq):
            parts = [self.term_expr(x, ns, d) for x in node.items]
            if len(parts) == 1:
                return parts[0]
            literal = None
            if all(p.literal is not None for p in parts):
                literal = "".join(p.literal for p in parts)  # type: ignore[misc]
            regex = "".join(_wrap(p, _CAT) for p in parts)
            self._size_check(regex, d)
            return _Rx(regex, _CAT if parts else _ATOM, literal)
        if isinstance(node, _Alt):
            parts = [self.term_expr(x, ns, d) for x in node.alts]
            seen: list[str] = []
            for p in parts:
                r = _wrap(p, _ALT)
                if r not in seen:
                    seen.append(r)
            if len(seen) == 1:
                return parts[0]
            regex = "|".join(seen)
            self._size_check(regex, d)
            return _Rx(regex, _ALT)
        if isinstance(node, _Repeat):
            inner = self.term_expr(node.item, ns, d)
            if (node.lo, node.hi) == (1, 1):
                return inner
            if inner.regex == "" and not inner.flags:
                return inner
            regex = _wrap(inner, _ATOM) + _quantifier(node.lo, node.hi)
            return _Rx(regex, _CAT)
        raise AssertionError(f"unknown node {node!r}")

    def _size_check(self, regex: str, d: _Def) -> None:
        if len(regex) > self.limits.max_regex_nodes:
            raise LimitExceeded(
                "max_regex_nodes", self.limits.max_regex_nodes, f"terminal {d.name} inlines to a huge regex"
            )

    def terminal_lexeme(self, name: str) -> int:
        rx = self.term_rx[("", name)]
        if name not in self.lexeme_checked:
            self.lexeme_checked.add(name)
            self.checker.check_lexeme(rx.regex, rx.flags, self._def_fail(self.terms[name]), f"terminal {name}")
        if rx.literal is not None:
            return self.builder.literal(rx.literal, name=name)
        return self.builder.lexeme(name, rx.regex, flags=rx.flags)

    # Rules --------------------------------------------------------------------------
    def reachable_rules(self, start: str) -> list[str]:
        seen = {start}
        todo = [start]
        while todo:
            d = self.rules[todo.pop()]
            for node in _walk(d.body):
                if isinstance(node, _Name) and node.name in self.rules and node.name not in seen:
                    seen.add(node.name)
                    todo.append(node.name)
        return [name for name in self.rules if name in seen]

    def rule_alts(self, node: _Node, d: _Def) -> list[list[int]]:
        b = self.builder
        if isinstance(node, _Lit):
            if node.text == "":
                raise d.src.error(node.pos, 'the empty string "" cannot be a lexeme; use ? or [ ] for an optional part')
            flags = _norm_flags(node.flags)
            if not flags:
                return [[b.literal(node.text)]]
            name = '"' + node.text + '"' + node.flags
            return [[b.lexeme(name, regex_escape_bytes(node.text.encode("utf-8")), flags=flags)]]
        if isinstance(node, _Re):
            rx = self.term_expr(node, "", d)
            raw = d.src.text[node.pos : node.pos + len(node.pattern) + 2 + len(node.flags)]
            self.checker.check_lexeme(
                rx.regex, rx.flags, self._atom_fail(d.src, node.pos), f"the regex {raw} of rule {d.name!r}"
            )
            return [[b.lexeme(raw, rx.regex, flags=rx.flags)]]
        if isinstance(node, _Range):
            rx = self.term_expr(node, "", d)
            return [[b.lexeme(f'"{node.lo}".."{node.hi}"', rx.regex)]]
        if isinstance(node, _Name):
            if node.name in self.terms:
                return [[self.terminal_lexeme(node.name)]]
            return [[b.nonterminal(node.name)]]
        if isinstance(node, _Seq):
            seq: list[int] = []
            for item in node.items:
                alts = self.rule_alts(item, d)
                if len(alts) == 1:
                    seq.extend(alts[0])
                else:
                    opt = isinstance(item, _Repeat) and (item.lo, item.hi) == (0, 1)
                    seq.append(b.sequence_rule(f"{d.name}@{'opt' if opt else 'group'}", alts))
            return [seq]
        if isinstance(node, _Alt):
            out: list[list[int]] = []
            for alt in node.alts:
                for a in self.rule_alts(alt, d):
                    if a not in out:
                        out.append(a)
            return out
        if isinstance(node, _Repeat):
            alts = self.rule_alts(node.item, d)
            lo, hi = node.lo, node.hi
            if (lo, hi) == (1, 1):
                return alts
            if (lo, hi) == (0, 1):
                return alts + [[]] if [] not in alts else alts
            sym = self.as_symbol(alts, d)
            if (lo, hi) == (0, None):
                return [[b.star(sym, f"{d.name}@star")]]
            if (lo, hi) == (1, None):
                return [[b.plus(sym, f"{d.name}@plus")]]
            return [[b.repeat(sym, lo, hi, f"{d.name}@rep")]]
        raise AssertionError(f"unknown node {node!r}")

    def as_symbol(self, alts: list[list[int]], d: _Def) -> int:
        if len(alts) == 1 and len(alts[0]) == 1:
            return alts[0][0]
        return self.builder.sequence_rule(f"{d.name}@group", alts)

    # Whole grammar ----------------------------------------------------------------------
    def compile(self) -> Grammar:
        self.check_names()
        self.compile_terminals()
        b = self.builder
        for body, pos in self.ignores:
            d = _Def("%ignore", "term", body, pos, self.src)
            rx = self.term_expr(body, "", d)
            regex = _wrap(rx, _ALT) if rx.flags else rx.regex
            self.checker.check_lexeme(regex, "", self._def_fail(d), "%ignore")
            b.add_ignore(regex)
        start = self.start
        if start in self.rules:
            for name in self.reachable_rules(start):
                b.nonterminal(name)
            for name in self.reachable_rules(start):
                d = self.rules[name]
                nt = b.nonterminal(name)
                for alt in self.rule_alts(d.body, d):
                    b.rule(nt, alt)
            return b.build(b.nonterminal(start))
        if start in self.terms:
            nt = b.nonterminal(start.lower() + "@start")
            b.rule(nt, [self.terminal_lexeme(start)])
            return b.build(nt)
        close = difflib.get_close_matches(start, list(self.rules), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise GrammarError(f"the grammar has no rule {start!r} (the start rule); define `{start}: ...`{hint}")


def _walk(node: _Node):
    """All nodes of an expression tree, without recursion."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, _Seq):
            todo.extend(n.items)
        elif isinstance(n, _Alt):
            todo.extend(n.alts)
        elif isinstance(n, _Repeat):
            todo.append(n.item)


def compile_lark(text: str, *, start: str = "start", limits: Limits = DEFAULT_LIMITS) -> Grammar:
    """Compile Lark grammar text into a `Grammar`; `start` names the start rule."""
    if not isinstance(text, str):
        raise TypeError(f"compile_lark takes grammar text (str), got {type(text).__name__}")
    parser = _Parser(_Source(text), limits)
    parser.parse()
    return _Compiler(parser, start, limits).compile()
