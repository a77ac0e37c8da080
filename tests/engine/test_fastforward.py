"""Fast-forward tokens on the real Llama 3 tokenizer: the examples of docs/design/fast-forward.md."""

from midword.engine import Grammar, Matcher

PERSON = r"""
start: "{" "\"name_of_the_person\"" ":" ESCAPED_STRING "," "\"age\"" ":" INT "}"
%import common.ESCAPED_STRING
%import common.INT
%ignore /[ \t\n]+/
"""

ORDER = r"""
start: "{\"" ("orderId" | "orderName") "\":" INT "}"
%import common.INT
"""


def spelled(tok, tokens):
    return [tok.token_bytes(t) for t in tokens]


def test_forced_quote_is_left_to_the_model(llama3):
    m = Matcher(llama3, Grammar.from_lark(PERSON))
    m.consume_tokens(llama3.encode('{"'))
    assert m.compute_ff_bytes() == b'name_of_the_person"'
    ff = m.compute_ff_tokens()
    # `"` is dropped: `":` spans the end of the forced bytes and the grammar allows it
    assert ff == llama3.encode("name_of_the_person")
    assert spelled(llama3, ff) == [b"name", b"_of", b"_the", b"_person"]
    m.consume_tokens(ff)
    assert m.compute_ff_bytes() == b'"'  # still required, now by the grammar alone


def test_order_prefix_is_not_forced(llama3):
    m = Matcher(llama3, Grammar.from_lark(ORDER))
    # `{"` is one Llama 3 token, and the forced `{"order` is cut back to it
    assert m.compute_ff_bytes() == b'{"order'
    assert spelled(llama3, m.compute_ff_tokens()) == [b'{"']
    m.consume_tokens(llama3.encode('{"'))
    assert m.compute_ff_bytes() == b"order"
    assert m.compute_ff_tokens() == []
    mask_tokens = {llama3.token_bytes(t) for t in m.allowed_tokens()}
    assert b"orderId" in mask_tokens and b"order" in mask_tokens


def test_ff_tokens_continue_the_canonical_tokenization(llama3):
    # Whatever is forced, forced tokens followed by the rest must equal the canonical
    # tokenization of the final text.
    g = Grammar.from_lark(r"""
start: "const config = {" "\"version\"" ":" INT "," "\"description\"" ":" ESCAPED_STRING "}"
%import common.INT
%import common.ESCAPED_STRING
""")
    final = 'const config = {"version":12,"description":"hello there"}'
    canonical = llama3.encode(final)
    m = Matcher(llama3, g)
    pos = 0
    while pos < len(canonical):
        ff = m.compute_ff_tokens()
        assert ff == canonical[pos : pos + len(ff)], (llama3.decode(canonical[:pos]), spelled(llama3, ff))
        step = ff or [canonical[pos]]
        m.consume_tokens(step)
        pos += len(step)
    assert m.is_accepting()


def test_a_sliced_mask_answers_nothing_forced_as_the_scan_does(llama3):
    # After a sliced mask the fast-forward call compares one state object
    # (`MaskWalker.last_parted`); at every position of a JSON text that answer must be
    # what the scan of the mask says, and the sliced positions must be met.
    from midword.engine.mask import tokens_part_within_py

    g = Grammar.from_json_schema(
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
        }
    )
    m = Matcher(llama3, g)
    heads, lengths = m.trie.token_heads
    parted = 0
    for t in llama3.encode('{"name": "a long enough value", "tags": ["x", "yz", "the last one"]}'):
        mask = m.compute_mask()
        walker = m.walker
        if walker.last_parted is m._state:
            parted += 1
            assert walker.last_sliced
            assert tokens_part_within_py(mask, heads, lengths, 1)
            assert m.compute_ff_tokens() == []
        else:
            assert not walker.last_sliced or not walker._slices_part()
        m.consume_token(t)
    assert parted >= 10


def test_tokens_part_within_answers_every_depth_from_one_scan(llama3):
    # A state's answers are remembered and answer other depths where they settle them
    # (a parting within 2 bytes is one within 5), again when the state comes back: each
    # answer must be the definition's, asked in both orders, read off the
    # allowed tokens' spellings (two differ within d bytes exactly when one token's first
    # d bytes are not a prefix of the longest such head).
    from midword.engine.matcher import mask_to_ids
    from midword.engine.trie import HEAD_BYTES

    g = Grammar.from_json_schema(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": "integer"},
                "kind": {"enum": ["alpha", "beta"]},
            },
        }
    )
    text = '{"name": "x", "kind": "beta", "count": 12}'
    for _ in range(2):  # the second pass meets every state again
        m = Matcher(llama3, g)
        checked = 0
        for t in llama3.encode(text):
            mask = m.compute_mask()
            heads = [llama3.token_bytes(int(i)) for i in mask_to_ids(mask, llama3.vocab_size) if i < m.trie.vocab_size]
            depths = range(1, HEAD_BYTES + 2)
            for depth in depths if len(m.tokens) % 2 else reversed(depths):
                cut = [h[: min(depth, HEAD_BYTES)] for h in heads]
                longest = max(cut, key=len, default=b"")
                want = any(not longest.startswith(c) for c in cut)
                assert m.walker.tokens_part_within(m._state, depth) == want, (llama3.decode(m.tokens), depth)
            checked += 1
            m.consume_token(t)
        assert checked >= 10
