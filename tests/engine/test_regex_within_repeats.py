"""`within_repeats(body, head, chars)`: every word of `body` is a word of `head·chars*`.
It first asks the question of `body` with its large repeat counts unbounded, a larger
language, so that a word-count limit is not searched once per count left (MaskBench's
Github_medium---o21142, outside the dev set: a first mask of 60 ms in a
`(\\S+\\s+){0,49}\\S+` summary)."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.jsonschema.keywords import CANON_CHAR
from midword.engine.regex import ExprSet, LazyDFA

_CHARS = ["(?:a|bc)", "(?:a|b|cx)", "(?:[ab]|xy)"]
_HEADS = ["", "c", "x", "y", "(?:c|y)"]
_PIECES = ["a", "b", "bc", "cx", "xy", "[ab]", "(?:a|bc)", "(?:bc|xy)"]
_WORDS = [bytes(w) for n in range(7) for w in itertools.product(b"abcxy", repeat=n)]


@st.composite
def bodies(draw):
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        piece = draw(st.sampled_from(_PIECES))
        if draw(st.booleans()):
            lo = draw(st.integers(0, 2))
            hi = draw(st.integers(max(lo, 1), 14))
            piece = "(?:%s){%d,%d}" % (piece, lo, hi)
        parts.append(piece)
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(bodies(), st.sampled_from(_HEADS), st.sampled_from(_CHARS))
def test_a_yes_holds_for_every_word(body, head, chars):
    es = ExprSet()
    b, h, c = es.parse(body, ""), es.parse(head, ""), es.parse(chars, "")
    if not es.within_repeats(b, h, c):
        return
    word_of_body = LazyDFA(es, b)
    allowed = re.compile(f"(?:{head})(?:{chars})*".encode())
    for w in _WORDS:
        if word_of_body.matches(w):
            assert allowed.fullmatch(w), (body, head, chars, w)


@settings(max_examples=200, deadline=None)
@given(bodies(), st.sampled_from(_HEADS), st.sampled_from(_CHARS))
def test_unbounded_counts_take_every_word_and_keep_the_least_length(body, head, chars):
    es = ExprSet()
    b = es.parse(body, "")
    relaxed = es._repeats_unbounded(b)
    bigger = LazyDFA(es, relaxed)
    exact = LazyDFA(es, b)
    for w in _WORDS:
        if exact.matches(w):
            assert bigger.matches(w), (body, w)
    assert es._min_len[relaxed] == es._min_len[b]


def test_a_word_count_limit_mid_character_needs_no_pair_per_count():
    # A word-count limit after the first byte of an escape (`\`), the window's head the
    # escape's rest, over the JSON string's characters: the answer is yes, from the
    # relaxed body, with few new nodes.
    es = ExprSet()
    words = es.parse("(?:[a-z]+ +){0,99}[a-z]+", "")
    escape_rest = es.parse('["\\\\bfnrt]|u00(?:0[0-7bef]|1[0-9a-f])', "")
    chars = es.parse(CANON_CHAR, "")
    assert es.within_repeats(es.concat(es.parse("[a-z]", ""), words), escape_rest, chars) is False
    before = len(es._kind)
    body = es.concat(escape_rest, words)
    assert es.within_repeats(body, escape_rest, chars) is True
    # Searched count by count, it made about 8 nodes per count left.
    assert len(es._kind) - before < 100


def test_the_rest_of_a_character_then_a_pattern_is_read_from_the_shapes():
    # A pattern's derivative after the first byte of a two- or three-byte character: the
    # rest of the character, then the pattern's rest (an email pattern beside a length
    # limit, MaskBench Github_easy---o21456). The answer comes without the search over
    # pairs, which walked the whole pattern.
    es = ExprSet()
    chars = es.parse(CANON_CHAR, "")
    pattern = es.parse(f"(?:{CANON_CHAR})+@[a-z]+(?:\\.[a-z]+)*\\.gov\\.uk(?:{CANON_CHAR})*", "")

    def no_search(*_):
        raise AssertionError("searched pairs")

    continuation = es.byte_set(range(0x80, 0xC0))
    es._pair_steps = no_search
    for lead, rest in ((0xC3, continuation), (0xE2, es.repeat(continuation, 2, 2))):
        body = es.derivative(pattern, lead)
        assert es.within_repeats(body, rest, chars)
    # Where the rest is not made of the characters (a lone quote), the shapes are unsure
    # and the search answers.
    del es._pair_steps
    quoted = es.derivative(es.parse(f'(?:{CANON_CHAR})+"', ""), 0xC3)
    assert not es.within_repeats(quoted, continuation, chars)
