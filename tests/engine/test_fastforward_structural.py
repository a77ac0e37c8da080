"""Fast-forward from the lexer state's structure equals the row-by-row definition.

`fastforward.forced_bytes` reads forced text off the literal structure (first bytes of
the live regexes, literal tails) without filling lexer rows; `forced_bytes_by_rows`
fills a row per byte. Checked at every position of the MaskBench development files'
valid instances, and the forced tokens against the plain healing loop (a walk per
index, tokenizing first)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine import Grammar, Matcher
from midword.engine import fastforward as ff
from midword.engine.fastforward import MANY, forced_bytes, forced_bytes_by_rows
from midword.engine.lexer import DEAD, UNKNOWN
from midword.engine.limits import GrammarError, LimitExceeded
from midword.engine.mask import allowed_bytes_py
from midword.engine.recognizer import SCAN_IN_PYTHON
from midword.engine.trie import TokenTrie

FILES = 40


def _plain_forced_tokens(tok, m: Matcher, state, recent: list[int], forced: bytes) -> tuple[int, ...]:
    """The healing loop as first written: tokenize in context, then walk every index."""
    tokens = ff._tokenize_in_context(tok, forced, recent[-ff.CONTEXT_TOKENS :])
    tail = tokens[-ff.HEAL_TOKENS :]
    max_length = sum(len(tok.token_bytes(t)) for t in tail)
    end_state = m.rec.step_bytes(state, forced)
    keep_upto = len(forced)
    for idx in range(max(0, len(forced) - max_length), len(forced)):
        node = m.trie.node_for(forced[idx:])
        if node >= 0 and m.trie.subtree_size[node] > 1 and m.walker.any_extension(end_state, node):
            keep_upto = idx
            break
    kept, length = [], 0
    for t in tokens:
        n = len(tok.token_bytes(t))
        if length + n > keep_upto:
            break
        kept.append(t)
        length += n
    return tuple(kept)


@pytest.mark.slow
def test_forced_bytes_and_tokens_equal_the_row_by_row_way_on_maskbench(maskbench_dev, llama3):
    files = sorted(maskbench_dev.glob("*.json"))[:FILES]
    assert files, f"MaskBench development set empty at {maskbench_dev}"
    positions = forced_positions = forced_token_positions = parted_positions = 0
    for path in files:
        doc = json.loads(path.read_text())
        try:
            grammar = Grammar.from_json_schema(doc["schema"])
        except (GrammarError, LimitExceeded):
            continue
        for test in doc.get("tests", []):
            if not test["valid"]:
                continue
            m = Matcher(llama3, grammar)
            for t in llama3.encode(json.dumps(test["data"], ensure_ascii=False)):
                m.compute_mask()  # as a decoder does before it asks for forced tokens
                state = m._state
                quick = ff.nothing_forced(m.rec, state)  # asked first: before the cache has the state
                by_mask = m.walker.two_bytes_allowed(state)
                parted = m.walker.tokens_part_within(state, ff.HEAL_TOKENS + 1)
                got, after = forced_bytes(m.rec, state)
                assert got == forced_bytes_by_rows(m.rec, state), (path.name, llama3.decode(m.tokens))
                assert not (quick and got), (path.name, llama3.decode(m.tokens))
                assert not (by_mask and got), (path.name, llama3.decode(m.tokens))
                assert after == m.rec.step_bytes(state, got)
                recent = m._recent_tokens()
                tokens = m.compute_ff_tokens()
                if got:
                    forced_positions += 1
                    forced_token_positions += bool(tokens)
                    # Where two allowed tokens part within HEAL_TOKENS + 1 bytes, the call
                    # answers at once; the plain way must agree that healing takes all.
                    parted_positions += parted
                    assert tuple(tokens) == _plain_forced_tokens(llama3, m, state, recent, got), path.name
                positions += 1
                try:
                    m.consume_token(t)
                except Exception:
                    break  # a valid instance midword rejects is the bench's business, not this test's
    # The check must have met real forced text, both healed away and kept.
    assert positions > 1000 and forced_positions > 300 and forced_token_positions > 100, (
        positions,
        forced_positions,
        forced_token_positions,
    )
    assert parted_positions > 50, parted_positions


def test_live_bytes_from_first_bytes_equal_the_filled_row(llama3):
    # The structural way's one assumption: without & and ~, a regex's first bytes are
    # exactly the bytes with a live derivative. Checked on every lexer state a JSON
    # Schema walk meets, against the state's filled row.
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "kind": {"enum": ["alpha", "beta", 3, None]},
            "size": {"type": "number", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$"}},
            "when": {"type": "string", "format": "date"},
        },
        "required": ["name"],
    }
    m = Matcher(llama3, Grammar.from_json_schema(schema))
    text = '{"name": "Ann", "kind": "beta", "size": 1.5e3, "tags": ["a-b", "c"], "when": "2024-01-02"}'
    for t in llama3.encode(text):
        m.compute_mask()
        forced_bytes(m.rec, m._state)  # by structure: the mask's answer would skip it
        m.consume_token(t)
    lexer = m.rec.lexer
    checked = 0
    for lexstate, live in list(m.rec.caches.live_bytes.items()):
        if (lexer.table[lexstate] == UNKNOWN).any():
            lexer.fill_row(lexstate)
        row_live = lexer.table[lexstate] != DEAD
        if live == MANY:
            assert np.count_nonzero(row_live) >= 2
        else:
            assert live == sum(1 << int(b) for b in np.flatnonzero(row_live)), lexer.describe_state(lexstate)
        checked += 1
    assert checked > 20


def test_allowed_bytes_twin_equals_the_recognizer(llama3):
    # Token healing's compiled call first asks which bytes the state after the forced
    # text allows (a token one byte longer, `":` after a key's `"`, settles most suffixes
    # without a walk). That answer is read off the lexer table and, for entries the mask
    # walk left missing, off the derivatives its regexes published: the plain twin is
    # checked against the recognizer at every position and after its forced bytes, with
    # long keys and values, two keys with a long common part, keys out of schema order.
    schema = {
        "type": "object",
        "properties": {
            "purchasableFromMarketplaceProductUrl": {"type": "integer"},
            "purchasableFromMarketplaceOnly": {"type": "boolean"},
            "kind": {"enum": ["alphabeticallyOrderedCollection", "beta"]},
            "nested": {
                "type": "object",
                "properties": {"onlyThisVeryLongPropertyName": {"const": "value"}},
                "required": ["onlyThisVeryLongPropertyName"],
                "additionalProperties": False,
            },
        },
        "required": ["nested"],
        "additionalProperties": False,
    }
    text = (
        '{"kind": "alphabeticallyOrderedCollection", "purchasableFromMarketplaceProductUrl": 7, '
        '"nested": {"onlyThisVeryLongPropertyName": "value"}, "purchasableFromMarketplaceOnly": true}'
    )
    m = Matcher(llama3, Grammar.from_json_schema(schema))
    rec, lexer = m.rec, m.rec.lexer
    known = from_derivatives = 0
    for t in llama3.encode(text):
        m.compute_mask()
        state = m._state
        _, end = forced_bytes(rec, state)  # by structure: fills no table row
        for s in (state, end):
            had_missing = bool((lexer.table[s[0]] == UNKNOWN).any())
            lex_arrays = lexer.step_arrays()  # first: it may grow the table
            parser_arrays = rec.parser.walk_arrays(m.walker.limits_items, m.walker.limits_fuel)
            live = np.zeros(256, dtype=np.bool_)
            after = allowed_bytes_py(
                s[0],
                s[1],
                lexer.table,
                lexer.accept,
                rec.row_lexstate,
                rec.step_keys,
                rec.step_vals,
                parser_arrays,
                rec.scan_arrays(),
                lex_arrays,
                live,
            )
            if after == SCAN_IN_PYTHON:
                continue
            assert sum(1 << int(b) for b in np.flatnonzero(live)) == rec.allowed_byte_mask(s), llama3.decode(m.tokens)
            known += 1
            from_derivatives += had_missing
        m.consume_token(t)
    assert known > 60 and from_derivatives >= 3, (known, from_derivatives)


def test_a_forced_key_is_read_off_the_literal_at_once(llama3):
    # After `{"` in an object with a single key, the rest of the key is one literal: its
    # bytes come at once, and only the state after them is made (none in between).
    m = Matcher(
        llama3,
        Grammar.from_lark(r"""
start: "{" "\"name_of_the_person\"" ":" ESCAPED_STRING "}"
%import common.ESCAPED_STRING
"""),
    )
    m.consume_tokens(llama3.encode('{"'))
    m.compute_mask()
    states_before = len(m.rec.lexer.states)
    assert m.compute_ff_bytes() == b'name_of_the_person":"'
    # The literal's end, then for `:` and for the string a start state and the state
    # after its byte: five, where a state per byte would be 21.
    made = len(m.rec.lexer.states) - states_before
    assert made <= 5, made
    assert m.compute_ff_bytes() == forced_bytes_by_rows(m.rec, m._state)


def test_nothing_forced_never_hides_forced_bytes(llama3):
    # The fast-forward call's early answer: where `nothing_forced` says so, the
    # row-by-row definition forces nothing, and the early answer is taken at positions
    # inside strings and numbers (else it would be dead code).
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "count": {"type": "integer"},
            "mode": {"enum": ["fast", "slow"]},
            "items": {"type": "array", "items": {"type": "number"}},
        },
        "required": ["title", "mode"],
    }
    grammar = Grammar.from_json_schema(schema)
    text = '{"title": "a longer title with words", "count": 12345, "mode": "slow", "items": [1.5, 22, 3e4]}'
    quick_positions = 0
    for _ in range(2):  # the second pass meets lexer states whose live bytes are cached
        m = Matcher(llama3, grammar)
        for t in llama3.encode(text):
            state = m._state
            quick = ff.nothing_forced(m.rec, state)
            forced_bytes(m.rec, state)  # by structure, as a caller without a mask asks
            m.compute_mask()
            by_rows = forced_bytes_by_rows(m.rec, state)
            if quick:
                quick_positions += 1
                assert by_rows == b"", llama3.decode(m.tokens)
                assert m.compute_ff_tokens() == [] and m.compute_ff_bytes() == b""
            else:
                assert m.compute_ff_bytes() == by_rows, llama3.decode(m.tokens)
            m.consume_token(t)
    assert quick_positions >= 5, quick_positions


def test_the_mask_tells_two_allowed_bytes_exactly(llama3):
    # `two_bytes_allowed` answers from the mask just computed: at each position it is
    # True exactly where the recognizer allows two bytes or more, and it says nothing
    # about a state whose mask was not the last one asked for.
    schema = {
        "type": "object",
        "properties": {"kind": {"const": "circle"}, "radius": {"type": "number"}, "tag": {"type": "string"}},
        "required": ["kind", "radius"],
    }
    m = Matcher(llama3, Grammar.from_json_schema(schema))
    text = '{"kind": "circle", "radius": 2.5, "tag": "a b"}'
    answers = set()
    previous = None
    for t in llama3.encode(text):
        state = m._state
        if previous != state:  # the last mask is another state's: nothing is told
            assert not m.walker.two_bytes_allowed(state)
        m.compute_mask()
        allowed = m.rec.allowed_byte_mask(state)
        answer = m.walker.two_bytes_allowed(state)
        assert answer == (allowed & (allowed - 1) != 0), llama3.decode(m.tokens)
        answers.add(answer)
        previous = state
        m.consume_token(t)
    assert answers == {True, False}  # both answers met: forced keys and free strings


def test_a_literal_run_is_kept_per_lexer_state(llama3):
    # The same key in two array items: the second item's forced key is read off the
    # run kept for the lexer state, with the second item's own parser row.
    item = {"type": "object", "properties": {"identifier": {"type": "integer"}}, "additionalProperties": False}
    schema = {"type": "array", "items": item}
    grammar = Grammar.from_json_schema(schema)
    m = Matcher(llama3, grammar)
    m.consume_bytes(b'[{"i')
    first = m._state
    first_forced = m.compute_ff_bytes()
    assert first_forced.startswith(b"dentifier")
    runs = dict(m.rec.caches.literal_runs)
    m.consume_bytes(first_forced + b': 1}, {"i')
    second = m._state
    assert second[0] == first[0] and second[1] != first[1]
    assert m.compute_ff_bytes() == first_forced == forced_bytes_by_rows(m.rec, second)
    assert m.rec.caches.literal_runs == runs  # nothing new: the run was kept


def test_a_literal_lexemes_run_equals_its_chain_at_every_prefix(llama3):
    # A key read part way is forced to its end whatever the part: the shortcut takes the
    # literal's last bytes and the lexeme's own end state, which must be what reading
    # the chain gives, at each prefix of keys with repeated bytes (`aa` is a{2} in the
    # chain) and of a keyword.
    keys = ["identifier", "aardvark_aa", "bookkeeper", "x"]
    schema = {
        "type": "object",
        "properties": {k: {"type": "boolean"} for k in keys},
        "required": keys,
        "additionalProperties": False,
    }
    grammar = Grammar.from_json_schema(schema, key_order="schema")
    text = json.dumps({k: True for k in keys})
    shortcuts = 0
    for cut in range(1, len(text)):
        m = Matcher(llama3, grammar)
        m.consume_bytes(text[:cut].encode())
        lexstate = m._state[0]
        pairs = [(i, e) for i, e in m.rec.lexer.pairs_of(lexstate) if i != m.rec.lexer.start_marker]
        if len(pairs) != 1 or m.rec.lexer.literal_of(pairs[0][0]) is None:
            continue
        got = ff._literal_run_of(m.rec, lexstate, ff.MAX_FORCED_BYTES)
        chain = ff._chain_run(m.rec, pairs[0][0], pairs[0][1], ff.MAX_FORCED_BYTES)
        # The chain stops before a repeat (`aa` is a{2}) and leaves those bytes to be
        # stepped one at a time: the shortcut reads on, and lands where stepping does.
        if got != chain:
            assert chain is None or got[0].startswith(chain[0]), text[:cut]
            assert m.rec.step_bytes(m._state, got[0])[0] == got[1], text[:cut]
        shortcuts += got is not None and got[1] == m.rec.caches.literal_ends.get(pairs[0][0])
        assert m.compute_ff_bytes() == forced_bytes_by_rows(m.rec, m._state), text[:cut]
    assert shortcuts >= 20, shortcuts


@settings(max_examples=200, deadline=None)
@given(
    spellings=st.lists(st.binary(min_size=0, max_size=6), min_size=1, max_size=40),
    allowed=st.sets(st.integers(0, 39), max_size=12),
    depth=st.integers(1, 9),
)
def test_tokens_part_within_equals_twin_and_the_pairwise_definition(spellings, allowed, depth):
    from midword.engine.mask import tokens_part_within_jit, tokens_part_within_py
    from midword.engine.trie import HEAD_BYTES

    trie = TokenTrie.build(spellings)
    heads, lengths = trie.token_heads
    allowed = {t for t in allowed if t < len(spellings)}
    mask = np.zeros((len(spellings) + 31) // 32 + 1, dtype=np.uint32)  # a spare word past the vocabulary
    for t in allowed:
        mask[t >> 5] |= np.uint32(1 << (t & 31))
    looked = min(depth, HEAD_BYTES)
    # Two allowed tokens differ at a position both reach, before `looked`; the empty
    # spelling is no token of the trie.
    want = any(
        any(p < len(a) and p < len(b) and a[p] != b[p] for p in range(looked))
        for i, a in enumerate(spellings)
        for j, b in enumerate(spellings)
        if i in allowed and j in allowed and a and b
    )
    assert tokens_part_within_py(mask, heads, lengths, depth) == want
    assert tokens_part_within_jit(mask, heads, lengths, depth) == want
