"""An intersection is empty when one side has in every word a byte the other never reads
(`_needs_a_byte_another_lacks`): a URI's `:` beside a hostname, the `oneOf` of the two
formats in `Github_medium---o58478`. The bytes every word needs (`_needed_bytes`) are an
under-estimate, checked here against every short word each random pattern matches."""

import itertools
import re

from hypothesis import given, settings
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


@settings(max_examples=200, deadline=None)
@given(random_patterns(["a", "b", "c", ":", "[ab]", "(?:a:)", "[abc:]"], depth=2))
def test_every_word_holds_the_needed_bytes(pattern):
    es = ExprSet()
    e = es.parse(pattern)
    needed = es._needed_bytes(e)
    for w in _WORDS:
        if matches(es, e, w):
            assert re.fullmatch(pattern, w.decode()) is not None
            assert all(w.count(b) for b in range(256) if needed >> b & 1), (pattern, w, needed)
