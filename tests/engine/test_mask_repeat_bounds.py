"""Repeat counts clamped by what a vocabulary's tokens hold (`RepeatBounds`): the count
states of a bounded repetition of a group (`(?:\\S+\\s+){0,99}`) share one inside walk
down to the few repetitions a token can spell, not down to trie depth // group length,
so a word-count limit makes a bounded number of lexer states however many words are
written, and every mask still equals the reference mask."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from regex_reference import most_chained

from midword.engine import mask as mask_module
from midword.engine.grammar import Grammar
from midword.engine.matcher import Matcher, mask_to_ids, trie_for
from midword.engine.regex import ExprSet, RepeatBounds


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["a+b+", "ab?c", "(ab|c)+d", "[ab]c*", "a*b"]),
    st.lists(st.text(alphabet="abcd ", min_size=1, max_size=12), min_size=1, max_size=6),
)
def test_most_chained_equals_brute_force(pattern, texts):
    es = ExprSet()
    e = es.parse(pattern)
    strings = [t.encode() for t in texts]
    assert es.most_chained(e, strings, 10**6) == most_chained(es, e, strings)
    assert es.most_chained(e, strings, 0) is None


def _bounds(strings, floor: int) -> RepeatBounds:
    bounds = RepeatBounds(("test", tuple(strings)), lambda n: sorted(s for s in strings if len(s) >= n))
    bounds.floor = floor
    return bounds


def _same_on_prefixes(es: ExprSet, a: int, b: int, strings) -> None:
    """`a` and `b` allow the same prefixes of each string and accept the same ones."""
    for s in strings:
        x, y = a, b
        for i, byte in enumerate(s):
            assert es.nullable(x) == es.nullable(y), (s, i)
            x, y = es.derivative(x, byte), es.derivative(y, byte)
            assert (x == 0) == (y == 0), (s, i)
            if x == 0:
                break
        else:
            assert es.nullable(x) == es.nullable(y), s


def test_clamped_by_tokens_agrees_on_every_token():
    es = ExprSet()
    tokens = [b"ab ", b"aaa bb", b"a b c", b" ", b"        ", b"abcabc", b"x y", b"a", b" b"]
    bounds = _bounds(tokens, 1)
    words = es.parse("(?:[a-z]+ +){0,9}[a-z]+")
    clamped = es.clamped(words, 128, bounds)
    # "a b c" holds two whole words with their spaces: counts above 2 clamp
    assert clamped == es.parse("(?:[a-z]+ +)*[a-z]+")
    assert es.clamped(es.parse("(?:[a-z]+ +){0,2}[a-z]+"), 128, bounds) == es.parse("(?:[a-z]+ +){0,2}[a-z]+")
    assert es.clamped(es.parse("(?:[a-z]+ +){5,9}x"), 128, bounds) == es.parse("(?:[a-z]+ +){3,}x")
    for pattern in ("(?:[a-z]+ +){0,9}[a-z]+", "(?:[a-z]+ +){4,9}c", "(abc){2,7}", "((?:a+ ){1,3}b){0,6}"):
        e = es.parse(pattern)
        c = es.clamped(e, 128, bounds)
        for _ in range(6):  # the count states a walk meets: derivatives by whole tokens
            _same_on_prefixes(es, e, c, tokens)
            assert es.clamped(c, 128, bounds) == c
            e = es.derivative(es.derivative(e, ord("a")), ord(" "))
            if e == 0:
                break
            c = es.clamped(e, 128, bounds)
    # a group of one byte or fewer is left to the length bound
    assert es.clamped(es.parse("a{0,50}"), 128, bounds) == es.parse("a{0,50}")


def test_long_tokens_are_spelled_from_the_trie(llama3):
    trie = trie_for(llama3)
    got = mask_module._long_token_strings(trie, 40)
    assert got == mask_module._long_token_strings(trie, 40, use_jit=False)
    assert got and all(len(s) >= 40 for s in got)
    assert b" " * 128 in got  # llama3's longest run of spaces
    lengths = [len(s) for s in got]
    assert lengths == sorted(lengths, reverse=True)
    vocab = {t for t in llama3.all_token_bytes() if len(t) >= 40}
    assert len(vocab) > 100
    # every token that long is one of them or a prefix of one
    assert all(any(s.startswith(v) for s in got) for v in vocab)
    assert mask_module._long_token_strings(trie, 1) is None  # too many to search


SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "summary": {"type": "string", "pattern": "^(?:\\S+\\s+){0,99}\\S+$"}},
    "required": ["title", "summary"],
    "additionalProperties": False,
}


def test_word_count_masks_make_a_bounded_number_of_lexer_states(llama3):
    tok = llama3
    g = Grammar.from_json_schema(SCHEMA)
    m = Matcher(tok, g)
    lexer = m.rec.lexer
    words = "the quick brown fox jumps over the lazy dog and".split()
    body = " ".join(words[i % len(words)] for i in range(99))
    tokens = tok.encode('{"title": "x", "summary": "' + body)
    made = []  # lexer states added by each mask
    for i, t in enumerate(tokens):
        before = len(lexer.states)
        got = m.compute_mask()
        made.append(len(lexer.states) - before)
        if i % 23 == 0 or i > len(tokens) - 4:
            assert np.array_equal(got, m.reference_mask()), i
        m.consume_token(t)
    # Each count would make a few dozen states of its own (the steps through a UTF-8
    # sequence or an escape, per count): over 99 words, more than a thousand. Clamped,
    # every count above the floor shares one family: the masks between the string's
    # first words and its last `floor` make none, and the total does not grow with the
    # words written.
    floor = RepeatBounds.FLOOR
    assert sum(made[12 : -(floor + 2)]) == 0, made
    assert sum(made) < 40 * (floor + 4), made
    # the 99th word may go on, and the string may close; no 101st word can start
    got = m.compute_mask()
    allowed = set(mask_to_ids(got, tok.vocab_size).tolist())
    assert tok.encode('"')[0] in allowed and tok.encode("d")[0] in allowed
    m.consume_bytes(b" w")
    got = m.compute_mask()
    assert np.array_equal(got, m.reference_mask())
    assert tok.encode(" ")[0] not in set(mask_to_ids(got, tok.vocab_size).tolist())
