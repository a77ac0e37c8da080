"""The regex a large string enum compiles to matches exactly its words: as text
(`_literal_regex`, which number enums use) and as the term the enum lexeme is built
from (`_literal_term`)."""

import json
import random
import re

import pytest

from midword.engine.jsonschema.numeric import _literal_regex, _literal_term
from midword.engine.regex import ExprSet, LazyDFA

ALPHABET = 'ab"c.\x01\u00e9\u4e2d [\\]-?'


def _random_sets(n: int):
    rng = random.Random(7)
    for _ in range(n):
        yield ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 12))]


def _near_misses(words):
    """Every word with one character changed, dropped or added."""
    for w in words:
        for i in range(len(w) + 1):
            for c in "a\u00e9":
                yield from (w[:i] + c + w[i:], w[:i] + c + w[i + 1 :], w[:i] + w[i + 1 :])


@pytest.mark.parametrize("words", list(_random_sets(300)))
def test_literal_regex_matches_exactly_its_words(words):
    pattern = re.compile(_literal_regex(words), re.DOTALL)
    for w in words:
        assert pattern.fullmatch(w), (words, w)
    wanted = set(words)
    for other in _near_misses(words):
        assert bool(pattern.fullmatch(other)) == (other in wanted), (words, other)


@pytest.mark.parametrize("words", list(_random_sets(100)))
def test_literal_term_matches_exactly_its_words(words):
    es = ExprSet()
    dfa = LazyDFA(es, es.build(_literal_term(tuple(words))))
    wanted = set(words)
    for other in [*words, *_near_misses(words)]:
        assert dfa.matches(other.encode("utf-8")) == (other in wanted), (words, other)


def test_literal_regex_shares_prefixes_and_keeps_word_order():
    assert _literal_regex(["apple", "apricot", "banana"]) == "(?:ap(?:ple|ricot)|banana)"
    assert _literal_regex(["ab", "a"]) == "ab?"
    assert _literal_regex(["", "x"]) == "x?"
    assert _literal_regex([""]) == "(?:)"
    assert _literal_regex([]) is None


def test_a_large_string_enum_accepts_exactly_its_values_as_json():
    from midword.engine.jsonschema import compile_json_schema
    from midword.engine.jsonschema.keywords import ENUM_LEXEME_THRESHOLD
    from midword.engine.recognizer import grammar_accepts

    values = [f'v{i}"\\\u00e9\n' if i % 3 == 0 else f"value-{i}" for i in range(ENUM_LEXEME_THRESHOLD + 24)]
    grammar = compile_json_schema({"enum": values})
    for v in values:
        assert grammar_accepts(grammar, json.dumps(v, ensure_ascii=False).encode()), v
    for miss in ["value-", "value-1000", "v0", 'v0"\\\u00e9', "Value-1"]:
        assert not grammar_accepts(grammar, json.dumps(miss, ensure_ascii=False).encode()), miss
