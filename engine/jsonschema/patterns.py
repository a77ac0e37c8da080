"""ECMA-262 `pattern`s as regexes over a JSON string's encoded text."""

from __future__ import annotations

import re
from collections.abc import Callable

from ..limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits
from ..regex import charset
from ..regex import term as T
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


def parse_ecma(pattern: str, where: "str | _Where" = "#") -> tuple:
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


def _branches(node: tuple, where: "str | _Where", pattern: str) -> list[tuple[bool, bool, list, tuple]]:
    """Top-level alternatives as (anchored at start, anchored at end, conditions, body).

    Anchors are moved to the ends of a top-level alternative: directly there, inside
    a leading/trailing group alternation (`^(a|$)` is `^a|^$`), or, anywhere else, by
    splitting the alternative into its matches through the anchor (`_split_at_anchor`)
    and the others. Conditions are lookaheads right after a leading `^`
    (("look", negative, X): the text does / does not start with X) and the idiom
    `^((?!X).)*$` (("avoid", X): X occurs nowhere).
    """
    work = [(False, False, _as_items(a)) for a in (node[1] if node[0] == "alt" else (node,))]
    out: list[tuple[bool, bool, list, tuple]] = []
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
        # An anchor inside (`(/|$)`, `(?:^x|y)z`): the matches through it are a branch
        # anchored there, the others a branch without it; the lookaheads lifted off this
        # branch hold for both.
        through_only = False  # every match passes an anchor: nothing is left of it
        for anchor in (_EOL, _BOL) if all(c[0] == "look" for c in conds) else ():
            if not through_only and any(sub == anchor for it in items for sub in _walk(it)):
                free, through = _split_at_anchor(("seq", tuple(items)), anchor)
                if through is not None:
                    anchored = (start, True) if anchor == _EOL else (True, end)
                    work.insert(0, (*anchored, list(conds) + _as_items(through)))
                if free is None:
                    through_only = True
                else:
                    items = _as_items(free)
        if through_only:
            continue
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


def _split_at_anchor(node: tuple, anchor: tuple) -> tuple[tuple | None, tuple | None]:
    """(matches of `node` through no `anchor`, matches through one), None for none.
    After a `$` the text ends, so what follows it in the match must match the empty
    string (and is dropped), and a repetition passes it on its last non-empty turn;
    before a `^` the text starts, the mirror image."""
    at_end = anchor == _EOL
    other = _BOL if at_end else _EOL
    kind = node[0]
    if node == anchor:
        return None, ("seq", ())
    if kind != "seq" and kind != "alt" and kind != "rep":
        return node, None
    if kind == "alt":
        parts = [_split_at_anchor(x, anchor) for x in node[1]]
        free_alts = [f for f, _ in parts if f is not None]
        through_alts = [t for _, t in parts if t is not None]
        return (_EcmaAst.alt(*free_alts) if free_alts else None), (
            _EcmaAst.alt(*through_alts) if through_alts else None
        )
    if kind == "seq":
        items = list(node[1])
        split = [_split_at_anchor(x, anchor) for x in items]
        through: list[tuple] = []
        for i, (_, hit) in enumerate(split):
            dropped = items[i + 1 :] if at_end else items[:i]
            if hit is None or not all(_nullable_ast(x) and other not in _walk(x) for x in dropped):
                continue
            kept = [f for f, _ in (split[:i] if at_end else split[i + 1 :])]
            if all(f is not None for f in kept):
                frees = [f for f in kept if f is not None]
                through.append(_EcmaAst.concat(*frees, hit) if at_end else _EcmaAst.concat(hit, *frees))
        frees_all = [f for f, _ in split]
        whole = None if any(f is None for f in frees_all) else ("seq", tuple(f for f in frees_all if f is not None))
        return whole, (_EcmaAst.alt(*through) if through else None)
    _, inner, lo, hi = node
    free_inner, hit_inner = _split_at_anchor(inner, anchor)
    free: tuple | None
    if free_inner is None:
        free = ("seq", ()) if lo == 0 else None
    else:
        free = ("rep", free_inner, lo, hi)
    if hit_inner is None or hi == 0:
        return free, None
    # The turns on the kept side of the one through the anchor; those on the other side
    # must match the empty string, so where the body cannot, the kept ones make up the
    # count.
    fewest = 0 if _nullable_ast(inner) else max(0, lo - 1)
    most = None if hi is None else hi - 1
    if free_inner is None:
        return free, (hit_inner if fewest == 0 else None)
    turns = ("rep", free_inner, fewest, most)
    return free, (_EcmaAst.concat(turns, hit_inner) if at_end else _EcmaAst.concat(hit_inner, turns))


# Characters a JSON string must escape.
_SPECIAL = charset.normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_NOT_SPECIAL = charset.complement(_SPECIAL)
_NAMED_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}


def _json_set(s: tuple) -> T.Term | None:
    """Canonical JSON-encoded text of one character from `s` (None: `s` is empty)."""
    if len(s) == 1 and s[0][0] == s[0][1]:
        cp = s[0][0]
        if cp >= 0x20 and cp != 0x22 and cp != 0x5C:
            # One character that needs no escape, as most of a pattern's are: its UTF-8.
            return T.lit(chr(cp).encode("utf-8"))
    alts = []
    plain = charset.intersect(s, _NOT_SPECIAL)
    if plain:
        alts.append(T.cls(plain))
    specials = charset.intersect(s, _SPECIAL)
    cps = [cp for lo, hi in specials for cp in range(lo, hi + 1)]
    if 0x22 in cps:
        alts.append(T.lit(b'\\"'))
    if 0x5C in cps:
        alts.append(T.lit(b"\\\\"))
    named = [ord(_NAMED_ESCAPES[c]) for c in cps if c in _NAMED_ESCAPES]
    if named:
        alts.append(T.seq(T.lit(b"\\"), T.cls((c, c) for c in named)))
    hexes = [f"{c:02x}".encode() for c in cps if c < 0x20 and c not in _NAMED_ESCAPES]
    if hexes:
        alts.append(T.seq(T.lit(b"\\u00"), T.alt(*map(T.lit, hexes))))
    if not alts:
        return None
    return T.alt(*alts)


def _json_term(node: tuple) -> T.Term | None:
    """The expression for an AST node over canonical JSON-encoded text, built from the
    parse (None when the node matches nothing)."""
    kind = node[0]
    if kind == "set":
        return _json_set(node[1]) if node[1] else None
    if kind == "seq":
        parts: list[T.Term] = []
        for it in node[1]:
            r = _json_term(it)
            if r is None:
                return None
            if r[0] == "lit" and parts and parts[-1][0] == "lit":
                # A run of characters is one literal: one chain in the expression set.
                parts[-1] = T.lit(parts[-1][1] + r[1])
            else:
                parts.append(r)
        return T.seq(*parts)
    if kind == "alt":
        alts = [r for r in (_json_term(it) for it in node[1]) if r is not None]
        return T.alt(*alts) if alts else None
    if kind == "rep":
        _, inner, lo, hi = node
        r = _json_term(inner)
        if r is None or r == T.EMPTY:
            return T.EMPTY if (r == T.EMPTY or lo == 0) else None
        if hi == 0:
            return T.EMPTY
        return T.rep(r, lo, hi)
    raise AssertionError(kind)  # anchors and lookaheads are placed by `_branches`


def _plain_text(node: tuple) -> str | None:
    """The text a body matches when it matches exactly one string, spelled character by
    character (a single code point per set); None otherwise."""
    if node[0] == "set":
        ranges = node[1]
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            return chr(ranges[0][0])
        return None
    if node[0] == "seq":
        chars = [_plain_text(item) for item in node[1]]
        return None if None in chars else "".join(c for c in chars if c is not None)
    return None


def _py_regex(node: tuple) -> str | None:
    """Python `re` text for an AST node over the decoded text, for `_Pattern.py`. None
    when the node matches nothing. Results are atoms or sequences safe to concatenate;
    alternations come wrapped."""
    kind = node[0]
    if kind == "set":
        if not node[1]:
            return None
        return _class_regex(node[1])
    if kind == "seq":
        parts = []
        for it in node[1]:
            r = _py_regex(it)
            if r is None:
                return None
            parts.append(r)
        return "".join(parts)
    if kind == "alt":
        parts = [r for r in (_py_regex(it) for it in node[1]) if r is not None]
        if not parts:
            return None
        return "(?:" + "|".join(parts) + ")"
    if kind == "rep":
        _, inner, lo, hi = node
        r = _py_regex(inner)
        if r is None or r == "":
            return "" if (r == "" or lo == 0) else None
        if hi == 0:
            return ""
        return "(?:" + r + ")" + _rep_suffix(lo, hi)
    if kind == "look":
        r = _py_regex(node[2])
        return "(?" + ("!" if node[1] else "=") + (r if r is not None else "[^\\x00-\\U0010ffff]") + ")"
    raise AssertionError(kind)


def _one_character_of(body: tuple) -> charset.CharSet | None:
    """The set c when an unanchored `body` matches inside a string exactly where some
    character of c occurs: a class, or a class repeated at least once (a run of one
    is enough to contain a match). None for anything else."""
    if body[0] == "seq" and len(body[1]) == 1:
        body = body[1][0]
    if body[0] == "rep" and body[2] == 1 and body[3] != 0:
        body = body[1]
    if body[0] == "set" and body[1]:
        return body[1]
    return None


def _fewest_chars(node: tuple) -> int | None:
    """The fewest characters of a string the AST node matches (None: it matches none),
    read off the parse as `_json_term` builds it; one character is one code point."""
    kind = node[0]
    if kind == "set":
        return 1 if node[1] else None
    if kind == "seq":
        total = 0
        for it in node[1]:
            n = _fewest_chars(it)
            if n is None:
                return None
            total += n
        return total
    if kind == "alt":
        found = [n for n in map(_fewest_chars, node[1]) if n is not None]
        return min(found) if found else None
    if kind == "rep":
        _, inner, lo, hi = node
        n = _fewest_chars(inner)
        if n is None or hi == 0:
            return 0 if (lo == 0 or hi == 0) else None
        return lo * n
    raise AssertionError(kind)  # anchors and lookaheads are placed by `_branches`


def _first_of(chars: charset.CharSet) -> T.Term:
    """Strings where some character of `chars` occurs, read up to the first one:
    `(C - c)*·c·C*`, the language of `C*·c+·C*` without its ambiguity, so that a lexer
    meets one state where the other form meets a set of overlapping ones."""
    others = _json_set(charset.complement(chars))
    one = _json_set(chars)
    assert one is not None  # `_one_character_of` gives non-empty sets only
    return T.seq(*([T.rep(others, 0, None)] if others is not None else []), one, _ANY_JSON)


class _Pattern:
    """A translated pattern: `expr` is the regex term (`regex.term`, or None: no string
    matches) over the canonical JSON-encoded body of a string, built from the pattern's
    one parse; `extended` says it uses `&`/`~`; `py` is the same language as a Python
    regex over the decoded text (fullmatch semantics). The compiler itself matches with
    `expr` on midword's linear-time engine; `py` (backtracking) serves tests and
    debugging."""

    __slots__ = ("expr", "extended", "_py_source", "_py", "char_set", "fewest_chars", "literals")

    def __init__(
        self,
        expr: T.Term | None,
        extended: bool,
        py_source: str | Callable[[], str] | None,
        char_set: charset.CharSet | None = None,
        fewest_chars: int | None = None,
        literals: tuple[tuple[bool, bool, str], ...] | None = None,
    ):
        self.expr = expr
        self.extended = extended
        self._py_source = py_source
        self._py: re.Pattern | None = None
        # The code points c when the pattern says no more than "some character is in c"
        # (`.+`, `\S`, `[a-z]`, unanchored): then the strings it does not match are
        # those of the other characters, `(C - c)*`, a regex far cheaper to run than the
        # complement of `C*·c·C*`. None for any other pattern.
        self.char_set = char_set
        # The length in characters of a string the pattern matches, as short as its
        # branches without lookaheads give (None: every branch has one): a witness that
        # a length limit leaves some string, without a search.
        self.fewest_chars = fewest_chars
        # (anchored at start, anchored at end, text) per branch where every branch is
        # plain text (`Normal|Fighting`, `^x-`): then whether a key matches is a substring
        # test on it, where the linear-time engine would derive a state per character of
        # each listed key. None for any other pattern.
        self.literals = literals

    def matches_literally(self, text: str) -> bool:
        """Whether the decoded `text` contains a match (JSON Schema's unanchored search),
        for a pattern of plain-text branches (`literals` is not None)."""
        assert self.literals is not None
        for start, end, lit in self.literals:
            if start and end:
                found = text == lit
            elif start:
                found = text.startswith(lit)
            elif end:
                found = text.endswith(lit)
            else:
                found = lit in text
            if found:
                return True
        return False

    @property
    def py(self) -> re.Pattern | None:
        # Compiled on first use: only tests and checks of literal values need it, and
        # Python's re compiler costs as much as the rest of a schema's compile.
        if self._py is None and self._py_source is not None:
            if callable(self._py_source):
                self._py_source = self._py_source()
            try:
                self._py = re.compile(self._py_source, re.DOTALL)
            except re.error as e:  # pragma: no cover - our own output; a bug if reached
                raise GrammarError(f"internal error translating a pattern to Python: {e}") from None
        return self._py

    def matches(self, text: str) -> bool:
        py = self.py
        return py is not None and py.fullmatch(text) is not None


def _py_source(branches: list) -> str:
    """The Python regex of the branches `pattern_to_regex` kept, over the decoded text."""
    alts = []
    for start, end, looks, body in branches:
        core = _py_regex(body)
        assert core is not None  # a kept branch has a term, and so a regex
        pcore = ("" if start else _ANY_PY) + core + ("" if end else _ANY_PY)
        for cond in looks:
            cond_py = _py_regex(cond[-1])
            if cond_py is None:
                continue  # a negative lookahead of nothing, which always holds
            negative = cond[0] == "avoid" or cond[1]
            lead = cond[0] == "avoid"
            pcore = "(?" + ("!" if negative else "=") + (_ANY_PY if lead else "") + cond_py + ")" + pcore
        alts.append(pcore)
    return "(?:" + "|".join(alts) + ")"


# (pattern) -> (translation, its term's size).
_pattern_cache: dict[str, tuple[_Pattern, int]] = {}
_ANY_JSON = T.rep(T.src(CANON_CHAR), 0, None)
_ANY_PY = _class_regex(charset.ALL) + "*"


def pattern_to_regex(pattern: str, where: "str | _Where" = "#", limits: Limits = DEFAULT_LIMITS) -> _Pattern:
    """Translate an ECMA-262 `pattern` (unanchored, JSON Schema semantics) into the
    language of strings containing a match, over canonical JSON-encoded text."""
    hit = _pattern_cache.get(pattern)
    if hit is not None:
        if hit[1] > limits.max_regex_chars:
            raise LimitExceeded("max_regex_chars", limits.max_regex_chars, f"pattern {pattern!r} at {where}")
        return hit[0]
    ast = parse_ecma(pattern, where)
    branches = _branches(ast, where, pattern)
    json_alts = []
    extended = False
    # The union of the branches' `_one_character_of` sets: empty until a branch is read,
    # None once one branch is of another shape.
    char_set: charset.CharSet | None = ()
    fewest: int | None = None
    kept = []
    literals: list[tuple[bool, bool, str]] | None = []
    for start, end, looks, body in branches:
        # `_py_regex` is None exactly where `_json_term` is: both follow the parse.
        core = _json_term(body)
        if core is None:
            continue
        if not looks:
            shortest = _fewest_chars(body)
            if shortest is not None and (fewest is None or shortest < fewest):
                fewest = shortest
        one = None if (start or end or looks) else _one_character_of(body)
        char_set = None if one is None or char_set is None else charset.normalize(char_set + one)
        core = T.seq(*([] if start else [_ANY_JSON]), core, *([] if end else [_ANY_JSON]))
        conj = [core]
        dead = False
        for cond in looks:
            negative = cond[0] == "avoid" or cond[1]
            cond_term = _json_term(cond[-1])
            if cond_term is None:
                if negative:
                    continue  # (?!nothing) always holds
                dead = True
                break
            lead = cond[0] == "avoid"
            looked = T.seq(*([_ANY_JSON] if lead else []), cond_term, _ANY_JSON)
            conj.append(T.not_(looked) if negative else looked)
            extended = True
        if dead:
            continue
        json_alts.append(T.and_(*conj))
        kept.append((start, end, looks, body))
        if literals is not None:
            text = None if looks else _plain_text(body)
            if text is None:
                literals = None
            else:
                literals.append((start, end, text))
    size = 0
    if not json_alts:
        result = _Pattern(None, False, None)
    else:
        expr = T.alt(*json_alts) if not char_set else _first_of(char_set)
        size = T.size(expr)
        if size > limits.max_regex_chars:
            raise LimitExceeded("max_regex_chars", limits.max_regex_chars, f"pattern {pattern!r} at {where}")
        # The Python regex serves tests and literal checks only: spelled when first asked.
        result = _Pattern(
            expr, extended, lambda: _py_source(kept), char_set or None, fewest, tuple(literals) if literals else None
        )
    if len(_pattern_cache) > 4096:
        _pattern_cache.clear()
    _pattern_cache[pattern] = (result, size)
    return result
