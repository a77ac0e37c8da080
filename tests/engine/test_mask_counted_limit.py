"""A string whose length limit is shorter than the vocabulary's longest tokens
(`maxLength: 64` against llama3's runs of 128 spaces) is walked from its twin (`C*"`,
or the pattern's own state) with the characters counted (Lexer.count_entry), not
through a lexer state per count left: the first mask inside such a string makes a
handful of states, and every mask, up to the last character the limit allows, equals
the reference mask."""

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.grammar import Grammar
from midword.engine.limits import DEFAULT_LIMITS
from midword.engine.mask import MaskWalker
from midword.engine.matcher import Matcher
from midword.engine.regex import ExprSet


def _schema(string: dict) -> dict:
    return {
        "type": "object",
        "properties": {"note": string, "id": {"type": "integer"}},
        "required": ["note", "id"],
        "additionalProperties": False,
    }


def _matchers(tok, schema: dict, text: str, own: int) -> tuple[Matcher, Matcher]:
    # Limits of its own give the test a regex set of its own: in the process-wide one,
    # derivatives another grammar published let the compiled walk step a string's count
    # states without a return to Python, and so without looking for a count loop.
    limits = dataclasses.replace(DEFAULT_LIMITS, lexer_fuel=DEFAULT_LIMITS.lexer_fuel + own)
    g = Grammar.from_json_schema(schema, key_order="schema")
    split, whole = Matcher(tok, g, limits=limits), Matcher(tok, g, limits=limits)
    whole.walker.split_at_lexeme = False
    for t in tok.encode(text):
        split.consume_token(t)
        whole.consume_token(t)
    return split, whole


def _check_along(tok, split: Matcher, whole: Matcher, text: str) -> None:
    for i, t in enumerate(tok.encode(text)):
        got = split.compute_mask()
        assert np.array_equal(got, whole.compute_mask()), i
        assert np.array_equal(got, split.reference_mask()), i
        split.consume_token(t)
        whole.consume_token(t)


def test_a_short_limit_walks_its_long_runs_in_a_few_states(llama3):
    tok = llama3
    split, whole = _matchers(tok, _schema({"type": "string", "maxLength": 64}), '{"note": "', 1)
    before = len(split.rec.lexer.states)
    got = split.compute_mask()
    # Through a state per count left, the walk made one per byte down the runs of
    # spaces and dashes, and more for each multi-byte character run.
    assert len(split.rec.lexer.states) - before < 48
    assert np.array_equal(got, whole.compute_mask())
    assert np.array_equal(got, split.reference_mask())
    # Spaces, dashes, two-, three- and four-byte characters, an escape, up to the very
    # last character the limit allows and the closing quote.
    head = "a" + " " * 20 + "é–日本" + "-" * 12 + '\\"x' + "𝄞"
    body = head + " " * (63 - len(json_chars(head))) + "z"
    assert len(json_chars(body)) == 64
    _check_along(tok, split, whole, body + '", "id": 1}')
    assert split.is_accepting()


def json_chars(body: str) -> list[str]:
    """The characters of a JSON string body, an escape counting as one."""
    out, i = [], 0
    while i < len(body):
        n = 2 if body[i] == "\\" else 1
        out.append(body[i : i + n])
        i += n
    return out


# Patterns under a limit: (string schema, text before the mask, the rest to the limit,
# most lexer states the first mask may make).
PATTERNS = [
    # A version pattern whose `.*` meets maxLength (`.{0,27}` once "0.1.0" is read).
    (
        {"type": "string", "pattern": "^(\\d+\\.\\d+\\.\\d+.*)$", "maxLength": 32},
        "0.1.0",
        "-rc" + " " * 16 + "ü" * 6,
        48,
    ),
    # A pattern made of whole characters under maxLength (`(A & C{0,k})·"`): the twin is
    # the pattern's own state, and the count ends at the tail's state only where the
    # pattern may end there.
    (
        {"type": "string", "pattern": "^(?:\\S+\\s+){0,11}\\S+$", "maxLength": 40},
        "Über 40 neue",
        " Radwege   in München" + " " * 6 + "x",
        200,
    ),
]


@pytest.mark.parametrize("string,before_text,rest,most_states", PATTERNS, ids=["version-tail", "word-count"])
def test_a_pattern_under_a_limit_counts_too(llama3, string, before_text, rest, most_states):
    tok = llama3
    own = 10 + PATTERNS.index((string, before_text, rest, most_states))
    split, whole = _matchers(tok, _schema(string), '{"note": "' + before_text, own)
    before = len(split.rec.lexer.states)
    got = split.compute_mask()
    assert len(split.rec.lexer.states) - before < most_states
    assert np.array_equal(got, split.reference_mask())
    assert np.array_equal(got, whole.compute_mask())
    _check_along(tok, split, whole, rest + '", "id": 2}')
    assert split.is_accepting()


def test_a_limit_past_a_tokens_reach_stays_exact_at_its_end(llama3):
    # Twenty characters left, then none: the masks at the limit allow the closing quote
    # and nothing that adds a character.
    tok = llama3
    split, whole = _matchers(tok, _schema({"type": "string", "maxLength": 20}), '{"note": "', 3)
    _check_along(tok, split, whole, "x" * 20)
    mask = split.compute_mask()
    assert np.array_equal(mask, split.reference_mask())
    quote = tok.encode('"')[0]
    space = tok.encode(" ")[0]
    assert mask[quote >> 5] >> (quote & 31) & 1
    assert not mask[space >> 5] >> (space & 31) & 1


def test_count_window_reads_only_the_shapes_it_counts_exactly():
    es = ExprSet()
    char = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
    found = es.count_window(es.parse(char + '{0,30}"'))
    assert found is not None
    twin, chars, hi, tail = found
    assert tail == es.parse('"') and twin == es.parse(char + '*"') and hi == 30
    # The prefixes of UTF-8 sequences and escapes, each a row of the automaton.
    rows = es.character_rows(chars)
    assert rows is not None and 8 <= len(rows) <= 64
    words = es.parse("[a-z]+( [a-z]+)*")
    found = es.count_window(es.concat(es.and_(words, es.repeat(es.parse("[ a-z]"), 0, 20)), es.parse('"')))
    assert found is not None and found[0] == es.concat(words, es.parse('"')) and found[2] == 20
    # A tail that may start like a character, a code whose words split two ways, and a
    # limit too short to narrow are counted the usual way.
    assert es.count_window(es.parse("[a-z]{0,30}[a-z0-9]+")) is None
    assert es.count_window(es.parse("(a|ab|b){0,30}c")) is None
    assert es.count_window(es.parse("[a-z]{0,8}c")) is None
    # A twin whose derivatives could hold a window of their own (`[a-z]{1,20}` becomes
    # `[a-z]{0,19}`) is not counted either: its states would be read as entries too.
    assert es.count_window(es.parse("([a-z]{1,20}c){0,30}d")) is None


# Prefix codes of one to three bytes, patterns of their words, and tails: one that leaves
# the limit on a byte of its own, one that is empty, a nullable one, and one that starts
# like a word (not counted).
_CODES = ["a|b", "a|bc|bb", "ab|b|c", "a|cab|cb"]
_TAILS = ["d", "", "dd*a", "(de)*", "a"]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_counting_from_the_twin_matches_the_limit(data):
    # The walk's counting (mask.walk_py: the characters' automaton from the twin; where a
    # character ends with none left, on from Lexer.count_exit's state) accepts exactly
    # the words of `C{0,m}·T` and `(A & C{0,m})·T`.
    code = data.draw(st.sampled_from(_CODES))
    tail_src = data.draw(st.sampled_from(_TAILS))
    m = data.draw(st.integers(16, 19))
    words = code.split("|")
    es = ExprSet()
    chars = es.parse(f"({code})")
    tail = es.parse(tail_src) if tail_src else ExprSet.EPSILON
    if data.draw(st.booleans()):
        limit = es.repeat(chars, 0, m)
    else:
        # A pattern of whole characters: words of one to four characters, apart or not.
        word = es.repeat(chars, 1, data.draw(st.integers(1, 4)))
        sep = es.parse(data.draw(st.sampled_from(words)))
        pattern = es.concat(word, es.star(es.concat(sep, word)))
        limit = es.and_(pattern, es.repeat(chars, 0, m))
    expr = es.concat(limit, tail)
    found = es.count_window(expr)
    if es.first_bytes(chars) & es.first_bytes(tail):
        assert found is None
        return
    if found is None:
        # `and_` may have made the limit one repetition of a part of the code, or the
        # window not one `window_parts` reads: nothing to count, nothing to check.
        return
    twin, counted_chars, hi, got_tail = found
    assert got_tail == tail and hi == m
    rows = es.character_rows(counted_chars)
    assert rows is not None
    pieces = st.lists(st.sampled_from(words), min_size=m - 2, max_size=m + 2)
    for _ in range(12):
        text = "".join(data.draw(pieces)) + data.draw(st.sampled_from(["", "d", "de", "a", "c", "dd"]))
        w = text.encode()
        assert _agrees(es, expr, _counted_match(es, twin, tail, rows, m, w), w), (code, tail_src, m, text)
    for n in range(4):
        for letters in itertools.product(b"abcde", repeat=n):
            w = bytes(letters)
            assert _agrees(es, expr, _counted_match(es, twin, tail, rows, m, w), w)


def _counted_match(es: ExprSet, twin: int, tail: int, rows: list[list[int]], m: int, w: bytes) -> int:
    """The walk's counting, byte by byte, from the twin with m characters left: the state
    it reaches (NOTHING where it dies)."""
    state, left, row = twin, m, 0
    for b in w:
        state = es.derivative(state, b)
        if state == ExprSet.NOTHING:
            return state
        if left >= 0:
            row = rows[row][b]
            if row < 0:
                left = -1
            elif row == 0:
                left -= 1
                if left == 0:
                    if es.nullable(tail):
                        ends = es.nullable(state)
                    else:
                        ends = bool(es.first_bytes(state) & es.first_bytes(tail))
                    state, left = (tail if ends else ExprSet.NOTHING), -1
                    if state == ExprSet.NOTHING:
                        return state
    return state


def _agrees(es: ExprSet, exact: int, counted: int, w: bytes) -> bool:
    """Whether the counted walk's state after w takes the empty word and is alive exactly
    when the definition's does and is (a token is allowed where its path is alive)."""
    d = exact
    for b in w:
        d = es.derivative(d, b)
    return (es.nullable(counted), es.is_empty(counted)) == (es.nullable(d), es.is_empty(d))


# Floors: (string schema, most lexer states the first mask inside may make, the body).
FLOORS = [
    # An exact length, as in a schema's ids: a floor that leaves nothing after it.
    ({"type": "string", "minLength": 36, "maxLength": 36}, "0f8b3c1e-" + "é" * 6 + "日本" + " " * 19),
    # A floor under a limit: the limit's own count follows the floor's.
    ({"type": "string", "minLength": 20, "maxLength": 60}, "Über 40 neue Radwege  " + '\\"x' + " " * 30),
    # A floor alone: after it, any number of characters.
    ({"type": "string", "minLength": 24}, "𝄞" + "-" * 30 + "ü" * 4 + " " * 70),
    # A limit too short for a length window, alone and above a floor.
    ({"type": "string", "maxLength": 12}, "ab é日 -x"),
    ({"type": "string", "minLength": 2, "maxLength": 9}, "é" * 9),
]


@pytest.mark.parametrize(
    "string,body", FLOORS, ids=["exact-length", "floor-and-limit", "floor-only", "short-limit", "short-range"]
)
def test_a_floor_is_counted_not_a_state_per_character_to_go(llama3, string, body):
    # Before the repetition was counted, the first mask inside `C{36}"` made a lexer state
    # per character to go (`C{35}"` ... `C{1}"`), each with the derivatives of every
    # class of byte the walk met: over a hundred returns to Python.
    tok = llama3
    own = 20 + [f[0] for f in FLOORS].index(string)
    split, whole = _matchers(tok, _schema(string), '{"note": "', own)
    before = len(split.rec.lexer.states)
    got = split.compute_mask()
    assert len(split.rec.lexer.states) - before < 12
    assert np.array_equal(got, split.reference_mask())
    assert np.array_equal(got, whole.compute_mask())
    # The closing quote is refused until the floor is read, and allowed after it.
    _check_along(tok, split, whole, body + '", "id": 3}')
    assert split.is_accepting()


def test_a_floor_refuses_the_tail_before_its_last_character(llama3):
    tok = llama3
    split, whole = _matchers(tok, _schema({"type": "string", "minLength": 16, "maxLength": 16}), '{"note": "', 30)
    quote = tok.encode('"')[0]
    for i, t in enumerate(tok.encode("a" * 16)):
        mask = split.compute_mask()
        assert np.array_equal(mask, split.reference_mask()), i
        assert not mask[quote >> 5] >> (quote & 31) & 1, i
        split.consume_token(t)
    mask = split.compute_mask()
    assert np.array_equal(mask, split.reference_mask())
    assert mask[quote >> 5] >> (quote & 31) & 1


def test_count_bounds_reads_only_the_shapes_it_counts_exactly():
    es = ExprSet()
    char = r'([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
    quote = es.parse('"')
    # Up to hi where the tail starts unlike a character: after the count, the tail.
    assert es.count_bounds(es.parse(char + '{36}"'))[1:] == (36, 36, quote)
    assert es.count_bounds(es.parse(char + '{20,60}"'))[1:] == (20, 60, quote)
    assert es.count_bounds(es.parse('[a-z]{0,12}"'))[1:] == (0, 12, quote)
    # The floor only: no bound, a tail that may start like a character, or none.
    assert es.count_bounds(es.parse(char + '{24,}"'))[1:] == (24, None, es.parse(char + '*"'))
    assert es.count_bounds(es.parse("[a-z]{5,9}[a-z0-9]"))[1:] == (5, None, es.parse("[a-z]{0,4}[a-z0-9]"))
    assert es.count_bounds(es.parse("[a-z]{5,9}"))[1:] == (5, None, es.parse("[a-z]{0,4}"))
    # Too few counts to be worth counting, a tail like a character with no floor, a
    # code whose words split two ways and a repetition that is not the expression's
    # head are not counted (`(a?){8}` is `a{0,8}`, counted).
    assert es.count_bounds(es.parse('[a-z]{3}"')) is None
    assert es.count_bounds(es.parse("[a-z]{0,12}[a-z0-9]")) is None
    assert es.count_bounds(es.parse("(a|ab|b){8}c")) is None
    assert es.count_bounds(es.parse("(a?){8}c"))[1:] == (0, 8, es.parse("c"))
    assert es.count_bounds(es.parse("x[a-z]{8}c")) is None


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_counting_a_repetition_matches_it(data):
    # The walk's count (mask.walk_py: C's automaton alone while characters are to go;
    # then, up to hi, the tail's state where a byte starts no character between two;
    # and on from `after` once the count is done) accepts exactly the words of
    # `C{lo,hi}·T`.
    code = data.draw(st.sampled_from(_CODES))
    tail_src = data.draw(st.sampled_from(_TAILS + ["(a|b)*c", "d(a|b)*"]))
    lo = data.draw(st.integers(0, 7))
    hi = data.draw(st.one_of(st.none(), st.integers(max(lo, 1), lo + 5)))
    words = code.split("|")
    es = ExprSet()
    chars = es.parse(f"({code})")
    tail = es.parse(tail_src) if tail_src else ExprSet.EPSILON
    repetition = es.repeat(chars, lo, hi)
    expr = es.concat(repetition, tail)
    found = es.count_bounds(expr)
    if found is None:
        return
    got_chars, got_lo, got_hi, after = found
    assert got_chars == chars and got_lo == lo and got_hi in (hi, None)
    rows = es.character_rows(chars)
    assert rows is not None
    pieces = st.lists(st.sampled_from(words), min_size=max(0, lo - 2), max_size=(hi or lo) + 3)
    for _ in range(12):
        text = "".join(data.draw(pieces)) + data.draw(st.sampled_from(["", "d", "de", "a", "c", "dd", "da"]))
        w = text.encode()
        got = _bounded_match(es, rows, got_lo, got_hi, after, w)
        assert _agrees(es, expr, got, w), (code, tail_src, lo, hi, text)
    for n in range(5):
        for letters in itertools.product(b"abcd", repeat=n):
            w = bytes(letters)
            assert _agrees(es, expr, _bounded_match(es, rows, got_lo, got_hi, after, w), w)


def _bounded_match(es: ExprSet, rows: list[list[int]], lo: int, hi: int | None, after: int, w: bytes) -> int:
    """The walk's count, byte by byte (NOTHING where the path dies). While the count
    runs the state stands for one that is alive and takes no empty word."""
    floor, ceiling = 1, 2
    phase, left, row = floor, lo, 0
    if left == 0:
        phase, left = ceiling, hi
    state = None
    for b in w:
        if state is not None:
            state = es.derivative(state, b)
            if state == ExprSet.NOTHING:
                return state
            continue
        following = rows[row][b]
        if following >= 0:
            row = following
            if row == 0:
                left -= 1
            if left == 0 and phase == floor and hi is not None and hi > lo:
                phase, left = ceiling, hi - lo
            if left == 0:
                state = after
        elif phase == ceiling and row == 0:
            state = es.derivative(after, b)
            if state == ExprSet.NOTHING:
                return state
        else:
            return ExprSet.NOTHING
    if state is None:
        return es.parse("zz")
    return state


def test_the_plain_walk_counts_a_floor_as_the_compiled_one(llama3):
    """walk_py, the compiled walk's twin, along an exact-length string; both counted the
    floor (a state marked in `Lexer.floor`)."""
    tok = llama3
    schema = _schema({"type": "string", "minLength": 18, "maxLength": 18})
    # Recognizers of their own (limits of their own), and no mask cache for the twin:
    # each mask below is walked, none read back.
    compiled = Matcher(
        tok,
        Grammar.from_json_schema(schema, key_order="schema"),
        limits=dataclasses.replace(DEFAULT_LIMITS, lexer_fuel=DEFAULT_LIMITS.lexer_fuel + 40),
    )
    plain = Matcher(
        tok,
        Grammar.from_json_schema(schema, key_order="schema"),
        limits=dataclasses.replace(DEFAULT_LIMITS, lexer_fuel=DEFAULT_LIMITS.lexer_fuel + 41),
    )
    plain.walker = MaskWalker(plain.trie, plain.rec, use_jit=False, sliced=plain.walker.sliced, cache=None)
    compiled.walker.cache = None
    assert plain.rec is not compiled.rec
    for i, t in enumerate(tok.encode('{"note": "' + "日本 " * 4 + "ab" * 3 + '", "id": 4}')):
        assert np.array_equal(compiled.compute_mask(), plain.compute_mask()), i
        compiled.consume_token(t)
        plain.consume_token(t)
    assert plain.is_accepting()
    for m in (compiled, plain):
        lexer = m.walker.rec.lexer
        assert np.count_nonzero(lexer.floor[: len(lexer.states)] >= 0) > 0


def test_a_counted_repetition_of_longer_words_lets_the_tail_in_only_between_them():
    # Words of two bytes beside one of one: after `a`, a `d` would start the tail in the
    # middle of a word, which the repetition refuses. The walk counts from the states
    # after `c` (a repetition at the head), so every mask below walks a count.
    from toy import ToyTokenizer

    tok = ToyTokenizer([b"ad", b"cad", b"abd", b"cab", b"abab", b"cd", b"ca", b"ba", b"dd", b"bd", b"ccd"])
    g = Grammar.from_lark("start: /(ab|c){0,8}d/")
    counted = 0
    for k, prefix in enumerate([b"c", b"cc", b"cab", b"ccab", b"cabab", b"cccc", b"abc"]):
        # A regex set of its own each time (see _matchers): no derivative is known yet.
        m = Matcher(tok, g, limits=dataclasses.replace(DEFAULT_LIMITS, lexer_fuel=DEFAULT_LIMITS.lexer_fuel + 50 + k))
        m.consume_bytes(prefix)
        lexer = m.walker.rec.lexer
        # The compiled lexer step makes this small automaton's states without a return
        # to Python, where the walk would work the count out: worked out here instead.
        lexer.narrowing(m._state[0])
        assert lexer.floor[m._state[0]] >= 0, prefix
        assert np.array_equal(m.compute_mask(), m.reference_mask()), prefix
        counted += 1
    assert counted == 7
