"""`A & C*` is `A` when A reads only bytes that are words of C on their own (a pattern
or format ANDed with the JSON string characters): the intersection is dropped at
construction, and the language is what Python's `re` says of both together."""

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from regex_reference import matches, random_patterns

from midword.engine.regex import ExprSet
from midword.engine.regex.nodes import AND

_ATOMS = ["a", "b", "c", "[ab]", "(?:ab)", "x", "(?:xy)", "(?:zz)", "(?:zy|a)"]


def patterns():
    return random_patterns(_ATOMS)


_STARS = ["(?:[abc]|xy)*", "(?:[abc]|xy)+", "(?:[ab]|c|xy)*", "[abc]*", "(?:[abx]|y)*", "(?:[abc]|xy){0,3}"]
_WORDS = [bytes(w) for n in range(6) for w in itertools.product(b"abcxy", repeat=n)]


@settings(max_examples=150, deadline=None)
@given(patterns(), st.sampled_from(_STARS))
def test_and_with_a_star_keeps_the_language(pattern, star):
    es = ExprSet()
    a, c = es.parse(pattern), es.parse(star)
    both = es.and_(a, c)
    ra, rc = re.compile(pattern.encode()), re.compile(star.encode())
    for w in _WORDS:
        want = ra.fullmatch(w) is not None and rc.fullmatch(w) is not None
        assert matches(es, both, w) == want, (pattern, star, w)


def test_a_pattern_inside_the_characters_loses_the_and():
    es = ExprSet()
    chars = es.parse('(?:[^"\\\\\\x00-\\x1f]|\\\\["\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4})*')
    email = es.parse("[a-z0-9.]+@[a-z0-9-]{0,61}[a-z0-9](?:\\.[a-z]{2,})+")
    assert es.and_(email, chars) == email
    # a byte outside the characters' single bytes (a quote) keeps the intersection
    quoted = es.parse('[a-z"]+')
    assert es._kind[es.and_(quoted, chars)] == AND
    # C+ drops only for a member that cannot be empty
    plus = es.parse("[a-z]+")
    assert es.and_(es.parse("[a-z]{2,5}"), plus) == es.parse("[a-z]{2,5}")
    # ... and counts of the same characters meet as one count (ExprSet._meet_counts)
    assert es.and_(es.parse("[a-z]{0,5}"), plus) == es.parse("[a-z]{1,5}")
    # a bounded count of characters is a length limit: kept
    assert es._kind[es.and_(email, es.parse("[a-z0-9.@-]{0,40}"))] == AND


_HEADS = ["[ab]", "(?:ab|ba)", "[xy]{2}", "a", "(?:a|bc)", "(?:ab)?"]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(_HEADS), patterns(), patterns(), patterns(), st.booleans())
def test_and_not_with_a_common_head_keeps_the_language(head, a, b, other, with_other):
    """`P·A & ~(P·B | M)`, factored to `P·(A & ~B)` where P has one length and M
    cannot start P's words, against `re` on every word of up to five bytes."""
    es = ExprSet()
    pa = es.parse(head + "(?:" + a + ")")
    excluded = head + "(?:" + b + ")" + (("|" + other) if with_other else "")
    both = es.and_(pa, es.not_(es.parse(excluded)))
    ra, rb = re.compile((head + "(?:" + a + ")").encode()), re.compile(("(?:" + excluded + ")").encode())
    for w in _WORDS:
        want = ra.fullmatch(w) is not None and rb.fullmatch(w) is None
        assert matches(es, both, w) == want, (head, a, excluded, w)


def test_a_partial_character_shares_the_intersection():
    """Inside a multibyte character, `(char)* & ~K` factors its continuation bytes out:
    the derivatives by the lead bytes of one length meet the same intersection."""
    es = ExprSet()
    chars = "(?:[a-z]|[\\xc2-\\xdf][\\x80-\\xbf]|[\\xe1-\\xec][\\x80-\\xbf]{2})"
    e = es.and_(es.parse(chars + "*"), es.not_(es.parse(chars + "*q" + chars + "*")))
    two = es.derivative(e, 0xE1)
    assert es._kind[two] != AND  # the head [\x80-\xbf]{2} is outside the &
    # after the whole character the intersection is the one before it
    assert es.derivative(es.derivative(es.derivative(e, 0xE1), 0x80), 0x80) == es.derivative(
        es.derivative(e, 0xC3), 0x80
    )


_SHORT = [bytes(w) for n in range(5) for w in itertools.product(b"abcxyz", repeat=n)]


@settings(max_examples=200, deadline=None)
@given(
    patterns(),
    st.integers(0, 3),
    st.integers(0, 12),
    st.sampled_from(["[abcxy]", "(?:[abcxy]|zz)", "(?:[abcxy]|zz|zy)", "(?:[abcx]|zz|zy|y)"]),
)
def test_a_clamped_length_limit_agrees_on_short_prefixes(pattern, lo, extra, chars):
    """`A & C{lo,hi}` clamped at depth 4 (to A's clamped form where `_clamped_window`
    allows): after every string of at most 4 bytes, the derivatives of it and of the
    original are empty alike and take the empty word alike (what a mask walk reads)."""
    es = ExprSet()
    depth = 4
    body = es.parse(pattern)
    limit = es.parse("%s{%d,%d}" % (chars, lo, lo + extra))
    e = es.and_(body, limit)
    c = es.clamped(e, depth)
    for w in _SHORT:
        x, y = e, c
        for b in w:
            x, y = es.derivative(x, b), es.derivative(y, b)
        assert es.is_empty(x) == es.is_empty(y), (pattern, lo, extra, w)
        assert es.nullable(x) == es.nullable(y), (pattern, lo, extra, w)


def test_a_long_limit_on_a_format_clamps_to_the_format():
    es = ExprSet()
    chars = '(?:[^"\\\\\\x00-\\x1f]|\\\\["\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4})'
    email = es.parse("[a-z0-9.]+@[a-z0-9-]{0,61}[a-z0-9](?:\\.[a-z]{2,})+")
    limited = es.and_(email, es.parse(chars + "{0,1024}"))
    assert es._kind[limited] == AND
    quote = es.parse('"')
    lexeme = es._concat2(quote, es._concat2(limited, quote))
    assert es.clamped(lexeme, 128) == es._concat2(quote, es._concat2(es.clamped(email, 128), quote))
    # too close to the walk's depth: the count left matters, nothing changes
    near = es.and_(email, es.parse(chars + "{0,130}"))
    assert es.clamped(near, 128) == near
    # a quote is not a one-byte character: kept
    quoted = es.and_(es.parse('[a-z"]+'), es.parse(chars + "{0,1024}"))
    assert es.clamped(quoted, 128) == quoted
    assert es.completion_bound(es.parse("a{3}(?:bc)+")) == 5
    assert es.completion_bound(es.parse("(?:ab|c)*d")) == 3


def test_multibyte_characters_clamp_an_upper_limit_only():
    es = ExprSet()
    chars = es.parse("(?:[abcxy]|zz)")
    whole = es.parse("(?:zz|a)+")
    assert es._made_of(whole, chars)
    limited = es.and_(whole, es.repeat(chars, 0, 40))
    assert es.clamped(limited, 4) == es.clamped(whole, 4)
    # a lower limit counts characters, which bytes do not bound from below: kept
    ending = es.parse("(?:zz|a)+b")
    at_least = es.and_(ending, es.repeat(chars, 2, 40))
    assert es.clamped(at_least, 4) == at_least
    # (a repetition of whole characters meets the limit as one count: ExprSet._meet_counts)
    assert es.and_(whole, es.repeat(chars, 2, 40)) == es.repeat(es.parse("(?:zz|a)"), 2, 40)
    # `z` alone is no character: not a sequence of them, kept
    broken = es.and_(es.parse("(?:z|a)+"), es.repeat(chars, 0, 40))
    assert not es._made_of(es.parse("(?:z|a)+"), chars)
    assert es.clamped(broken, 4) == broken


def test_words_in_any_script_are_json_characters():
    es = ExprSet()
    chars = es.parse('(?:[^"\\\\\\x00-\\x1f]|\\\\["\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4})')
    words = es.parse('(?:[^\\x00- "\\\\]+ +){0,11}[^\\x00- "\\\\]+')
    assert es._made_of(words, chars)
    limited = es.and_(words, es.repeat(chars, 0, 1000))
    assert es.clamped(limited, 128) == es.clamped(words, 128)
