"""Masks of strings whose `maxLength` sits on a format or a pattern (`A & C{0,hi}`):
the counts left above the walk's reach share the pattern's own walk (`_clamped_window`),
and every mask still equals a whole walk and the reference mask, up to the last
characters the limit allows."""

import numpy as np
import pytest

from midword.engine.grammar import Grammar
from midword.engine.matcher import Matcher, MatcherError, mask_to_ids

CASES = [
    # (schema of the value, text of the value)
    ({"type": "string", "format": "email", "maxLength": 254}, "zoe.mueller@example-mail.de"),
    ({"type": "string", "pattern": "^[a-z0-9]+(?:-[a-z0-9]+)*$", "maxLength": 300}, "wireless-noise-cancelling-2024"),
    ({"type": "string", "pattern": "^(?:\\S+\\s+){0,11}\\S+$", "maxLength": 400}, "Über 40 neue Radwege in München"),
]


def _pair(tok, schema):
    g = Grammar.from_json_schema({"type": "object", "properties": {"v": schema}, "required": ["v"]})
    split = Matcher(tok, g)
    split.walker.whole_walk_first_visit = False
    whole = Matcher(tok, g)
    whole.walker.split_at_lexeme = False
    return split, whole


@pytest.mark.parametrize("schema,value", CASES, ids=["email", "slug", "words"])
def test_masks_under_a_long_limit_are_exact(llama3, schema, value):
    tok = llama3
    split, whole = _pair(tok, schema)
    for i, t in enumerate(tok.encode('{"v": "' + value + '"}')):
        got = split.compute_mask()
        assert np.array_equal(got, whole.compute_mask()), i
        if i % 3 == 0:
            assert np.array_equal(got, split.reference_mask()), i
        split.consume_token(t)
        whole.consume_token(t)
    assert split.is_accepting()


def test_the_limit_still_ends_the_string(llama3):
    tok = llama3
    schema = {"type": "string", "pattern": "^[a-z]+(?:-[a-z]+)*$", "maxLength": 140}
    split, whole = _pair(tok, schema)
    value = "-".join(["abcdefg"] * 17) + "-abc"
    assert len(value) == 139
    text = '{"v": "' + value
    split.consume_bytes(text.encode())
    whole.consume_bytes(text.encode())
    got = split.compute_mask()
    assert np.array_equal(got, whole.compute_mask())
    assert np.array_equal(got, split.reference_mask())
    split.consume_bytes(b"d")  # the 140th
    with pytest.raises(MatcherError):
        split.consume_bytes(b"e")
    last = split.compute_mask()
    assert np.array_equal(last, split.reference_mask())
    allowed = set(mask_to_ids(last, tok.vocab_size).tolist())
    assert tok.encode("e")[0] not in allowed and tok.encode('"')[0] in allowed
    split.consume_bytes(b'"}')
    assert split.is_accepting()
