"""Expressions as values, independent of any `ExprSet`.

A front end that has already parsed a pattern (JSON Schema's ECMA `pattern`s) builds
its lexemes from the parse instead of writing regex text for the lexer to parse again:
it composes terms, and the lexer builds each term into its own expression set with the
smart constructors (`build`). A term is a tuple, hashable and compared by structure, so
two equal expressions are equal keys and two different ones are different keys:

    ("lit", bytes)              the bytes themselves
    ("cls", ranges)             one code point of a set (normalized ranges), as UTF-8
    ("seq", (t, ...))           concatenation; ("seq", ()) is the empty string
    ("alt", (t, ...))           alternation; ("alt", ()) is the empty language
    ("and", (t, ...))           intersection
    ("not", t)                  complement (every byte string not in t)
    ("rep", t, lo, hi)          t{lo,hi}, hi None for unbounded
    ("excl", t, words)          t less the byte strings `words` (sorted, distinct)
    ("src", text)               text in midword's extended syntax, written by the
                                front end itself (a character class such as a JSON
                                string's character), parsed once per expression set
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from . import charset
from .printer import class_regex, regex_escape_bytes, repeat_suffix

if TYPE_CHECKING:
    from .exprset import ExprSet

Term = tuple

EMPTY: Term = ("seq", ())
NOTHING: Term = ("alt", ())


def lit(data: bytes) -> Term:
    return ("lit", bytes(data))


def cls(ranges: Iterable[tuple[int, int]]) -> Term:
    return ("cls", charset.normalize(ranges))


def seq(*items: Term) -> Term:
    flat: list[Term] = []
    for t in items:
        if t[0] == "seq":
            flat.extend(t[1])
        else:
            flat.append(t)
    return flat[0] if len(flat) == 1 else ("seq", tuple(flat))


def alt(*items: Term) -> Term:
    return items[0] if len(items) == 1 else ("alt", tuple(items))


def and_(*items: Term) -> Term:
    return items[0] if len(items) == 1 else ("and", tuple(items))


def not_(item: Term) -> Term:
    return ("not", item)


def rep(item: Term, lo: int, hi: int | None) -> Term:
    return ("rep", item, lo, hi)


def excl(item: Term, words: Iterable[bytes]) -> Term:
    return ("excl", item, tuple(sorted(set(words))))


def src(text: str) -> Term:
    return ("src", text)


def build(es: ExprSet, term: Term) -> int:
    """The expression of `term` in `es`."""
    k = term[0]
    if k == "lit":
        return es.literal(term[1])
    if k == "cls":
        return es.char_class(term[1])
    if k == "seq":
        return es.concat(*[build(es, t) for t in term[1]])
    if k == "alt":
        return es.alt(*[build(es, t) for t in term[1]])
    if k == "and":
        # A string's pattern (a format's, hundreds of nodes) is a conjunct beside its
        # length window, which differs from schema to schema: the pattern is built once.
        return es.and_(*[es.build(t) for t in term[1]])
    if k == "not":
        return es.not_(build(es, term[1]))
    if k == "rep":
        return es.repeat(build(es, term[1]), term[2], term[3])
    if k == "excl":
        return es._exclude_sorted(build(es, term[1]), term[2])
    if k == "src":
        return es.parse(term[1], extended=True)
    raise ValueError(f"not a regex term: {term!r}")


def size(term: Term) -> int:
    """Nodes and leaf characters of `term`: what its regex text would take, roughly."""
    k = term[0]
    if k in ("lit", "src"):
        return 1 + len(term[1])
    if k == "cls":
        return 1 + 2 * len(term[1])
    if k in ("seq", "alt", "and"):
        return 1 + sum(size(t) for t in term[1])
    if k == "excl":
        return 1 + size(term[1]) + sum(len(w) + 1 for w in term[2])
    return 1 + size(term[1])


def render(term: Term) -> str:
    """`term` in midword's extended syntax, for reading (grammar listings, messages):
    the lexer builds the term itself, never this text."""
    k = term[0]
    if k == "lit":
        return regex_escape_bytes(term[1])
    if k == "cls":
        return class_regex(term[1]) if term[1] else "(?:[^\\x00-\\U0010ffff])"
    if k == "seq":
        return "".join(_atom(t) if t[0] in ("alt", "and", "excl", "src") else render(t) for t in term[1])
    if k == "alt":
        return "|".join(render(t) for t in term[1]) if term[1] else "(?:[^\\x00-\\U0010ffff])"
    if k == "and":
        return "&".join(_atom(t) for t in term[1])
    if k == "not":
        return "~" + _atom(term[1])
    if k == "rep":
        return _atom(term[1]) + repeat_suffix(term[2], term[3])
    if k == "excl":
        words = "|".join(regex_escape_bytes(w) for w in term[2])
        return _atom(term[1]) + "&~(?:" + words + ")"
    if k == "src":
        return term[1]
    raise ValueError(f"not a regex term: {term!r}")


def _atom(term: Term) -> str:
    return "(?:" + render(term) + ")"
