"""Matcher masks against the reference definition, on random grammars and random valid walks."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toy import toy

from midword.engine.grammar import Grammar, GrammarBuilder
from midword.engine.limits import GrammarError, LimitExceeded, Limits
from midword.engine.matcher import Matcher, MatcherError, mask_to_ids
from midword.engine.recognizer import grammar_accepts

TOY = toy()

LEXEME_POOL = [
    ("A", "a", b"a"),
    ("B", "b", b"b"),
    ("AB", "ab", b"ab"),
    ("X", "x", b"x"),
    ("INT", "[0-9]+", None),
    ("WORD", "[a-z]+", None),
    ("STR", '"[^"\\\\]*"', None),
    ("LB", "\\[", b"["),
    ("RB", "\\]", b"]"),
    ("COMMA", ",", b","),
    ("OPTA", "a?b", None),
]


@st.composite
def random_grammars(draw):
    b = GrammarBuilder()
    n_nt = draw(st.integers(1, 4))
    nts = [b.nonterminal(f"n{i}") for i in range(n_nt)]
    lexemes = []
    for name, rx, lit in draw(st.lists(st.sampled_from(LEXEME_POOL), min_size=1, max_size=5, unique=True)):
        lexemes.append(b.lexeme(name, rx, literal=lit))
    symbols = lexemes + nts
    for nt in nts:
        for _ in range(draw(st.integers(1, 3))):
            rhs = draw(st.lists(st.sampled_from(symbols), max_size=4))
            b.rule(nt, rhs)
        # a base case keeps every nonterminal productive
        b.rule(nt, [draw(st.sampled_from(lexemes))])
    if draw(st.booleans()):
        b.add_ignore("[ \\n]+")
    return b.build(nts[0])


def assert_mask_equals_reference(m: Matcher):
    got = m.compute_mask()
    ref = m.reference_mask()
    if not np.array_equal(got, ref):
        diff = mask_to_ids(got ^ ref, TOY.vocab_size)
        pytest.fail(f"mask differs from reference on tokens {[TOY.token_bytes(int(t)) for t in diff[:10]]}")
    return got


@settings(max_examples=60, deadline=None)
@given(random_grammars(), st.integers(0, 2**32 - 1))
def test_mask_equals_reference_along_random_walks(grammar, seed):
    rng = random.Random(seed)
    for use_jit, slicer in ((True, True), (True, False), (False, True)):
        m = Matcher(TOY, grammar, use_jit=use_jit, slicer=slicer)
        rng.seed(seed)
        for _ in range(12):
            mask = assert_mask_equals_reference(m)
            ids = [int(t) for t in mask_to_ids(mask, TOY.vocab_size) if t not in TOY.eos_token_ids]
            if not ids:
                assert m.is_accepting()
                break
            m.consume_token(rng.choice(ids))


@settings(max_examples=60, deadline=None)
@given(random_grammars(), st.integers(0, 2**32 - 1))
def test_forced_bytes_are_the_only_continuation(grammar, seed):
    m = Matcher(TOY, grammar)
    rng = random.Random(seed)
    for _ in range(6):
        forced = m.compute_ff_bytes()
        if forced:
            assert not m.is_accepting()
            # every allowed token agrees with the forced bytes
            for t in mask_to_ids(m.compute_mask(), TOY.vocab_size):
                tb = TOY.token_bytes(int(t))
                n = min(len(tb), len(forced))
                assert tb[:n] == forced[:n]
        ff = m.compute_ff_tokens()
        assert TOY.decode(ff) == forced[: len(TOY.decode(ff))]
        m.consume_tokens(ff)
        ids = [int(t) for t in mask_to_ids(m.compute_mask(), TOY.vocab_size) if t not in TOY.eos_token_ids]
        if not ids:
            break
        m.consume_token(rng.choice(ids))


def json_like() -> Grammar:
    b = GrammarBuilder()
    value, obj, arr, members, elements = (b.nonterminal(n) for n in ["value", "object", "array", "members", "elements"])
    string = b.lexeme("STRING", r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
    number = b.lexeme("NUMBER", r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
    for lit in ["true", "false", "null"]:
        b.rule(value, [b.literal(lit)])
    b.rule(value, [string])
    b.rule(value, [number])
    b.rule(value, [obj])
    b.rule(value, [arr])
    b.rule(obj, [b.literal("{"), b.literal("}")])
    b.rule(obj, [b.literal("{"), members, b.literal("}")])
    b.rule(members, [string, b.literal(":"), value])
    b.rule(members, [members, b.literal(","), string, b.literal(":"), value])
    b.rule(arr, [b.literal("["), b.literal("]")])
    b.rule(arr, [b.literal("["), elements, b.literal("]")])
    b.rule(elements, [value])
    b.rule(elements, [elements, b.literal(","), value])
    b.add_ignore(r"[ \t\n\r]+")
    return b.build(value)


@pytest.mark.parametrize(
    "text,ok",
    [
        (b'{"a": [1, 2.5e3, true, null, "x\\u00e9"]}', True),
        (b"[ ]", True),
        (b"[ ] ", False),  # nor after the last one
        (b"  [ ]", False),  # no %ignore before the first lexeme unless allow_initial_skip
        (b'{"a" 1}', False),
        (b"[1,]", False),
        (b'"caf\xc3\xa9"', True),
        (b"01", False),
        (b"", False),
    ],
)
def test_grammar_accepts_json_like(text, ok):
    assert grammar_accepts(json_like(), text) == ok


def test_json_like_walk_on_real_text():
    m = Matcher(TOY, json_like())
    text = b'{"name": "order", "orderId": [12, 123, true], "x": {"ab": null}}'
    for t in TOY.encode(text):
        assert_mask_equals_reference(m)
        m.consume_token(t)
    assert m.is_accepting()
    mask = assert_mask_equals_reference(m)
    assert set(mask_to_ids(mask, TOY.vocab_size).tolist()) >= set(TOY.eos_token_ids)


def test_rollback_reset_and_errors():
    m = Matcher(TOY, json_like())
    m.consume_tokens(TOY.encode(b'{"ab":'))
    before = m.compute_mask()
    with pytest.raises(MatcherError, match="not allowed"):
        m.consume_token(TOY.encode(b"}")[0])
    assert np.array_equal(m.compute_mask(), before)  # a refused token changes nothing
    m.consume_tokens(TOY.encode(b"12"))
    m.rollback(1)
    assert np.array_equal(m.compute_mask(), before)
    with pytest.raises(MatcherError):
        m.rollback(99)
    eos = next(iter(TOY.eos_token_ids))
    with pytest.raises(MatcherError, match="end of sequence"):
        m.consume_token(eos)
    m.consume_bytes(b" 1}")
    assert m.is_accepting()
    m.consume_token(eos)
    assert m.is_stopped() and not m.compute_mask().any()
    m.reset()
    assert not m.is_accepting() and m.tokens == []


def test_order_id_is_not_forced_as_order():
    # docs/design/fast-forward.md: after `{"` the grammar forces `order`, but `orderId` spans
    # the end of the forced bytes, so no token may be forced.
    b = GrammarBuilder()
    start = b.nonterminal("start")
    b.rule(start, [b.literal('{"'), b.literal("orderId"), b.literal('":'), b.lexeme("INT", "[0-9]+"), b.literal("}")])
    b.rule(start, [b.literal('{"'), b.literal("orderName"), b.literal('":'), b.lexeme("INT", "[0-9]+"), b.literal("}")])
    m = Matcher(TOY, b.build(start))
    m.consume_tokens(TOY.encode(b'{"'))
    assert m.compute_ff_bytes() == b"order"
    assert m.compute_ff_tokens() == []


def test_exploding_grammar_hits_a_limit_not_a_hang():
    # (a|b)*a(a|b){n}: the DFA needs 2^n states
    g = Grammar.from_regex("[ab]*a[ab]{14}")
    m = Matcher(TOY, g, limits=Limits(max_lexer_states=40))
    with pytest.raises(MatcherError, match="max_lexer_states"):
        rng = random.Random(7)
        for _ in range(200):
            m.consume_bytes(rng.choice([b"a", b"b"]))
            m.compute_mask()
    assert m.is_error()
    with pytest.raises(MatcherError, match="error state"):
        m.compute_mask()


def test_ambiguous_grammar_rows_are_bounded():
    b = GrammarBuilder(Limits(max_items_per_row=200))
    s = b.nonterminal("s")
    a = b.literal("a")
    b.rule(s, [s, s])
    b.rule(s, [s, s, s])
    b.rule(s, [a])
    g = b.build(s)
    from midword.engine.recognizer import Recognizer

    rec = Recognizer(g, Limits(max_items_per_row=200))
    with pytest.raises(LimitExceeded, match="max_items_per_row"):
        rec.step_bytes(rec.initial(), b"a" * 100 + b"b")


def test_non_productive_start_is_a_clear_error():
    b = GrammarBuilder()
    s = b.nonterminal("s")
    b.rule(s, [b.literal("a"), s])
    from midword.engine.recognizer import Recognizer

    with pytest.raises(GrammarError, match="derives no finite string"):
        Recognizer(b.build(s))


def test_fuel_bounds_each_mask_not_the_grammar_s_lifetime():
    # A grammar serving a long session computes many masks; each gets the full fuel.
    g = Grammar.from_lark('start: item+\nitem: /[a-z]+/ ";"\n%ignore " "')
    limits = Limits(lexer_fuel=400, parser_fuel=400)
    m = Matcher(TOY, g, limits=limits)
    text = b"".join(bytes([97 + i % 26, 97 + i // 26 % 26]) + b"; " for i in range(300))
    for i in range(0, len(text), 3):
        m.compute_mask()
        m.consume_bytes(text[i : i + 3])
    assert not m.is_error()
    assert m.rec.parser.num_rows > 400


def test_a_worn_out_shared_recognizer_is_replaced_for_new_matchers(monkeypatch):
    # A server uses one grammar for days; its shared recognizer must not grow forever.
    from midword.engine.recognizer import Recognizer

    g = Grammar.from_json_schema(
        {
            "type": "object",
            "properties": {"a": {"type": "array", "items": {"type": "integer"}}, "b": {"type": "string"}},
        }
    )
    first, other = Matcher(TOY, g), Matcher(TOY, g)
    assert other.rec is first.rec  # shared while small
    fresh_bytes = Recognizer(g).footprint_bytes()
    text = '{"a": [' + ", ".join(str(i * 7) for i in range(150)) + '], "b": "xyz"}'
    for t in TOY.encode(text):
        first.consume_token(t)
    assert first.is_accepting() and first.rec.footprint_bytes() > fresh_bytes
    monkeypatch.setattr(Recognizer, "MAX_SHARED_BYTES", fresh_bytes)
    second = Matcher(TOY, g)
    assert second.rec is not first.rec and not second.rec.worn_out()
    assert Matcher(TOY, g).rec is second.rec
    # The old one goes on serving the matchers that hold it, with the same masks.
    for t in TOY.encode('{"a": [4, 5], "b": "q"}'):
        assert np.array_equal(second.compute_mask(), other.compute_mask())
        second.consume_token(t)
        other.consume_token(t)
    assert second.is_accepting() and other.is_accepting()


def test_a_released_grammar_gets_a_new_recognizer_and_its_matchers_go_on():
    from midword.engine.recognizer import Recognizer

    g = Grammar.from_lark('start: "[" (NUM ("," NUM)*)? "]"\nNUM: /[0-9]+/')
    first = Matcher(TOY, g)
    assert Matcher(TOY, Grammar.from_lark('start: "[" (NUM ("," NUM)*)? "]"\nNUM: /[0-9]+/')).rec is first.rec
    assert Recognizer.release(g) and not Recognizer.release(g)
    second = Matcher(TOY, g)
    assert second.rec is not first.rec
    for t in TOY.encode("[12,7]"):
        assert np.array_equal(first.compute_mask(), second.compute_mask())
        first.consume_token(t)
        second.consume_token(t)
    assert first.is_accepting() and second.is_accepting()


def test_recognizers_are_shared_by_content_key_exactly_when_fingerprints_match():
    from midword.engine.recognizer import Recognizer

    texts = [
        'start: "[" (NUM ("," NUM)*)? "]"\nNUM: /[0-9]+/',
        'start: "[" (NUM ("," NUM)*)? "]"\nNUM: /[0-9]+/i',  # a lexeme's flags
        'start: "[" (NUM ("," NUM)*)? "]"\nNUM: /[0-9]+/\n%ignore " "',  # what is skipped
        'start: "[" (NUM (";" NUM)*)? "]"\nNUM: /[0-9]+/',  # a literal
        'start: "[" (NUM ("," NUM)+)? "]"\nNUM: /[0-9]+/',  # a rule
    ]
    grammars = [Grammar.from_lark(t) for t in texts] + [Grammar.from_lark(t) for t in texts]
    for a in grammars:
        for b in grammars:
            same = a.fingerprint() == b.fingerprint()
            assert (a.content_key() == b.content_key()) == same
            assert (Recognizer.for_grammar(a) is Recognizer.for_grammar(b)) == same
    for g in grammars[: len(texts)]:
        Recognizer.release(g)
