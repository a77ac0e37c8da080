"""A string schema's body: length, patterns and exclusions as one expression."""

from __future__ import annotations

from ..limits import GrammarError
from ..regex import term as T
from .ir import _Const, _Str
from .keywords import CANON_CHAR, GENERAL_CHAR
from .patterns import pattern_to_regex
from .pointers import _json_str

# Any string body: the characters as any spelling, or as the canonical one.
GENERAL_BODY = T.rep(T.src(GENERAL_CHAR), 0, None)
CANON_BODY = T.rep(T.src(CANON_CHAR), 0, None)
QUOTE = T.lit(b'"')


def _string_body(node: _Str, depth: int = 0) -> tuple[T.Term, bool] | None:
    """(body expression, extended) of a string schema, or None if it matches nothing.
    Its patterns come as their parses (`regex.term`), never as regex text."""
    if depth > 16:
        raise GrammarError("string exclusions nested too deeply")
    # A pattern or an exclusion is checked on one spelling: the canonical one.
    char = T.src(CANON_CHAR if (node.patterns or node.excluded) else GENERAL_CHAR)
    conj: list[T.Term] = []
    extended = False
    if node.min_len or node.max_len is not None:
        conj.append(T.rep(char, node.min_len, node.max_len))
    for p in node.patterns:
        pr = pattern_to_regex(p)
        if pr.expr is None:
            return None
        conj.append(pr.expr)
        extended |= pr.extended
    negs = []
    for x in node.excluded:
        if isinstance(x, _Const):
            negs.append(T.lit(_json_str(x.value)[1:-1].encode()))
        else:
            sub = _string_body(x, depth + 1)
            if sub is not None:
                negs.append(sub[0])
    if negs:
        if not conj:
            conj.append(T.rep(char, 0, None))
        # One complement of the union, not a complement per exclusion: the same
        # language, and a derivative normalizes one alternation instead of comparing
        # every pair of complements in the intersection (a oneOf of k overlapping
        # patterns excludes k - 1 of them from each branch).
        conj.append(T.not_(negs[0] if len(negs) == 1 else T.alt(*negs)))
        extended = True
    if not conj:
        return T.rep(char, 0, None), False
    if len(conj) == 1:
        return conj[0], extended
    return T.and_(*conj), True


def surely_has_a_string(node: _Str) -> bool:
    """True when a string fits the schema for sure, found without a search: one pattern,
    no exclusions, and the pattern's shortest string (a lookahead-free branch's) within
    the length limits. False means "not known"."""
    if len(node.patterns) != 1 or node.excluded:
        return False
    fewest = pattern_to_regex(node.patterns[0]).fewest_chars
    return fewest is not None and node.min_len <= fewest and (node.max_len is None or fewest <= node.max_len)


def quoted(body: T.Term) -> T.Term:
    """A JSON string with body `body`, quotes included."""
    return T.seq(QUOTE, body, QUOTE)
