"""The lexer's and regex engine's shortcuts must not change an answer: each is checked
against the plain computation (derivatives one lexeme at a time, emptiness by search)."""

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.grammar import Grammar
from midword.engine.lexer import DEAD, IGNORE_ONLY, NO_ACCEPT, UNKNOWN, Lexer
from midword.engine.limits import LimitExceeded, Limits
from midword.engine.regex import ExprSet, LazyDFA

GRAMMAR = r"""
start: value
value: obj | arr | STR | NUM | "true" | "null" | ENUM
obj: "{" (pair ("," pair)*)? "}"
pair: KEY ":" value
arr: "[" (value ("," value)*)? "]"
KEY: "\"name\"" | "\"nested\"" | "\"n\"" | "\"description\""
ENUM: "\"alpha\"" | "\"alphabet\"" | "\"beta\""
STR: /"[^"\\]{0,12}"/
NUM: /-?[0-9]+/
%ignore /[ \n]+/
"""


def _expected(lx: Lexer, state: int, byte: int) -> tuple[tuple[int, int], ...]:
    """The pairs after `byte`, with no first-byte masks, classes or chains."""
    es = lx.exprs
    out = []
    for i, e in lx.states[state]:
        if i == lx.start_marker:
            continue
        d = es.derivative(e, byte)
        if d != ExprSet.NOTHING and not es.is_empty(d):
            out.append((i, d))
    return tuple(out)


def _expected_accept(lx: Lexer, state: int) -> object:
    real = frozenset(i for i, e in lx.states[state] if i < lx.num_lexemes and lx.exprs.nullable(e))
    if real:
        return real
    if any(i == lx.ignore_index and lx.exprs.nullable(e) for i, e in lx.states[state]):
        return IGNORE_ONLY
    return NO_ACCEPT


def _check_table(lx: Lexer) -> int:
    checked = 0
    for s in range(len(lx.states)):
        acc = int(lx.accept[s])
        assert (lx.lexsets[acc] if acc >= 0 else acc) == _expected_accept(lx, s)
        for byte in range(256):
            t = int(lx.table[s, byte])
            if t != UNKNOWN:
                assert lx.states[t] == _expected(lx, s, byte), (s, byte)
                checked += 1
    return checked


@pytest.mark.parametrize("seed", range(6))
def test_every_filled_entry_is_the_plain_derivative(seed):
    lx = Lexer(Grammar.from_lark(GRAMMAR))
    rng = random.Random(seed)
    alphabet = b'"{}[],:0123456789-abdehilmnoprstuv \n\\\x00\xff'
    starts = [
        lx.initial_state(frozenset(rng.sample(range(lx.num_lexemes), rng.randint(1, lx.num_lexemes)))) for _ in range(8)
    ]
    for _ in range(300):
        s = rng.choice(starts)
        for _ in range(rng.randint(1, 14)):
            byte = rng.choice(alphabet)
            if rng.random() < 0.1:
                lx.fill_row(s)
            s = lx.step(s, byte)
            if s == DEAD:
                break
    assert _check_table(lx) > 1000


def test_a_first_miss_also_fills_the_dead_bytes():
    lx = Lexer(Grammar.from_lark(GRAMMAR))
    key = lx.lexeme_names.index("KEY")
    s = lx.initial_state(frozenset([key]), with_ignore=False)
    s = lx.step(s, ord('"'))
    s2 = lx.step(s, ord("d"))  # only "description" is left: one live byte
    assert lx.fuel_used == 2
    assert (lx.table[s2] == UNKNOWN).all()
    t = lx.step(s2, ord("e"))
    row = lx.table[s2]
    assert int(row[ord("e")]) == t != DEAD
    assert (row[[b for b in range(256) if b != ord("e")]] == DEAD).all()  # no second miss to come
    assert lx.fuel_used == 3  # the dead bytes took no derivative
    _check_table(lx)


@pytest.mark.parametrize("first_byte", [ord("e"), ord("x")])
def test_a_literal_state_fills_its_row_on_the_first_miss(first_byte):
    # Inside "description" the regex is a byte followed by a tail: the first miss, even
    # with a byte that kills it, leaves no entry of the row to miss later.
    lx = Lexer(Grammar.from_lark(GRAMMAR))
    key = lx.lexeme_names.index("KEY")
    s = lx.step(lx.step(lx.initial_state(frozenset([key]), with_ignore=False), ord('"')), ord("d"))
    assert (lx.table[s] == UNKNOWN).all()
    t = lx.step(s, first_byte)
    assert (t == DEAD) == (first_byte != ord("e"))
    assert (lx.table[s] != UNKNOWN).all()
    assert lx.states[int(lx.table[s, ord("e")])] == _expected(lx, s, ord("e")) != ()
    _check_table(lx)


def test_literals_sharing_a_first_byte_fill_one_row():
    # After '"' every live regex is a byte set and a tail: bytes that several, one or
    # none of the sets hold get their own targets.
    g = Grammar.from_lark('start: K | E | F | X\nK: "\\"ab"\nE: "\\"ac"\nF: "\\"b"\nX: "x"')
    lx = Lexer(g)
    s = lx.step(lx.initial_state(frozenset(range(lx.num_lexemes)), with_ignore=False), ord('"'))
    assert [lx.lexeme_names[i] for i in lx.possible_lexemes(s)] == ["K", "E", "F"]
    fuel = lx.fuel_used
    lx.step(s, ord("z"))
    assert (lx.table[s] != UNKNOWN).all()
    assert lx.fuel_used - fuel == 2  # "a" (K and E) and "b" (F): one target each
    a, b = int(lx.table[s, ord("a")]), int(lx.table[s, ord("b")])
    assert [lx.lexeme_names[i] for i in lx.possible_lexemes(a)] == ["K", "E"]
    assert [lx.lexeme_names[i] for i in lx.possible_lexemes(b)] == ["F"]
    assert _check_table(lx) == 256 * 3  # whole rows: DEAD, the start state and the state after '"'


def test_fuel_still_bounds_a_lexer():
    g = Grammar.from_lark(r'start: "{" W "}"' + "\n" + r'W: "' + "x" * 200 + '"')
    lx = Lexer(g, limits=Limits(lexer_fuel=40))
    s = lx.initial_state(frozenset([lx.lexeme_names.index("W")]))
    with pytest.raises(LimitExceeded):
        for _ in range(200):
            s = lx.step(s, ord("x"))
    assert lx.fuel_used == 41


def test_state_limit_still_bounds_a_lexer():
    g = Grammar.from_lark("start: W\nW: /[a-z]{0,400}q/")
    lx = Lexer(g, limits=Limits(max_lexer_states=50))
    s = lx.initial_state(frozenset([0]))
    with pytest.raises(LimitExceeded):
        for _ in range(100):
            s = lx.step(s, ord("a"))


# The compiled step ----------------------------------------------------------------


def _compiled_steps(
    step_fn, lx: Lexer, rng: random.Random, alphabet: bytes, walks: int, publish: bool = False, max_len: int = 14
) -> tuple[int, int]:
    """Random walks through `lx` with `step_fn` (lex_step_py or its compiled copy), as
    the mask walk does: where the compiled step gives up, `publish` the missing
    derivatives and try again (with `publish`), else Python's `step`. Returns
    (entries the compiled step filled, entries it left to Python)."""
    done = left = 0
    starts = [
        lx.initial_state(frozenset(rng.sample(range(lx.num_lexemes), rng.randint(1, lx.num_lexemes)))) for _ in range(6)
    ]
    for _ in range(walks):
        s = rng.choice(starts)
        for _ in range(rng.randint(1, max_len)):
            byte = rng.choice(alphabet)
            t = int(lx.table[s, byte])
            if t == UNKNOWN:
                arrays = lx.step_arrays()  # (first: it may grow the table)
                t = step_fn(s, byte, lx.table, lx.accept, arrays)
                if t == UNKNOWN and publish and lx.publish(s, byte):
                    arrays = lx.step_arrays()
                    t = step_fn(s, byte, lx.table, lx.accept, arrays)
                if t == UNKNOWN:
                    left += 1
                    t = lx.step(s, byte)
                else:
                    done += 1
            s = t
            if s == DEAD:
                break
    return done, left


@pytest.mark.parametrize("compiled,publish", [(False, False), (True, False), (False, True), (True, True)])
def test_compiled_steps_equal_the_plain_derivatives(compiled, publish):
    from midword.engine.lexer import lex_step_py
    from midword.engine.mask import lex_step_jit

    step_fn = lex_step_jit if compiled else lex_step_py
    es = ExprSet()
    g = Grammar.from_lark(GRAMMAR)
    alphabet = b'"{}[],:0123456789-abdehilmnoprstuv \n\\\x00\xff'
    # A first lexer publishes derivatives; a second one over the same regex set steps
    # mostly compiled, adding its own states, and both agree with plain derivatives.
    first = Lexer(g, es)
    _compiled_steps(step_fn, first, random.Random(0), alphabet, 300, publish)
    second = Lexer(g, es)
    done, left = _compiled_steps(step_fn, second, random.Random(1), alphabet, 300, publish)
    # Publishing, the walk's way, leaves Python nothing (new accepting states included).
    assert done > 3 * left and (left == 0) == publish
    assert _check_table(first) > 500 and _check_table(second) > 500
    for lx in (first, second):
        assert len(set(lx.states)) == len(lx.states)  # no state twice
        assert all(lx._state_index[pairs] == sid for sid, pairs in enumerate(lx.states))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.booleans())
def test_compiled_and_plain_steps_build_the_same_lexer(seed_first, seed_second, publish):
    # The compiled step against its plain twin: the same entries, states and accepts,
    # after a first lexer has published derivatives for the second to use.
    from midword.engine.lexer import lex_step_py
    from midword.engine.mask import lex_step_jit

    g = Grammar.from_lark(GRAMMAR)
    alphabet = b'"{}[],:0123456789-abdehilmnoprstuv \n\\\x00\xff'
    built = []
    for step_fn in (lex_step_py, lex_step_jit):
        es = ExprSet()
        _compiled_steps(step_fn, Lexer(g, es), random.Random(seed_first), alphabet, 60, publish)
        lx = Lexer(g, es)
        counts = _compiled_steps(step_fn, lx, random.Random(seed_second), alphabet, 60, publish)
        built.append((counts, lx.states, lx.table[: len(lx.states)].tolist(), lx.accept[: len(lx.states)].tolist()))
        _check_table(lx)
    assert built[0] == built[1]


def test_publish_computes_only_the_missing_class_and_the_step_fills_it():
    from midword.engine.lexer import lex_step_py

    lx = Lexer(Grammar.from_lark(GRAMMAR), ExprSet())
    s = lx.step(lx.initial_state(frozenset([lx.lexeme_names.index("STR")]), with_ignore=False), ord('"'))
    fuel = lx.fuel_used
    assert lx.publish(s, ord("a"))
    assert lx.fuel_used == fuel + 1
    assert not lx.publish(s, ord("q"))  # same class as "a": nothing left to compute
    assert lx.publish(s, ord('"'))  # another class
    arrays = lx.step_arrays()
    t = lex_step_py(s, ord("a"), lx.table, lx.accept, arrays)
    assert t not in (UNKNOWN, DEAD)
    # The whole class of "a" (what the string body allows) got the entry in one step.
    row = lx.table[s]
    assert int(row[ord("q")]) == int(row[ord("7")]) == t
    assert int(row[ord("\\")]) == UNKNOWN
    _check_table(lx)


def test_step_arrays_keep_room_for_the_compiled_step_and_every_state_hashed():
    from midword.engine.lexer import CORE_COMPS, CORE_STATES
    from midword.engine.mask import lex_step_jit

    # Long bounded repeats: hundreds of states, so the arrays grow and the table rehashes.
    lx = Lexer(Grammar.from_lark("start: W | V\nW: /[a-c]{0,300}q/\nV: /[ab]{0,200}x/"), ExprSet())
    rng = random.Random(5)
    for rounds in range(4):
        _compiled_steps(lex_step_jit, lx, rng, b"abc", 20, publish=bool(rounds % 2), max_len=300)
        arrays = lx.step_arrays()
        # The compiled step enters the states Python added in the hash table first.
        assert lex_step_jit(DEAD, 0, lx.table, lx.accept, arrays) == DEAD
        n, comps = int(lx.core[CORE_STATES]), int(lx.core[CORE_COMPS])
        assert n == len(lx.states)
        room = max(32, n // 4)
        assert lx.table.shape[0] >= n + room and lx.accept.shape[0] == lx.table.shape[0]
        assert lx.st_ptr.shape[0] >= n + room + 2 and lx.st_keys.shape[0] >= 2 * (n + room)
        assert lx.comp_lex.shape[0] - comps >= 2048
        # Each state once in the hash table, whatever rehashes happened on the way.
        assert sorted(lx.st_vals[lx.st_vals >= 0].tolist()) == list(range(n))
    assert n > 128  # past the first sizes: grown and rehashed on the way


def test_publish_counts_making_a_states_rows_as_progress():
    lx = Lexer(Grammar.from_lark('start: A | B\nA: "xab"\nB: "xcd"'), ExprSet())
    s = lx.step(lx.initial_state(frozenset([0, 1]), with_ignore=False), ord("x"))
    # Every regex of the state is the rest of a literal: its row is complete when made,
    # so nothing is left to compute, but the compiled step could not go on before.
    fuel = lx.fuel_used
    assert lx.publish(s, ord("a"))
    assert lx.fuel_used == fuel
    assert not lx.publish(s, ord("a"))


def test_a_literal_row_comes_with_the_rows_of_its_tails():
    from midword.engine.lexer import DerivativeRows

    es = ExprSet()
    rows = DerivativeRows.of(es)
    word = es.concat(es.literal(b"key"), es.parse("[0-9]+"))
    rows.row(word)
    # Down the byte-headed chain ("ey[0-9]+", "y[0-9]+", "[0-9]+"), each row made and
    # complete, so a walk through the literal never returns to Python to make one.
    tail = word
    for byte in b"key":
        assert tail in rows
        base, classes = rows.row(tail)
        d = es.derivative(tail, byte)
        assert rows.pool[base + classes[byte]] == 2 * d + es.nullable(d)
        assert int(rows.pool[base + classes[ord("z")]]) == 0
        tail = d
    # The chain ends at the first tail that is not byte-headed ("[0-9]+", a repeat):
    # its row waits until a state holding it is stepped, and is made the general way,
    # with its derivatives left to compute.
    assert es.byte_head(tail) is None and tail not in rows
    base, classes = rows.row(tail)
    assert int(rows.pool[base + classes[ord("5")]]) == -1


@pytest.mark.parametrize("most_links", [None, 1, 2])
def test_rows_made_together_equal_rows_made_one_by_one(most_links):
    # Keys that end alike share their tails' nodes: made together, each shared tail is
    # made once, and every row holds the plain derivatives, as made one chain at a time.
    from midword.engine.lexer import DerivativeRows

    es = ExprSet()
    words = [b'"alpha"', b'"beta"', b'"zeta"', b'"eta"', b'"a"', b"x"]
    exprs = [es.literal(w) for w in words] + [es.parse("[0-9]+")]
    together = DerivativeRows.of(es)
    together.make_rows(exprs + exprs[:2], most_links)
    made = set(together._rows)
    for e in exprs:
        assert e in together
        # A key's first bytes, kept on the way when its rows were made, are its head's.
        head = es.byte_head(e)
        if head is not None:
            assert es.first_bytes(e) == head[0]
    for e in made:
        base, classes = together.row(e)
        for byte in range(256):
            got = int(together.pool[base + classes[byte]])
            if got == -1:
                continue  # left to compute (a row without a byte head)
            d = es.derivative(e, byte)
            assert got == 2 * d + es.nullable(d), (e, byte)
    # The same rows as chains made one at a time, each once: a chain stops after
    # `most_links` links, or at a tail another chain of the call made.
    apart = DerivativeRows(es)
    for e in exprs:
        apart.row(e, most_links)
    assert set(apart._rows) == made and apart.pool_used == together.pool_used
    if most_links is None:
        assert es.literal(b'eta"') in together and es.literal(b'ta"') in together


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abcAB-.0", min_size=1, max_size=7), min_size=2, max_size=60, unique=True))
def test_a_word_trie_is_made_down_its_levels_with_the_plain_derivatives(words):
    # A large enum is one trie-shaped alternation. Its first row comes with the rows of
    # its branches a few levels down (a walk inside the string meets them next), each
    # entry the plain derivative, none left to compute where the branches' first bytes
    # tell it (JsonSchemaStore---galaxy's SPDX license enum: a walk inside the string
    # returned to Python at nearly every node).
    from midword.engine.jsonschema.numeric import _literal_term
    from midword.engine.lexer import DerivativeRows

    es = ExprSet()
    start = es.build(_literal_term(tuple(json.dumps(w) for w in sorted(words))))
    rows = DerivativeRows(es)
    rows.row(start)
    # After the opening quote, the trie's first branch node.
    trie = es.derivative(start, ord('"'))
    heads = es.disjoint_heads(trie)
    for e in list(rows._rows):
        base, classes = rows.row(e)
        known = es.disjoint_heads(e) is not None or es.byte_head(e) is not None
        for byte in range(256):
            got = int(rows.pool[base + classes[byte]])
            if got == -1:
                assert not known, (e, byte)  # a trie node or a link knows every entry
                continue
            d = es.derivative(e, byte)
            assert got == 2 * d + es.nullable(d), (e, byte)
    if heads is not None:
        # The trie's node was made at once, with its branches' tails below it.
        assert trie in rows
        assert all(t in rows for _, t in heads if t > 1)


def test_a_key_state_row_takes_the_entries_of_the_string_it_shadows():
    from midword.engine.lexer import DerivativeRows

    es = ExprSet()
    rows = DerivativeRows.of(es)
    string = es.parse(r'[^"\\]*"')
    other_key = es.parse(r'([^"\\]*&~(name|nested))"', extended=True)
    base, classes = rows.row(string)
    for byte in (ord("x"), 0xC3, ord('"')):
        d = es.live_derivative(string, byte)
        rows.pool[base + classes[byte]] = 2 * d + es.nullable(d)
    # The key state's row, made after: the string's published entries are its own
    # outside "n", and "n" (the listed keys' first byte) waits for a derivative.
    key_base, key_classes = rows.row(other_key)
    for byte in (ord("x"), 0xC3, ord('"')):
        d = es.live_derivative(other_key, byte)
        assert int(rows.pool[key_base + key_classes[byte]]) == 2 * d + es.nullable(d)
    assert int(rows.pool[key_base + key_classes[ord("n")]]) == -1
    assert int(rows.pool[key_base + key_classes[0xE2]]) == -1  # not published for the string either


def test_publish_makes_the_row_of_the_state_it_leads_to():
    lx = Lexer(Grammar.from_lark(GRAMMAR), ExprSet())
    s = lx.step(lx.initial_state(frozenset([lx.lexeme_names.index("STR")]), with_ignore=False), ord('"'))
    assert lx.publish(s, ord("a"))
    ((_, d),) = _expected(lx, s, ord("a"))
    # The compiled step goes on from the target without returning for its row.
    assert d in lx.rows


def test_publish_adds_the_accepting_state_the_compiled_step_cannot():
    from midword.engine.lexer import lex_step_py

    es = ExprSet()
    # After `a` both W and V may end: a state accepting two lexemes, whose set is made
    # in Python.
    g = Grammar.from_lark("start: W | V\nW: /ab?/\nV: /a/")
    lx = Lexer(g, es)
    assert lx.publish(lx.initial_state(frozenset([0, 1])), ord("a"))
    # A second lexer over the same regex set finds the rows and derivatives published:
    # the compiled step lacks nothing but the target. publish adds it, and the step
    # then finds it.
    other = Lexer(g, es)
    s2 = other.initial_state(frozenset([0, 1]))
    assert lex_step_py(s2, ord("a"), other.table, other.accept, other.step_arrays()) == UNKNOWN
    fuel = other.fuel_used
    assert other.publish(s2, ord("a"))
    assert other.fuel_used == fuel + 1
    t = lex_step_py(s2, ord("a"), other.table, other.accept, other.step_arrays())
    assert t not in (UNKNOWN, DEAD) and other.states[t] == _expected(other, s2, ord("a"))
    assert other.lexsets[int(other.accept[t])] == _expected_accept(other, t) == frozenset([0, 1])
    # With the target there too, nothing is left to publish: the step gave up for
    # another reason, and the walk hands it to Python instead of retrying.
    assert not other.publish(s2, ord("a"))
    _check_table(other)


def test_the_compiled_step_makes_a_state_accepting_one_lexeme():
    from midword.engine.lexer import lex_step_py

    es = ExprSet()
    g = Grammar.from_lark("start: W | V\nW: /ab?/\nV: /a/")
    lx = Lexer(g, es)
    assert lx.publish(lx.initial_state(frozenset([0])), ord("a"))  # d(W, a) = "b?", which accepts
    assert lx.publish(lx.initial_state(frozenset([0, 1])), ord("a"))
    other = Lexer(g, es)
    # One lexeme accepts: its set is its own id, and the compiled step makes the state
    # (the mask walk meets one at every key's closing quote, on a first visit).
    s1 = other.initial_state(frozenset([0]))
    t = lex_step_py(s1, ord("a"), other.table, other.accept, other.step_arrays())
    assert t not in (UNKNOWN, DEAD) and other.states[t] == _expected(other, s1, ord("a"))
    assert int(other.accept[t]) == 0 and other.lexsets[0] == _expected_accept(other, t) == frozenset([0])
    # Two accept: left to Python, with nothing changed.
    s2 = other.initial_state(frozenset([0, 1]))
    arrays = other.step_arrays()
    before = (len(other.states), other.table.copy(), other.fuel_used)
    assert lex_step_py(s2, ord("a"), other.table, other.accept, arrays) == UNKNOWN
    assert (len(other.states), other.fuel_used) == (before[0], before[2])
    assert (other.table == before[1]).all()
    # A dead byte needs no lexeme set: the compiled step fills it.
    assert lex_step_py(s2, ord("z"), other.table, other.accept, arrays) == DEAD
    _check_table(other)


# Regex engine ----------------------------------------------------------------------


def _search_empty(es: ExprSet, expr: int, bound: int = 5_000) -> bool:
    """Emptiness by exploring every byte's derivative, without decomposition."""
    seen = {expr}
    stack = [expr]
    while stack:
        x = stack.pop()
        if es.nullable(x):
            return False
        for b in range(256):
            y = es.derivative(x, b)
            if y and y not in seen:
                seen.add(y)
                assert len(seen) < bound
                stack.append(y)
    return True


@pytest.mark.parametrize("seed", range(4))
def test_emptiness_agrees_with_plain_search(seed):
    rng = random.Random(seed)
    atoms = ["a", "b", "ab", "a*", "(?:ab)+", "[ab]{2}", "b?a", ""]

    def rx(depth: int) -> str:
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(atoms)
        op = rng.choice(["cat", "or", "and", "not", "rep"])
        if op == "cat":
            return "(?:" + rx(depth - 1) + ")(?:" + rx(depth - 1) + ")"
        if op == "or":
            return "(?:" + rx(depth - 1) + "|" + rx(depth - 1) + ")"
        if op == "and":
            return "(?:(?:" + rx(depth - 1) + ")&(?:" + rx(depth - 1) + "))"
        if op == "not":
            return "~(?:" + rx(depth - 1) + ")"
        return "(?:" + rx(depth - 1) + "){1,3}"

    es = ExprSet()
    empties = 0
    for _ in range(150):
        pattern = rx(4)
        e = es.parse(pattern, extended=True)
        plain = _search_empty(es, e)
        assert es.is_empty(e) == plain, pattern
        empties += plain
    assert empties > 0


def test_wide_alternation_derivative_equals_member_derivatives():
    es = ExprSet()
    words = [f"key{i}_{c}".encode() for i in range(40) for c in "xyz"]
    alt = es.alt(*[es.literal(w) for w in words] + [es.parse("[a-k]+q"), es.not_(es.literal(b"k"))])
    for b in range(256):
        members = es._args[alt]
        expected = es.alt(*[es.derivative(m, b) for m in members])
        assert es.derivative(alt, b) == expected


def test_literal_is_cached_and_matches_its_bytes():
    es = ExprSet()
    for data in [b"", b"a", b"aa", b"aab", b"abab", b'"name"', "\u00e9t\u00e9".encode(), b"\x00\xff\xff"]:
        e = es.literal(data)
        assert es.literal(bytearray(data)) == e
        dfa = LazyDFA(es, e)
        assert dfa.matches(data)
        assert not dfa.matches(data + b"a") and (not data or not dfa.matches(data[:-1]))
    # Built before and after a shared tail exists, the same node.
    fresh = ExprSet()
    tail = fresh.literal(b"bc")
    assert fresh.literal(b"abc") == fresh.concat(fresh.byte_set([ord("a")]), tail)


# Table growth ----------------------------------------------------------------------


def test_large_tables_grow_in_mapped_memory_with_their_contents_and_fill():
    from midword.engine import _arrays
    from midword.engine._views import pack

    rows = _arrays.LARGE_BYTES // (256 * 4)
    old = np.arange(rows * 256, dtype=np.int32).reshape(rows, 256)
    new = _arrays.grown(old, 2 * rows, UNKNOWN)
    assert new.base is not None and not new.flags.owndata  # from the map, not numpy's allocator
    assert new.dtype == np.int32 and new.flags.c_contiguous and new.flags.writeable
    assert (new[:rows] == old).all() and (new[rows:] == UNKNOWN).all()
    zeros = _arrays.grown(np.ones(_arrays.LARGE_BYTES // 8, dtype=np.int64), _arrays.LARGE_BYTES // 4, 0)
    assert zeros[: _arrays.LARGE_BYTES // 8].all() and not zeros[_arrays.LARGE_BYTES // 8 :].any()
    pack((new, zeros), (np.int32, np.int64))  # what the compiled walk accepts
    small = _arrays.grown(np.ones(3, dtype=np.int8), 5, 7)
    assert small.flags.owndata and small.tolist() == [1, 1, 1, 7, 7]


def test_a_lexer_whose_tables_grow_in_mapped_memory_steps_as_before(monkeypatch):
    from midword.engine import _arrays
    from midword.engine.mask import lex_step_jit

    # Every growth takes the mapped path: the compiled step and the plain derivatives
    # still agree over hundreds of states.
    monkeypatch.setattr(_arrays, "LARGE_BYTES", 0)
    lx = Lexer(Grammar.from_lark("start: W | V\nW: /[a-c]{0,300}q/\nV: /[ab]{0,200}x/"), ExprSet())
    rng = random.Random(5)
    for rounds in range(4):
        _compiled_steps(lex_step_jit, lx, rng, b"abc", 20, publish=bool(rounds % 2), max_len=300)
    assert len(lx.states) > 128 and not lx.table.flags.owndata
    _check_table(lx)


@settings(max_examples=200, deadline=None)
@given(
    pattern=st.sampled_from(
        ['"name"', "abc", "a[bc]d", "ab*c", "(ab|ac)d", '("x"|"y")z', "[a-c]bc(d|e)", "ab&~(abc)", 'é"', "aa"]
    ),
    stop_at=st.integers(min_value=0, max_value=4),
)
def test_a_byte_chain_is_the_byte_heads_taken_one_by_one(pattern, stop_at):
    # DerivativeRows makes a key's rows from ExprSet.byte_chain_codes in one pass; the
    # chain is byte_head of each tail in turn, stopping at ∅, a stop expression or no byte
    # head, each tail encoded as the rows hold it.
    es = ExprSet()
    expr = es.parse(pattern, extended=True)
    plain, e, stop = [], expr, set()
    while (head := es.byte_head(e)) is not None:
        byte_set, tail = head
        tail = 0 if es.is_empty(tail) else tail
        plain.append((e, byte_set, 2 * tail + es.nullable(tail)))
        if len(plain) == stop_at and tail:
            stop.add(tail)
        if not tail or tail in stop:
            break
        e = tail
    links, byte_sets, codes = es.byte_chain_codes(expr, stop)
    assert list(zip(links, byte_sets, codes, strict=True)) == plain
    # At most `most` links, the same ones.
    assert es.byte_chain_codes(expr, stop, 1) == ([e for e, _, _ in plain[:1]], byte_sets[:1], codes[:1])


def test_a_large_table_grows_in_place_in_small_steps_and_keeps_its_rows(monkeypatch):
    # Past _SPACE_FROM_BYTES the table lives in a map and grows in place, filling only
    # its new rows, inside the mask that needed them: a sixteenth of the table at a time.
    import midword.engine.lexer as lexer_module

    monkeypatch.setattr(lexer_module, "_SPACE_FROM_BYTES", 1 << 16)  # 64 rows of 256
    g = Grammar.from_lark("start: W\nW: /[a-z]{0,6000}q/")
    lx = Lexer(g, limits=Limits(max_lexer_states=20_000))
    s = lx.initial_state(frozenset([0]))
    path = [s]
    sizes = [lx.table.shape[0]]
    for _ in range(5000):
        s = lx.step(s, ord("a"))
        path.append(s)
        lx.step_arrays()  # the compiled walk's reserve, which grows the table
        if lx.table.shape[0] != sizes[-1]:
            sizes.append(lx.table.shape[0])
    assert lx._space is not None and len(lx.states) > 5000
    in_space = [(a, b) for a, b in zip(sizes, sizes[1:], strict=False) if a * 256 * 4 >= 1 << 16]
    assert len(in_space) > 10
    for old, new in in_space:
        assert new - old <= max(lexer_module._SPACE_ROOM, old // 16) + lexer_module._SPACE_ROOM, (old, new)
    # Every row filled on the way is still there: each state steps to the next.
    for a, b in zip(path, path[1:], strict=False):
        assert int(lx.table[a, ord("a")]) == b
