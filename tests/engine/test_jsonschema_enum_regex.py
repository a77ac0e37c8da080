"""The regex a large string enum compiles to (`_literal_regex`) matches exactly its words."""

import random
import re

import pytest

from midword.engine.jsonschema.numeric import _literal_regex

ALPHABET = 'ab"c.\x01\u00e9\u4e2d [\\]-?'


def _random_sets(n: int):
    rng = random.Random(7)
    for _ in range(n):
        yield ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 12))]


@pytest.mark.parametrize("words", list(_random_sets(300)))
def test_literal_regex_matches_exactly_its_words(words):
    pattern = re.compile(_literal_regex(words), re.DOTALL)
    for w in words:
        assert pattern.fullmatch(w), (words, w)
    # Near misses: every word with one character changed, dropped or added.
    wanted = set(words)
    for w in words:
        for i in range(len(w) + 1):
            for c in "a\u00e9":
                for other in (w[:i] + c + w[i:], w[:i] + c + w[i + 1 :], w[:i] + w[i + 1 :]):
                    assert bool(pattern.fullmatch(other)) == (other in wanted), (words, other)


def test_literal_regex_shares_prefixes_and_keeps_word_order():
    assert _literal_regex(["apple", "apricot", "banana"]) == "(?:ap(?:ple|ricot)|banana)"
    assert _literal_regex(["ab", "a"]) == "ab?"
    assert _literal_regex(["", "x"]) == "x?"
    assert _literal_regex([""]) == "(?:)"
    assert _literal_regex([]) is None
