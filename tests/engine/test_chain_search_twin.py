"""The chain search behind `RepeatBounds` (`chain_search_py` over a derivative table that
grows as the walk meets it) and its compiled twin: the same answer as a brute force over
every split of every string, the same give-ups, and the same clamped counts on a real
vocabulary's long tokens."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from regex_reference import most_chained

from midword.engine import mask as mask_module
from midword.engine.matcher import trie_for
from midword.engine.regex import ExprSet
from midword.engine.regex.analysis import CHAIN_STATES, PackedStrings, chain_search_py

PATTERNS = ["a+b+", "ab?c", "(ab|c)+d", "[ab]c*", "a*b", "\\S+\\s+", "[0-9a-f]{2,4}:", "(é|ü)+ ", "[^ ]+ "]


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(PATTERNS),
    st.lists(st.text(alphabet="abcdé0f: ", min_size=0, max_size=14), min_size=0, max_size=7),
)
def test_twins_equal_brute_force(pattern, texts):
    es = ExprSet()
    e = es.parse(pattern)
    strings = [t.encode() for t in texts]
    want = most_chained(es, e, strings)
    assert es.most_chained(e, strings, 10**6, chain_search_py) == want
    assert es.most_chained(e, PackedStrings(strings), 10**6, mask_module._chain_search_jit) == want


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=10), st.integers(0, 200))
def test_twins_give_up_alike(strings, max_steps):
    es = ExprSet()
    e = es.parse("[\\x00-\\x7f]+[\\x80-\\xff]")
    got_py = es.most_chained(e, strings, max_steps, chain_search_py)
    got_jit = es.most_chained(e, strings, max_steps, mask_module._chain_search_jit)
    assert got_py == got_jit
    assert got_py is None or got_py == most_chained(es, e, strings)


def test_too_many_derivatives_is_unknown():
    es = ExprSet()
    # a fixed-length group longer than the table: every byte read is a derivative of its own
    e = es.parse("x{%d}" % (CHAIN_STATES + 8))
    strings = [b"x" * (CHAIN_STATES + 20)]
    assert es.most_chained(e, strings, 10**6, chain_search_py) is None
    assert es.most_chained(e, strings, 10**6, mask_module._chain_search_jit) is None
    short = es.parse("x{3}")
    assert es.most_chained(short, strings, 10**6, mask_module._chain_search_jit) == (CHAIN_STATES + 20) // 3


def test_real_vocabulary_twins_agree(llama3):
    """On Llama 3's long tokens (what a mask walk searches), for word-count and code groups."""
    trie = trie_for(llama3)
    bounds = mask_module.repeat_bounds_for(trie)
    es = ExprSet()
    for pattern in ("\\S+\\s+", "[A-Za-z0-9.'-]+ ", "[0-9a-f]{1,4}:", "[a-z]+, ", "-{2,3}"):
        e = es.parse(pattern)
        strings = bounds._packed_strings(2 * (bounds.floor + 1))
        assert strings is not None and strings.count > 0
        got_py = es.most_chained(e, strings, 10**7, chain_search_py)
        got_jit = es.most_chained(e, strings, 10**7, mask_module._chain_search_jit)
        assert got_py == got_jit, pattern
        assert got_jit is not None
        if pattern == "-{2,3}":
            # runs of dashes are tokens: a long run holds many whole matches
            assert got_jit >= 8
    dashes = [s for s in (bounds._long_strings(2 * (bounds.floor + 1)) or []) if set(s) == {ord("-")}]
    if dashes:
        assert es.most_chained(es.parse("-{2,3}"), dashes, 10**7) == max(len(s) for s in dashes) // 2


def test_packed_strings_share_prefixes():
    packed = PackedStrings([b"abcd", b"abx", b"", b"abcd", b"b"])
    assert packed.count == 4
    assert packed.buf.tobytes() == b"abcdabxb"
    assert packed.starts.tolist() == [0, 0, 4, 7, 8]
    assert packed.lcp.tolist() == [0, 0, 2, 0]
    assert packed.longest == 4
    assert np.asarray(packed.buf).flags.writeable
