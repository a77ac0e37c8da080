"""ECMA-262 `pattern`s as regexes over a JSON string's encoded text."""

from __future__ import annotations

import re

from ..limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits
from ..regex import charset
from ..regex.parser import _Parser
from ..regex.printer import class_regex as _class_regex
from ..regex.printer import repeat_suffix as _rep_suffix
from .keywords import CANON_CHAR
from .pointers import _Where

# --------------------------------------------------------------------------------------
# ECMA-262 patterns
# --------------------------------------------------------------------------------------

_BOL = ("bol",)
_EOL = ("eol",)


class _EcmaAst:
    """Builder for the regex parser's "ecma" dialect: a small AST over code point sets,
    kept as an AST because the anchors and lookaheads it holds are placed afterwards
    (`_branches`) and the sets are written in a JSON string's encoding (`_emit`). Nodes
    are tuples: ("set", ranges) ("seq", items) ("alt", items) ("rep", node, lo, hi)
    ("bol",) ("eol",) ("look", negative, node)."""

    @staticmethod
    def alt(*items: tuple) -> tuple:
        return items[0] if len(items) == 1 else ("alt", items)

    @staticmethod
    def concat(*items: tuple) -> tuple:
        flat: list = []
        for it in items:
            if it[0] == "seq":
                flat.extend(it[1])
            else:
                flat.append(it)
        return flat[0] if len(flat) == 1 else ("seq", tuple(flat))

    @staticmethod
    def literal(data: bytes) -> tuple:
        return _EcmaAst.concat(*[("set", charset.single(ord(c))) for c in data.decode("utf-8")])

    @staticmethod
    def char_class(ranges, negate: bool = False) -> tuple:
        s = charset.normalize(ranges)
        return ("set", charset.complement(s) if negate else s)

    @staticmethod
    def repeat(node: tuple, lo: int, hi: int | None) -> tuple:
        return ("rep", node, lo, hi)

    @staticmethod
    def anchor(kind: str) -> tuple:
        return _BOL if kind == "bol" else _EOL

    @staticmethod
    def look(negative: bool, node: tuple) -> tuple:
        return ("look", negative, node)


def parse_ecma(pattern: str, where: str = "#") -> tuple:
    """The AST of an ECMA-262 pattern, read by the one regex parser's "ecma" dialect."""
    return _Parser(_EcmaAst, pattern, dialect="ecma", where=str(where)).parse()


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


# Characters a JSON string must escape.
_SPECIAL = charset.normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_NOT_SPECIAL = charset.complement(_SPECIAL)
_NAMED_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}


def _json_set_regex(s: tuple) -> str | None:
    """Regex over canonical JSON-encoded text for one character from `s` (None: empty)."""
    alts = []
    plain = charset.intersect(s, _NOT_SPECIAL)
    if plain:
        alts.append(_class_regex(plain))
    specials = charset.intersect(s, _SPECIAL)
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


def pattern_to_regex(pattern: str, where: "str | _Where" = "#", limits: Limits = DEFAULT_LIMITS) -> _Pattern:
    """Translate an ECMA-262 `pattern` (unanchored, JSON Schema semantics) into the
    language of strings containing a match, over canonical JSON-encoded text."""
    hit = _pattern_cache.get(pattern)
    if hit is not None:
        if hit.json is not None and len(hit.json) > limits.max_regex_chars:
            raise LimitExceeded("max_regex_chars", limits.max_regex_chars, f"pattern {pattern!r} at {where}")
        return hit
    ast = parse_ecma(pattern, where)
    branches = _branches(ast, where, pattern)
    any_json = CANON_CHAR + "*"
    any_py = _class_regex(charset.ALL) + "*"
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
        if len(jre) > limits.max_regex_chars:
            raise LimitExceeded("max_regex_chars", limits.max_regex_chars, f"pattern {pattern!r} at {where}")
        result = _Pattern(jre, extended, "(?:" + "|".join(py_alts) + ")")
    if len(_pattern_cache) > 4096:
        _pattern_cache.clear()
    _pattern_cache[pattern] = result
    return result
