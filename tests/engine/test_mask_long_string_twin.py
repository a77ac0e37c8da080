"""A string with a `maxLength` longer than any token is walked from its clamped twin
(`C*"`), not from the count state itself: the walk stays in one lexer state down a run
of spaces instead of making one per byte, the masks still equal a whole walk and the
reference mask, and fast-forward reads the twin's row to the same forced bytes."""

import numpy as np

from midword.engine import fastforward
from midword.engine.grammar import Grammar
from midword.engine.matcher import Matcher

SCHEMA = {
    "type": "object",
    "properties": {"note": {"type": "string", "maxLength": 6000}, "id": {"type": "integer"}},
    "required": ["note", "id"],
    "additionalProperties": False,
}


def _inside_string(tok, g, text: str) -> Matcher:
    m = Matcher(tok, g)
    for t in tok.encode(text):
        m.compute_mask()
        m.consume_token(t)
    return m


def test_long_string_counts_walk_as_one_twin_and_masks_stay_exact(llama3):
    tok = llama3
    g = Grammar.from_json_schema(SCHEMA, key_order="schema")
    split = _inside_string(tok, g, '{"note": "')
    whole = _inside_string(tok, g, '{"note": "')
    whole.walker.split_at_lexeme = False
    # The first mask inside the string: a walk from the count state itself made a state
    # per byte down llama3's runs of up to 128 spaces.
    before = len(split.rec.lexer.states)
    got = split.compute_mask()
    assert len(split.rec.lexer.states) - before < 16
    assert np.array_equal(got, whole.compute_mask())
    assert np.array_equal(got, split.reference_mask())
    for i, t in enumerate(tok.encode("a  b" + " " * 40 + "c  d")):
        split.consume_token(t)
        whole.consume_token(t)
        got = split.compute_mask()
        assert np.array_equal(got, whole.compute_mask()), i
        if i % 3 == 0:
            assert np.array_equal(got, split.reference_mask()), i
    twins = split.rec.caches.walk_twins
    assert twins and all(rep != s for s, rep in twins.items())
    assert len(set(twins.values())) == 1, twins


def test_forced_bytes_through_a_twin_equal_the_plain_answer(llama3):
    tok = llama3
    g = Grammar.from_json_schema(SCHEMA, key_order="schema")
    m = _inside_string(tok, g, '{"note": "hello')
    m.compute_mask()
    state = m._state
    assert state[0] in m.rec.caches.walk_twins
    got = m.compute_ff_bytes()
    m.rec.caches.walk_twins.clear()
    m.rec.caches.forced_bytes.clear()
    m.rec.caches.live_bytes.clear()
    assert got == fastforward.forced_bytes(m.rec, state)[0] == b""
