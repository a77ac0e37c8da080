"""Masks of a word-count limit, a bounded repetition of a variable-length group
(`(?:\\S+\\s+){0,99}\\S+`), the shape behind the engine's tail on unseen schemas: the
count states above what a token can consume share one inside walk, and every mask
still equals a whole walk and the reference mask."""

import numpy as np

from midword.engine.grammar import Grammar
from midword.engine.matcher import Matcher, mask_to_ids

SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "summary": {"type": "string", "pattern": "^(?:\\S+\\s+){0,99}\\S+$"}},
    "required": ["title", "summary"],
    "additionalProperties": False,
}


def test_word_count_states_share_inside_walks_and_masks_stay_exact(llama3):
    tok = llama3
    g = Grammar.from_json_schema(SCHEMA)
    split = Matcher(tok, g)
    split.walker.whole_walk_first_visit = False
    whole = Matcher(tok, g)
    whole.walker.split_at_lexeme = False
    inside_walks = []
    walk_inside = split.walker._inside_lexeme
    split.walker._inside_lexeme = lambda lexstate, applicable: (
        inside_walks.append(lexstate),
        walk_inside(lexstate, applicable),
    )[1]
    words = "the quick brown fox jumps over the lazy dog and".split()
    body = " ".join(words[i % len(words)] for i in range(40))
    prefix = '{"title": "x", "summary": "' + body
    for i, t in enumerate(tok.encode(prefix)):
        got = split.compute_mask()
        assert np.array_equal(got, whole.compute_mask()), i
        if i % 9 == 0:
            assert np.array_equal(got, split.reference_mask()), i
        split.consume_token(t)
        whole.consume_token(t)
    # 40 words of 100: more words and the closing quote are allowed
    got = split.compute_mask()
    assert np.array_equal(got, whole.compute_mask())
    assert np.array_equal(got, split.reference_mask())
    allowed = set(mask_to_ids(got, tok.vocab_size).tolist())
    assert tok.encode(" fox")[0] in allowed and tok.encode('"')[0] in allowed
    # Counts above 64 (a 128-byte token holds at most 64 of the two-byte-least groups)
    # clamp alike: the word positions among the first 35 share their inside walk.
    space = split.walker.space
    shared = len(space.representative) - len(set(space.representative.values()))
    assert shared > 20, (len(inside_walks), shared)


def test_a_word_count_limit_is_enforced_to_the_last_word(llama3):
    tok = llama3
    g = Grammar.from_json_schema({"type": "string", "pattern": "^(?:\\S+\\s+){0,69}\\S+$"})
    m = Matcher(tok, g)
    m.consume_bytes(b'"' + b"w " * 69 + b"w")
    allowed = set(mask_to_ids(m.compute_mask(), tok.vocab_size).tolist())
    assert np.array_equal(m.compute_mask(), m.reference_mask())
    # the 70th word may go on, but no space can start a 71st
    assert tok.encode("w")[0] in allowed and tok.encode('"')[0] in allowed
    assert tok.encode(" ")[0] not in allowed
