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

from midword.engine import Grammar, Matcher
from midword.engine import fastforward as ff
from midword.engine.fastforward import MANY, forced_bytes, forced_bytes_by_rows
from midword.engine.lexer import DEAD, UNKNOWN
from midword.engine.limits import GrammarError, LimitExceeded

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
    positions = forced_positions = forced_token_positions = 0
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
                got, after = forced_bytes(m.rec, state)
                assert got == forced_bytes_by_rows(m.rec, state), (path.name, llama3.decode(m.tokens))
                assert not (quick and got), (path.name, llama3.decode(m.tokens))
                assert after == m.rec.step_bytes(state, got)
                recent = m._recent_tokens()
                tokens = m.compute_ff_tokens()
                if got:
                    forced_positions += 1
                    forced_token_positions += bool(tokens)
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
        m.compute_ff_tokens()
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
            m.compute_mask()
            state = m._state
            quick = ff.nothing_forced(m.rec, state)
            by_rows = forced_bytes_by_rows(m.rec, state)
            if quick:
                quick_positions += 1
                assert by_rows == b"", llama3.decode(m.tokens)
                assert m.compute_ff_tokens() == [] and m.compute_ff_bytes() == b""
            else:
                assert m.compute_ff_bytes() == by_rows, llama3.decode(m.tokens)
            m.consume_token(t)
    assert quick_positions >= 5, quick_positions
