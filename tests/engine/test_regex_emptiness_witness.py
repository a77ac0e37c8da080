"""Emptiness of an intersection decided by a conjunct's shortest word
(`_Analysis._a_conjunct_word_fits`), against the derivative search it stands before.

A `oneOf` of unanchored patterns makes each branch "contains P_i and none of the
others"; the search walked thousands of states of such a branch before it met `P_i`
itself (MaskBench's Github_hard---o12278, outside the dev set: 16 s to compile)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from regex_reference import random_patterns

from midword.engine.jsonschema.keywords import CANON_CHAR
from midword.engine.limits import LimitExceeded
from midword.engine.regex import ExprSet

_ATOMS = ["a", "b", "c", "[ab]", "(?:ab)", "x", "(?:xy)", "(?:zz)", "(?:zy|a)", "[a-z]"]


def patterns():
    return random_patterns(_ATOMS)


def _searched_only(regex: str) -> bool:
    es = ExprSet()
    es._a_conjunct_word_fits = lambda expr: False
    es._window_fits = lambda expr: None
    es._window_too_short = lambda expr: False
    return es.is_empty(es.parse(regex, "", extended=True))


def _with_witness(regex: str) -> bool:
    es = ExprSet()
    return es.is_empty(es.parse(regex, "", extended=True))


@settings(max_examples=200, deadline=None)
@given(patterns(), patterns(), st.one_of(st.none(), patterns()), st.booleans())
def test_a_conjunct_word_decides_as_the_search_does(a, b, c, contains):
    # Plain conjuncts beside complements, as "contains" or as whole patterns.
    wrap = (lambda p: "[a-z]*" + p + "[a-z]*") if contains else (lambda p: p)
    regex = wrap(a) + "&~(" + wrap(b) + ")"
    if c is not None:
        regex += "&" + wrap(c)
    assert _with_witness(regex) == _searched_only(regex), regex


@pytest.mark.parametrize(
    "regex, empty",
    [
        ("[a-z]*NEW[a-z]*&~([a-z]*DONE[a-z]*|[a-z]*OLD[a-z]*)", False),
        # The shortest word of the plain conjunct contains the excluded one: the search
        # decides, and finds another word or none.
        ("[A-Z]*AB[A-Z]*&~([A-Z]*B[A-Z]*)", True),
        ("(?:AB|AC)&~(AB)", False),
        ("(?:AB){2,}&~((?:AB)*)", True),
    ],
)
def test_intersections_of_patterns(regex, empty):
    assert _with_witness(regex) is empty
    assert _searched_only(regex) is empty


def test_one_exact_branch_of_seven_unanchored_patterns_needs_no_search():
    # o12278's `state`: exactly one of seven "contains" patterns over the JSON string's
    # characters. Its branches are not empty; the shortest word of each says so at once,
    # with no state explored, where the search alone explores hundreds.
    words = ["NEW", "ON_APPROVAL", "ON_SIGNING", "ON_MODIFICATION", "EXECUTED", "DEPRECATED", "REJECTED"]
    char = CANON_CHAR
    for i, w in enumerate(words):
        others = "|".join(f"{char}*{x}{char}*" for j, x in enumerate(words) if j != i)
        regex = f"{char}*{w}{char}*&~({others})"
        es = ExprSet()
        assert es.is_empty(es.parse(regex, "", extended=True), 1) is False
        es = ExprSet()
        es._a_conjunct_word_fits = lambda expr: False
        with pytest.raises(LimitExceeded):
            es.is_empty(es.parse(regex, "", extended=True), 1)


def test_a_length_limit_beside_a_pattern_takes_its_shortest_word_first():
    # `B & Q·C{0,n}`: a `maxLength` beside an email pattern, in the middle of a
    # character (MaskBench Github_easy---o21456). B's shortest word, a word of Q·C* and
    # at most n bytes long, settles it without `fewest_repeats`' search over pairs.
    es = ExprSet()
    body = es.parse("[a-z]+@[a-z]+\\.gov\\.uk[a-z]*")
    head = es.parse("[a-z]")
    chars = es.parse("[a-z@.]")
    fits = es.and_(body, es.concat(head, es.repeat(chars, 0, 40)))
    assert not es.is_empty(fits)
    assert es._fewest == {}
    # Too short for the shortest word: the search decides, and says empty.
    short = es.and_(body, es.concat(head, es.repeat(chars, 0, 8)))
    assert es.is_empty(short)
    assert list(es._fewest.values()) == [9]


@settings(max_examples=200, deadline=None)
@given(patterns(), st.sampled_from(["", "a", "[ab]", "(?:xy)"]), st.integers(0, 3), st.integers(0, 6))
def test_a_limit_decided_by_a_shortest_word_agrees_with_the_search(body, head, lo, hi):
    regex = f"(?:{body})&(?:{head})(?:[abcxyz]|zy){{{min(lo, hi)},{hi}}}"
    assert _with_witness(regex) == _searched_only(regex)


def test_a_window_shorter_than_every_word_is_empty_without_the_search():
    # An unanchored pattern of ten digits in a string of ten characters, after one other
    # character (MaskBench Github_medium---o44205): nine characters left, no word fits.
    es = ExprSet()
    chars = es.parse(CANON_CHAR, "")
    body = es.parse(f"(?:{CANON_CHAR})*[0-9]{{10}}(?:{CANON_CHAR})*", "")
    nine = es.and_(body, es.repeat(chars, 9, 9))
    es._class_reps = None  # the search would need it
    assert es.is_empty(nine)
    ten = es.and_(body, es.repeat(chars, 10, 10))
    del es._class_reps
    assert not es.is_empty(ten)


@settings(max_examples=200, deadline=None)
@given(patterns(), st.one_of(st.none(), patterns()), st.integers(0, 12), st.booleans())
def test_a_lengthened_word_decides_as_the_search_does(a, b, least, contains):
    # A minimum length beside a pattern (minLength beside `pattern`): the shortest word
    # of the pattern is too short, and the one lengthened where it may repeat is tried.
    wrap = (lambda p: "[a-z]*" + p + "[a-z]*") if contains else (lambda p: p)
    regex = f"[a-z]{{{least},}}&" + wrap(a)
    if b is not None:
        regex += "&~(" + wrap(b) + ")"
    assert _with_witness(regex) == _searched_only(regex), regex


def test_a_pattern_beside_a_minimum_length_needs_no_search():
    # MaskBench's Github_hard---o79409 (outside the dev set): `trace_id` has
    # minLength 35 beside an unanchored pattern whose shortest word has 27 characters.
    # Each count left was a state whose emptiness was searched, byte class by class, in
    # the masks of the string; the pattern's word with its leading run lengthened fits.
    char = CANON_CHAR
    pattern = f"{char}*[0-9]+-[0-9A-Fa-f]*-[0-9A-Fa-f]{{24}}{char}*"
    for least in (28, 35, 60):
        regex = f"{char}{{{least},}}&{pattern}"
        es = ExprSet()
        assert es.is_empty(es.parse(regex, "", extended=True), 1) is False
        es = ExprSet()
        es._a_conjunct_word_fits = lambda expr: False
        es._window_fits = lambda expr: None
        with pytest.raises(LimitExceeded):
            es.is_empty(es.parse(regex, "", extended=True), 1)
    # Past the longest word tried, the search decides.
    es = ExprSet()
    assert es.is_empty(es.parse(f"{char}{{300,}}&{pattern}", "", extended=True)) is False
