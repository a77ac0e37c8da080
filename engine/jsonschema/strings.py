"""A string schema's body regex: length, patterns and exclusions as one lexeme."""

from __future__ import annotations

from ..limits import GrammarError
from ..regex import regex_escape_bytes
from ..regex.printer import repeat_suffix as _rep_suffix
from .ir import _Const, _Str
from .keywords import CANON_CHAR, GENERAL_CHAR
from .patterns import pattern_to_regex
from .pointers import _json_str


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
