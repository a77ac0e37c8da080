"""An intersection is empty when one side has in every word a byte the other never reads
(`_needs_a_byte_another_lacks`): a URI's `:` beside a hostname, the `oneOf` of the two
formats in `Github_medium---o58478`, and of the two each beside a `maxLength`. The bytes
every word needs and the bytes any word may read (`_byte_bounds`) are an under- and an
over-estimate, checked here against every short word random patterns match, with `&` and
`~` among them."""

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from regex_reference import matches, random_patterns

from midword.engine.regex import ExprSet

_WORDS = [bytes(w) for n in range(6) for w in itertools.product(b"abc:", repeat=n)]
_LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"


def test_a_byte_one_side_needs_and_the_other_never_reads_decides_emptiness():
    es = ExprSet()
    uri = es.parse("[a-z][a-z0-9+.-]*:[a-z0-9/?#]*")
    hostname = es.parse(f"{_LABEL}(?:\\.{_LABEL})*")
    # Decided without a search: a bound of one state would stop any.
    assert es.is_empty(es.and_(uri, hostname), bound=1)
    # A colon in some words only: the search decides, and finds the words in both.
    maybe_colon = es.parse("[a-z]+:?")
    assert not es.is_empty(es.and_(maybe_colon, hostname))
    assert not es._needs_a_byte_another_lacks(es.and_(maybe_colon, hostname))


def test_beside_length_windows_too():
    es = ExprSet()
    uri = es.parse("[a-z:/.]{0,255}&[a-z][a-z0-9+.-]*:[a-z0-9/?#]*", extended=True)
    hostname = es.parse(f"[a-z0-9.-]{{0,255}}&{_LABEL}(?:\\.{_LABEL})*", extended=True)
    assert es.is_empty(es.and_(uri, hostname), bound=1)


_ATOMS = ["a", "b", "c", ":", "[ab]", "(?:a:)", "[abc:]"]


@settings(max_examples=200, deadline=None)
@given(random_patterns(_ATOMS, depth=2), random_patterns(_ATOMS, depth=1), st.sampled_from(["", "&", "&~"]))
def test_every_word_holds_the_needed_bytes_and_only_bytes_read(pattern, other, join):
    es = ExprSet()
    e = es.parse(pattern)
    if join == "&":
        e = es.and_(e, es.parse(other))
    elif join == "&~":
        e = es.and_(e, es.not_(es.parse(other)))
    needed, reads = es._byte_bounds(e)
    for w in _WORDS:
        if matches(es, e, w):
            assert re.fullmatch(pattern, w.decode()) is not None
            if join:
                assert (re.fullmatch(other, w.decode()) is not None) == (join == "&")
            assert all(w.count(b) for b in range(256) if needed >> b & 1), (pattern, join, other, w, needed)
            assert all(reads >> b & 1 for b in w), (pattern, join, other, w, reads)
