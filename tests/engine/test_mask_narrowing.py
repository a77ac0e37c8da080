"""A length limit on a pattern (`A & C{0,hi}`, a `maxLength` beside a `pattern` or a
`format`) makes every count left a lexer state of its own. Where the tokens below a trie
node are too short to reach the limit, the walk goes on from the pattern's own state
(`Lexer.narrowing`, `ExprSet.without_windows`); these tests hold the masks to the
reference mask (every token stepped byte by byte) at every position, near the limit
too, and check that the narrowing is what spares the states."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.grammar import Grammar
from midword.engine.lexer import NARROW_SHIFT, NO_NARROWING, Lexer
from midword.engine.matcher import Matcher
from midword.engine.recognizer import Recognizer
from midword.engine.regex.exprset import ExprSet

HEADLINE = {"type": "string", "pattern": "^(?:\\S+\\s+){0,11}\\S+$", "maxLength": 120}

CASES = [
    # (schema of the value, text of the value): limits shorter than the longest token
    (HEADLINE, "Über 40 neue Radwege in München geplant"),
    (HEADLINE, "東京で新しい博物館が開館 今週末"),
    ({"type": "string", "format": "email", "maxLength": 40}, "zoe.mueller@example-mail.de"),
    ({"type": "string", "pattern": "^[a-z]+(?: [a-z]+)*$", "maxLength": 24}, "one two three four five"),
    # A plain `maxLength` (`C{0,hi}`, repeat_window), and one on a pattern that ends in
    # `.*` (`S* & C{0,k}` becomes `S{0,k}` there), each filled to the limit.
    ({"type": "string", "maxLength": 20}, "Grüße aus Köln, 東京"),
    ({"type": "string", "pattern": "^\\d+\\.\\d+.*$", "maxLength": 19}, '1.0 – beta «rc» \\"q\\"'),
    # A string that fails a `minLength` (`S* & ~C{20,}`, `S{0,19}`).
    ({"oneOf": [{"type": "string", "minLength": 20}, {"type": "string", "maxLength": 3}]}, "abc"),
]


def _matcher(tok, schema) -> Matcher:
    g = Grammar.from_json_schema({"type": "object", "properties": {"v": schema}, "required": ["v"]})
    return Matcher(tok, g)


@pytest.mark.parametrize(
    "schema,value",
    CASES,
    ids=["words-de", "words-ja", "email", "near-the-limit", "plain-limit", "limit-after-pattern", "under-min"],
)
def test_masks_under_a_short_limit_equal_the_reference(llama3, schema, value):
    m = _matcher(llama3, schema)
    for i, t in enumerate(llama3.encode('{"v": "' + value + '"}')):
        assert np.array_equal(m.compute_mask(), m.reference_mask()), i
        m.consume_token(t)
    assert m.is_accepting()


def test_the_plain_walk_narrows_as_the_compiled_one(llama3):
    """walk_py, the compiled walk's twin, on the same positions of a headline."""
    schema = {"type": "object", "properties": {"v": HEADLINE}, "required": ["v"]}
    compiled = Matcher(llama3, Grammar.from_json_schema(schema))
    plain = Matcher(llama3, Grammar.from_json_schema(schema), use_jit=False)
    for i, t in enumerate(llama3.encode('{"v": "Über 40 neue Radwege"}')):
        assert np.array_equal(compiled.compute_mask(), plain.compute_mask()), i
        compiled.consume_token(t)
        plain.consume_token(t)
    lexer = plain.walker.rec.lexer
    assert np.count_nonzero(lexer.narrow[: len(lexer.states)] != NO_NARROWING) > 0


def test_the_walk_goes_on_from_the_pattern_state(llama3, monkeypatch):
    """The first masks inside a headline, with and without narrowing: the same masks,
    and with it the walk makes a third fewer lexer states or more (each a derivative in Python)."""
    prefix = '{"v": "Über 40 neue'

    def states_and_masks():
        # A fresh expression set: derivatives and rows an earlier walk left in the
        # shared one let the compiled step make states without Python.
        monkeypatch.setattr(ExprSet, "_shared", {})
        g = Grammar.from_json_schema({"type": "object", "properties": {"v": HEADLINE}, "required": ["v"]})
        Recognizer.release(g)  # one an earlier test made, states and all
        m = Matcher(llama3, g)
        m.consume_bytes(prefix[:7].encode())
        masks = []
        for t in llama3.encode(prefix[7:]):
            masks.append(m.compute_mask().copy())
            m.consume_token(t)
        masks.append(m.compute_mask().copy())
        lexer = m.walker.rec.lexer
        narrowed = int(np.count_nonzero(lexer.narrow[: len(lexer.states)] != NO_NARROWING))
        # The next matcher of the grammar gets a recognizer of its own, with no states.
        Recognizer.release(g)
        return len(lexer.states), masks, narrowed

    with_states, with_masks, narrowed = states_and_masks()
    monkeypatch.setattr(Lexer, "narrowing", lambda self, state: NO_NARROWING)
    without_states, without_masks, _ = states_and_masks()
    assert narrowed > 0
    assert all(np.array_equal(a, b) for a, b in zip(with_masks, without_masks, strict=True))
    assert 3 * with_states < 2 * without_states, (with_states, without_states)


class _Plain(ExprSet):
    """Emptiness by exploring derivatives only, as before the length-limit shortcut."""

    def _window_fits(self, expr):
        return None


PATTERNS = [
    r"(?:\S+\s+){0,3}\S+",
    r"[a-z]+(?:-[a-z]+)*",
    r"(?:ab|c)+",
    r"x(?:yz)*",
    r"é+a?",
    # Shortest words longer than some limits below, in bytes and in characters.
    r"[a-z]{3,}(?:-[a-z]+)*",
    r"(?:ab){2}c+",
    r"é{3}x?",
]
# The bytes a short walk tries: ASCII, a backslash and a quote, UTF-8 lead and
# continuation bytes, and a byte no UTF-8 text holds.
BYTES = list(range(0x20, 0x7F)) + [0x09, 0x0A, 0xC3, 0xA9, 0x80, 0xBF, 0xE6, 0xF0, 0xFF]
CHARS = r"(?:[^\"\\\x00-\x1f]|\\[\"\\nt])"


@settings(max_examples=60, deadline=None)
@given(
    pattern=st.sampled_from(PATTERNS),
    prefix=st.sampled_from(["", "a", "é", "\\", "ab-"]),
    hi=st.integers(0, 8),
)
def test_length_limit_emptiness_equals_exploring(pattern, prefix, hi):
    results = []
    for cls in (ExprSet, _Plain):
        es = cls()
        body = es.parse(pattern)
        window = es.repeat(es.parse(CHARS), 0, hi)
        expr = es.and_(body, window)
        for b in prefix.encode():
            expr = es.derivative(expr, b)
        results.append(es.is_empty(expr))
    assert results[0] == results[1]


@settings(max_examples=60, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), prefix=st.sampled_from(["", "a", "é", "ab c", "x"]), hi=st.integers(1, 40))
def test_without_windows_keeps_short_walks(pattern, prefix, hi):
    """Within `window_reach` bytes the limit and the pattern alone take the same bytes
    and end alike, the claim the walk's narrowing rests on."""
    es = ExprSet()
    expr = es.and_(es.parse(pattern), es.repeat(es.parse(CHARS), 0, hi))
    for b in prefix.encode():
        expr = es.derivative(expr, b)
    if expr == 0:
        return
    reach = es.window_reach(expr)
    if reach is None:
        return
    _assert_walks_alike(es, expr, es.without_windows(expr), reach)


def _assert_walks_alike(es: ExprSet, expr: int, plain: int, reach: int, emptiness: bool = False) -> None:
    """Every walk of up to four bytes (at most `reach`) from `expr` and from `plain` ends
    alike and dies alike; with `emptiness`, their states are empty alike too."""
    frontier = [(expr, plain)]
    for _ in range(min(reach, 4)):
        nxt = []
        for a, b in frontier:
            assert es.nullable(a) == es.nullable(b)
            if emptiness:
                assert es.is_empty(a) == es.is_empty(b)
            for byte in BYTES:
                da = es.live_derivative(a, byte)
                db = es.live_derivative(b, byte)
                assert (da == 0) == (db == 0), (byte, es.to_str(a, 200))
                if da:
                    nxt.append((da, db))
        frontier = list(dict.fromkeys(nxt))[:16]


KEY_LIMITS = ["[a-z]", "[-./0-9A-Z_a-z]", "[a-f0-9]", "é|[a-z]"]


@settings(max_examples=60, deadline=None)
@given(
    letter=st.sampled_from(KEY_LIMITS),
    hi=st.integers(16, 40),
    prefix=st.sampled_from(["", "a", "ab", "a.b", "é", "A b", "\\n"]),
)
def test_other_keys_beside_a_limited_key_pattern_keep_short_walks(letter, hi, prefix):
    """`S* & ~C{0,hi}`, the keys a limited key pattern does not match, and its twin
    `S* & ~C*` take the same bytes and end alike within `window_reach` bytes."""
    es = ExprSet()
    chars = es.parse(CHARS)
    expr = es.and_(es.repeat(chars, 0, None), es.not_(es.repeat(es.parse(letter), 0, hi)))
    assert es.window_reach(expr) == hi
    for b in prefix.encode():
        expr = es.derivative(expr, b)
    if expr == 0:
        return
    reach = es.window_reach(expr)
    if reach is None:  # fewer counts left than a window is taken off for
        return
    plain = es.without_windows(expr)
    assert plain != expr
    _assert_walks_alike(es, expr, plain, reach, emptiness=True)


def test_keys_beside_a_limited_key_pattern_equal_the_reference_and_narrow(llama3):
    # Github_medium---o65507: `^[/][/.\w-]{0,254}$` keys beside any other key. Each
    # count left was a lexer state of both key lexemes (81 states, 6 ms for the mask
    # after `{"/`); the other keys' complement now narrows with the pattern.
    schema = {
        "type": "object",
        "properties": {
            "costs": {
                "type": "object",
                "patternProperties": {"^[/][/.\\w-]{0,40}$": {"type": "integer"}},
            }
        },
    }
    g = Grammar.from_json_schema(schema)
    m = Matcher(llama3, g)
    text = '{"costs": {"/api/v1.items": 3, "/x": 1, "other key": {"a": [1]}, "/": 2, "/' + "a" * 45 + '": null}}'
    for i, t in enumerate(llama3.encode(text)):
        assert np.array_equal(m.compute_mask(), m.reference_mask()), (i, llama3.decode(m.tokens))
        m.consume_token(t)
    assert m.is_accepting()
    lexer = m.walker.rec.lexer
    exprs = lexer.exprs
    narrowed = [
        s
        for s in range(len(lexer.states))
        if lexer.narrow[s] != NO_NARROWING and any(exprs._has_bool[e] for _, e in lexer.pairs_of(s))
    ]
    # One twin for all the counts left, not one per count.
    twins = {int(lexer.narrow[s]) >> NARROW_SHIFT for s in narrowed}
    assert narrowed and 4 * len(twins) <= len(narrowed), (len(narrowed), len(twins))
