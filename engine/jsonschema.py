"""JSON Schema to grammar: completions that stay valid against the schema a file declares.

The compiler works in two stages, like llguidance's JSON front end.

1. *Normalise.* Every subschema becomes a small immutable IR: a union of typed
   parts (`_Str`, `_Num`, `_Arr`, `_Obj`, `_Const`, ...) with all the keywords of
   one type folded into one node. Keywords at one level are a conjunction, so
   `allOf`, `$ref` siblings, `enum`, `anyOf`, `not`, `if`/`then`/`else` and
   `dependencies` are *intersected* into that form (types intersect, bounds
   tighten, properties merge); `not` uses the IR's complement where it can be
   expressed. `$ref` stays a lazy reference, so recursive schemas become
   recursive nonterminals. `oneOf` equals `anyOf` where its branches are provably
   disjoint (by type, constants, a required discriminator, string regexes);
   otherwise it is compiled exactly as the union of "branch i and no other
   branch" where those complements exist, and is an error where they do not.
2. *Generate.* The lexical parts become lexemes, with every constraint on a
   string folded into ONE lexeme regex: `"` + body + `"`, where the body is the
   intersection (`&`, the lexer's extended syntax, flag `E`) of the length bound
   `(?:char){m,n}` and each `pattern`/`format` translated from ECMA-262 into a
   regex over the *JSON-encoded* text. Numbers and integers are lexemes too,
   with `minimum`/`maximum` compiled into exact digit-range regexes. Structure
   (objects, arrays, alternatives) becomes CFG rules; object members come in
   schema order with commas threaded through a small state machine that also
   counts members for minProperties/maxProperties (and array elements for
   `contains`).

Output is valid JSON by construction. Strings whose content is constrained
(`pattern`, `format`, `enum`, exclusions, object keys) are produced in the
canonical encoding of `json.dumps(..., ensure_ascii=False)`, so a pattern is
checked on exactly one spelling of each string; unconstrained strings accept
every JSON escape. Where the schema asks for something a grammar cannot express
exactly, compilation fails with a `GrammarError` naming the keyword and its JSON
pointer, never silently accepting more than the schema allows. The only
relaxations are listed in `RELAXED_KEYWORDS`; each use is reported in the
grammar's `warnings` list.

Stricter-than-schema choices (valid instances a grammar may still reject, never
the reverse): properties in schema order (`schema_ordered` reorders an instance);
bounded numbers allow exponents only where every digit choice stays in range
(Python's `1e-06` and `1e+16` forms are covered); integers are written without
fraction or exponent (`1.0` is not an "integer" spelling); number constants are
matched in their `json.dumps` spelling; string constants and keys in canonical
escapes; lone surrogate escapes are rejected.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
import urllib.parse
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from itertools import compress
from typing import Any, Iterable

import numpy as np

from ._jit import compiled_once
from .grammar import Grammar, GrammarBuilder, Rule, _new_rule, regex_escape_bytes
from .limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits
from .analysis import flatten_rules, grammar_marks_jit

__all__ = [
    "compile_json_schema",
    "schema_ordered",
    "SUPPORTED_KEYWORDS",
    "ANNOTATION_KEYWORDS",
    "UNSUPPORTED_KEYWORDS",
    "RELAXED_KEYWORDS",
    "SUPPORTED_FORMATS",
    "integer_range_regex",
    "number_range_regex",
    "multiple_of_regex",
    "pattern_to_regex",
]

# --------------------------------------------------------------------------------------
# Keyword tables
# --------------------------------------------------------------------------------------

# Keywords the compiler enforces exactly (draft-04 to 2020-12 spellings).
SUPPORTED_KEYWORDS = frozenset(
    """type enum const properties required additionalProperties patternProperties items
    prefixItems additionalItems minItems maxItems anyOf oneOf allOf $ref minLength maxLength
    pattern format minimum maximum exclusiveMinimum exclusiveMaximum multipleOf
    minProperties maxProperties unevaluatedProperties unevaluatedItems not if then else
    dependentRequired dependentSchemas dependencies propertyNames contains minContains maxContains""".split()
)

# Annotations and containers: they describe or hold subschemas, never constrain. Other
# unknown keywords (x-*, markdownDescription, ...) are ignored too, as the spec says.
ANNOTATION_KEYWORDS = frozenset(
    """title description examples example default $comment $schema $id id deprecated readOnly
    writeOnly contentMediaType contentEncoding discriminator $anchor $dynamicAnchor
    $recursiveAnchor $vocabulary definitions $defs contentSchema""".split()
)

# JSON Schema vocabulary this compiler does not enforce. Meeting one is an error, so
# the grammar never accepts more than the schema.
UNSUPPORTED_KEYWORDS = frozenset(
    """$dynamicRef $recursiveRef extends disallow divisibleBy""".split()
)

# Keywords that are deliberately *not* enforced. Every use adds a line to the grammar's
# `warnings`; `strict=True` turns each into a GrammarError instead.
RELAXED_KEYWORDS: dict[str, str] = {
    "uniqueItems": "uniqueItems: true is not enforced (a context-free grammar cannot check that array items differ)",
    "format": "format values not in SUPPORTED_FORMATS are not enforced "
    "(JSON Schema makes format an annotation by default)",
}

# `format` values turned into regexes (ECMA-262 syntax, applied like `pattern`).
# Approximations are noted; each accepts only strings of the right shape.
# Month lengths are checked; February always allows the 29th (leap years are not).
_DATE = (
    r"[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-9]))"
)
# RFC 3339 full-time; a leap second (:60) is allowed at any minute.
_TIME = (
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_FORMAT_PATTERNS: dict[str, str] = {
    "date": rf"^{_DATE}$",
    "time": rf"^{_TIME}$",
    "date-time": rf"^{_DATE}[Tt]{_TIME}$",
    # ISO 8601 durations as in RFC 3339 appendix A (exact).
    "duration": (
        rf"^P(?:(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{_DUR_TIME})?"
        rf"|{_DUR_TIME}|[0-9]+W)$"
    ),
    # A subset of RFC 5321: dot-atom local part, hostname domain (no quoted locals, no IP literals).
    "email": rf"^{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})*$",
    # RFC 1123 labels; the 253-character total is not checked.
    "hostname": rf"^{_LABEL}(?:\.{_LABEL})*$",
    "ipv4": rf"^{_IPV4}$",
    # RFC 4291 text forms incl. embedded IPv4; no zone index.
    "ipv6": (
        rf"^(?:(?:{_H16}:){{7}}{_H16}|(?:{_H16}:){{1,7}}:|(?:{_H16}:){{1,6}}:{_H16}"
        rf"|(?:{_H16}:){{1,5}}(?::{_H16}){{1,2}}|(?:{_H16}:){{1,4}}(?::{_H16}){{1,3}}"
        rf"|(?:{_H16}:){{1,3}}(?::{_H16}){{1,4}}|(?:{_H16}:){{1,2}}(?::{_H16}){{1,5}}"
        rf"|{_H16}:(?::{_H16}){{1,6}}|:(?:(?::{_H16}){{1,7}}|:)"
        rf"|(?:{_H16}:){{6}}{_IPV4}|(?:{_H16}:){{0,5}}:{_IPV4}|::(?:{_H16}:){{0,5}}{_IPV4})$"
    ),
    "uuid": r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$",
    # RFC 3986 shape: a scheme, then URI characters and %-escapes; the component
    # structure after the scheme is not checked.
    "uri": r"^[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9._~!$&'()*+,;=:@/?#\[\]-]|%[0-9A-Fa-f]{2})*$",
}
SUPPORTED_FORMATS = frozenset(_FORMAT_PATTERNS)

_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# In-place applicators: beside them, unevaluated* would depend on which subschemas matched.
_APPLICATORS = ("allOf", "anyOf", "oneOf", "$ref", "not", "if", "dependentSchemas", "dependencies")
_TYPE_KIND = {
    "null": "null", "boolean": "bool", "integer": "num", "number": "num",
    "string": "str", "array": "arr", "object": "obj",
}
_ALL_KINDS = frozenset(_TYPE_KIND.values())
# Every keyword that _typed (and the per-type methods under it) reads besides `type`.
_TYPE_KEYWORDS = frozenset(
    """minimum maximum exclusiveMinimum exclusiveMaximum multipleOf minLength maxLength pattern format
    prefixItems items additionalItems unevaluatedItems minItems maxItems uniqueItems contains minContains
    maxContains properties patternProperties additionalProperties unevaluatedProperties required
    minProperties maxProperties propertyNames""".split()
)

# Keywords holding subschemas, by shape: "map" (name -> schema), "list" (a schema or a
# list of them), "one" (a schema).
_SUBSCHEMA_SHAPE = {
    **dict.fromkeys(("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"),
                    "map"),
    **dict.fromkeys(("items", "prefixItems", "allOf", "anyOf", "oneOf"), "list"),
    **dict.fromkeys(("additionalProperties", "additionalItems", "not", "if", "then", "else", "contains",
                     "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contentSchema"), "one"),
}

# Bounds on work for adversarial schemas (the grammar size itself is bounded by Limits).
MAX_SCHEMA_DEPTH = 200
MAX_UNION_PARTS = 20000
MAX_SYNTHETIC_REFS = 20000
MAX_OBJECT_STATES = 20000
MAX_PATTERN_GROUPS = 4
MAX_CONTAINS = 3
# A union with more string constants than this gets them as one lexeme.
ENUM_LEXEME_THRESHOLD = 16
MAX_REGEX_CHARS = 200_000
MAX_VALIDATION_STEPS = 200_000

# JSON string characters as regexes over the encoded text. GENERAL: any escape JSON
# allows (surrogate escapes only as a valid pair, so a pair counts as one character).
# CANON: the one spelling `json.dumps(ensure_ascii=False)` produces.
CANON_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))'
GENERAL_CHAR = (
    r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CeEfF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}'
    r"|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}))"
)
NUMBER_REGEX = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
INTEGER_REGEX = r"-?(?:0|[1-9][0-9]*)"
_WHITESPACE = r"[ \t\n\r]+"


# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------


def compile_json_schema(
    schema: Any,
    *,
    whitespace: str = "flexible",
    key_order: str = "schema",
    strict: bool = False,
    limits: Limits = DEFAULT_LIMITS,
) -> Grammar:
    """Compile a JSON Schema (a parsed value, or its JSON text) to a `Grammar`.

    whitespace: "flexible" skips JSON whitespace between lexemes (an `%ignore`),
    "compact" allows none. key_order: "schema" (the only order supported) lists
    properties in schema order, then additional ones. strict: a relaxed keyword
    (see RELAXED_KEYWORDS) is an error instead of a warning. The grammar's
    `warnings` attribute lists every relaxation applied.
    """
    if whitespace not in ("flexible", "compact"):
        raise ValueError(f"whitespace must be 'flexible' or 'compact', not {whitespace!r}")
    if key_order != "schema":
        raise ValueError(f"key_order must be 'schema', not {key_order!r}")
    if isinstance(schema, (str, bytes, bytearray)):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(f"schema is not valid JSON: {e.msg} at line {e.lineno}:{e.colno}") from None
    try:
        comp = _Compiler(schema, strict=strict, limits=limits)
        root = comp.root()
        if root is NOTHING:
            raise GrammarError("the schema at # accepts no JSON value")
        grammar = _Generator(comp, limits).build(root, whitespace)
    except RecursionError:
        # Depth guards cover schema nesting; this catches pathological values (enum/const).
        raise LimitExceeded("max_schema_depth", MAX_SCHEMA_DEPTH, "schema or constant nested too deeply") from None
    grammar.warnings = list(comp.warnings)
    return grammar


def schema_ordered(schema: Any, value: Any) -> Any:
    """`value` with every object's keys in the order the grammar of `schema` writes them
    (listed properties in schema order, then the rest in their original order).

    Validity against a schema does not depend on key order but the grammar's does; this
    turns a valid instance into one the grammar accepts. Where alternatives apply, the
    first alternative the value satisfies decides the order.
    """
    if isinstance(schema, (str, bytes, bytearray)):
        schema = json.loads(schema)
    comp = _Compiler(schema, strict=False, limits=DEFAULT_LIMITS)
    return comp.reorder(comp.root(), value, 0)


# --------------------------------------------------------------------------------------
# JSON pointers
# --------------------------------------------------------------------------------------


def _ptr(path: tuple) -> str:
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


class _Where:
    """The pointer of `path`, spelled only if an error message formats it: most
    subschemas raise nothing, and spelling every pointer costs a share of a compile."""

    __slots__ = ("path",)

    def __init__(self, path: tuple):
        self.path = path

    def __str__(self) -> str:
        return _ptr(self.path)


def _decode_pointer(fragment: str, where: str) -> tuple:
    if fragment == "":
        return ()
    if not fragment.startswith("/"):
        raise GrammarError(f"$ref fragment {fragment!r} at {where} is not a JSON pointer")
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in fragment[1:].split("/"))


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema sees it: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _value_key(v: Any):
    """A hashable key equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, (int, float)):
        d = Decimal(v) if isinstance(v, int) else Decimal(repr(v))
        return ("num", d.normalize() if d else Decimal(0))
    if isinstance(v, list):
        return ("list", tuple(_value_key(x) for x in v))
    if isinstance(v, dict):
        return ("dict", frozenset((k, _value_key(x)) for k, x in v.items()))
    return ("other", repr(v))


# A string's `json.dumps(s, ensure_ascii=False)` spelling, without the encoder object
# json.dumps sets up per call (keys are spelled by the thousand).
_json_str = json.encoder.encode_basestring


# json.dumps builds an encoder per call unless every option is the default; enums of
# thousands of values are spelled one by one, so the encoders are made once.
_CANON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_SPELLING_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _canon(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, separators=(",", ":"))`."""
    return _CANON_ENCODER.encode(value)


# --------------------------------------------------------------------------------------
# Code point sets
# --------------------------------------------------------------------------------------

_MAX_CP = 0x10FFFF
_UNIVERSE = ((0, 0xD7FF), (0xE000, _MAX_CP))  # surrogates are not characters


def _cs(ranges: Iterable[tuple[int, int]]) -> tuple:
    """Normalise ranges to a sorted, merged tuple, surrogates removed."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        for ulo, uhi in _UNIVERSE:
            a, b = max(lo, ulo), min(hi, uhi)
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
    out.sort()
    merged: list[list[int]] = []
    for a, b in out:
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return tuple((a, b) for a, b in merged)


def _cs_complement(s: tuple) -> tuple:
    """The characters not in `s` (a set as `_cs` makes them: sorted, merged, without
    surrogates). Its gaps are already sorted and apart, so only the surrogates need
    cutting out of them."""
    out = []
    prev = 0
    for lo, hi in s:
        if lo > prev:
            _add_gap(out, prev, lo - 1)
        prev = hi + 1
    if prev <= _MAX_CP:
        _add_gap(out, prev, _MAX_CP)
    return tuple(out)


def _add_gap(out: list, lo: int, hi: int) -> None:
    if hi < 0xD800 or lo > 0xDFFF:
        out.append((lo, hi))
        return
    if lo < 0xD800:
        out.append((lo, 0xD7FF))
    if hi > 0xDFFF:
        out.append((0xE000, hi))


def _cs_intersect(a: tuple, b: tuple) -> tuple:
    """The characters in both sets (sets as `_cs` makes them; so is the result: a
    range of either set ends where the next character is outside it, so the pieces
    never touch)."""
    out = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        alo, ahi = a[i]
        blo, bhi = b[j]
        lo = alo if alo > blo else blo
        hi = ahi if ahi < bhi else bhi
        if lo <= hi:
            out.append((lo, hi))
        if ahi < bhi:
            i += 1
        else:
            j += 1
    return tuple(out)


_ALL = _cs([(0, _MAX_CP)])
_DIGITS = _cs([(0x30, 0x39)])
_WORDS = _cs([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
# ECMA-262 WhiteSpace and LineTerminator.
_SPACES = _cs(
    [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
     (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
)
_DOT = _cs_complement(_cs([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))
# Characters a JSON string must escape.
_SPECIAL = _cs([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_NOT_SPECIAL = _cs_complement(_SPECIAL)

_CATEGORY_NAMES = {
    "Letter": "L", "Cased_Letter": "LC", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt", "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M",
    "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Number": "N",
    "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
    "Punctuation": "P", "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd",
    "Open_Punctuation": "Ps", "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi",
    "Final_Punctuation": "Pf", "Other_Punctuation": "Po", "Symbol": "S", "Math_Symbol": "Sm",
    "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk", "Other_Symbol": "So", "Separator": "Z",
    "Space_Separator": "Zs", "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Other": "C",
    "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Private_Use": "Co", "Unassigned": "Cn",
}
_category_cache: dict[str, tuple] = {}


def _category_set(name: str) -> tuple | None:
    """Code points of a Unicode general category (Python's Unicode version), or None."""
    cat = _CATEGORY_NAMES.get(name, name)
    if cat in _category_cache:
        return _category_cache[cat]
    valid = {v for v in _CATEGORY_NAMES.values()} | {"Lu", "Ll", "Lt", "Lm", "Lo", "Cs"}
    if cat == "Any":
        return _ALL
    if cat == "ASCII":
        return _cs([(0, 0x7F)])
    if cat not in valid:
        return None
    ranges = []
    start = None
    for cp in range(_MAX_CP + 2):
        c = unicodedata.category(chr(cp)) if cp <= _MAX_CP else ""
        hit = c == cat or (len(cat) == 1 and c[:1] == cat) or (cat == "LC" and c in ("Lu", "Ll", "Lt"))
        if hit and start is None:
            start = cp
        elif not hit and start is not None:
            ranges.append((start, cp - 1))
            start = None
    result = _cs(ranges)
    _category_cache[cat] = result
    return result


# --------------------------------------------------------------------------------------
# ECMA-262 patterns
# --------------------------------------------------------------------------------------
# AST nodes are tuples: ("set", ranges) ("seq", items) ("alt", items) ("rep", node, lo, hi)
# ("bol",) ("eol",) ("look", negative, node).

_BOL = ("bol",)
_EOL = ("eol",)


class _EcmaParser:
    def __init__(self, pattern: str, where: str):
        self.p = pattern
        self.n = len(pattern)
        self.pos = 0
        self.where = where

    def error(self, msg: str, pos: int | None = None) -> GrammarError:
        pos = self.pos if pos is None else pos
        return GrammarError(f"{msg} at offset {pos} of pattern {self.p!r} at {self.where}")

    def parse(self) -> tuple:
        node = self.alt(0)
        if self.pos < self.n:
            raise self.error("unmatched ')'")
        return node

    def alt(self, depth: int) -> tuple:
        if depth > 100:
            raise self.error("groups nested too deeply")
        items = [self.seq(depth)]
        while self.pos < self.n and self.p[self.pos] == "|":
            self.pos += 1
            items.append(self.seq(depth))
        return items[0] if len(items) == 1 else ("alt", tuple(items))

    def seq(self, depth: int) -> tuple:
        items = []
        while self.pos < self.n and self.p[self.pos] not in "|)":
            items.append(self.term(depth))
        return items[0] if len(items) == 1 else ("seq", tuple(items))

    def term(self, depth: int) -> tuple:
        p = self.p
        c = p[self.pos]
        start = self.pos
        if c == "^":
            self.pos += 1
            return _BOL
        if c == "$":
            self.pos += 1
            return _EOL
        if c == "\\" and self.pos + 1 < self.n and p[self.pos + 1] in "bB":
            raise self.error(f"word boundary \\{p[self.pos + 1]} is not supported")
        if p.startswith("(?=", self.pos) or p.startswith("(?!", self.pos):
            neg = p[self.pos + 2] == "!"
            self.pos += 3
            inner = self.alt(depth + 1)
            self.expect_close(start)
            if self.pos < self.n and p[self.pos] in "*+?{" and self.quantifier() is not None:
                raise self.error("a quantified lookahead is not supported", start)
            return ("look", neg, inner)
        if p.startswith("(?<=", self.pos) or p.startswith("(?<!", self.pos):
            raise self.error("lookbehind is not supported")
        atom = self.atom(depth)
        while True:
            q = self.quantifier()
            if q is None:
                return atom
            lo, hi = q
            if self.pos < self.n and p[self.pos] == "?":
                self.pos += 1  # lazy: the same set of matches
            atom = ("rep", atom, lo, hi)
            save = self.pos
            if self.quantifier() is not None:
                raise self.error("nothing to repeat", save)

    def expect_close(self, start: int) -> None:
        if self.pos >= self.n or self.p[self.pos] != ")":
            raise self.error("missing ')'", start)
        self.pos += 1

    def quantifier(self) -> tuple[int, int | None] | None:
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
        if c == "{":
            m = re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}").match(self.p, self.pos)
            if not m:
                return None  # Annex B: a literal '{'
            lo = int(m.group(1))
            hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
            if hi is not None and hi < lo:
                raise self.error(f"bad repetition {m.group(0)}")
            if lo > 100_000 or (hi is not None and hi > 100_000):
                raise self.error(f"repetition {m.group(0)} is too large")
            self.pos = m.end()
            return lo, hi
        return None

    def atom(self, depth: int) -> tuple:
        p = self.p
        c = p[self.pos]
        if c in "*+?":
            raise self.error("nothing to repeat")
        if c == "{" and re.compile(r"\{[0-9]+(,[0-9]*)?\}").match(p, self.pos):
            raise self.error("nothing to repeat")
        if c == "(":
            start = self.pos
            self.pos += 1
            if p.startswith("?:", self.pos):
                self.pos += 2
            elif p.startswith("?<", self.pos):
                end = p.find(">", self.pos)
                if end < 0:
                    raise self.error("unterminated group name", start)
                self.pos = end + 1
            elif p.startswith("?", self.pos):
                raise self.error("unknown group syntax", start)
            inner = self.alt(depth + 1)
            self.expect_close(start)
            return inner
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            self.pos += 1
            return ("set", _DOT)
        if c == "\\":
            kind, val = self.escape(in_class=False)
            return ("set", val if kind == "set" else _cs([(val, val)]))
        self.pos += 1
        cp = ord(c)
        return ("set", _cs([(cp, cp)]))

    def char_class(self) -> tuple:
        p = self.p
        start = self.pos
        self.pos += 1
        negate = False
        if self.pos < self.n and p[self.pos] == "^":
            negate = True
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while True:
            if self.pos >= self.n:
                raise self.error("unterminated character class", start)
            if p[self.pos] == "]":
                self.pos += 1
                break
            lo = self.class_atom()
            if self.pos + 1 < self.n and p[self.pos] == "-" and p[self.pos + 1] != "]":
                dash = self.pos
                self.pos += 1
                hi = self.class_atom()
                if lo[0] == "cp" and hi[0] == "cp":
                    if hi[1] < lo[1]:
                        raise self.error("character range out of order", dash)
                    ranges.append((lo[1], hi[1]))
                    continue
                # Annex B: a class escape next to '-' makes the '-' literal.
                for item in (lo, ("cp", 0x2D), hi):
                    ranges.extend(item[1] if item[0] == "set" else [(item[1], item[1])])
                continue
            ranges.extend(lo[1] if lo[0] == "set" else [(lo[1], lo[1])])
        s = _cs(ranges)
        return _cs_complement(s) if negate else s

    def class_atom(self) -> tuple:
        c = self.p[self.pos]
        if c == "\\":
            return self.escape(in_class=True)
        self.pos += 1
        return ("cp", ord(c))

    def escape(self, in_class: bool) -> tuple:
        p = self.p
        start = self.pos
        self.pos += 1
        if self.pos >= self.n:
            raise self.error("pattern ends with '\\'", start)
        c = p[self.pos]
        self.pos += 1
        sets = {"d": _DIGITS, "w": _WORDS, "s": _SPACES}
        if c in sets:
            return ("set", sets[c])
        if c.lower() in sets:
            return ("set", _cs_complement(sets[c.lower()]))
        simple = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
        if c in simple:
            return ("cp", simple[c])
        if c == "b" and in_class:
            return ("cp", 8)
        if c == "0" and not (self.pos < self.n and p[self.pos].isdigit()):
            return ("cp", 0)
        if c.isdigit():
            raise self.error("backreferences are not supported", start)
        if c == "k" and self.pos < self.n and p[self.pos] == "<":
            raise self.error("named backreferences are not supported", start)
        if c == "c" and self.pos < self.n and p[self.pos].isascii() and p[self.pos].isalpha():
            self.pos += 1
            return ("cp", ord(p[self.pos - 1]) % 32)
        if c == "x":
            m = re.compile(r"[0-9A-Fa-f]{2}").match(p, self.pos)
            if m:
                self.pos = m.end()
                return ("cp", int(m.group(0), 16))
            return ("cp", ord("x"))
        if c == "u":
            m = re.compile(r"\{([0-9A-Fa-f]{1,6})\}").match(p, self.pos)
            if m:
                self.pos = m.end()
                cp = int(m.group(1), 16)
                if cp > _MAX_CP:
                    raise self.error("code point above U+10FFFF", start)
                return ("cp", cp)
            m = re.compile(r"[0-9A-Fa-f]{4}").match(p, self.pos)
            if not m:
                return ("cp", ord("u"))
            self.pos = m.end()
            cp = int(m.group(0), 16)
            if 0xD800 <= cp <= 0xDBFF:
                m2 = re.compile(r"\\u([dD][c-fC-F][0-9A-Fa-f]{2})").match(p, self.pos)
                if m2:
                    self.pos = m2.end()
                    low = int(m2.group(1), 16)
                    return ("cp", 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00))
            if 0xD800 <= cp <= 0xDFFF:
                raise self.error("a lone surrogate cannot occur in a JSON string's text", start)
            return ("cp", cp)
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
            s = _category_set(name)
            if s is None:
                raise self.error(f"unicode property {name!r} is not supported", start)
            return ("set", _cs_complement(s) if c == "P" else s)
        return ("cp", ord(c))


def _walk(node: tuple):
    yield node
    kind = node[0]
    if kind in ("seq", "alt"):
        for item in node[1]:
            yield from _walk(item)
    elif kind == "rep":
        yield from _walk(node[1])
    elif kind == "look":
        yield from _walk(node[2])


def _nullable_ast(node: tuple) -> bool:
    kind = node[0]
    if kind == "set":
        return False
    if kind == "seq":
        return all(_nullable_ast(x) for x in node[1])
    if kind == "alt":
        return any(_nullable_ast(x) for x in node[1])
    if kind == "rep":
        return node[2] == 0 or _nullable_ast(node[1])
    return True  # anchors and lookaheads consume nothing


def _as_items(node: tuple) -> list:
    return list(node[1]) if node[0] == "seq" else [node]


def _branches(node: tuple, where: str, pattern: str) -> list[tuple[bool, bool, list, tuple]]:
    """Top-level alternatives as (anchored at start, anchored at end, conditions, body).

    Anchors are supported where they can be moved to the ends of a top-level
    alternative: directly there, or inside a leading/trailing group alternation
    (`^(a|$)` is `^a|^$`). Conditions are lookaheads right after a leading `^`
    (("look", negative, X): the text does / does not start with X) and the idiom
    `^((?!X).)*$` (("avoid", X): X occurs nowhere).
    """
    work = [(False, False, _as_items(a)) for a in (node[1] if node[0] == "alt" else (node,))]
    out = []
    while work:
        if len(out) + len(work) > 256:
            raise GrammarError(f"pattern {pattern!r} at {where} has too many alternatives around its anchors")
        start, end, items = work.pop(0)
        items = list(items)
        while items and items[0] == _BOL:
            items.pop(0)
            start = True
        while items and items[-1] == _EOL:
            items.pop()
            end = True
        if len(items) == 1 and items[0][0] == "alt" and not start and not end:
            work[:0] = [(False, False, _as_items(a)) for a in items[0][1]]
            continue
        if items and items[0][0] == "alt" and any(_as_items(a)[:1] == [_BOL] for a in items[0][1]):
            work[:0] = [(start, end, _as_items(a) + items[1:]) for a in items[0][1]]
            continue
        if items and items[-1][0] == "alt" and any(_as_items(a)[-1:] == [_EOL] for a in items[-1][1]):
            work[:0] = [(start, end, items[:-1] + _as_items(a)) for a in items[-1][1]]
            continue
        conds = []
        while start and items and items[0][0] == "look":
            conds.append(items.pop(0))
        if start and end and len(items) == 1 and items[0][0] == "rep":
            _, inner, lo, hi = items[0]
            parts = _as_items(inner)
            if len(parts) == 2 and parts[0][0] == "look" and parts[0][1] and parts[1][0] == "set":
                if _nullable_ast(parts[0][2]):
                    raise GrammarError(f"lookahead in pattern {pattern!r} at {where} can match the empty string")
                conds.append(("avoid", parts[0][2]))
                items = [("rep", parts[1], lo, hi)]
        for it in items:
            for sub in _walk(it):
                if sub == _BOL or sub == _EOL:
                    raise GrammarError(
                        f"anchor inside pattern {pattern!r} at {where} is not supported (only at the ends)"
                    )
                if sub[0] == "look":
                    raise GrammarError(
                        f"lookahead in pattern {pattern!r} at {where} is supported only right after a leading '^' "
                        "(or as ^((?!X).)*$)"
                    )
        for c in conds:
            for sub in _walk(c[-1]):
                if sub == _BOL or sub == _EOL or sub[0] == "look":
                    raise GrammarError(f"anchor or lookahead inside a lookahead of pattern {pattern!r} at {where}")
        out.append((start, end, conds, ("seq", tuple(items))))
    return out


def _esc_cp(cp: int, in_class: bool) -> str:
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


def _class_regex(s: tuple) -> str:
    """A regex atom matching exactly the code points of `s` (non-empty)."""
    if len(s) == 1 and s[0][0] == s[0][1]:
        return _esc_cp(s[0][0], False)
    comp = _cs_complement(s)
    negate = len(comp) < len(s) and comp
    rs = comp if negate else s
    parts = []
    for lo, hi in rs:
        if lo == hi:
            parts.append(_esc_cp(lo, True))
        elif hi == lo + 1:
            parts.append(_esc_cp(lo, True) + _esc_cp(hi, True))
        else:
            parts.append(_esc_cp(lo, True) + "-" + _esc_cp(hi, True))
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


_NAMED_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}


def _json_set_regex(s: tuple) -> str | None:
    """Regex over canonical JSON-encoded text for one character from `s` (None: empty)."""
    alts = []
    plain = _cs_intersect(s, _NOT_SPECIAL)
    if plain:
        alts.append(_class_regex(plain))
    specials = _cs_intersect(s, _SPECIAL)
    cps = [cp for lo, hi in specials for cp in range(lo, hi + 1)]
    if 0x22 in cps:
        alts.append(r"\\\"")
    if 0x5C in cps:
        alts.append(r"\\\\")
    named = "".join(_NAMED_ESCAPES[c] for c in cps if c in _NAMED_ESCAPES)
    if named:
        alts.append(r"\\" + (named if len(named) == 1 else "[" + named + "]"))
    hexes = [f"{c:02x}" for c in cps if c < 0x20 and c not in _NAMED_ESCAPES]
    if hexes:
        alts.append(r"\\u00" + (hexes[0] if len(hexes) == 1 else "(?:" + "|".join(hexes) + ")"))
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def _rep_suffix(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{'' if hi is None else hi}}}"


def _emit(node: tuple, mode: str) -> str | None:
    """Regex text for an AST node: mode "json" (canonical encoded text) or "py" (decoded
    text, Python `re`). None when the node matches nothing. Results are atoms or
    sequences safe to concatenate; alternations come wrapped."""
    kind = node[0]
    if kind == "set":
        if not node[1]:
            return None
        return _json_set_regex(node[1]) if mode == "json" else _class_regex(node[1])
    if kind == "seq":
        parts = []
        for it in node[1]:
            r = _emit(it, mode)
            if r is None:
                return None
            parts.append(r)
        return "".join(parts)
    if kind == "alt":
        parts = [r for r in (_emit(it, mode) for it in node[1]) if r is not None]
        if not parts:
            return None
        return "(?:" + "|".join(parts) + ")"
    if kind == "rep":
        _, inner, lo, hi = node
        r = _emit(inner, mode)
        if r is None or r == "":
            return "" if (r == "" or lo == 0) else None
        if hi == 0:
            return ""
        return "(?:" + r + ")" + _rep_suffix(lo, hi)
    if kind == "look":
        r = _emit(node[2], mode)
        return "(?" + ("!" if node[1] else "=") + (r if r is not None else "[^\\x00-\\U0010ffff]") + ")"
    raise AssertionError(kind)


class _Pattern:
    """A translated pattern: `json` is a regex (or None: no string matches) over the
    canonical JSON-encoded body of a string, `extended` says it uses `&`/`~`;
    `py` is the same language as a Python regex over the decoded text (fullmatch
    semantics). The compiler itself matches with `json` on midword's linear-time
    engine; `py` (backtracking) serves tests and debugging."""

    __slots__ = ("json", "extended", "_py_source", "_py")

    def __init__(self, json_regex: str | None, extended: bool, py_source: str | None):
        self.json = json_regex
        self.extended = extended
        self._py_source = py_source
        self._py: re.Pattern | None = None

    @property
    def py(self) -> re.Pattern | None:
        # Compiled on first use: only tests and checks of literal values need it, and
        # Python's re compiler costs as much as the rest of a schema's compile.
        if self._py is None and self._py_source is not None:
            try:
                self._py = re.compile(self._py_source, re.DOTALL)
            except re.error as e:  # pragma: no cover - our own output; a bug if reached
                raise GrammarError(f"internal error translating a pattern to Python: {e}") from None
        return self._py

    def matches(self, text: str) -> bool:
        py = self.py
        return py is not None and py.fullmatch(text) is not None


_pattern_cache: dict[str, _Pattern] = {}


def pattern_to_regex(pattern: str, where: "str | _Where" = "#") -> _Pattern:
    """Translate an ECMA-262 `pattern` (unanchored, JSON Schema semantics) into the
    language of strings containing a match, over canonical JSON-encoded text."""
    hit = _pattern_cache.get(pattern)
    if hit is not None:
        return hit
    ast = _EcmaParser(pattern, where).parse()
    branches = _branches(ast, where, pattern)
    any_json = CANON_CHAR + "*"
    any_py = _class_regex(_ALL) + "*"
    json_alts = []
    py_alts = []
    extended = False
    for start, end, looks, body in branches:
        core = _emit(body, "json")
        pcore = _emit(body, "py")
        if core is None:
            continue
        core = ("" if start else any_json) + core + ("" if end else any_json)
        pcore = ("" if start else any_py) + pcore + ("" if end else any_py)
        conj = ["(?:" + core + ")"] if core else ["(?:)"]
        dead = False
        for cond in looks:
            negative = cond[0] == "avoid" or cond[1]
            body_re = _emit(cond[-1], "json")
            if body_re is None:
                if negative:
                    continue  # (?!nothing) always holds
                dead = True
                break
            lead_json, lead_py = (any_json, any_py) if cond[0] == "avoid" else ("", "")
            conj.append(("~" if negative else "") + "(?:" + lead_json + body_re + any_json + ")")
            extended = True
            pcore = "(?" + ("!" if negative else "=") + lead_py + _emit(cond[-1], "py") + ")" + pcore
        if dead:
            continue
        json_alts.append(conj[0] if len(conj) == 1 else "(?:" + "&".join(conj) + ")")
        py_alts.append(pcore)
    if not json_alts:
        result = _Pattern(None, False, None)
    else:
        jre = json_alts[0] if len(json_alts) == 1 else "(?:" + "|".join(json_alts) + ")"
        if len(jre) > MAX_REGEX_CHARS:
            raise LimitExceeded("max_regex_chars", MAX_REGEX_CHARS, f"pattern {pattern!r} at {where}")
        result = _Pattern(jre, extended, "(?:" + "|".join(py_alts) + ")")
    if len(_pattern_cache) > 4096:
        _pattern_cache.clear()
    _pattern_cache[pattern] = result
    return result


# --------------------------------------------------------------------------------------
# Number regexes
# --------------------------------------------------------------------------------------


def _alt(parts: list[str]) -> str | None:
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _literal_regex(words: list[str]) -> str | None:
    """A compact regex for a finite set of strings: a trie whose sibling branches with
    equal continuations share one character class."""
    if not words:
        return None
    trie: dict = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def go(node: dict) -> str:
        by_rest: dict[str, list[str]] = {}
        end = False
        for ch, child in node.items():
            if ch == "":
                end = True
                continue
            by_rest.setdefault(go(child), []).append(ch)
        alts = []
        for rest, chars in by_rest.items():
            if len(chars) == 1:
                head = _esc_cp(ord(chars[0]), False)
            else:
                head = _class_regex(_cs((ord(c), ord(c)) for c in chars))
            alts.append(head + rest)
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if end:
            return "(?:" + body + ")?" if len(body) > 1 else body + "?"
        return body

    r = go(trie)
    return r if r else "(?:)"


def _digit_class(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    if lo == 0 and hi == 9:
        return "[0-9]"
    return f"[{lo}-{hi}]"


def _same_len_range(x: str, y: str) -> str:
    """Digit strings of len(x) == len(y) between x and y (inclusive, x <= y)."""
    if x == y:
        return x
    k = len(x) - 1
    x0, y0 = int(x[0]), int(y[0])
    if x[1:] == "0" * k and y[1:] == "9" * k:
        return _digit_class(x0, y0) + ("[0-9]" + _rep_suffix(k, k) if k > 1 else "[0-9]" * k)
    if x0 == y0:
        return x[0] + _same_len_range(x[1:], y[1:])
    alts = [x[0] + _same_len_range(x[1:], "9" * k)]
    if x0 + 1 <= y0 - 1:
        alts.append(_digit_class(x0 + 1, y0 - 1) + ("[0-9]" + _rep_suffix(k, k) if k > 1 else "[0-9]" * k))
    alts.append(y[0] + _same_len_range("0" * k, y[1:]))
    return "(?:" + "|".join(alts) + ")"


def _nat_range(a: int, b: int | None) -> str | None:
    """Naturals a..b (b None: unbounded) in decimal without leading zeros."""
    if a < 0:
        raise ValueError("negative lower bound")
    if b is not None and b < a:
        return None
    la = len(str(a))
    lb = len(str(b)) if b is not None else la
    alts = []
    for n in range(la, lb + 1):
        lo = max(a, 0 if n == 1 else 10 ** (n - 1))
        hi = 10**n - 1 if (b is None or n < lb) else b
        if lo <= hi:
            alts.append(_same_len_range(str(lo), str(hi)))
    if b is None:
        alts.append("[1-9][0-9]" + _rep_suffix(la, None))
    return _alt(alts)


def integer_range_regex(lo: int | None, hi: int | None) -> str | None:
    """Regex for the JSON integers in [lo, hi] (None: unbounded); None if the range is empty."""
    if lo is None and hi is None:
        return INTEGER_REGEX
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    if hi is None or hi >= 0:
        parts.append(_nat_range(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        top = -1 if hi is None or hi >= 0 else hi
        r = _nat_range(-top, None if lo is None else -lo)
        if r is not None:
            parts.append("-" + r)
    return _alt(parts)


# Fraction languages: (regex for non-empty digit strings or None, whether "no digits" is in).
# A digit string s stands for the value 0.s, so these languages are closed under
# appending zeros; "empty" is the number without a fraction part.


def _frac_full(fr: tuple) -> str | None:
    ne, empty = fr
    if ne is None:
        return "" if empty else None
    return "(?:" + ne + ")?" if empty else "(?:" + ne + ")"


def _frac_ge(a: str, excl: bool) -> tuple:
    if a == "":
        return ("0*[1-9][0-9]*", False) if excl else ("[0-9]+", True)
    d = int(a[0])
    alts = []
    if d < 9:
        alts.append(_digit_class(d + 1, 9) + "[0-9]*")
    t = _frac_full(_frac_ge(a[1:], excl))
    if t is not None:
        alts.append(str(d) + t)
    return (_alt(alts), False)


def _frac_le(b: str, excl: bool) -> tuple:
    if b == "":
        return (None, False) if excl else ("0+", True)
    d = int(b[0])
    alts = []
    if d > 0:
        alts.append(_digit_class(0, d - 1) + "[0-9]*")
    t = _frac_full(_frac_le(b[1:], excl))
    if t is not None:
        alts.append(str(d) + t)
    return (_alt(alts), True)


def _frac_le_pos(b: str, excl: bool) -> tuple:
    """0 < value <= 0.b (< if excl)."""
    if b == "":
        return (None, False)
    d = int(b[0])
    alts = []
    if d > 1:
        alts.append(_digit_class(1, d - 1) + "[0-9]*")
    if d > 0:
        alts.append("0+[1-9][0-9]*")
        t = _frac_full(_frac_le(b[1:], excl))
    else:
        t = _frac_full(_frac_le_pos(b[1:], excl))
    if t is not None:
        alts.append(str(d) + t)
    return (_alt(alts), False)


def _frac_between(a: str, ax: bool, b: str, bx: bool) -> tuple:
    """0.a <= value <= 0.b (strict where ax/bx), given 0.a <= 0.b."""
    if a == "":
        return _frac_le_pos(b, bx) if ax else _frac_le(b, bx)
    da, db = int(a[0]), int(b[0])
    if da == db:
        t = _frac_full(_frac_between(a[1:], ax, b[1:], bx))
        return (str(da) + t if t is not None else None, False)
    alts = []
    t = _frac_full(_frac_ge(a[1:], ax))
    if t is not None:
        alts.append(str(da) + t)
    if da + 1 <= db - 1:
        alts.append(_digit_class(da + 1, db - 1) + "[0-9]*")
    t = _frac_full(_frac_le(b[1:], bx))
    if t is not None:
        alts.append(str(db) + t)
    return (_alt(alts), False)


def _frac_emit(fr: tuple) -> str | None:
    ne, empty = fr
    if ne is None:
        return "" if empty else None
    return "(?:\\.(?:" + ne + "))?" if empty else "\\.(?:" + ne + ")"


def _dec_parts(d: Decimal) -> tuple[int, str]:
    s = format(d, "f")
    i, _, f = s.partition(".")
    return int(i), f.rstrip("0")


def _magnitude_range(lo: Decimal, lox: bool, hi: Decimal | None, hix: bool) -> str | None:
    """Unsigned decimals `I(.F)?` in [lo, hi] (exclusive ends where lox/hix)."""
    if hi is not None and (lo > hi or (lo == hi and (lox or hix))):
        return None
    li, lf = _dec_parts(lo)
    alts = []
    if hi is None:
        r = _nat_range(li + 1, None)
        alts.append(r + "(?:\\.[0-9]+)?")
        f = _frac_emit(_frac_ge(lf, lox))
        if f is not None:
            alts.append(str(li) + f)
        return _alt(alts + _exponent_forms(lo, lox, hi, hix))
    hi_i, hf = _dec_parts(hi)
    if li == hi_i:
        f = _frac_emit(_frac_between(lf, lox, hf, hix))
        alts.append(None if f is None else str(li) + f)
        return _alt(alts + _exponent_forms(lo, lox, hi, hix))
    f = _frac_emit(_frac_ge(lf, lox))
    if f is not None:
        alts.append(str(li) + f)
    r = _nat_range(li + 1, hi_i - 1)
    if r is not None:
        alts.append(r + "(?:\\.[0-9]+)?")
    f = _frac_emit(_frac_le(hf, hix))
    if f is not None:
        alts.append(str(hi_i) + f)
    return _alt(alts + _exponent_forms(lo, lox, hi, hix))


def _exponent_forms(lo: Decimal, lox: bool, hi: Decimal | None, hix: bool) -> list[str]:
    """Exponent spellings of magnitudes that lie in [lo, hi] whatever their digits: a
    one-digit mantissa with a negative exponent is in [0, 1), with a positive one in
    [10, inf). These cover what Python's float repr writes (1e-06, 1.5e+16)."""
    out = []
    if lo == 0 and (hi is None or hi >= 1):
        mant = "(?:[1-9](?:\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)" if lox else "[0-9](?:\\.[0-9]+)?"
        out.append(mant + "[eE]-0*[1-9][0-9]*")
    if hi is None and (lo < 10 or (lo == 10 and not lox)):
        out.append("[1-9](?:\\.[0-9]+)?[eE]\\+?0*[1-9][0-9]*")
    return out


def number_range_regex(lo: Decimal | None, lox: bool, hi: Decimal | None, hix: bool) -> str | None:
    """Regex for JSON numbers in a range, exactly: every number it matches is in the range.

    Bounds are any finite decimals; None means unbounded (both None: the full JSON
    number syntax). Plain decimals are matched for every in-range value; exponent
    spellings only where no digit choice can leave the range (see _exponent_forms).
    Returns None for an empty range.
    """
    if lo is None and hi is None:
        return NUMBER_REGEX
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lox or hix))):
        return None
    zero = Decimal(0)
    parts = []
    if hi is None or hi > 0 or (hi == 0 and not hix):
        low, lowx = (zero, False) if lo is None or lo < 0 else (lo, lox)
        parts.append(_magnitude_range(low, lowx, hi, hix))
    if lo is None or lo < 0:
        mlo, mlox = (zero, True) if hi is None or hi >= 0 else (-hi, hix)
        mhi, mhix = (None, False) if lo is None else (-lo, lox)
        r = _magnitude_range(mlo, mlox, mhi, mhix)
        if r is not None:
            # _alt wraps alternations, so a plain prefix concatenates safely.
            parts.append("-" + r)
    return _alt(parts)


def _dfa_to_regex(
    n: int, start_edges: dict[int, str], edges: dict[tuple[int, int], str], accept: set[int]
) -> str | None:
    """State elimination (Brzozowski–McCluskey) for a DFA whose labels are regex atoms."""
    S, F = n, n + 1
    g: dict[tuple[int, int], str] = dict(edges)
    for t, lab in start_edges.items():
        g[(S, t)] = lab
    for a in accept:
        g[(a, F)] = ""

    def union(x: str | None, y: str) -> str:
        return y if x is None else "(?:" + x + "|" + y + ")"

    merged: dict[tuple[int, int], str] = {}
    for k, v in g.items():
        merged[k] = v
    g = merged
    for q in range(n):
        loop = g.pop((q, q), None)
        ins = [(p, lab) for (p, t), lab in g.items() if t == q]
        outs = [(t, lab) for (p, t), lab in g.items() if p == q]
        for p, _ in ins:
            del g[(p, q)]
        for t, _ in outs:
            del g[(q, t)]
        mid = "" if loop is None else "(?:" + loop + ")*"
        for p, a in ins:
            for t, b in outs:
                g[(p, t)] = union(g.get((p, t)), a + mid + b)
        if sum(len(v) for v in g.values()) > MAX_REGEX_CHARS:
            return None
    return g.get((S, F))


def multiple_of_regex(k: int) -> str | None:
    """Regex for the JSON integers divisible by k (k >= 1), or None if it would be too large."""
    if k < 1:
        raise ValueError("k must be positive")
    if k == 1:
        return INTEGER_REGEX
    a = b = 0
    m = k
    while m % 2 == 0:
        m //= 2
        a += 1
    while m % 5 == 0:
        m //= 5
        b += 1
    if m == 1:
        # k divides 10^d: the last d digits decide.
        d = max(a, b)
        if 10**d // k <= 5000:
            small = _literal_regex([str(r) for r in range(k, 10**d, k)])
            suffix = _literal_regex([str(r).zfill(d) for r in range(0, 10**d, k)])
            nonzero = _alt(["[1-9][0-9]*" + suffix] + ([small] if small else []))
            return "(?:0|-?" + nonzero + ")"
    # Residue DFA over the digits of a positive number (first digit 1-9).
    start: dict[int, list[int]] = {}
    for dgt in range(1, 10):
        start.setdefault(dgt % k, []).append(dgt)
    trans: dict[tuple[int, int], list[int]] = {}
    for r in range(k):
        for dgt in range(10):
            trans.setdefault((r, (10 * r + dgt) % k), []).append(dgt)

    def label(ds: list[int]) -> str:
        ds = sorted(ds)
        if len(ds) == 1:
            return str(ds[0])
        if ds == list(range(ds[0], ds[-1] + 1)):
            return f"[{ds[0]}-{ds[-1]}]"
        return "[" + "".join(map(str, ds)) + "]"

    body = _dfa_to_regex(
        k,
        {t: label(ds) for t, ds in start.items()},
        {e: label(ds) for e, ds in trans.items()},
        {0},
    )
    if body is None:
        return None
    return "(?:0|-?(?:" + body + "))"


# --------------------------------------------------------------------------------------
# The IR
# --------------------------------------------------------------------------------------


class _Node:
    """Immutable IR node with structural equality (the key) and a cached hash."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: tuple):
        self.key = key
        self._hash = hash(key)

    def __eq__(self, other):
        return self is other or (type(self) is type(other) and self._hash == other._hash and self.key == other.key)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"{type(self).__name__}{self.key!r}"


class _AnyT(_Node):
    __slots__ = ()


class _NullT(_Node):
    __slots__ = ()


class _BoolT(_Node):
    __slots__ = ()


class _Num(_Node):
    """Numbers in a range; `integer`: integral values only, `fractional`: non-integral
    values only; `mult`: a multiple of it; `not_mult`: integers that are multiples of
    none of these integers; `excluded`: values (Decimals) that may not occur."""

    __slots__ = ("integer", "lo", "lox", "hi", "hix", "mult", "fractional", "not_mult", "excluded")

    def __init__(self, integer=False, lo=None, lox=False, hi=None, hix=False, mult=None, fractional=False, not_mult=(),
                 excluded=()):
        super().__init__(("num", integer, lo, lox, hi, hix, mult, fractional, not_mult, excluded))
        self.integer, self.lo, self.lox, self.hi, self.hix, self.mult = integer, lo, lox, hi, hix, mult
        self.fractional, self.not_mult, self.excluded = fractional, not_mult, excluded


class _Str(_Node):
    """Strings with a length range matching every pattern and none of `excluded`
    (string-kind nodes: `_Str` or string `_Const`)."""

    __slots__ = ("min_len", "max_len", "patterns", "excluded")

    def __init__(self, min_len=0, max_len=None, patterns=(), excluded=()):
        super().__init__(("str", min_len, max_len, patterns, excluded))
        self.min_len, self.max_len, self.patterns, self.excluded = min_len, max_len, patterns, excluded


class _Arr(_Node):
    """Arrays: element i satisfies prefix[i], later ones `items`; a length range; and for
    each schema in `contains`, some element after the prefix satisfies it."""

    __slots__ = ("prefix", "items", "min_items", "max_items", "contains")

    def __init__(self, prefix=(), items=None, min_items=0, max_items=None, contains=()):
        items = ANY if items is None else items
        super().__init__(("arr", prefix, items, min_items, max_items, contains))
        self.prefix, self.items, self.min_items, self.max_items = prefix, items, min_items, max_items
        self.contains = contains


class _Obj(_Node):
    """Objects: `props` in schema order, `patterns` (patternProperties), `additional`
    for other keys, `required` names, a member count range, and `names`: the schema
    every key must satisfy (propertyNames; ANY when unconstrained)."""

    __slots__ = ("props", "patterns", "additional", "required", "min_props", "max_props", "names", "_by_name")

    def __init__(self, props=(), patterns=(), additional=None, required=(), min_props=0, max_props=None, names=None):
        additional = ANY if additional is None else additional
        names = ANY if names is None else names
        super().__init__(("obj", props, patterns, additional, required, min_props, max_props, names))
        self.props, self.patterns, self.additional = props, patterns, additional
        self.required, self.min_props, self.max_props = required, min_props, max_props
        self.names = names
        self._by_name: dict[str, _Node] | None = None

    def prop(self, name: str):
        if len(self.props) < 8:
            for k, v in self.props:
                if k == name:
                    return v
            return None
        # Merging and generating ask for every property by name: a scan each would be
        # quadratic in the number of properties.
        by_name = self._by_name
        if by_name is None:
            by_name = self._by_name = {}
            for k, v in self.props:
                by_name.setdefault(k, v)
        return by_name.get(name)


class _Const(_Node):
    __slots__ = ("value",)

    def __init__(self, value):
        super().__init__(("const", _canon(value)))
        self.value = value


class _Ref(_Node):
    """A lazily unfolded schema: `atoms` are base reference names (str) and IR nodes,
    and the schema is their intersection."""

    __slots__ = ("atoms",)

    def __init__(self, atoms: frozenset):
        super().__init__(("ref", atoms))
        self.atoms = atoms


class _Union(_Node):
    __slots__ = ("parts",)

    def __init__(self, parts: tuple):
        super().__init__(("union", parts))
        self.parts = parts


ANY = _AnyT(("any",))
NOTHING = _Union(())
_NULL = _NullT(("null",))
_BOOL = _BoolT(("bool",))
# The unconstrained parts of each type: together they are ANY.
_ANY_PARTS = frozenset({_NULL, _BOOL, _Num(), _Str(), _Arr(), _Obj()})


def _kind(n: _Node) -> str:
    if isinstance(n, _Const):
        v = n.value
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, (int, float)):
            return "num"
        if isinstance(v, str):
            return "str"
        return "arr" if isinstance(v, list) else "obj"
    return {_NullT: "null", _BoolT: "bool", _Num: "num", _Str: "str", _Arr: "arr", _Obj: "obj"}[type(n)]


def _union(parts: Iterable[_Node]) -> _Node:
    flat: list[_Node] = []
    seen = set()
    for p in parts:
        if p is ANY:
            return ANY
        sub = p.parts if isinstance(p, _Union) else (p,)
        for q in sub:
            if q not in seen:
                seen.add(q)
                flat.append(q)
    if len(flat) > MAX_UNION_PARTS:
        raise LimitExceeded("max_union_parts", MAX_UNION_PARTS, "anyOf/allOf expansion has too many alternatives")
    if not flat:
        return NOTHING
    if len(flat) == 1:
        return flat[0]
    if _ANY_PARTS <= seen:
        return ANY
    return _Union(tuple(flat))


# --------------------------------------------------------------------------------------
# Compiler: schema documents -> IR
# --------------------------------------------------------------------------------------


class _Compiler:
    def __init__(self, schema: Any, *, strict: bool, limits: Limits):
        self.doc = schema
        self.strict = strict
        self.limits = limits
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        # Base reference name -> (schema value, base URI, path).
        self.targets: dict[str, tuple[Any, str, tuple]] = {}
        self.bodies: dict[str, _Node] = {}
        self.in_progress: set[str] = set()
        self.unfolding: set = set()
        self.synthetic: dict[frozenset, _Node] = {}
        self.depth = 0
        self.steps = 0
        self.validating = 0
        self._exprs = None
        self._empty_cache: dict[str | tuple[str, str], bool] = {}
        self._dfas: dict[str, Any] = {}
        schema_uri = schema.get("$schema", "") if isinstance(schema, dict) else ""
        self.honor_id = not isinstance(schema_uri, str) or "draft-04" in schema_uri or "draft-03" in schema_uri
        # Resource URIs (no fragment) and anchors -> (schema, base, path).
        self.resources: dict[str, tuple[Any, str, tuple]] = {}
        self.anchors: dict[str, tuple[Any, str, tuple]] = {}
        self.base_of: dict[tuple, str] = {}
        root_base = self._own_id(schema, "") if isinstance(schema, dict) else ""
        self.root_base = root_base
        self.resources[root_base] = (schema, root_base, ())
        self.resources.setdefault("", (schema, root_base, ()))
        # Indexed at the first $ref: most schemas have none, and until then normalisation
        # works out each subschema's base on its way down, as the index would.
        self._indexed = False

    def exprs(self):
        """The process-wide expression set the lexer will use (regex.ExprSet.shared)."""
        if self._exprs is None:
            from .regex import ExprSet

            self._exprs = ExprSet.shared(self.limits)
        return self._exprs

    def regex_empty(self, regex: str) -> bool:
        """Whether an extended-syntax regex denotes the empty language (unsure: False)."""
        hit = self._empty_cache.get(regex)
        if hit is not None:
            return hit
        exprs = self.exprs()
        try:
            empty = exprs.is_empty(exprs.parse(regex, "", extended=True))
        except LimitExceeded:
            empty = False
        self._empty_cache[regex] = empty
        return empty

    def regexes_disjoint(self, a: str, b: str) -> bool:
        """Whether two extended-syntax regexes share no string (unsure: False): the
        emptiness of `(?:a)&(?:b)`, with each side parsed on its own. oneOf compares
        every pair of branches, so each regex is parsed (and cached) once, not once
        per pair inside a combined text."""
        key = (a, b)
        hit = self._empty_cache.get(key)
        if hit is not None:
            return hit
        exprs = self.exprs()
        try:
            empty = exprs.is_empty(exprs.and_(exprs.parse(a, "", extended=True), exprs.parse(b, "", extended=True)))
        except LimitExceeded:
            empty = False
        self._empty_cache[key] = empty
        return empty

    def pattern_matches(self, pattern: str, text: str) -> bool:
        """Whether a (translated) pattern finds a match in `text`, in linear time."""
        pr = pattern_to_regex(pattern)
        if pr.json is None:
            return False
        dfa = self._dfas.get(pattern)
        if dfa is None:
            from .regex import LazyDFA

            exprs = self.exprs()
            dfa = self._dfas[pattern] = LazyDFA(exprs, exprs.parse(pr.json, "", extended=True))
        return dfa.matches(_json_str(text)[1:-1].encode("utf-8"))

    # Warnings --------------------------------------------------------------------
    def relax(self, keyword: str, path: tuple, detail: str = "") -> None:
        msg = f"{keyword} at {_ptr(path)}: {detail or RELAXED_KEYWORDS[keyword]}"
        if self.strict:
            raise GrammarError(f"{msg} (strict mode)")
        if msg not in self._warned:
            self._warned.add(msg)
            self.warnings.append(msg)

    # $id / $ref -------------------------------------------------------------------
    def _own_id(self, s: dict, base: str) -> str:
        ident = s.get("$id")
        if not isinstance(ident, str) and self.honor_id and isinstance(s.get("id"), str):
            ident = s.get("id")
        if not isinstance(ident, str) or ident.startswith("#"):
            return base
        return urllib.parse.urljoin(base, ident).split("#", 1)[0] if base else ident.split("#", 1)[0]

    def _index(self, s: Any, base: str, path: tuple, depth: int = 0) -> None:
        """Record the base URI of every subschema, its `$id`s and anchors."""
        if depth > MAX_SCHEMA_DEPTH:
            raise LimitExceeded("max_schema_depth", MAX_SCHEMA_DEPTH, f"schema nested too deeply at {_ptr(path)}")
        if not isinstance(s, dict):
            return
        new_base = self._own_id(s, base)
        if new_base != base:
            self.resources.setdefault(new_base, (s, new_base, path))
        base = new_base
        self.base_of[path] = base
        for key in ("$id", "id") if self.honor_id else ("$id",):
            v = s.get(key)
            if isinstance(v, str) and v.startswith("#") and len(v) > 1:
                self.anchors.setdefault(base + v, (s, base, path))
        anchor = s.get("$anchor")
        if isinstance(anchor, str):
            self.anchors.setdefault(base + "#" + anchor, (s, base, path))
        for key, v in s.items():
            shape = _SUBSCHEMA_SHAPE.get(key)
            if shape is None:
                continue
            if shape == "map":
                if isinstance(v, dict):
                    for k2, v2 in v.items():
                        self._index(v2, base, path + (key, k2), depth + 1)
            elif shape == "list" and isinstance(v, list):
                for i, v2 in enumerate(v):
                    self._index(v2, base, path + (key, i), depth + 1)
            else:
                self._index(v, base, path + (key,), depth + 1)

    def _resolve(self, ref: str, base: str, path: tuple) -> str:
        """The reference name for `$ref` (registering its target)."""
        if not self._indexed:
            self._indexed = True
            self._index(self.doc, self.root_base, ())
        where = _ptr(path)
        absolute = urllib.parse.urljoin(base, ref) if base else ref
        uri, _, fragment = absolute.partition("#")
        fragment = urllib.parse.unquote(fragment)
        target = None
        if fragment and not fragment.startswith("/"):
            target = self.anchors.get(uri + "#" + fragment)
            if target is None:
                raise GrammarError(f"$ref {ref!r} at {where}: anchor {fragment!r} not found")
            doc, doc_base, doc_path = target
            name = _ptr(doc_path)
            self.targets.setdefault(name, (doc, doc_base, doc_path))
            return name
        res = self.resources.get(uri)
        if res is None:
            if uri in ("", self.root_base) or not urllib.parse.urlparse(ref).netloc and ref.startswith("#"):
                res = self.resources[self.root_base]
            else:
                raise GrammarError(
                    f"$ref {ref!r} at {where}: cannot resolve {uri!r} "
                    "(only references into this document are supported)"
                )
        pointer = _decode_pointer(fragment, where)
        found = self._follow(res, pointer)
        if found is None and res[2] != ():
            # Fall back to the document root (common in schemas with decorative ids).
            found = self._follow(self.resources[self.root_base], pointer)
        if found is None:
            raise GrammarError(f"$ref {ref!r} at {where}: {fragment or '#'} not found in the document")
        node, doc_path = found
        name = _ptr(doc_path)
        self.targets.setdefault(name, (node, self.base_of.get(doc_path, res[1]), doc_path))
        return name

    @staticmethod
    def _follow(res: tuple, pointer: tuple):
        node, _, doc_path = res
        for tok in pointer:
            if isinstance(node, dict) and tok in node:
                node = node[tok]
            elif isinstance(node, list) and tok.isdigit() and int(tok) < len(node):
                tok = int(tok)
                node = node[tok]
            else:
                return None
            doc_path = doc_path + (tok,)
        return node, doc_path

    def body(self, name: str) -> _Node:
        b = self.bodies.get(name)
        if b is not None:
            return b
        if name in self.in_progress:
            raise GrammarError(f"circular $ref: {name} refers to itself without any structure in between")
        schema, base, path = self.targets[name]
        self.in_progress.add(name)
        try:
            b = self.norm(schema, base, path)
        finally:
            self.in_progress.discard(name)
        self.bodies[name] = b
        return b

    def unfold(self, r: _Ref) -> _Node:
        """The IR a reference stands for (computed once per reference)."""
        b = self.bodies.get(r.key)
        if b is not None:
            return b
        if r.key in self.unfolding:
            raise GrammarError(
                f"circular $ref: {', '.join(sorted(a for a in r.atoms if isinstance(a, str)))} "
                "refers to itself without any structure in between"
            )
        self.unfolding.add(r.key)
        try:
            acc = self._unfold_atoms(r)
        finally:
            self.unfolding.discard(r.key)
        self.bodies[r.key] = acc
        return acc

    def _unfold_atoms(self, r: _Ref) -> _Node:
        acc: _Node = ANY
        # Named references first, in name order, so the result does not depend on set order.
        for atom in sorted(r.atoms, key=lambda a: (0, a) if isinstance(a, str) else (1, "")):
            acc = self.intersect(acc, self.body(atom) if isinstance(atom, str) else atom)
        return acc

    def root(self) -> _Node:
        return self.norm(self.doc, self.root_base, ())

    # Normalisation -------------------------------------------------------------------
    def norm(self, s: Any, base: str, path: tuple) -> _Node:
        self.depth += 1
        try:
            if self.depth > MAX_SCHEMA_DEPTH:
                raise LimitExceeded("max_schema_depth", MAX_SCHEMA_DEPTH, f"schema nested too deeply at {_ptr(path)}")
            return self._norm(s, base, path)
        finally:
            self.depth -= 1

    def _norm(self, s: Any, base: str, path: tuple) -> _Node:
        if s is True:
            return ANY
        if s is False:
            return NOTHING
        if not isinstance(s, dict):
            raise GrammarError(f"schema at {_ptr(path)} must be an object or a boolean, not {type(s).__name__}")
        known = self.base_of.get(path)
        base = known if known is not None else self._own_id(s, base)
        if not UNSUPPORTED_KEYWORDS.isdisjoint(s):
            for key in s:
                if key in UNSUPPORTED_KEYWORDS:
                    raise GrammarError(f"unsupported keyword {key!r} at {_ptr(path)}")
        for key in ("unevaluatedProperties", "unevaluatedItems"):
            if key not in s or s[key] is True:
                continue
            applicators = [k for k in _APPLICATORS if k in s]
            if applicators:
                raise GrammarError(
                    f"unsupported keyword {key!r} at {_ptr(path)} (only without in-place applicators such as "
                    f"{', '.join(applicators)} beside it)"
                )

        node = self._typed(s, base, path)
        if "enum" in s or "const" in s:
            values = []
            if "enum" in s:
                if not isinstance(s["enum"], list):
                    raise GrammarError(f"enum at {_ptr(path)} must be an array")
                values = list(s["enum"])
            if "const" in s:
                values = [v for v in values if _json_equal(v, s["const"])] if "enum" in s else [s["const"]]
            kept = []
            seen = set()
            for v in values:
                key = _value_key(v)
                if key not in seen and self.accepts(node, v):
                    seen.add(key)
                    kept.append(v)
            node = _union(_Const(v) for v in kept)
        if "$ref" in s:
            ref = s["$ref"]
            if not isinstance(ref, str):
                raise GrammarError(f"$ref at {_ptr(path)} must be a string")
            name = self._resolve(ref, base, path)
            node = self.intersect(node, _Ref(frozenset([name])))
        if "allOf" in s:
            for i, sub in enumerate(self._schema_list(s, "allOf", path)):
                node = self.intersect(node, self.norm(sub, base, path + ("allOf", i)))
        if "anyOf" in s:
            subs = self._schema_list(s, "anyOf", path)
            node = self.intersect(node, _union(self.norm(sub, base, path + ("anyOf", i)) for i, sub in enumerate(subs)))
        if "not" in s:
            inner = self.norm(s["not"], base, path + ("not",))
            node = self.intersect(node, self.negate(inner, _ptr(path + ("not",))))
        if "if" in s and ("then" in s or "else" in s):
            # if/then/else == (if AND then) OR (NOT if AND else)
            cond = self.norm(s["if"], base, path + ("if",))
            then = self.norm(s.get("then", True), base, path + ("then",))
            other = self.norm(s.get("else", True), base, path + ("else",))
            alt = _union([self.intersect(cond, then), self.intersect(self.negate(cond, _ptr(path + ("if",))), other)])
            node = self.intersect(node, alt)
        node = self._dependencies(s, node, base, path)
        if "oneOf" in s:
            subs = self._schema_list(s, "oneOf", path)
            raw = [self.norm(sub, base, path + ("oneOf", i)) for i, sub in enumerate(subs)]
            node = self._one_of(node, raw, _ptr(path))
        return node

    def _dependencies(self, s: dict, node: _Node, base: str, path: tuple) -> _Node:
        """dependentRequired / dependentSchemas / draft-04..07 dependencies: for each
        trigger key, (key absent) OR (key present AND the dependency)."""
        deps: list[tuple[str, Any, tuple]] = []
        for key in ("dependencies", "dependentRequired", "dependentSchemas"):
            if key not in s:
                continue
            if not isinstance(s[key], dict):
                raise GrammarError(f"{key} at {_ptr(path + (key,))} must be an object")
            for trigger, dep in s[key].items():
                deps.append((trigger, dep, path + (key, trigger)))
        for trigger, dep, dpath in deps:
            if isinstance(dep, list) and dpath[-2] != "dependentSchemas":
                if not all(isinstance(x, str) for x in dep):
                    raise GrammarError(f"dependency at {_ptr(dpath)} must be an array of property names")
                then: _Node = _Obj(required=tuple(dict.fromkeys([trigger] + dep)))
            elif dpath[-2] == "dependentRequired":
                raise GrammarError(f"dependentRequired at {_ptr(dpath)} must be an array of property names")
            else:
                then = self.intersect(_Obj(required=(trigger,)), self.norm(dep, base, dpath))
            absent = _Obj(props=((trigger, NOTHING),))
            others = _union(p for p in _ANY_PARTS if not isinstance(p, _Obj))
            node = self.intersect(node, _union([others, absent, then]))
        return node

    def _one_of(self, node: _Node, raw: list[_Node], where: str) -> _Node:
        """`node` AND oneOf(raw) as a union: directly when the branches are provably
        disjoint, else as the union of (branch i AND NOT each overlapping branch j),
        where those complements can be expressed."""
        pairs = [(self.intersect(node, r), r) for r in raw]
        pairs = [(b, r) for b, r in pairs if b is not NOTHING]
        live = [b for b, _ in pairs]
        n = len(live)
        overlap = [[False] * n for _ in range(n)]
        exclusive = True
        for i in range(n):
            for j in range(i + 1, n):
                if not self.disjoint(live[i], live[j], 0):
                    overlap[i][j] = overlap[j][i] = True
                    exclusive = False
        if exclusive:
            return _union(live)
        try:
            negs: dict[int, _Node] = {}
            out = []
            for i in range(n):
                acc = live[i]
                for j in range(n):
                    if j != i and overlap[i][j]:
                        if j not in negs:
                            # node AND b_i AND NOT (node AND b_j) == node AND b_i AND NOT b_j
                            negs[j] = self.negate(pairs[j][1], where)
                        acc = self.intersect(acc, negs[j])
                out.append(acc)
            return _union(out)
        except (GrammarError, LimitExceeded) as e:
            raise GrammarError(
                f"oneOf at {where}: cannot prove its branches exclusive (different types, constants, or a "
                f"required property with disjoint values) nor build their complement ({e})"
            ) from None

    # Complement ---------------------------------------------------------------------------
    def negate(self, node: _Node, where: str, depth: int = 0) -> _Node:
        """The IR of NOT node, where it is expressible; a GrammarError naming `where` otherwise."""
        if depth > 16:
            raise GrammarError(f"not at {where}: cannot complement a recursive schema")
        if node is ANY:
            return NOTHING
        if node is NOTHING:
            return ANY
        if isinstance(node, _Ref):
            if any(isinstance(x, str) and x in self.in_progress for x in node.atoms):
                raise GrammarError(f"not at {where}: cannot complement a recursive schema")
            return self.negate(self.unfold(node), where, depth + 1)
        if isinstance(node, _Union):
            acc: _Node = ANY
            for p in node.parts:
                acc = self.intersect(acc, self.negate(p, where, depth))
            return acc
        kind = _kind(node)
        others = [p for p in _ANY_PARTS if _kind(p) != kind]
        return _union(others + [self._negate_within(node, kind, where, depth)])

    def _negate_within(self, node: _Node, kind: str, where: str, depth: int) -> _Node:
        """Values of the same kind as `node` that `node` rejects."""
        def unsupported(what: str) -> GrammarError:
            return GrammarError(f"not at {where}: cannot express the complement of {what}")

        if isinstance(node, _Const):
            v = node.value
            if v is None:
                return NOTHING
            if isinstance(v, bool):
                return _Const(not v)
            if isinstance(v, str):
                return _Str(excluded=(node,))
            if isinstance(v, (int, float)) and not (isinstance(v, float) and not math.isfinite(v)):
                d = Decimal(v) if isinstance(v, int) else Decimal(repr(v))
                return _Num(excluded=(d.normalize() if d else Decimal(0),))
            raise unsupported(f"the constant {_canon(v)[:40]}")
        if kind in ("null", "bool"):
            return NOTHING
        if isinstance(node, _Str):
            return _Str(excluded=(node,))
        if isinstance(node, _Num):
            parts = []
            if node.lo is not None:
                parts.append(_Num(hi=node.lo, hix=not node.lox))
            if node.hi is not None:
                parts.append(_Num(lo=node.hi, lox=not node.hix))
            if node.integer:
                parts.append(_Num(fractional=True))
            if node.fractional:
                parts.append(_Num(integer=True))
            if node.mult is not None:
                if Fraction(node.mult).denominator != 1:
                    raise unsupported(f"multipleOf {node.mult}")
                parts += [_Num(fractional=True), _Num(integer=True, not_mult=(node.mult,))]
            for k in node.not_mult:
                parts.append(_make_num(True, None, False, None, False, k, where))
            for x in node.excluded:
                parts.append(_Const(int(x) if x == x.to_integral_value() else float(x)))
            return _union(parts)
        if isinstance(node, _Arr):
            p = len(node.prefix)
            parts = []
            if node.min_items > 0:
                parts.append(_Arr(max_items=node.min_items - 1))
            if node.max_items is not None:
                parts.append(_Arr(min_items=node.max_items + 1))
            for i, sub in enumerate(node.prefix):
                parts.append(_make_arr((ANY,) * i + (self.negate(sub, where, depth + 1),), ANY, i + 1, None))
            if node.items is not ANY:
                parts.append(_make_arr((ANY,) * p, ANY, p + 1, None, (self.negate(node.items, where, depth + 1),)))
            for c in node.contains:
                parts.append(_make_arr((ANY,) * p, self.negate(c, where, depth + 1), 0, None))
            return _union(parts)
        if isinstance(node, _Obj):
            if node.patterns or node.additional is not ANY or node.names is not ANY:
                raise unsupported("patternProperties/additionalProperties/propertyNames")
            parts: list[_Node] = []
            for k in node.required:
                parts.append(_Obj(props=((k, NOTHING),)))
            for k, v in node.props:
                nv = self.negate(v, where, depth + 1)
                if nv is not NOTHING:
                    parts.append(_make_obj(((k, nv),), (), ANY, (k,), 0, None))
            if node.min_props > 0:
                parts.append(_Obj(max_props=node.min_props - 1))
            if node.max_props is not None:
                parts.append(_Obj(min_props=node.max_props + 1))
            return _union(parts)
        raise AssertionError(node)

    def kinds(self, node: _Node, depth: int = 0) -> frozenset:
        """Kinds of values a node may accept (an over-approximation)."""
        if node is ANY or depth > 32:
            return _ALL_KINDS
        if isinstance(node, _Union):
            out: set = set()
            for p in node.parts:
                out |= self.kinds(p, depth)
            return frozenset(out)
        if isinstance(node, _Ref):
            acc = _ALL_KINDS
            for a in node.atoms:
                if isinstance(a, str):
                    if a in self.bodies:
                        acc &= self.kinds(self.bodies[a], depth + 1)
                    else:
                        schema, _, _ = self.targets[a]
                        acc &= self._raw_kinds(schema, set())
                else:
                    acc &= self.kinds(a, depth + 1)
            return acc
        return frozenset([_kind(node)])

    def _raw_kinds(self, s: Any, seen: set) -> frozenset:
        """Kinds of a schema read off its type/enum/const/$ref/allOf/anyOf/oneOf (over-approximation)."""
        if s is False:
            return frozenset()
        if not isinstance(s, dict) or id(s) in seen or len(seen) > 200:
            return _ALL_KINDS
        seen.add(id(s))
        acc = _ALL_KINDS
        t = s.get("type")
        if isinstance(t, str):
            t = [t]
        if isinstance(t, list):
            acc &= frozenset(_TYPE_KIND.get(x, "") for x in t)
        if isinstance(s.get("enum"), list):
            acc &= frozenset(_kind(_Const(v)) for v in s["enum"])
        if "const" in s:
            acc &= frozenset([_kind(_Const(s["const"]))])
        ref = s.get("$ref")
        if isinstance(ref, str):
            try:
                name = self._resolve(ref, self.root_base, ())
                acc &= self._raw_kinds(self.targets[name][0], seen)
            except GrammarError:
                pass
        for sub in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
            acc &= self._raw_kinds(sub, seen)
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list):
                u: set = set()
                for sub in s[key]:
                    u |= self._raw_kinds(sub, seen)
                acc &= frozenset(u)
        return acc

    def _schema_list(self, s: dict, key: str, path: tuple) -> list:
        v = s[key]
        if not isinstance(v, list) or not v:
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be a non-empty array")
        return v

    # Keyword value checks ----------------------------------------------------------
    def _count(self, s: dict, key: str, path: tuple) -> int | None:
        v = s.get(key)
        if v is None:
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be a non-negative integer")
        return v

    def _number(self, v: Any, key: str, path: tuple) -> Decimal:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be a number")
        if isinstance(v, float) and not math.isfinite(v):
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be finite")
        return Decimal(v) if isinstance(v, int) else Decimal(repr(v))

    def _typed(self, s: dict, base: str, path: tuple) -> _Node:
        """The conjunction of `type` and the type-specific keywords of one schema."""
        t = s.get("type")
        if t is None:
            if _TYPE_KEYWORDS.isdisjoint(s):
                # Every type unconstrained: the union below would come out as ANY.
                return ANY
            types = None
        else:
            tl = [t] if isinstance(t, str) else t
            if not isinstance(tl, list) or not all(isinstance(x, str) for x in tl):
                raise GrammarError(f"type at {_ptr(path)} must be a string or an array of strings")
            for x in tl:
                if x not in _TYPES:
                    raise GrammarError(f"unknown type {x!r} at {_ptr(path)}")
            types = set(tl)
        parts: list[_Node] = []

        def want(name: str) -> bool:
            return types is None or name in types

        if want("null"):
            parts.append(_NULL)
        if want("boolean"):
            parts.append(_BOOL)
        if want("number") or want("integer"):
            integer = types is not None and "integer" in types and "number" not in types
            parts.append(self._num(s, path, integer))
        if want("string"):
            parts.append(self._str(s, path))
        if want("array"):
            parts.append(self._arr(s, base, path))
        elif "uniqueItems" in s and not isinstance(s["uniqueItems"], bool):
            raise GrammarError(f"uniqueItems at {_ptr(path)} must be a boolean")
        if want("object"):
            parts.append(self._obj(s, base, path))
        return parts[0] if len(parts) == 1 else _union(parts)

    def _num(self, s: dict, path: tuple, integer: bool) -> _Node:
        where = _Where(path)
        lo = hi = None
        lox = hix = False
        if "minimum" in s:
            lo = self._number(s["minimum"], "minimum", path)
        if "maximum" in s:
            hi = self._number(s["maximum"], "maximum", path)
        for key, is_lo in (("exclusiveMinimum", True), ("exclusiveMaximum", False)):
            if key not in s:
                continue
            v = s[key]
            if isinstance(v, bool):  # draft-04: modifies minimum/maximum
                if v and is_lo:
                    lox = lo is not None
                elif v:
                    hix = hi is not None
                continue
            d = self._number(v, key, path)
            if is_lo and (lo is None or d >= lo):
                lo, lox = d, True
            elif not is_lo and (hi is None or d <= hi):
                hi, hix = d, True
        mult = None
        if "multipleOf" in s:
            m = self._number(s["multipleOf"], "multipleOf", path)
            if m <= 0:
                raise GrammarError(f"multipleOf at {where} must be positive")
            mult = m
        n = _make_num(integer, lo, lox, hi, hix, mult, where)
        if n is not NOTHING:
            self._check_num(n, where)
        return n

    def _check_num(self, n: "_Num", where: str) -> None:
        """Fail early (with the pointer) where a number lexeme cannot be built."""
        _num_regex(n, where)

    def _str(self, s: dict, path: tuple) -> _Node:
        lo = self._count(s, "minLength", path) or 0
        hi = self._count(s, "maxLength", path)
        patterns: list[str] = []
        if "pattern" in s:
            p = s["pattern"]
            if not isinstance(p, str):
                raise GrammarError(f"pattern at {_ptr(path)} must be a string")
            pattern_to_regex(p, _Where(path + ("pattern",)))
            patterns.append(p)
        if "format" in s:
            f = s["format"]
            if not isinstance(f, str):
                raise GrammarError(f"format at {_ptr(path)} must be a string")
            if f in _FORMAT_PATTERNS:
                patterns.append(_FORMAT_PATTERNS[f])
            else:
                known = ", ".join(sorted(SUPPORTED_FORMATS))
                self.relax("format", path, f"format {f!r} is not enforced (not one of {known})")
        return _make_str(lo, hi, tuple(patterns))

    def _arr(self, s: dict, base: str, path: tuple) -> _Node:
        prefix: list[_Node] = []
        items: _Node = ANY
        if "prefixItems" in s:
            if not isinstance(s["prefixItems"], list):
                raise GrammarError(f"prefixItems at {_ptr(path)} must be an array")
            if isinstance(s.get("items"), list):
                raise GrammarError(f"items at {_ptr(path)} must be a schema when prefixItems is present")
            prefix = [self.norm(x, base, path + ("prefixItems", i)) for i, x in enumerate(s["prefixItems"])]
        if "items" in s:
            v = s["items"]
            if isinstance(v, list):  # draft-04..2019: tuple form
                prefix = [self.norm(x, base, path + ("items", i)) for i, x in enumerate(v)]
                if "additionalItems" in s:
                    items = self.norm(s["additionalItems"], base, path + ("additionalItems",))
            else:
                items = self.norm(v, base, path + ("items",))
        elif "unevaluatedItems" in s:
            items = self.norm(s["unevaluatedItems"], base, path + ("unevaluatedItems",))
        lo = self._count(s, "minItems", path) or 0
        hi = self._count(s, "maxItems", path)
        if "uniqueItems" in s:
            u = s["uniqueItems"]
            if not isinstance(u, bool):
                raise GrammarError(f"uniqueItems at {_ptr(path)} must be a boolean")
            if u and (hi is None or hi > 1):
                self.relax("uniqueItems", path)
        arr = _make_arr(tuple(prefix), items, lo, hi)
        if "contains" in s:
            min_c = self._count(s, "minContains", path)
            if "maxContains" in s:
                raise GrammarError(f"unsupported keyword 'maxContains' at {_ptr(path)} (counting matches is not supported)")
            if min_c is None or min_c == 1:
                witness = self.norm(s["contains"], base, path + ("contains",))
                arr = self.intersect(arr, self._contains(witness, len(prefix)))
            elif min_c > 1:
                raise GrammarError(f"unsupported keyword 'minContains' at {_ptr(path)} (only 0 or 1)")
        return arr

    def _contains(self, c: _Node, p: int) -> _Node:
        """Arrays (with p prefix positions) having some element that satisfies c."""
        parts = [_make_arr((ANY,) * i + (c,), ANY, i + 1, None) for i in range(p)]
        parts.append(_make_arr((ANY,) * p, ANY, 0, None, (c,)))
        return _union(parts)

    def _align(self, a: _Arr, n: int) -> _Node:
        """`a` as a union of arrays with n prefix positions: each `contains` witness is
        met at one of the new positions or after them."""
        p = len(a.prefix)
        if p >= n:
            return a
        prefix = a.prefix + (a.items,) * (n - p)
        options: list[_Node] = [_make_arr(prefix, a.items, a.min_items, a.max_items)]
        for c in a.contains:
            grown: list[_Node] = []
            for o in options:
                if not isinstance(o, _Arr):
                    continue
                for i in range(p, n):
                    pre = o.prefix[:i] + (self.intersect(o.prefix[i], c),) + o.prefix[i + 1 :]
                    grown.append(_make_arr(pre, o.items, max(o.min_items, i + 1), o.max_items, o.contains))
                grown.append(_make_arr(o.prefix, o.items, o.min_items, o.max_items, o.contains + (c,)))
            options = grown
        return _union(options)

    def _obj(self, s: dict, base: str, path: tuple) -> _Node:
        props: list[tuple[str, _Node]] = []
        if "properties" in s:
            if not isinstance(s["properties"], dict):
                raise GrammarError(f"properties at {_ptr(path)} must be an object")
            for k, v in s["properties"].items():
                props.append((k, self.norm(v, base, path + ("properties", k))))
        patterns: list[tuple[str, _Node]] = []
        if "patternProperties" in s:
            if not isinstance(s["patternProperties"], dict):
                raise GrammarError(f"patternProperties at {_ptr(path)} must be an object")
            for k, v in s["patternProperties"].items():
                pattern_to_regex(k, _Where(path + ("patternProperties", k)))
                patterns.append((k, self.norm(v, base, path + ("patternProperties", k))))
        additional: _Node = ANY
        if "additionalProperties" in s:
            additional = self.norm(s["additionalProperties"], base, path + ("additionalProperties",))
        elif "unevaluatedProperties" in s:
            additional = self.norm(s["unevaluatedProperties"], base, path + ("unevaluatedProperties",))
        required: list[str] = []
        if "required" in s and s["required"] is not False:
            r = s["required"]
            if r is True:
                raise GrammarError(f"unsupported keyword 'required': true (draft-03) at {_ptr(path)}")
            if not isinstance(r, list) or not all(isinstance(x, str) for x in r):
                raise GrammarError(f"required at {_ptr(path)} must be an array of strings")
            for x in r:
                if x not in required:
                    required.append(x)
        lo = self._count(s, "minProperties", path) or 0
        hi = self._count(s, "maxProperties", path)
        names: _Node = ANY
        if "propertyNames" in s:
            # Keys are strings: only the string part of the schema matters.
            names = self.intersect(_Str(), self.norm(s["propertyNames"], base, path + ("propertyNames",)))
            if names == _Str():
                names = ANY
        return _make_obj(tuple(props), tuple(patterns), additional, tuple(required), lo, hi, names)

    # Intersection ----------------------------------------------------------------------
    def intersect(self, a: _Node, b: _Node) -> _Node:
        self.depth += 1
        try:
            if self.depth > MAX_SCHEMA_DEPTH:
                raise LimitExceeded("max_schema_depth", MAX_SCHEMA_DEPTH, "allOf/$ref intersection nested too deeply")
            return self._intersect(a, b)
        finally:
            self.depth -= 1

    def _intersect(self, a: _Node, b: _Node) -> _Node:
        if a is ANY or a == b:
            return b
        if b is ANY:
            return a
        if a is NOTHING or b is NOTHING:
            return NOTHING
        if isinstance(a, _Union) or isinstance(b, _Union):
            ap = a.parts if isinstance(a, _Union) else (a,)
            bp = b.parts if isinstance(b, _Union) else (b,)
            if len(ap) * len(bp) > MAX_UNION_PARTS:
                raise LimitExceeded(
                    "max_union_parts", MAX_UNION_PARTS, "allOf/anyOf expansion has too many alternatives"
                )
            return _union(self.intersect(x, y) for x in ap for y in bp)
        if isinstance(a, _Ref) or isinstance(b, _Ref):
            if isinstance(b, _Ref) and not isinstance(a, _Ref):
                a, b = b, a
            busy = any(isinstance(x, str) and x in self.in_progress for x in a.atoms)
            if isinstance(b, _Const) and not busy:
                return b if self.accepts(a, b.value) else NOTHING
            if isinstance(b, _Ref) or busy:
                atoms = a.atoms | (b.atoms if isinstance(b, _Ref) else frozenset([b]))
                if len(self.synthetic) > MAX_SYNTHETIC_REFS:
                    raise LimitExceeded("max_synthetic_refs", MAX_SYNTHETIC_REFS, "too many $ref intersections")
                r = self.synthetic.get(atoms)
                if r is None:
                    r = self.synthetic[atoms] = _Ref(atoms)
                return r
            return self.intersect(self.unfold(a), b)
        if isinstance(a, _Const) or isinstance(b, _Const):
            c, other = (a, b) if isinstance(a, _Const) else (b, a)
            return c if self.accepts(other, c.value) else NOTHING
        ka, kb = _kind(a), _kind(b)
        if ka != kb:
            return NOTHING
        if ka in ("null", "bool"):
            return a
        if ka == "num":
            return self._meet_num(a, b)
        if ka == "str":
            pats = a.patterns + tuple(p for p in b.patterns if p not in a.patterns)
            excl = a.excluded + tuple(x for x in b.excluded if x not in a.excluded)
            hi = _min_opt(a.max_len, b.max_len)
            return _make_str(max(a.min_len, b.min_len), hi, pats, excl)
        if ka == "arr":
            n = max(len(a.prefix), len(b.prefix))
            if (a.contains and len(a.prefix) < n) or (b.contains and len(b.prefix) < n):
                return self.intersect(self._align(a, n), self._align(b, n))
            prefix = tuple(self.intersect(_elem(a, i), _elem(b, i)) for i in range(n))
            hi = _min_opt(a.max_items, b.max_items)
            contains = a.contains + tuple(c for c in b.contains if c not in a.contains)
            return _make_arr(prefix, self.intersect(a.items, b.items), max(a.min_items, b.min_items), hi, contains)
        return self._meet_obj(a, b)

    def _meet_num(self, a: _Num, b: _Num) -> _Node:
        lo, lox = a.lo, a.lox
        if b.lo is not None and (lo is None or b.lo > lo or (b.lo == lo and b.lox)):
            lo, lox = b.lo, b.lox
        hi, hix = a.hi, a.hix
        if b.hi is not None and (hi is None or b.hi < hi or (b.hi == hi and b.hix)):
            hi, hix = b.hi, b.hix
        mult = a.mult
        if b.mult is not None:
            if mult is None:
                mult = b.mult
            else:
                fa, fb = Fraction(mult), Fraction(b.mult)
                # lcm of two rationals: lcm(numerators) / gcd(denominators)
                num = fa.numerator * fb.numerator // math.gcd(fa.numerator, fb.numerator)
                den = math.gcd(fa.denominator, fb.denominator)
                f = Fraction(num, den)
                mult = Decimal(f.numerator) / Decimal(f.denominator) if f.denominator != 1 else Decimal(f.numerator)
                if Fraction(mult) != f:
                    raise GrammarError(f"allOf: cannot combine multipleOf {a.mult} and {b.mult} exactly")
        not_mult = a.not_mult + tuple(k for k in b.not_mult if k not in a.not_mult)
        excluded = a.excluded + tuple(x for x in b.excluded if x not in a.excluded)
        n = _make_num(a.integer or b.integer, lo, lox, hi, hix, mult, "allOf", a.fractional or b.fractional, not_mult,
                      excluded)
        if n is not NOTHING:
            _num_regex(n, "allOf")
        return n

    def _meet_obj(self, a: _Obj, b: _Obj) -> _Node:
        names = [k for k, _ in a.props] + [k for k, _ in b.props if a.prop(k) is None]
        props = tuple((k, self.intersect(self.value_schema(a, k), self.value_schema(b, k))) for k in names)
        if a.patterns and b.patterns and (a.additional is not ANY or b.additional is not ANY):
            raise GrammarError(
                "allOf: cannot merge two object schemas that both have patternProperties "
                "and one has additionalProperties"
            )
        pats = tuple((p, self.intersect(v, b.additional) if not b.patterns else v) for p, v in a.patterns)
        pats += tuple((p, self.intersect(v, a.additional) if not a.patterns else v) for p, v in b.patterns)
        additional = self.intersect(a.additional, b.additional)
        required = a.required + tuple(r for r in b.required if r not in a.required)
        hi = _min_opt(a.max_props, b.max_props)
        names = self.intersect(a.names, b.names)
        return _make_obj(props, pats, additional, required, max(a.min_props, b.min_props), hi, names)

    def value_schema(self, o: _Obj, key: str) -> _Node:
        """The schema a member named `key` must satisfy in object schema `o`."""
        node = o.prop(key)
        matched = [v for p, v in o.patterns if self.pattern_matches(p, key)]
        if node is None and not matched:
            return o.additional
        acc = ANY if node is None else node
        for v in matched:
            acc = self.intersect(acc, v)
        return acc

    # Validation of constants -------------------------------------------------------------
    def accepts(self, node: _Node, v: Any) -> bool:
        """Whether the JSON value v satisfies node (used on constants, keys and by
        schema_ordered); each outermost call gets its own work budget."""
        outer = self.validating == 0
        if outer:
            self.steps = 0
        self.validating += 1
        try:
            return self._accepts(node, v, 0)
        finally:
            self.validating -= 1

    def _accepts(self, node: _Node, v: Any, depth: int) -> bool:
        self.steps += 1
        if self.steps > MAX_VALIDATION_STEPS:
            raise LimitExceeded("max_validation_steps", MAX_VALIDATION_STEPS, "checking enum/const values")
        if depth > MAX_SCHEMA_DEPTH:
            raise LimitExceeded("max_schema_depth", MAX_SCHEMA_DEPTH, "value nested too deeply")
        d1 = depth + 1
        if node is ANY:
            return True
        if isinstance(node, _Union):
            return any(self._accepts(p, v, d1) for p in node.parts)
        if isinstance(node, _Ref):
            return self._accepts(self.unfold(node), v, d1)
        if isinstance(node, _Const):
            return _json_equal(node.value, v)
        if isinstance(node, _NullT):
            return v is None
        if isinstance(node, _BoolT):
            return isinstance(v, bool)
        if isinstance(node, _Num):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return False
            if isinstance(v, float) and not math.isfinite(v):
                return False
            d = Decimal(v) if isinstance(v, int) else Decimal(repr(v))
            if node.integer and d != d.to_integral_value():
                return False
            if node.lo is not None and (d < node.lo or (node.lox and d == node.lo)):
                return False
            if node.hi is not None and (d > node.hi or (node.hix and d == node.hi)):
                return False
            if node.fractional and d == d.to_integral_value():
                return False
            if node.mult is not None and Fraction(d) % Fraction(node.mult) != 0:
                return False
            if any(Fraction(d) % Fraction(k) == 0 for k in node.not_mult):
                return False
            if any(d == x for x in node.excluded):
                return False
            return True
        if isinstance(node, _Str):
            if not isinstance(v, str) or len(v) < node.min_len or (node.max_len is not None and len(v) > node.max_len):
                return False
            return all(self.pattern_matches(p, v) for p in node.patterns) and not any(
                self._accepts(x, v, d1) for x in node.excluded
            )
        if isinstance(node, _Arr):
            if not isinstance(v, list) or len(v) < node.min_items:
                return False
            if node.max_items is not None and len(v) > node.max_items:
                return False
            tail = v[len(node.prefix) :]
            return all(self._accepts(_elem(node, i), x, d1) for i, x in enumerate(v)) and all(
                any(self._accepts(c, x, d1) for x in tail) for c in node.contains
            )
        if isinstance(node, _Obj):
            if not isinstance(v, dict) or len(v) < node.min_props:
                return False
            if node.max_props is not None and len(v) > node.max_props:
                return False
            if any(r not in v for r in node.required):
                return False
            if node.names is not ANY and not all(self._accepts(node.names, k, d1) for k in v):
                return False
            return all(self._accepts(self.value_schema(node, k), x, d1) for k, x in v.items())
        raise AssertionError(node)

    def reorder(self, node: _Node, v: Any, depth: int) -> Any:
        if depth > MAX_SCHEMA_DEPTH:
            return v
        if isinstance(node, _Ref):
            return self.reorder(self.unfold(node), v, depth + 1)
        if isinstance(node, _Union):
            for p in node.parts:
                if self.accepts(p, v):
                    return self.reorder(p, v, depth + 1)
            return v
        if isinstance(node, _Obj) and isinstance(v, dict):
            order = [k for k, _ in node.props] + [r for r in node.required if node.prop(r) is None]
            keys = [k for k in order if k in v] + [k for k in v if k not in order]
            return {k: self.reorder(self.value_schema(node, k), v[k], depth + 1) for k in keys}
        if isinstance(node, _Arr) and isinstance(v, list):
            return [self.reorder(_elem(node, i), x, depth + 1) for i, x in enumerate(v)]
        return v

    # oneOf: provable disjointness ---------------------------------------------------------
    def disjoint(self, a: _Node, b: _Node, depth: int) -> bool:
        """True only if no JSON value satisfies both (False: disjoint or unknown)."""
        if a is NOTHING or b is NOTHING:
            return True
        if a is ANY or b is ANY or depth > 8:
            return False
        if not (self.kinds(a) & self.kinds(b)):
            return True
        if isinstance(a, _Ref) or isinstance(b, _Ref):
            refs = [r for r in (a, b) if isinstance(r, _Ref)]
            if any(isinstance(x, str) and x in self.in_progress for r in refs for x in r.atoms):
                return False
            a = self.unfold(a) if isinstance(a, _Ref) else a
            b = self.unfold(b) if isinstance(b, _Ref) else b
            return self.disjoint(a, b, depth + 1)
        if isinstance(a, _Union) or isinstance(b, _Union):
            ap = a.parts if isinstance(a, _Union) else (a,)
            bp = b.parts if isinstance(b, _Union) else (b,)
            return all(self.disjoint(x, y, depth) for x in ap for y in bp)
        if isinstance(a, _Const) and isinstance(b, _Const):
            return not _json_equal(a.value, b.value)
        if isinstance(a, _Const) or isinstance(b, _Const):
            c, other = (a, b) if isinstance(a, _Const) else (b, a)
            return not self.accepts(other, c.value)
        if _kind(a) != _kind(b):
            return True
        if isinstance(a, _Num):
            if a.hi is not None and b.lo is not None and (a.hi < b.lo or (a.hi == b.lo and (a.hix or b.lox))):
                return True
            if b.hi is not None and a.lo is not None and (b.hi < a.lo or (b.hi == a.lo and (b.hix or a.lox))):
                return True
            return False
        if isinstance(a, _Str):
            if _apart(a.min_len, a.max_len, b.min_len, b.max_len):
                return True
            if _str_within_excluded(a, b) or _str_within_excluded(b, a):
                return True
            if a.patterns or b.patterns or a.excluded or b.excluded:
                ra, rb = _string_body(a), _string_body(b)
                if ra is None or rb is None:
                    return True
                return self.regexes_disjoint('"' + ra[0] + '"', '"' + rb[0] + '"')
            return False
        if isinstance(a, _Arr):
            if _apart(a.min_items, a.max_items, b.min_items, b.max_items):
                return True
            for i in range(min(a.min_items, b.min_items)):
                if self.disjoint(_elem(a, i), _elem(b, i), depth + 1):
                    return True
            return False
        if isinstance(a, _Obj):
            if _apart(a.min_props, a.max_props, b.min_props, b.max_props):
                return True
            for x, y in ((a, b), (b, a)):
                for k in x.required:
                    vy = self.value_schema(y, k)
                    if vy is NOTHING:
                        return True
                    # x requires k, so a common value has k and y constrains it too.
                    if self.disjoint(self.value_schema(x, k), vy, depth + 1):
                        return True
            return False
        return False


def _min_opt(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional upper bounds (None: unbounded)."""
    return b if a is None else (a if b is None else min(a, b))


def _apart(alo: int, ahi: int | None, blo: int, bhi: int | None) -> bool:
    """Whether two count ranges [alo, ahi] and [blo, bhi] do not overlap."""
    return (ahi is not None and ahi < blo) or (bhi is not None and bhi < alo)


def _elem(a: _Arr, i: int) -> _Node:
    return a.prefix[i] if i < len(a.prefix) else a.items


def _str_within_excluded(a: _Str, b: _Str) -> bool:
    """Whether every string of `a` is excluded by `b` (a structural, sufficient check)."""
    for x in b.excluded:
        if not isinstance(x, _Str) or x.excluded or not set(x.patterns) <= set(a.patterns):
            continue
        if x.min_len <= a.min_len and (x.max_len is None or (a.max_len is not None and a.max_len <= x.max_len)):
            return True
    return False


def _make_num(integer, lo, lox, hi, hix, mult, where, fractional=False, not_mult=(), excluded=()) -> _Node:
    if integer and fractional:
        return NOTHING
    if mult is not None and fractional and Fraction(mult).denominator == 1:
        return NOTHING  # a multiple of an integer is an integer
    if not_mult and not integer:
        # Non-integers are multiples of no integer: only integral values are constrained.
        if fractional:
            not_mult = ()
        else:
            raise GrammarError(f"not multipleOf at {where}: supported for integers only")
    if any(k == 1 for k in not_mult):
        return NOTHING
    if mult is not None and any(Fraction(mult) % Fraction(k) == 0 for k in not_mult):
        return NOTHING
    if integer:
        # Integer bounds are inclusive integers.
        if lo is not None:
            c = lo.to_integral_value(rounding=ROUND_CEILING)
            lo, lox = (c + 1 if lox and c == lo else c), False
        if hi is not None:
            f = hi.to_integral_value(rounding=ROUND_FLOOR)
            hi, hix = (f - 1 if hix and f == hi else f), False
        if mult is not None:
            # Integer multiples of p/q (lowest terms) are the multiples of p.
            p = Fraction(mult).numerator
            mult = None if p == 1 else Decimal(p)
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lox or hix))):
        return NOTHING
    if lo is not None and lo == hi and lo in excluded:
        return NOTHING
    return _Num(integer, lo, lox, hi, hix, mult, fractional, tuple(not_mult), tuple(excluded))


def _make_str(lo, hi, patterns, excluded=()) -> _Node:
    if hi is not None and lo > hi:
        return NOTHING
    for p in patterns:
        if pattern_to_regex(p).json is None:
            return NOTHING
    if _Str() in excluded:
        return NOTHING
    return _Str(lo, hi, patterns, excluded)


def _make_arr(prefix, items, lo, hi, contains=()) -> _Node:
    if NOTHING in contains:
        return NOTHING
    if contains:
        lo = max(lo, len(prefix) + 1)  # the witnesses need an element after the prefix
    if hi is not None and lo > hi:
        return NOTHING
    # A position that admits no value caps the length there.
    for i, p in enumerate(prefix):
        if p is NOTHING:
            if i < lo:
                return NOTHING
            hi = i if hi is None else min(hi, i)
            prefix = prefix[:i]
            break
    if items is NOTHING:
        if lo > len(prefix):
            return NOTHING
        hi = len(prefix) if hi is None else min(hi, len(prefix))
    if hi is not None:
        prefix = prefix[:hi]
        if hi <= len(prefix):
            items = NOTHING
    if items is NOTHING and hi is None:
        hi = len(prefix)
    if contains and (items is NOTHING or lo > (hi if hi is not None else lo)):
        return NOTHING
    if len(contains) > MAX_CONTAINS:
        raise GrammarError(f"an array may combine at most {MAX_CONTAINS} 'contains' constraints")
    return _Arr(prefix, items, lo, hi, tuple(contains))


def _make_obj(props, patterns, additional, required, lo, hi, names=ANY) -> _Node:
    if hi is not None and (lo > hi or len(required) > hi):
        return NOTHING
    if names is NOTHING and (required or lo > 0):
        return NOTHING
    for r in required:
        for k, v in props:
            if k == r and v is NOTHING:
                return NOTHING
    return _Obj(props, patterns, additional, required, lo, hi, names)


def _num_regex(n: _Num, where: str) -> tuple[str, bool] | None:
    """(regex, extended) of the lexeme for a number schema; None if no number fits."""
    if n in _num_cache:
        return _num_cache[n]
    bounded = n.lo is not None or n.hi is not None
    conj: list[str] = []
    suffix = ""
    if n.integer or (n.mult is not None and Fraction(n.mult).denominator == 1):
        lo = hi = None
        if n.lo is not None:
            c = n.lo.to_integral_value(rounding=ROUND_CEILING)
            lo = int(c + 1 if n.lox and c == n.lo else c)
        if n.hi is not None:
            f = n.hi.to_integral_value(rounding=ROUND_FLOOR)
            hi = int(f - 1 if n.hix and f == n.hi else f)
        k = int(n.mult) if n.mult is not None else 1
        if lo is not None and hi is not None and (hi - lo) // k <= 2000:
            # Few values: list them (exact, and small even where a divisibility regex is not).
            first = -((-lo) // k) * k
            values = [
                v for v in range(first, hi + 1, k)
                if not any(v % int(m) == 0 for m in n.not_mult) and Decimal(v) not in n.excluded
            ]
            result = (_enum_numbers(values), False) if values else None
            if result is not None and not n.integer:
                result = (result[0] + "(?:\\.0+)?", False)
            _num_cache[n] = result
            return result
        rng = integer_range_regex(lo, hi) if bounded else INTEGER_REGEX
        if rng is None:
            _num_cache[n] = None
            return None
        conj.append(rng)
        for m in ([k] if k != 1 else []):
            mre = multiple_of_regex(m)
            if mre is None:
                raise GrammarError(
                    f"multipleOf {m} at {where}: the divisibility regex would be too large (bound the range "
                    "with minimum/maximum to at most 2000 multiples)"
                )
            conj.append(mre)
        if not n.integer:
            # A number that is an integer multiple may carry a zero fraction.
            suffix = "(?:\\.0+)?"
    else:
        rng = number_range_regex(n.lo, n.lox, n.hi, n.hix)
        if rng is None:
            _num_cache[n] = None
            return None
        conj.append(rng)
        if n.fractional:
            conj.append(_FRACTIONAL_REGEX)
        if n.mult is not None:
            f = Fraction(n.mult)
            digits = round(math.log10(f.denominator)) if f.numerator == 1 else -1
            if digits < 0 or 10**digits != f.denominator:
                raise GrammarError(
                    f"multipleOf {n.mult} at {where}: only integers and powers of ten (0.1, 0.01, ...) "
                    "are supported for numbers"
                )
            conj.append("-?[0-9]+(?:\\.[0-9]{1," + str(digits) + "}0*)?")
    negs = []
    if n.excluded:
        if not (n.integer or n.mult is not None):
            # Every spelling of a value must be excluded; without exponents there are
            # few (1, 1.0, 1.00, ...), so plain decimals only.
            conj.append(_PLAIN_NUMBER_REGEX)
        for x in n.excluded:
            negs.append("~(?:" + _value_spellings(x) + ")")
    for m in n.not_mult:
        mre = multiple_of_regex(int(m))
        if mre is None:
            raise GrammarError(f"not multipleOf {m} at {where}: the divisibility regex would be too large")
        negs.append("~(?:" + mre + ")")
    if len(conj) == 1 and not negs:
        result = (conj[0] + suffix, False)
    else:
        result = ("(?:" + "&".join(["(?:" + c + ")" for c in conj] + negs) + ")" + suffix, True)
    if len(_num_cache) > 4096:
        _num_cache.clear()
    _num_cache[n] = result
    return result


def _enum_numbers(values: list[int]) -> str:
    neg = _literal_regex([str(-v) for v in values if v < 0])
    pos = _literal_regex([str(v) for v in values if v >= 0])
    return _alt(([pos] if pos else []) + (["-" + neg] if neg else [])) or "(?:)"


_PLAIN_NUMBER_REGEX = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"


def _value_spellings(x: Decimal) -> str:
    """Every exponent-free JSON spelling of the number x."""
    ip, fp = _dec_parts(abs(x))
    sign = "-?" if x == 0 else ("-" if x < 0 else "")
    return sign + str(ip) + ("(?:\\.0+)?" if not fp else "\\." + fp + "0*")


# Numbers with a non-zero fractional part: plain decimals, and exponent forms whose
# value lies strictly between 0 and 1 in magnitude.
_FRACTIONAL_REGEX = (
    r"-?(?:(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*"
    r"|(?:[1-9](?:\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)[eE]-0*[1-9][0-9]*)"
)


_num_cache: dict[_Num, tuple[str, bool] | None] = {}


# --------------------------------------------------------------------------------------
# Generator: IR -> grammar
# --------------------------------------------------------------------------------------


class _Generator:
    def __init__(self, comp: _Compiler, limits: Limits):
        self.c = comp
        self.limits = limits
        self.b = GrammarBuilder(limits)
        self.memo: dict[_Node, int] = {}
        self.pending: list[tuple[int, _Ref]] = []
        self.names = 0
        self._any = None
        self._nothing = None
        self._name_counts: dict[str, int] = {}

    # The punctuation lexemes (LBRACE, COMMA, ...) are made on first use: a grammar
    # without arrays then has no bracket lexemes for pruning to renumber away.
    _PUNCTUATION = {"LBRACE": "{", "RBRACE": "}", "LBRACK": "[", "RBRACK": "]", "COMMA": ",", "COLON": ":"}

    def __getattr__(self, name: str) -> int:
        text = _Generator._PUNCTUATION.get(name)
        if text is None:
            raise AttributeError(name)
        sym = self.b.literal(text)
        setattr(self, name, sym)
        return sym

    def build(self, root: _Node, whitespace: str) -> Grammar:
        b = self.b
        start = b.nonterminal("start")
        b.rule(start, [self.sym(root)])
        while self.pending:
            nt, ref = self.pending.pop()
            b.rule(nt, [self.sym(self.c.unfold(ref))])
        return self._pruned(start, whitespace)

    # Pruning: drop what derives no finite string, then what is unreachable. Part of
    # every schema's compile time, so the analysis is compiled (grammar_marks_py) and,
    # where it drops nothing (nearly always), the builder's rules are the grammar's. The
    # builder's rules are already unique and within the size limit, and what survives is
    # a valid grammar by construction, so the kept rules are renumbered in place instead
    # of going through a second builder and `validate`.
    def _pruned(self, start: int, whitespace: str) -> Grammar:
        b = self.b
        rules = b.rules
        names = b.nonterminals
        lexemes = b.lexemes
        ignore = [_WHITESPACE] if whitespace == "flexible" else []
        flat = flatten_rules(rules)
        productive = np.empty(len(names), dtype=np.bool_)
        reachable = np.empty(len(names), dtype=np.bool_)
        used = np.empty(len(lexemes), dtype=np.bool_)
        kept_flags = np.empty(len(rules), dtype=np.bool_)
        args = (*flat, start, productive, reachable, used, kept_flags)
        n_kept = compiled_once(grammar_marks_jit, args)(*args)
        if not productive[start]:
            raise GrammarError("the schema at # accepts no finite JSON value (its constraints contradict each other)")
        if n_kept == len(rules) and reachable.all() and used.all():
            return Grammar(list(lexemes), list(names), rules, start, ignore, all_productive=True)
        kept = list(compress(rules, kept_flags.tolist()))
        reach = reachable.tolist()
        lx_used = used.tolist()
        n = len(names)
        if all(reach) and all(lx_used):
            out_lexemes, out_names, new_start = list(lexemes), list(names), start
        else:
            # One list maps both kinds of symbol: nonterminal s at index s, lexeme ~j at
            # index -1 - j, which Python's negative indexing places at the end.
            sym_map = [0] * (n + len(lexemes))
            out_names = []
            for i in range(n):
                if reach[i]:
                    sym_map[i] = len(out_names)
                    out_names.append(names[i])
            out_lexemes = []
            for j, lx in enumerate(lexemes):
                if lx_used[j]:
                    sym_map[~j] = ~len(out_lexemes)
                    out_lexemes.append(lx)
            get = sym_map.__getitem__
            kept = [_new_rule(Rule, (get(lhs), tuple(map(get, rhs)))) for lhs, rhs in kept]
            new_start = sym_map[start]
        return Grammar(out_lexemes, out_names, kept, new_start, ignore, all_productive=True)

    # Helpers ------------------------------------------------------------------------
    def nt(self, name: str) -> int:
        # Number the names here: GrammarBuilder probes name#2, name#3, ... one by one.
        k = self._name_counts.get(name, 0) + 1
        self._name_counts[name] = k
        return self.b.nonterminal(name if k == 1 else f"{name}#{k}", fresh=True)

    def repeat(self, symbol: int, lo: int, hi: int | None) -> int:
        """symbol{lo,hi} as BNF of size O(lo + hi): like GrammarBuilder.repeat, with names
        numbered here so thousands of them stay cheap."""
        b = self.b
        parts = [symbol] * lo
        if hi is None:
            parts.append(self.star(symbol))
        else:
            tail = None
            for _ in range(hi - lo):
                t = self.nt("items")
                b.rule(t, [symbol] if tail is None else [symbol, tail])
                b.rule(t, [])
                tail = t
            if tail is not None:
                parts.append(tail)
        nt = self.nt("items")
        b.rule(nt, parts)
        return nt

    def star(self, symbol: int) -> int:
        # Left recursion: Earley handles it in linear space.
        nt = self.nt("star")
        self.b.rule(nt, [])
        self.b.rule(nt, [nt, symbol])
        return nt

    def regex_lexeme(self, name: str, regex: str, extended: bool) -> int:
        return self.b.lexeme(name, regex, flags="E" if extended else "")

    def string_lexeme(self, body: str, extended: bool, name: str) -> int:
        return self.regex_lexeme(name, '"' + body + '"', extended)

    def any_value(self) -> int:
        if self._any is not None:
            return self._any
        b = self.b
        value = self.nt("value")
        self._any = value
        string = self.string_lexeme(GENERAL_CHAR + "*", False, "string")
        number = self.regex_lexeme("number", NUMBER_REGEX, False)
        obj = self.nt("object")
        members = self.nt("members")
        pair = self.nt("pair")
        arr = self.nt("array")
        elems = self.nt("elements")
        for alt in ([obj], [arr], [string], [number], [b.literal("true")], [b.literal("false")], [b.literal("null")]):
            b.rule(value, alt)
        b.rule(obj, [self.LBRACE, self.RBRACE])
        b.rule(obj, [self.LBRACE, members, self.RBRACE])
        b.rule(members, [pair])
        b.rule(members, [members, self.COMMA, pair])
        b.rule(pair, [string, self.COLON, value])
        b.rule(arr, [self.LBRACK, self.RBRACK])
        b.rule(arr, [self.LBRACK, elems, self.RBRACK])
        b.rule(elems, [value])
        b.rule(elems, [elems, self.COMMA, value])
        return value

    def nothing(self) -> int:
        # A nonterminal without rules: pruning removes every rule that mentions it.
        if self._nothing is None:
            self._nothing = self.nt("nothing")
        return self._nothing

    # IR -> symbol --------------------------------------------------------------------
    def sym(self, node: _Node) -> int:
        s = self.memo.get(node)
        if s is None:
            s = self._sym(node)
            self.memo[node] = s
        return s

    def _sym(self, node: _Node) -> int:
        b = self.b
        if node is ANY:
            return self.any_value()
        if node is NOTHING:
            return self.nothing()
        if isinstance(node, _Ref):
            names = sorted(a if isinstance(a, str) else "…" for a in node.atoms)
            nt = self.nt("&".join(names))
            self.pending.append((nt, node))
            return nt
        if isinstance(node, _Union):
            nt = self.nt("anyOf")
            parts = list(node.parts)
            words = [p.value for p in parts if isinstance(p, _Const) and isinstance(p.value, str)]
            if len(words) > ENUM_LEXEME_THRESHOLD:
                # One trie-shaped lexeme instead of hundreds of literals: the lexer then
                # follows one expression per byte, not one per value.
                spelled = [_json_str(w) for w in words]
                b.rule(nt, [self.regex_lexeme("enum", _literal_regex(spelled), False)])
                parts = [p for p in parts if not (isinstance(p, _Const) and isinstance(p.value, str))]
            for p in parts:
                b.rule(nt, [self.sym(p)])
            return nt
        if isinstance(node, _NullT):
            return b.literal("null")
        if isinstance(node, _BoolT):
            nt = self.nt("boolean")
            b.rule(nt, [b.literal("true")])
            b.rule(nt, [b.literal("false")])
            return nt
        if isinstance(node, _Const):
            return self.const(node.value)
        if isinstance(node, _Num):
            lx = _num_regex(node, "#")
            if lx is None or (lx[1] and self.c.regex_empty(lx[0])):
                return self.nothing()
            return self.regex_lexeme("integer" if node.integer else "number", lx[0], lx[1])
        if isinstance(node, _Str):
            return self.string(node)
        if isinstance(node, _Arr):
            return self.array(node)
        if isinstance(node, _Obj):
            return self.object(node)
        raise AssertionError(node)

    def const(self, v: Any) -> int:
        b = self.b
        if isinstance(v, dict):
            nt = self.nt("const")
            rhs = [self.LBRACE]
            for i, (k, x) in enumerate(v.items()):
                if i:
                    rhs.append(self.COMMA)
                rhs += [b.literal(_json_str(k)), self.COLON, self.const(x)]
            b.rule(nt, rhs + [self.RBRACE])
            return nt
        if isinstance(v, list):
            nt = self.nt("const")
            rhs = [self.LBRACK]
            for i, x in enumerate(v):
                if i:
                    rhs.append(self.COMMA)
                rhs.append(self.const(x))
            b.rule(nt, rhs + [self.RBRACK])
            return nt
        return b.literal(_SPELLING_ENCODER.encode(v))

    def string(self, node: _Str) -> int:
        body = _string_body(node)
        if body is None or (body[1] and self.c.regex_empty('"' + body[0] + '"')):
            return self.nothing()
        name = "string" if body[0] == GENERAL_CHAR + "*" else "string(constrained)"
        return self.string_lexeme(body[0], body[1], name)

    def array(self, node: _Arr) -> int:
        b = self.b
        prefix = [self.sym(p) for p in node.prefix]
        p = len(prefix)
        lo, hi = node.min_items, node.max_items
        item = None if node.items is NOTHING else self.sym(node.items)
        # _make_arr guarantees lo <= hi, lo <= len(prefix) when no further item fits, and
        # lo > len(prefix) when there are `contains` witnesses.
        comma_item = None
        if item is not None:
            comma_item = self.nt("item")
            b.rule(comma_item, [self.COMMA, item])
        nt = self.nt("array")
        if node.contains:
            tail_start = self.witness_tail(node, item, comma_item)
            if p == 0:
                b.rule(nt, [self.LBRACK, tail_start, self.RBRACK])
                return nt
        # rest[i]: the elements from index i on, each after a comma (None: no element fits).
        rest: list[int | None] = [None] * (p + 1)
        if node.contains:
            rest[p] = tail_start
        elif p > 0 and comma_item is not None and (hi is None or hi > p):
            rest[p] = self.repeat(comma_item, max(0, lo - p), None if hi is None else hi - p)
        for i in range(p - 1, 0, -1):
            if hi is not None and i >= hi:
                continue
            t = self.nt("items")
            if rest[i + 1] is not None or i + 1 >= lo:
                b.rule(t, [self.COMMA, prefix[i]] + ([rest[i + 1]] if rest[i + 1] is not None else []))
            if i >= lo:
                b.rule(t, [])
            rest[i] = t
        if lo == 0:
            b.rule(nt, [self.LBRACK, self.RBRACK])
        first = prefix[0] if prefix else item
        if first is not None and (hi is None or hi >= 1):
            tail = rest[1] if p >= 1 else (
                self.repeat(comma_item, max(0, lo - 1), None if hi is None else hi - 1)
                if (hi is None or hi > 1) else None
            )
            if tail is not None or lo <= 1:
                b.rule(nt, [self.LBRACK, first] + ([tail] if tail is not None else []) + [self.RBRACK])
        return nt

    def witness_tail(self, node: _Arr, item: int | None, comma_item: int | None) -> int:
        """The elements after the prefix when some must satisfy `contains` schemas: a
        state machine over (elements so far, witnesses met)."""
        b = self.b
        c = self.c
        p = len(node.prefix)
        ws = node.contains
        full = (1 << len(ws)) - 1
        lo_t = max(0, node.min_items - p)
        hi_t = None if node.max_items is None else node.max_items - p
        cap = hi_t if hi_t is not None else max(lo_t, 1)
        if (cap + 1) * (full + 1) > MAX_OBJECT_STATES:
            raise GrammarError(
                f"array with minItems/maxItems {node.min_items}/{node.max_items} and contains needs too many states"
            )
        # One element symbol per set of witnesses it meets.
        claims: list[tuple[int, int]] = []
        for mask in range(full + 1):
            sch = node.items
            for i, w in enumerate(ws):
                if mask >> i & 1:
                    sch = c.intersect(sch, w)
            if sch is not NOTHING:
                claims.append((mask, self.sym(sch)))
        state = [[self.nt("items") for _ in range(full + 1)] for _ in range(cap + 1)]

        def bump(cnt: int) -> int:
            return cnt + 1 if hi_t is not None else min(cnt + 1, cap)

        for cnt in range(cap + 1):
            for have in range(full + 1):
                nt = state[cnt][have]
                sep = [self.COMMA] if (p > 0 or cnt > 0) else []
                if have == full and hi_t is None and cnt == cap and comma_item is not None:
                    b.rule(nt, [self.star(comma_item)])
                    continue
                if have == full and cnt >= lo_t:
                    b.rule(nt, [])
                if hi_t is None or cnt < hi_t:
                    for mask, sym in claims:
                        b.rule(nt, sep + [sym, state[bump(cnt)][have | mask]])
        return state[0][0]

    def object(self, node: _Obj) -> int:
        b = self.b
        c = self.c
        listed: list[tuple[str, _Node, bool]] = []
        names: list[str] = []
        required = set(node.required)
        # value_schema, without its scan of the properties per key (quadratic in their
        # number) where no patternProperties can add to a listed property's schema.
        own: dict[str, _Node] | None = None
        if not node.patterns:
            own = {}
            for k, v in node.props:
                own.setdefault(k, v)
        for k, _ in node.props:
            listed.append((k, own[k] if own is not None else c.value_schema(node, k), k in required))
            names.append(k)
        seen = set(names)
        for r in node.required:
            if r not in seen:
                listed.append((r, c.value_schema(node, r), True))
                names.append(r)
                seen.add(r)
        if node.names is not ANY:
            # A listed key the key schema rejects cannot appear.
            listed = [(k, v if c.accepts(node.names, k) else NOTHING, req) for k, v, req in listed]
        if any(v is NOTHING and req for _, v, req in listed):
            return self.nothing()
        listed = [x for x in listed if x[1] is not NOTHING]
        extra = self.extra_members(node, names)
        lo, hi = node.min_props, node.max_props
        n = len(listed)
        # Members emitted so far are counted up to `cap`: exactly when maxProperties
        # bounds them, otherwise saturating once minProperties (and "need a comma") is met.
        cap = hi if hi is not None else max(lo, 1)
        if (n + 1) * (cap + 1) > MAX_OBJECT_STATES:
            raise GrammarError(
                f"object schema with {n} properties and minProperties {lo} / maxProperties {hi} "
                "needs too many grammar states"
            )
        keys = [b.literal(_json_str(k)) for k, _, _ in listed]
        values = [self.sym(v) for _, v, _ in listed]

        def bump(cnt: int) -> int:
            return cnt + 1 if hi is not None else min(cnt + 1, cap)

        # state[i][cnt]: the members from listed property i on, after cnt members. Only
        # reachable states are made (the others would be built just for pruning to drop):
        # before property i, at least the required ones and at most i members are written.
        first: list[int] = []
        req = 0
        for i in range(n + 1):
            first.append(min(req, cap))
            if i < n and listed[i][2]:
                req += 1
        state: list[dict[int, int]] = [
            {cnt: self.nt("members") for cnt in range(first[i], (min(i, cap) if i < n else cap) + 1)}
            for i in range(n + 1)
        ]
        for cnt in range(first[n], cap + 1):
            nt = state[n][cnt]
            sep = [self.COMMA] if cnt > 0 else []
            saturated = hi is None and cnt == cap
            if extra is not None and saturated:
                more = self.nt("member")
                b.rule(more, [self.COMMA, extra])
                b.rule(nt, [self.star(more)])
                continue
            if cnt >= lo:
                b.rule(nt, [])
            if extra is not None and (hi is None or cnt < hi):
                b.rule(nt, sep + [extra, state[n][bump(cnt)]])
        for i in range(n - 1, -1, -1):
            for cnt, nt in state[i].items():
                sep = [self.COMMA] if cnt > 0 else []
                if hi is None or cnt < hi:
                    b.rule(nt, sep + [keys[i], self.COLON, values[i], state[i + 1][bump(cnt)]])
                if not listed[i][2]:
                    b.rule(nt, [state[i + 1][cnt]])
        obj = self.nt("object")
        b.rule(obj, [self.LBRACE, state[0][0], self.RBRACE])
        return obj

    def extra_members(self, node: _Obj, listed: list[str]) -> int | None:
        """A member `key : value` for keys not listed, or None when none is allowed."""
        b = self.b
        c = self.c
        # Group patterns with equal value schemas: a key matching several patterns of one
        # group needs that schema once.
        groups: list[tuple[list[str], _Node]] = []
        for p, v in node.patterns:
            for g in groups:
                if g[1] == v:
                    g[0].append(p)
                    break
            else:
                groups.append(([p], v))
        if len(groups) > MAX_PATTERN_GROUPS:
            raise GrammarError(
                f"object schema with {len(groups)} patternProperties of different schemas is not supported "
                f"(at most {MAX_PATTERN_GROUPS})"
            )
        names_re = None
        if node.names is not ANY:
            alts = []
            for part in node.names.parts if isinstance(node.names, _Union) else (node.names,):
                if isinstance(part, _Const) and isinstance(part.value, str):
                    alts.append(regex_escape_bytes(_json_str(part.value).encode()))
                elif isinstance(part, _Str):
                    body = _string_body(part)
                    if body is not None:
                        alts.append('"' + body[0] + '"')
            if not alts:
                return None
            names_re = "(?:" + "|".join(alts) + ")"
        if not groups and node.additional is NOTHING:
            return None
        exclude = None
        if listed:
            # The listed keys' encoded text, escaped once for both spellings below (with
            # and without the quotes; escaping works character by character).
            encoded = [_json_str(k)[1:-1] for k in listed]
            bodies = [regex_escape_bytes(k.encode()) for k in encoded]
            exclude = '(?:\\"' + '\\"|\\"'.join(bodies) + '\\")'
        group_langs = []
        group_bodies = []
        for pats, _ in groups:
            langs = [pattern_to_regex(p).json for p in pats]
            langs = [x for x in langs if x is not None]
            group_langs.append('"(?:' + "|".join(langs) + ')"' if langs else None)
            group_bodies.append("|".join(langs) if langs else None)
        members = []
        for mask in range(1 << len(groups)):
            inside = [i for i in range(len(groups)) if mask >> i & 1]
            if mask == 0:
                value = node.additional
            else:
                if any(group_langs[i] is None for i in inside):
                    continue
                value = ANY
                for i in inside:
                    value = c.intersect(value, groups[i][1])
            if value is NOTHING:
                continue
            conj = ['"' + CANON_CHAR + '*"'] if mask == 0 else []
            conj += ["(?:" + group_langs[i] + ")" for i in inside]
            conj += ["~(?:" + group_langs[i] + ")" for i in range(len(groups)) if i not in inside and group_langs[i]]
            if exclude is not None:
                conj.append("~" + exclude)
            if names_re is not None:
                conj.append(names_re)
            if len(conj) == 1 and mask == 0:
                key = self.string_lexeme(GENERAL_CHAR + "*", False, "string")
            elif len(conj) == 1:
                key = self.regex_lexeme("key", group_langs[inside[0]], _pattern_ext(groups[inside[0]][0]))
            else:
                if mask == 0 and names_re is None:
                    # The same language with the quotes outside the intersection: after the
                    # opening quote the lexeme is `(C* & ~E) "`, a shape the slicer can
                    # prove contains its string slices (seeds/what_makes_it_fast.md).
                    inner = ["(?:" + CANON_CHAR + "*)"]
                    inner += ["~(?:" + group_bodies[i] + ")" for i in range(len(groups)) if group_bodies[i]]
                    if listed and len(inner) == 1:
                        # The common case, only the listed keys excluded: built from its
                        # parts, with its parse remembered for the lexer.
                        regex = c.exprs().parse_excluding('"', CANON_CHAR + "*", [k.encode() for k in encoded])
                    else:
                        if listed:
                            inner.append("~(?:" + "|".join(bodies) + ")")
                        regex = '"(?:' + "&".join(inner) + ')"'
                    key = self.regex_lexeme("key", regex, True)
                    m = self.nt("member")
                    b.rule(m, [key, self.COLON, self.sym(value)])
                    members.append(m)
                    continue
                regex = "(?:" + "&".join(conj) + ")"
                # Removing finitely many names from all strings leaves some: only a
                # pattern or propertyNames can make a key language empty.
                if (mask or names_re is not None) and self.c.regex_empty(regex):
                    continue
                key = self.regex_lexeme("key", regex, True)
            m = self.nt("member")
            b.rule(m, [key, self.COLON, self.sym(value)])
            members.append(m)
        if not members:
            return None
        if len(members) == 1:
            return members[0]
        nt = self.nt("member")
        for m in members:
            b.rule(nt, [m])
        return nt


def _string_body(node: _Str, depth: int = 0) -> tuple[str, bool] | None:
    """(body regex, extended) of a string schema, or None if it matches nothing."""
    if depth > 16:
        raise GrammarError("string exclusions nested too deeply")
    # A pattern or an exclusion is checked on one spelling: the canonical one.
    char = CANON_CHAR if (node.patterns or node.excluded) else GENERAL_CHAR
    conj = []
    extended = False
    if node.min_len or node.max_len is not None:
        conj.append(char + _rep_suffix(node.min_len, node.max_len))
    for p in node.patterns:
        pr = pattern_to_regex(p)
        if pr.json is None:
            return None
        conj.append(pr.json)
        extended |= pr.extended
    negs = []
    for x in node.excluded:
        if isinstance(x, _Const):
            negs.append(regex_escape_bytes(_json_str(x.value)[1:-1].encode()))
        else:
            sub = _string_body(x, depth + 1)
            if sub is not None:
                negs.append(sub[0])
    if negs:
        if not conj:
            conj.append(char + "*")
        conj += ["~(?:" + n + ")" for n in negs]
        extended = True
    if not conj:
        return char + "*", False
    if len(conj) == 1:
        return conj[0], extended
    return "(?:" + "&".join(c if c.startswith("~") else "(?:" + c + ")" for c in conj) + ")", True


def _pattern_ext(patterns: list[str]) -> bool:
    return any(pattern_to_regex(p).extended for p in patterns)
