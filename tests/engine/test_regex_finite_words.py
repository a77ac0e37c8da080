"""`ExprSet._finite_words` on bounded repeats: the count that refuses a repeat with too
many words before building them (`_too_many_repeat_words`) says what building them
would. A key pattern's `[a-zA-Z0-9_-]{0,250}` (MaskBench's Github_easy---o64731,
outside the dev set) built 4,096 words for every count left in its first mask."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.regex import ExprSet, LazyDFA
from midword.engine.regex.nodes import EXCL_MAX_WORDS


def _words_of_repeat(once: tuple[bytes, ...], lo: int, hi: int) -> int:
    found: set[bytes] = set()
    for n in range(lo, hi + 1):
        found.update(b"".join(p) for p in itertools.product(once, repeat=n))
        if len(found) > EXCL_MAX_WORDS:
            break
    return len(found)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=3), min_size=1, max_size=9, unique=True),
    st.integers(0, 4),
    st.integers(0, 7),
)
def test_the_count_agrees_with_the_words(words, lo, extra):
    hi = lo + extra
    once = tuple(sorted(words))
    told = ExprSet._too_many_repeat_words(once, lo, hi)
    if told:
        assert _words_of_repeat(once, lo, hi) > EXCL_MAX_WORDS
    if len({len(w) for w in once}) == 1 and _words_of_repeat(once, lo, hi) > EXCL_MAX_WORDS:
        assert told  # words of one length: the arithmetic is exact


def test_a_long_key_pattern_has_no_finite_words_and_a_short_one_has():
    es = ExprSet()
    assert es._finite_words(es.parse("[a-zA-Z0-9_-]{0,250}", "")) is None
    assert es._finite_words(es.parse("[ab]{0,3}", "")) == tuple(
        sorted(b"".join(p) for n in range(4) for p in itertools.product([b"a", b"b"], repeat=n))
    )
    assert ExprSet._too_many_repeat_words((b"a",), 0, 10**9)
    assert not ExprSet._too_many_repeat_words((b"a",), 0, 100)


_FINITE = ["a", "b", "[ab]", "(?:ab|c)", "[a-c]{0,2}", "(?:x|yz){1,3}", "(?:ab)?c", "[abc]{2}"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_FINITE), min_size=1, max_size=3), st.integers(0, 5), st.data())
def test_an_exclusion_from_many_words_keeps_its_language(parts, n_excluded, data):
    # Above a few words the exclusion stays one node (MaskBench's Github_hard---o62947:
    # 1,352 literal keys beside two listed ones, 56 ms for a key mask); spelled out or
    # not, the strings are the same, and the word-count bound holds.
    body = "".join(parts)
    es = ExprSet()
    expr = es.parse(body, "")
    words = es._finite_words(expr)
    assert words is not None
    assert es._word_count_bound(expr, 10_000) >= len(words)
    excluded = data.draw(st.lists(st.sampled_from(words), max_size=n_excluded, unique=True))
    kept = es._exclude(expr, excluded)
    spelled = es.alt(*map(es.literal, sorted(set(words).difference(excluded))))
    probe = set(words) | {w + b"a" for w in words} | {b"", b"zz"}
    kept_dfa, spelled_dfa = LazyDFA(es, kept), LazyDFA(es, spelled)
    for w in probe:
        assert kept_dfa.matches(w) == spelled_dfa.matches(w), (body, excluded, w)
