"""A string whose length limit is shorter than the vocabulary's longest tokens
(`maxLength: 64` against llama3's runs of 128 spaces) is walked from its twin `C*"`
with the characters counted (Lexer.count_loop), not through a lexer state per count
left: the first mask inside such a string makes a handful of states, and every mask,
up to the last character the limit allows, equals the reference mask."""

import dataclasses
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.grammar import Grammar
from midword.engine.limits import DEFAULT_LIMITS
from midword.engine.matcher import Matcher
from midword.engine.regex import ExprSet
from midword.engine.regex.dfa import LazyDFA


def _schema(string: dict) -> dict:
    return {
        "type": "object",
        "properties": {"note": string, "id": {"type": "integer"}},
        "required": ["note", "id"],
        "additionalProperties": False,
    }


def _matchers(tok, schema: dict, text: str, own: int) -> tuple[Matcher, Matcher]:
    # Limits of its own give the test a regex set of its own: in the process-wide one,
    # derivatives another grammar published let the compiled walk step a string's count
    # states without a return to Python, and so without looking for a count loop.
    limits = dataclasses.replace(DEFAULT_LIMITS, lexer_fuel=DEFAULT_LIMITS.lexer_fuel + own)
    g = Grammar.from_json_schema(schema, key_order="schema")
    split, whole = Matcher(tok, g, limits=limits), Matcher(tok, g, limits=limits)
    whole.walker.split_at_lexeme = False
    for t in tok.encode(text):
        split.consume_token(t)
        whole.consume_token(t)
    return split, whole


def _check_along(tok, split: Matcher, whole: Matcher, text: str) -> None:
    for i, t in enumerate(tok.encode(text)):
        got = split.compute_mask()
        assert np.array_equal(got, whole.compute_mask()), i
        assert np.array_equal(got, split.reference_mask()), i
        split.consume_token(t)
        whole.consume_token(t)


def test_a_short_limit_walks_its_long_runs_in_a_few_states(llama3):
    tok = llama3
    split, whole = _matchers(tok, _schema({"type": "string", "maxLength": 64}), '{"note": "', 1)
    before = len(split.rec.lexer.states)
    got = split.compute_mask()
    # Through a state per count left, the walk made one per byte down the runs of
    # spaces and dashes, and more for each multi-byte character run.
    assert len(split.rec.lexer.states) - before < 48
    assert np.array_equal(got, whole.compute_mask())
    assert np.array_equal(got, split.reference_mask())
    # Spaces, dashes, two-, three- and four-byte characters, an escape, up to the very
    # last character the limit allows and the closing quote.
    head = "a" + " " * 20 + "é–日本" + "-" * 12 + '\\"x' + "𝄞"
    body = head + " " * (63 - len(json_chars(head))) + "z"
    assert len(json_chars(body)) == 64
    _check_along(tok, split, whole, body + '", "id": 1}')
    assert split.is_accepting()


def json_chars(body: str) -> list[str]:
    """The characters of a JSON string body, an escape counting as one."""
    out, i = [], 0
    while i < len(body):
        n = 2 if body[i] == "\\" else 1
        out.append(body[i : i + n])
        i += n
    return out


def test_a_pattern_come_to_its_tail_under_a_limit_counts_too(llama3):
    # A version pattern whose `.*` meets maxLength (`.{0,27}` once "0.1.0" is read).
    tok = llama3
    string = {"type": "string", "pattern": "^(\\d+\\.\\d+\\.\\d+.*)$", "maxLength": 32}
    split, whole = _matchers(tok, _schema(string), '{"note": "0.1.0', 2)
    before = len(split.rec.lexer.states)
    got = split.compute_mask()
    assert len(split.rec.lexer.states) - before < 48
    assert np.array_equal(got, split.reference_mask())
    assert np.array_equal(got, whole.compute_mask())
    _check_along(tok, split, whole, "-rc" + " " * 16 + "ü" * 6 + '", "id": 2}')


def test_a_limit_past_a_tokens_reach_stays_exact_at_its_end(llama3):
    # Twenty characters left, then none: the masks at the limit allow the closing quote
    # and nothing that adds a character.
    tok = llama3
    split, whole = _matchers(tok, _schema({"type": "string", "maxLength": 20}), '{"note": "', 3)
    _check_along(tok, split, whole, "x" * 20)
    mask = split.compute_mask()
    assert np.array_equal(mask, split.reference_mask())
    quote = tok.encode('"')[0]
    space = tok.encode(" ")[0]
    assert mask[quote >> 5] >> (quote & 31) & 1
    assert not mask[space >> 5] >> (space & 31) & 1


def test_count_loop_reads_only_the_shapes_it_counts_exactly():
    es = ExprSet()
    char = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
    found = es.count_loop(es.parse(char + '{0,30}"'))
    assert found is not None
    loop, tail, partials = found
    assert tail == es.parse('"') and loop == es.parse(char + '*"')
    # The prefixes of UTF-8 sequences and escapes, each a state of the loop.
    assert 8 <= len(partials) <= 64
    # A tail that may start like a character, a code whose words split two ways, and a
    # limit too short to narrow are counted the usual way.
    assert es.count_loop(es.parse("[a-z]{0,30}[a-z0-9]+")) is None
    assert es.count_loop(es.parse("(a|ab|b){0,30}c")) is None
    assert es.count_loop(es.parse("[a-z]{0,8}c")) is None


# Prefix codes of one to three bytes, and tails: one that leaves the loop on a byte of
# its own, one that is empty, and one that starts like a word (not counted).
_CODES = ["a|b", "a|bc|bb", "ab|b|c", "a|cab|cb"]
_TAILS = ["d", "", "dd*a", "(de)*", "a"]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_counting_from_the_loop_matches_the_limit(data):
    # The walk's counting (mask.walk_py: back at the loop, one character more; none
    # left, on from the tail's state) accepts exactly the words of `C{0,m}·T`.
    code = data.draw(st.sampled_from(_CODES))
    tail_src = data.draw(st.sampled_from(_TAILS))
    m = data.draw(st.integers(16, 19))
    es = ExprSet()
    expr = es.parse(f"({code}){{0,{m}}}{tail_src}")
    found = es.count_loop(expr)
    words = code.split("|")
    tail_expr = es.parse(tail_src) if tail_src else ExprSet.EPSILON
    if es.first_bytes(es.parse(f"({code})")) & es.first_bytes(tail_expr):
        assert found is None
        return
    assert found is not None
    loop, tail, partials = found
    assert es.window_reach(expr) == m
    exact = LazyDFA(es, expr)
    pieces = st.lists(st.sampled_from(words), min_size=m - 2, max_size=m + 2)
    for _ in range(12):
        text = "".join(data.draw(pieces)) + data.draw(st.sampled_from(["", "d", "de", "a", "c", "dd"]))
        w = text.encode()
        assert _counted_match(es, loop, tail, set(partials), m, w) == exact.matches(w), (code, tail_src, m, text)
    for n in range(4):
        for word in itertools.product(b"abcde", repeat=n):
            w = bytes(word)
            assert _counted_match(es, loop, tail, set(partials), m, w) == exact.matches(w)


def _counted_match(es: ExprSet, loop: int, tail: int, partials: set[int], m: int, w: bytes) -> bool:
    state, left = loop, m
    for b in w:
        if left == 0 and state == loop:
            state, left = tail, -1
        state = es.derivative(state, b)
        if state == ExprSet.NOTHING:
            return False
        if left >= 0:
            if state == loop:
                left -= 1
            elif state not in partials:
                left = -1
    return es.nullable(state)
