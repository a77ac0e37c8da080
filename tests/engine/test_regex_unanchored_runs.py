"""An unanchored run (`.*X{n}.*`, a JSON Schema `pattern` without anchors) has, after k
bytes of X, a derivative of one member per byte it may have started at: `X{n-1}·T`,
`X{n-2}·T`, ... Where T takes X in front of itself, the run of fewest X holds the others
(`ExprSet._absorbed_runs`): the alternation keeps two members whatever k, and the
language is what Python's `re` says (MaskBench `Github_easy---o40228`: a 162-byte run,
whose every mask along it made derivatives of a hundred members before)."""

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from regex_reference import matches, random_patterns

from midword.engine.regex import ExprSet
from midword.engine.regex.nodes import OR

JSON_CHAR = r'[^"\\\x00-\x1F\x7F]'


def test_an_unanchored_run_keeps_two_members_along_the_run():
    es = ExprSet()
    # The JSON string the compiler makes for `"pattern": "[a-zA-Z0-9_-]{162}"`, shortened.
    string = es.parse(f'{JSON_CHAR}*[a-zA-Z0-9_-]{{40}}{JSON_CHAR}*"')
    d = string
    for k, b in enumerate(b"0123456789-" * 3):
        d = es.derivative(d, b)
        assert es._kind[d] != OR or len(es._args[d]) <= 2, k
    # 33 bytes of the run read: 7 to go, whichever byte the run started at.
    assert matches(es, d, b"abcdefg" + b'"')
    assert not matches(es, d, b"abcdef" + b'"')
    assert matches(es, d, b"abcdef!xyz" + b"q" * 40 + b'"')
    # A byte outside X ends every run but the one still to start.
    stopped = es.derivative(d, ord("!"))
    assert not matches(es, stopped, b"abcdefg" + b'"')
    assert matches(es, stopped, b"a" * 40 + b'"')


def test_runs_are_kept_where_the_tail_does_not_take_them():
    es = ExprSet()
    # T = [0-9]*·"... does not take a letter in front of itself: a{3}·T and a{5}·T differ.
    tail = es.parse('[0-9]*"')
    three, five = es.concat(es.parse("a{3}"), tail), es.concat(es.parse("a{5}"), tail)
    both = es.alt(three, five)
    assert es._kind[both] == OR and set(es._args[both]) == {three, five}
    # ... and where it does, the run of fewest holds the other, and T itself holds both.
    tail = es.parse('[a-z0-9]*"')
    three, five = es.concat(es.parse("a{3}"), tail), es.concat(es.parse("a{5}"), tail)
    assert es.alt(three, five) == three
    assert es.alt(three, five, tail) == tail


_ATOMS = ["a", "b", "[ab]", "(?:ab)", "c"]
_RUN_BODIES = ["a", "[ab]", "(?:ab)", "(?:a|bc)"]
_WORDS = [bytes(w) for n in range(7) for w in itertools.product(b"abc", repeat=n)]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(_RUN_BODIES),
    st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 3))), min_size=2, max_size=4),
    st.sampled_from(["[abc]*", "[ab]*c?", "(?:[ab]|c)*b", "a*", "[bc]*"]),
    random_patterns(_ATOMS, depth=1),
    st.booleans(),
)
def test_an_alternation_of_runs_keeps_the_language(body, counts, tail, other, with_tail):
    es = ExprSet()
    t = es.parse(tail)
    members = []
    texts = []
    for lo, hi in counts:
        hi = None if hi is None else max(lo, hi)
        bounds = "{%d,}" % lo if hi is None else "{%d,%d}" % (lo, hi)
        members.append(es.concat(es.parse(f"(?:{body}){bounds}"), t))
        texts.append(f"(?:{body}){bounds}(?:{tail})")
    members.append(es.parse(other))
    texts.append(other)
    if with_tail:
        members.append(t)
        texts.append(tail)
    union = es.alt(*members)
    reference = re.compile("|".join(f"(?:{x})" for x in texts).encode())
    for w in _WORDS:
        assert matches(es, union, w) == (reference.fullmatch(w) is not None), (texts, w)
