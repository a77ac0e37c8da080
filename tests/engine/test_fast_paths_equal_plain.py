"""The engine's speed-ups must not change a single answer: each is checked against the
plain way of computing the same thing."""

import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toy import toy

from midword.engine.fastforward import MANY, _allowed, _forced_bytes
from midword.engine.grammar import Grammar, GrammarBuilder
from midword.engine.lexer import UNKNOWN, Lexer
from midword.engine.limits import Limits
from midword.engine.mask import MaskCache, MaskWalker, _repack, _trie_packed
from midword.engine.matcher import Matcher, mask_to_ids
from midword.engine.recognizer import Recognizer
from midword.engine.regex import ExprSet, LazyDFA
from midword.engine.regex import parser as regex_module

TOY = toy()

JSONISH = r"""
start: value
value: obj | arr | STR | NUM | "true" | "null"
obj: "{" (pair ("," pair)*)? "}"
pair: KEY ":" value
arr: "[" (value ("," value)*)? "]"
KEY: "\"name\"" | "\"nested\"" | "\"n\""
STR: /"[^"\\]{0,12}"/
NUM: /-?[0-9]+/
%ignore /[ \n]+/
"""


def grammar() -> Grammar:
    return Grammar.from_lark(JSONISH)


def step_both(rng, mask, *matchers) -> bool:
    """Feeds one random token of `mask` (not EOS) to every matcher; False when none is left."""
    allowed = [
        int(t)
        for t in np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[: TOY.vocab_size])
        if int(t) not in TOY.eos_token_ids
    ]
    if not allowed:
        return False
    t = rng.choice(allowed)
    for m in matchers:
        m.consume_token(t)
    return True


# Mask cache ------------------------------------------------------------------------


def test_mask_cache_evicts_least_recent_within_budget():
    cache = MaskCache(budget_bytes=3 * 64)
    masks = {k: np.full(16, k, dtype=np.uint32) for k in range(4)}  # 64 bytes each
    for k in range(3):
        cache.put(("k", k), masks[k], False)
    assert cache.get(("k", 0)) is not None  # now most recent
    cache.put(("k", 3), masks[3], True)
    assert cache.get(("k", 1)) is None  # the least recent went
    assert cache.get(("k", 0)) is not None and cache.get(("k", 3))[1] is True


def test_cached_masks_equal_fresh_walks_and_no_caller_can_change_them():
    g = grammar()
    rng = random.Random(5)
    shared = 0
    for _ in range(20):
        m = Matcher(TOY, g)
        fresh = Matcher(TOY, g)
        fresh.walker.cache = None
        for _ in range(12):
            first = m.compute_mask()
            if first.flags.writeable:
                first[:] = 0  # a copy of its own (EOS added): the cache must not see it
            else:
                # The cache's own array, handed out as it is: writing to it is refused.
                shared += 1
                with pytest.raises(ValueError):
                    first[:] = 0
            got = m.compute_mask()
            assert np.array_equal(got, fresh.compute_mask())
            assert np.array_equal(got, m.reference_mask())
            if not step_both(rng, got, m, fresh):
                break
    assert shared > 50


@pytest.mark.parametrize("use_jit", [True, False])
def test_ids_sharing_their_bytes_are_all_in_the_mask(use_jit):
    # Two ids with the same bytes end at one trie node: the walk finds them through
    # tok_start/tok_end instead of the node's record.
    from toy import JSONISH_PIECES, ToyTokenizer

    tok = ToyTokenizer(JSONISH_PIECES)
    eos = tok._bytes.pop()
    twins = [b"name", b"12", b'{"', b"true", b'"']
    tok._bytes += twins + [eos]
    tok.vocab_size = len(tok._bytes)
    tok.eos_token_ids = tok.special_token_ids = frozenset({tok.vocab_size - 1})
    g = grammar()
    rng = random.Random(3)
    seen_twins = set()
    for _ in range(8):
        m = Matcher(tok, g, use_jit=use_jit)
        for _ in range(10):
            got = m.compute_mask()
            assert np.array_equal(got, m.reference_mask())
            seen_twins |= {
                t for t in range(tok.vocab_size - 1 - len(twins), tok.vocab_size - 1) if got[t >> 5] >> (t & 31) & 1
            }
            allowed = [
                int(t)
                for t in np.flatnonzero(np.unpackbits(got.view(np.uint8), bitorder="little")[: tok.vocab_size])
                if int(t) not in tok.eos_token_ids
            ]
            if not allowed:
                break
            m.consume_token(rng.choice(allowed))
    assert len(seen_twins) >= 3  # the duplicated ids were allowed, not just checked absent


def test_kept_accepting_answers_equal_fresh_ones():
    g = grammar()
    rng = random.Random(11)
    answers = set()
    for _ in range(10):
        m = Matcher(TOY, g)
        rec = m.rec
        for _ in range(14):
            state = m._state
            kept = rec.is_accepting(state)
            assert rec.is_accepting(state) is kept
            rec._accepting.clear()
            assert rec.is_accepting(state) == kept
            answers.add(kept)
            if not step_both(rng, m.compute_mask(), m):
                break
    assert answers == {True, False}


def test_masks_split_at_the_lexeme_equal_whole_walks_on_a_real_tokenizer():
    # Inside-lexeme parts are kept per lexer state and reused for every row that meets
    # it again (each string value, each array element): the masks must not change.
    from midword.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained("llama3")
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}},
            "n": {"type": "array", "items": {"type": "integer"}},
            "name": {"type": "string"},
        },
    }
    text = '{"tags": ["a", "bb", "a\\n", "dd"], "n": [1, 22, 333], "name": "x\\"y"}'
    g = Grammar.from_json_schema(schema)
    split = Matcher(tok, g)
    split.walker.whole_walk_first_visit = False  # every mask through the split
    whole = Matcher(tok, g)
    whole.walker.split_at_lexeme = False
    for t in tok.encode(text):
        assert np.array_equal(split.compute_mask(), whole.compute_mask())
        split.consume_token(t)
        whole.consume_token(t)
    assert np.array_equal(split.compute_mask(), whole.compute_mask())


def test_a_lexer_state_walks_whole_at_its_first_visit_and_is_split_from_its_second():
    # A state met with one row only gets one walk; a state met again (the next string
    # of the array) walks its inside part once, and later visits only their frontier.
    from midword.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained("llama3")
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}},
            "n": {"type": "array", "items": {"type": "integer"}},
        },
    }
    text = '{"tags": ["ab", "ab", "ab", "ab"], "n": [11, 11, 11]}'
    g = Grammar.from_json_schema(schema)
    deferred = Matcher(tok, g)
    whole = Matcher(tok, g)
    whole.walker.split_at_lexeme = False
    walker = deferred.walker
    assert walker.whole_walk_first_visit
    events = []
    whole_walk, inside_walk = walker._whole_walk, walker._inside_lexeme
    walker._whole_walk = lambda state, applicable: (
        events.append(("whole", walker._representative(int(state[0])), applicable)),
        whole_walk(state, applicable),
    )[1]
    walker._inside_lexeme = lambda lexstate, applicable: (
        events.append(("inside", walker._representative(lexstate), applicable)),
        inside_walk(lexstate, applicable),
    )[1]
    for t in tok.encode(text):
        assert np.array_equal(deferred.compute_mask(), whole.compute_mask())
        deferred.consume_token(t)
        whole.consume_token(t)
    assert np.array_equal(deferred.compute_mask(), whole.compute_mask())
    walked_whole = [e[1:] for e in events if e[0] == "whole"]
    walked_inside = [e[1:] for e in events if e[0] == "inside"]
    assert len(set(walked_whole)) == len(walked_whole) and len(set(walked_inside)) == len(walked_inside)
    for i, (kind, *key) in enumerate(events):
        if kind == "inside":
            assert ("whole", *key) in events[:i]
    # the strings and numbers after the first are revisits: split, with their insides kept
    assert len(walked_inside) >= 3
    assert len(events) < len(tok.encode(text))


def test_count_states_of_a_long_string_share_one_inside_walk_and_masks_stay_exact():
    # Each position in a string with maxLength 400 is a lexer state of its own (the
    # count left). Those whose counts exceed the longest token clamp alike and share
    # one inside walk; the masks must equal whole walks, and the last positions, where
    # the bound is in reach of a token, must walk on their own.
    from midword.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained("llama3")
    g = Grammar.from_json_schema(
        {"type": "object", "properties": {"s": {"type": "string", "maxLength": 400}}, "required": ["s"]}
    )
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
    words = "the quick brown fox jumps over the lazy dog and ".split(" ")
    body = " ".join(words[i % len(words)] for i in range(120))[:400]
    for t in tok.encode('{"s": "' + body):
        assert np.array_equal(split.compute_mask(), whole.compute_mask())
        split.consume_token(t)
        whole.consume_token(t)
    got = split.compute_mask()
    assert np.array_equal(got, whole.compute_mask())
    # 400 characters typed: nothing but the closing quote is left
    allowed = set(mask_to_ids(got, tok.vocab_size).tolist())
    assert tok.encode("a")[0] not in allowed and tok.encode('"')[0] in allowed
    space = split.walker.space
    positions = len(space.representative)
    shared = positions - len(set(space.representative.values()))
    assert len(inside_walks) < len(tok.encode(body)) - 20 and shared > 20, (len(inside_walks), shared)


@pytest.mark.parametrize("whole_walk_first_visit", [False, True])
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_masks_split_at_the_lexeme_equal_whole_walks_along_random_walks(whole_walk_first_visit, seed):
    g = grammar()
    rng = random.Random(seed)
    split, whole = Matcher(TOY, g), Matcher(TOY, g)
    split.walker.whole_walk_first_visit = whole_walk_first_visit
    whole.walker.split_at_lexeme = False
    whole.walker.cache = None
    for _ in range(16):
        got = split.compute_mask()
        assert np.array_equal(got, whole.compute_mask())
        if not step_both(rng, got, split, whole):
            break


def test_packed_views_read_and_write_the_packed_arrays():
    import numba

    from midword.engine._views import pack, view_1d, view_2d

    @numba.njit
    def touch(packed):
        ints = view_1d(packed, 0, np.int32)
        table = view_2d(packed, 1, np.int64)
        flags = view_1d(packed, 2, np.bool_)
        ints[1] += 5
        table[1, 2] = -7
        total = 0
        for i in range(table.shape[0]):
            for j in range(table.shape[1]):
                total += table[i, j]
        return ints.shape[0], table.shape[0], table.shape[1], total, flags[2], len(flags)

    ints = np.arange(5, dtype=np.int32)
    table = np.arange(12, dtype=np.int64).reshape(4, 3)
    flags = np.array([False, False, True, False])
    dtypes = (np.int32, np.int64, np.bool_)
    assert touch(pack((ints, table, flags), dtypes)) == (5, 4, 3, 66 - 5 - 7, True, 4)
    assert ints[1] == 6 and table[1, 2] == -7  # the views are the arrays, not copies
    with pytest.raises(ValueError, match="array 1: int32"):
        pack((ints, table.astype(np.int32), flags), dtypes)
    with pytest.raises(ValueError, match="array 0"):
        pack((ints[::2], table, flags), dtypes)  # not contiguous
    frozen = flags.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="array 2: bool, 1-D, contiguous True, writeable False"):
        pack((ints, table, frozen), dtypes)
    with pytest.raises(ValueError, match="array 1: int64, 3-D"):
        pack((ints, table.reshape(2, 2, 3), flags), dtypes)
    with pytest.raises(ValueError, match="array 1: a list, not an array"):
        pack((ints, [1, 2], flags), dtypes)
    with pytest.raises(ValueError, match="2 arrays for 3 dtypes"):
        pack((ints, table), dtypes)
    # Scalars ride after the arrays' fields.
    assert pack((ints, table, flags), dtypes, trailing=(7, -1)).tolist()[-2:] == [7, -1]


def test_a_group_unpacks_the_same_from_a_tuple_and_packed():
    # Kernels take the parser's, recognizer's and lexer's arrays as groups: tuples in
    # the plain twins and the loose walk, packed by address in the packed walk.
    import numba

    from midword.engine._views import pack, parse_spec, spec_dtypes, unpack_group

    spec = "q#2B?#"

    @numba.njit
    def read(group):
        counts, first, table, flags, second = unpack_group(group, spec)
        counts[0] += first
        table[1, 2] = second
        return counts.shape[0], table.shape[0], table.shape[1], flags[1], first, second

    counts = np.arange(3, dtype=np.int64)
    table = np.zeros((2, 4), dtype=np.uint8)
    flags = np.array([False, True])
    dtypes, scalars = spec_dtypes(spec)
    assert dtypes == (np.int64, np.uint8, np.bool_) and scalars == (1, 4)
    packed = np.concatenate([pack((counts, table, flags), dtypes), np.array([10, 7])])
    assert read(packed) == (3, 2, 4, True, 10, 7)
    assert counts[0] == 10 and table[1, 2] == 7  # views of the arrays, not copies
    assert read((counts, 10, table, flags, 9)) == (3, 2, 4, True, 10, 9)
    assert counts[0] == 20 and table[1, 2] == 9
    with pytest.raises(ValueError, match="'x' is not a member kind"):
        parse_spec("qx")


def test_packed_walk_equals_walks_with_every_array_passed_on_a_real_tokenizer():
    # The compiled walk reads its long-lived arrays by address (engine/_views.py), packed
    # again whenever one is replaced. The lexer table, step table and row pools grow
    # many times along this text, so stale addresses would show up as wrong masks (or
    # a crash) here.
    from midword.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained("llama3")
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "label": {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"},
                        "when": {"type": "string", "format": "date"},
                    },
                },
            },
            "name": {"type": "string"},
            "ok": {"type": "boolean"},
        },
    }
    text = (
        '{"items": ['
        + ", ".join(
            f'{{"id": {i * 37}, "label": "ab{"c" * i}-{i:02d}", "when": "2024-0{1 + i % 9}-1{i}"}}' for i in range(10)
        )
        + '], "name": "zed \\\\ \\u00e9", "ok": true}'
    )
    g = Grammar.from_json_schema(schema)
    packed, loose, plain = Matcher(tok, g), Matcher(tok, g), Matcher(tok, g)
    loose.walker._packing = False
    plain.walker = MaskWalker(plain.trie, plain.rec, use_jit=False, sliced=plain.walker.sliced, cache=None)
    for m in (packed, loose):
        m.walker.cache = None
    for t in tok.encode(text):
        want = loose.compute_mask()
        assert np.array_equal(packed.compute_mask(), want)
        assert np.array_equal(plain.compute_mask(), want)
        for m in (packed, loose, plain):
            m.consume_token(t)
    assert packed.is_accepting()
    # The packed path ran (its arrays were all of the types it reads) and was repacked.
    assert packed.walker._packing and packed.walker._walk_packed is not None
    assert loose.walker._walk_packed is None


def test_walkers_share_a_tries_packed_arrays_and_a_copy_packs_its_own():
    import copy
    import pickle

    g = grammar()
    first, second = Matcher(TOY, g), Matcher(TOY, Grammar.from_lark(JSONISH.replace("{0,12}", "{0,5}")))
    want = first.compute_mask()
    second.compute_mask()
    trie = first.walker.trie
    assert second.walker.trie is trie
    packed = _trie_packed(trie)
    assert packed[0] == trie.node_records.ctypes.data  # the address of the first array
    for twin in (copy.deepcopy(trie), pickle.loads(pickle.dumps(trie))):
        other = Matcher(TOY, g)
        other.walker = MaskWalker(twin, other.rec, sliced=None, cache=None)
        other.trie = twin
        assert np.array_equal(other.compute_mask(), want)
        assert _trie_packed(twin)[0] == twin.node_records.ctypes.data != packed[0]
    assert _trie_packed(trie) is packed


def test_slices_found_through_first_bytes_and_answers_per_expression_equal_the_plain_check():
    from midword.engine import slicer

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}},
            "n": {"type": "integer"},
            "kind": {"enum": ["a b", "cde"]},
            "when": {"type": "string", "format": "date"},
        },
    }
    m = Matcher(TOY, Grammar.from_json_schema(schema))
    rng = random.Random(4)
    for _ in range(40):
        if not step_both(rng, m.compute_mask(), m):
            break
    rec, sliced = m.rec, m.walker.sliced
    lexer, exprs = rec.lexer, rec.lexer.exprs
    ids = [exprs.parse(rx) for rx in sliced.regexes]
    answers = set()
    for state in range(len(lexer.states)):
        live = [e for i, e in lexer.states[state] if i != lexer.start_marker]
        # A slice is held wherever a slice whose language holds it is.
        plain = tuple(
            any(slicer._repeat_within(exprs, s, t) and exprs.prefix_contains(t, e) for e in live for t in ids)
            for s in ids
        )
        rec.__dict__.pop("_slice_cache", None)
        assert slicer.applicable_slices(rec, sliced, state) == plain  # expressions' answers kept
        rec.__dict__.pop("_slice_cache", None)
        slicer._answers_by_expr.clear()
        assert slicer.applicable_slices(rec, sliced, state) == plain
        answers.add(plain)
    assert len(answers) > 1 and any(any(a) for a in answers)


def test_slices_inside_larger_slices_are_read_from_their_counts():
    # `{1,10}` and `{1,30}` lie inside `+`: a lexeme that holds `+` holds them. Read from
    # the repeat counts, with no search over derivatives (which walked every count, in
    # the first mask of each new expression set).
    from midword.engine.slicer import DEFAULT_SLICES, _repeat_within

    es = ExprSet()
    ids = [es.parse(rx) for rx in DEFAULT_SLICES]
    held = [[_repeat_within(es, inner, outer) for inner in ids] for outer in ids]
    assert held == [
        [True, False, False, False],
        [False, True, False, False],
        [False, True, True, False],
        [False, True, True, True],
    ]
    assert es._subset_cache == {}


def test_walk_variants_do_not_share_cache_entries():
    rec = Recognizer(grammar())
    trie = Matcher(TOY, grammar()).trie
    a = MaskWalker(trie, rec, use_jit=True)
    b = MaskWalker(trie, rec, use_jit=False)
    a.mask(rec.initial())
    b.mask(rec.initial())
    assert a._state_key(rec.initial()) != b._state_key(rec.initial())
    assert a._prefix_key != b._prefix_key
    c = MaskWalker(trie, rec, use_jit=True)
    assert c._state_key(rec.initial()) == a._state_key(rec.initial())  # one variant shares


# Lexer rows ------------------------------------------------------------------------


def test_lazy_steps_and_full_rows_fill_the_same_table():
    g = grammar()
    lazy, full = Lexer(g), Lexer(g)
    start = lazy.initial_state(frozenset(range(lazy.num_lexemes)))
    assert full.initial_state(frozenset(range(full.num_lexemes))) == start
    rng = random.Random(1)
    frontier = [start]
    seen = {start}
    while frontier and len(seen) < 200:
        s = frontier.pop()
        for byte in rng.sample(range(256), 256):
            t = lazy.step(s, byte)
            if t not in seen:
                seen.add(t)
                frontier.append(t)
    for s in sorted(seen):
        full_s = full._intern(lazy.states[s])
        full.fill_row(full_s)
        row = lazy.table[s]
        assert (row != UNKNOWN).all()
        assert [lazy.states[t] for t in row] == [full.states[t] for t in full.table[full_s]]


# Regex parsing -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_plain_text_runs_parse_to_the_same_language(seed, monkeypatch):
    rng = random.Random(seed)
    atoms = [
        "ab",
        "name",
        "x_y",
        "a-b",
        "q",
        "[a-c]",
        "(?:de|f)",
        ".",
        "\\.",
        "z",
        "9",
        "k:v",
        "(?:ab|a|b-c|k:v)",
        "(ab|)",
        "(?i:ab|c)",
        "(?:a|b*)",
    ]
    quants = ["", "", "", "?", "*", "+", "{2}", "{1,3}"]
    pattern = "|".join(
        "".join(rng.choice(atoms) + rng.choice(quants) for _ in range(rng.randint(1, 4))) for _ in range(3)
    )
    fast = ExprSet()
    fast_id = fast.parse(pattern)
    fast_dfa = LazyDFA(fast, fast_id)
    monkeypatch.setattr(regex_module, "_PLAIN_RUN", re.compile(r"(?!)"))
    monkeypatch.setattr(regex_module, "_PLAIN_ALTERNATION", re.compile(r"(?!)"))
    # Not just the same language: the same expression, node for node (hash-consed).
    fast._parsed.clear()
    fast._groups.clear()
    assert fast.parse(pattern) == fast_id
    slow = ExprSet()
    slow_dfa = LazyDFA(slow, slow.parse(pattern))
    alphabet = "abcdefknqvxyz_-:.9"
    for _ in range(400):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
        expected = re.fullmatch(pattern, s) is not None
        assert fast_dfa.matches(s.encode()) == expected == slow_dfa.matches(s.encode()), (pattern, s)


def test_shared_expression_set_rolls_over():
    limits = Limits(max_regex_nodes=1_000)
    first = ExprSet.shared(limits)
    assert ExprSet.shared(limits) is first
    first.parse("|".join(f"word{i}x" for i in range(20)))  # well past 5% of the budget
    second = ExprSet.shared(limits)
    assert second is not first and len(second) < len(first)


def test_a_group_repacked_in_place_points_at_the_grown_arrays():
    from midword.engine._views import pack

    dtypes = (np.int64, np.int32, np.int64)
    arrays = (np.zeros(4, dtype=np.int64), np.zeros((3, 5), dtype=np.int32), np.zeros(2, dtype=np.int64))
    values = arrays + (7,)  # a scalar rides at the end, as the parser's limits do
    cached = _repack(None, values, (3,), dtypes)
    packed = cached[1]
    grown = (arrays[0], np.zeros((6, 5), dtype=np.int32), arrays[2], 9)
    again = _repack(cached, grown, (3,), dtypes)
    assert again[1] is packed  # the same array, so the book's pointer to it holds
    assert packed.tolist() == pack(grown[:3], dtypes).tolist() + [9]
    with pytest.raises(ValueError, match="int32"):
        _repack(again, (arrays[0], np.zeros((6, 5), dtype=np.int64), arrays[2], 9), (3,), dtypes)


# Walkers of one recognizer ---------------------------------------------------------


def test_matchers_of_one_grammar_share_the_walk_space_and_take_turns_correctly(monkeypatch):
    # A grammar of its own: recognizers are shared by content, and other tests' walkers
    # of `grammar()` (unpacked, plain twins) replace arrays in its space.
    g = Grammar.from_lark(JSONISH.replace("{0,12}", "{0,11}"))
    a, b = Matcher(TOY, g), Matcher(TOY, g)
    assert a.walker.space is b.walker.space
    rng = random.Random(7)
    for _ in range(30):
        for m in (a, b):  # interleaved: each walk finds the other's stacks and frontier
            mask = m.compute_mask()
            assert (mask == m.reference_mask()).all()
            step_both(rng, mask, m)
    # A new matcher's walks use the groups its recognizer's walks packed already.
    c = Matcher(TOY, g)
    c.walker.cache = None  # walk, not a cached mask
    repacked = []
    monkeypatch.setattr(MaskWalker, "_packed_again", lambda self, *args: repacked.append(1))
    assert (c.compute_mask() == c.reference_mask()).all()
    assert repacked == []


# Start states made in the walk ------------------------------------------------------


def keys_except_grammar(number_regex: str = "[0-9]+") -> Grammar:
    """An object of `"name": NUM` and other keys (`&~`, as JSON Schema's additional
    properties) with string values; %ignore'd spaces."""
    b = GrammarBuilder()
    start, pair = b.nonterminal("start"), b.nonterminal("pair")
    pairs = b.nonterminal("pairs")
    colon, comma = b.literal(":"), b.literal(",")
    b.rule(start, [b.literal("{"), pairs, b.literal("}")])
    b.rule(pairs, [pair])
    b.rule(pairs, [pairs, comma, pair])
    number = b.lexeme("NUM", number_regex)
    b.rule(pair, [b.literal('"name"'), colon, number])
    b.rule(pair, [b.lexeme("OTHER", '"(?:[a-z]+&~(?:name))"', flags="E"), colon, b.lexeme("STR", '"[a-z]{0,6}"')])
    b.rule(pair, [b.lexeme("NEVER", "(?:a+&b+)", flags="E"), colon, number])
    b.add_ignore("[ ]+")
    return b.build(start)


@pytest.mark.parametrize("use_jit", [True, False])
def test_start_states_made_in_the_walk_are_the_ones_initial_state_makes(use_jit):
    g = keys_except_grammar()
    rng = random.Random(4)
    for _ in range(6):
        m = Matcher(TOY, g, use_jit=use_jit)
        for _ in range(25):
            mask = m.compute_mask()
            assert (mask == m.reference_mask()).all()
            if not step_both(rng, mask, m):
                break
    rec = m.rec
    python_made = set(rec._start_states.values())
    entries = np.flatnonzero(rec.start_keys != -1)
    assert len(entries) == rec.start_fill[0]
    walk_made = 0
    for slot in entries:
        ptr, n = int(rec.start_ptr[slot]), int(rec.start_len[slot])
        allowed = rec.start_pool[ptr : ptr + n]
        lexstate = int(rec.start_val[slot])
        # The same state, pairs and all, as the lexer's own way of making it.
        assert rec.lexer.initial_state(frozenset(allowed.tolist()), n > 0) == lexstate
        walk_made += lexstate not in python_made
        # Entered once, though Python meets the same lexeme sets again.
        assert rec._find_start(allowed) == lexstate
    assert walk_made >= 1


def test_the_start_table_rehash_keeps_every_entry_by_its_hash():
    from midword.engine.recognizer import rehash_starts_jit, rehash_starts_py

    rng = random.Random(5)
    size = 64
    keys = np.full(size, -1, dtype=np.int64)
    val, ptr, length = (np.zeros(size, dtype=np.int64) for _ in range(3))
    entries = {}
    while len(entries) < 31:
        h = rng.randrange(1 << 40)
        if h in entries:
            continue
        entries[h] = (rng.randrange(9000), rng.randrange(5000), rng.randrange(300))
        slot = h & (size - 1)
        while keys[slot] != -1:
            slot = (slot + 1) & (size - 1)
        keys[slot] = h
        val[slot], ptr[slot], length[slot] = entries[h]
    for fn in (rehash_starts_py, rehash_starts_jit):
        grown = [np.full(2 * size, -1, dtype=np.int64)] + [np.zeros(2 * size, dtype=np.int64) for _ in range(3)]
        assert fn(keys, val, ptr, length, *grown) == len(entries)
        new_keys, new_val, new_ptr, new_len = grown
        for h, (v, p, n) in entries.items():
            slot = h & (2 * size - 1)
            while new_keys[slot] != h:
                assert new_keys[slot] != -1
                slot = (slot + 1) & (2 * size - 1)
            assert (new_val[slot], new_ptr[slot], new_len[slot]) == (v, p, n)


@pytest.mark.parametrize("use_jit", [True, False])
def test_start_states_stay_found_after_the_start_table_grows(use_jit):
    # Keys in any order: every set of keys still to come is a lexeme set of its own, so
    # an object of many keys fills the start table past its first size.
    names = [f"k{i:02d}" for i in range(40)]
    g = Grammar.from_json_schema({"type": "object", "properties": {k: {"type": "integer"} for k in names}})
    Recognizer.release(g)  # a fresh recognizer, its start table at its first size
    m = Matcher(TOY, g, use_jit=use_jit)
    rec = m.rec
    first_size = rec.start_keys.shape[0]
    text = "{" + ", ".join(f'"{k}": {i}' for i, k in enumerate(names)) + "}"
    for b in text.encode():
        assert m.compute_mask() is not None
        m.consume_bytes(bytes([b]))
    assert m.is_accepting()
    assert rec.start_keys.shape[0] > first_size, "the test must grow the start table"
    entries = np.flatnonzero(rec.start_keys != -1)
    assert len(entries) == rec.start_fill[0] > first_size // 2
    for slot in entries:
        ptr, n = int(rec.start_ptr[slot]), int(rec.start_len[slot])
        allowed = rec.start_pool[ptr : ptr + n]
        assert rec._find_start(allowed) == int(rec.start_val[slot])
        assert rec.lexer.initial_state(frozenset(allowed.tolist()), n > 0) == int(rec.start_val[slot])


def test_a_key_pattern_beside_listed_keys_is_decided_when_the_lexer_is_made():
    # A short emptiness search settles the keys other than the listed ones up front, so
    # the compiled way makes the start states that hold them.
    from midword.engine.lexer import START_EMPTY, start_state_py

    lx = Lexer(keys_except_grammar(number_regex="[0-9]*"), ExprSet())
    other, never = (lx.lexeme_names.index(name) for name in ("OTHER", "NEVER"))
    assert lx.start_codes[other] >= 0 and lx.start_codes[never] == START_EMPTY
    arrays = lx.step_arrays()
    made = start_state_py(np.array([other, never]), 2, True, lx.accept, lx.table.shape[0], arrays)
    assert made != UNKNOWN
    assert made == lx.initial_state(frozenset([other, never]), True)


def test_a_start_state_holding_an_undecided_or_nullable_lexeme_is_left_to_python(monkeypatch):
    from midword.engine import lexer as lexer_module
    from midword.engine.lexer import START_EMPTY, START_NULLABLE, START_UNDECIDED, start_state_py

    # Lexemes past the up-front search (a count above the bound: here every one) are
    # decided at their first use.
    monkeypatch.setattr(lexer_module, "EAGER_EMPTINESS_COUNT", -1)
    # A set of its own: the shared one knows these lexemes' emptiness from other tests.
    lx = Lexer(keys_except_grammar(number_regex="[0-9]*"), ExprSet())
    other, num, never = (lx.lexeme_names.index(name) for name in ("OTHER", "NUM", "NEVER"))
    assert lx.start_codes[other] == lx.start_codes[never] == START_UNDECIDED
    assert lx.start_codes[num] == START_NULLABLE
    for lexeme in (other, num, never):
        arrays = lx.step_arrays()
        before = int(lx.core[0])
        assert start_state_py(np.array([lexeme]), 1, True, lx.accept, lx.table.shape[0], arrays) == UNKNOWN
        assert int(lx.core[0]) == before  # nothing added
    # Python decides emptiness once (NEVER matches nothing, so it is left out); from
    # then on the compiled way makes the same states.
    s = lx.initial_state(frozenset([other, never]), True)
    assert lx.start_codes[other] >= 0 and lx.start_codes[never] == START_EMPTY
    arrays = lx.step_arrays()
    assert start_state_py(np.array([other, never]), 2, True, lx.accept, lx.table.shape[0], arrays) == s
    assert start_state_py(np.array([never]), 1, False, lx.accept, lx.table.shape[0], arrays) == lx.initial_state(
        frozenset([never]), False
    )


# Fast-forward ------------------------------------------------------------------------


def test_quick_unforced_check_agrees_with_allowed_bytes():
    g = grammar()
    rng = random.Random(2)
    for _ in range(30):
        m = Matcher(TOY, g)
        for _ in range(10):
            state = m._state
            m.compute_mask()  # fills the lexer rows the quick check reads
            allowed = _allowed(m.rec, state)
            if allowed == MANY:
                assert m.rec.allowed_bytes(state).sum() >= 2
            else:
                assert allowed == m.rec.allowed_byte_mask(state)
            assert m.rec.allowed_byte_mask(state) == sum(1 << b for b in m.rec.next_bytes(state))
            assert _forced_bytes(m.rec, state, 64)[0] == _forced_bytes_plain(m.rec, state, 64)
            nxt = m.rec.next_bytes(state)
            if not nxt:
                break
            m.consume_bytes(bytes([rng.choice(nxt)]))


def _forced_bytes_plain(rec, state, limit):
    out = bytearray()
    while len(out) < limit and not rec.is_accepting(state):
        allowed = rec.allowed_bytes(state)
        if allowed.sum() != 1:
            break
        b = int(allowed.argmax())
        out.append(b)
        state = rec.step(state, b)
    return bytes(out)


# Grammar fingerprints ----------------------------------------------------------------


def test_fingerprint_ignores_which_objects_are_shared():
    def build(shared: bool) -> Grammar:
        b = GrammarBuilder()
        s = b.nonterminal("s")
        rx = "[a-z]+"
        for i in range(3):
            # Equal regex strings, as one object or as three.
            b.lexeme(f"L{i}", rx if shared else "".join(["[a-z", "]+"]), flags="i" * i)
        b.rule(s, [-1, -2, -3])
        return b.build(s)

    assert build(True).fingerprint() == build(False).fingerprint()


# Parser steps outside the walk ---------------------------------------------------------


def test_steps_built_in_compiled_code_outside_the_walk_equal_those_built_in_python(monkeypatch):
    # Fast-forward and consuming meet parser steps the walk has not built; a live walker
    # builds them in compiled code (MaskWalker.step_child). The same bytes through a
    # recognizer without one build them in Python: both must reach the same rows.
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"enum": ["a", "bb"]}},
            "size": {"type": "object", "properties": {"w": {"type": "integer"}, "h": {"type": "integer"}}},
        },
        "required": ["name", "size"],
    }
    g = Grammar.from_json_schema(schema)
    text = b'{"size": {"h": 2, "w": 10}, "tags": ["bb", "a"], "name": "x"}'
    compiled, plain = Recognizer(g), Recognizer(g)
    walker = MaskWalker(Matcher(TOY, g).trie, compiled)
    built = []
    real_step_child = MaskWalker.step_child

    def spy(self, row, lexset):
        child = real_step_child(self, row, lexset)
        built.append(child)
        return child

    monkeypatch.setattr(MaskWalker, "step_child", spy)
    a, b = compiled.initial(), plain.initial()
    for i, byte in enumerate(text):
        a, b = compiled.step(a, byte), plain.step(b, byte)
        assert a is not None and b is not None, i
        assert compiled.lexer.pairs_of(a[0]) == plain.lexer.pairs_of(b[0]), i
        assert compiled.parser.row_items(a[1]) == plain.parser.row_items(b[1]), i
        assert compiled.is_accepting(a) == plain.is_accepting(b), i
    assert compiled.is_accepting(a)
    assert plain.caches.scanner is None and compiled.caches.scanner() is walker
    assert len([c for c in built if c >= 0]) >= 10  # most steps were built compiled
    # A step nothing scans is entered as such, compiled too.
    assert compiled.step(a, ord("x")) is None and plain.step(b, ord("x")) is None


def test_a_full_array_is_grown_and_the_walk_builds_the_step_itself(monkeypatch):
    # Where the compiled scan finds the parser's rows, the rows' start states or the step
    # table full, the walk grows them and resumes: Python builds a step only for other
    # reasons. Rows grow from 64 several times along this text.
    from midword.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained("llama3")
    schema = {
        "type": "object",
        "properties": {
            "rows": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "integer"}}}}
        },
    }
    text = '{"rows": [' + ", ".join(f'{{"k": {i}}}' for i in range(60)) + "]}"
    g = Grammar.from_json_schema(schema)
    m = Matcher(tok, g)
    m.walker.cache = None
    rec = m.rec
    full_at_python_scan = []
    real = Recognizer.scan_in_python

    def spy(self, row, lexset):
        p = self.parser
        full_at_python_scan.append(
            p.rows_built >= p.row_start.shape[0]
            or p.rows_built >= self.row_lexstate.shape[0]
            or 2 * (self.step_count + 1) > self.step_keys.shape[0]
        )
        return real(self, row, lexset)

    monkeypatch.setattr(Recognizer, "scan_in_python", spy)
    plain = Matcher(tok, g, use_jit=False)
    plain.walker.cache = None
    for t in tok.encode(text):
        assert np.array_equal(m.compute_mask(), plain.compute_mask())
        m.consume_token(t)
        plain.consume_token(t)
    assert m.is_accepting()
    assert rec.parser.rows_built > 256  # the rows grew at least twice
    assert not any(full_at_python_scan)


def _sliced_masks_at(schema: dict, text: str, where) -> int:
    """Walks `text` with a sliced walker and an unsliced one, asserting equal masks; returns
    how many masks were sliced at a lexer state `where(lexer, state)` picks."""
    from midword.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained("llama3")
    g = Grammar.from_json_schema(schema)
    sliced = Matcher(tok, g)
    whole = Matcher(tok, g)
    whole.walker = MaskWalker(whole.trie, whole.rec, sliced=None, cache=None)
    sliced.walker.cache = None
    count = 0
    for t in tok.encode(text):
        assert np.array_equal(sliced.compute_mask(), whole.compute_mask())
        count += bool(where(sliced.rec.lexer, sliced._state[0]) and sliced.walker.last_sliced)
        sliced.consume_token(t)
        whole.consume_token(t)
    assert sliced.is_accepting()
    return count


def test_a_key_beside_the_listed_ones_is_sliced_and_its_masks_equal_whole_walks():
    # After `{"` in an object that allows other keys, nearly every token is allowed: the
    # string-text slices apply wholesale (a string minus the listed keys), so the walk
    # skips them. Masks with and without slices must be equal, at the listed keys'
    # prefixes too. An unanchored key pattern, as real schemas write them: a key is
    # `[a-zA-Z0-9_]*` then any text, beside the listed ones.
    schema = {
        "type": "object",
        "properties": {"by": {"type": "array", "maxItems": 2}, "photos_by": {"type": "array"}},
        "patternProperties": {"^[a-zA-Z0-9_]*": {"type": "array", "items": {"type": "integer"}}},
    }
    text = '{"by": [1], "photos_by": [3], "other é": [1], "bystander": [2, 3], "b": []}'

    def in_key(lexer, state):
        return any(not lexer.exprs.emptiness_is_trivial(e) for _, e in lexer.pairs_of(state))

    assert _sliced_masks_at(schema, text, in_key) >= 1


@pytest.mark.parametrize("pattern", ["^.*$", "^abc.+$", "^fritzbox(\\..*)?$", ".{1,}"])
def test_pattern_keys_beside_the_other_keys_are_sliced_together_and_masks_equal_whole_walks(pattern):
    # Apart, neither the keys the pattern matches nor the other keys hold every string
    # text slice among their prefixes (`.` leaves out U+2028); together they are any key.
    schema = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}}
    text = '{"abcd": 1, "fritzbox.x": 2, "any\u2028key": 3, "fritz": 4}'

    def two_keys(lexer, state):
        return sum(i != lexer.start_marker for i, _ in lexer.pairs_of(state)) >= 2

    assert _sliced_masks_at(schema, text, two_keys) >= 1


@pytest.mark.parametrize("pattern", ["^title_[a-z]{2}(-[A-Za-z0-9]+)*$", "^x-"])
def test_pattern_keys_beside_listed_and_other_keys_are_sliced_and_masks_equal_whole_walks(pattern):
    # Github_ultra---o65323 (Open Contracting): listed keys, endless language-tagged
    # key patterns, other keys allowed. Both key lexemes leave the listed keys out, so their
    # join is any key but those; its first mask after `{"` walked a lexer state per key
    # prefix (8.7 ms). Masks with and without slices must be equal.
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "tenderers": {"type": "array"}, "x": {"type": "integer"}},
        "patternProperties": {pattern: {"type": ["string", "null"]}},
        "required": ["title"],
    }
    text = '{"title": "t", "title_en": "x", "x": 3, "x-tra": null, "tenderers": [], "titles": {"a": 1}}'

    def at_key_start(lexer, state):
        return sum(i != lexer.start_marker for i, _ in lexer.pairs_of(state)) >= 4

    assert _sliced_masks_at(schema, text, at_key_start) >= 1


def test_keys_containing_one_of_several_words_are_sliced_and_masks_equal_whole_walks():
    # Github_medium---o48427: an unanchored pattern of alternatives, every listed key
    # required, no other keys. Its first mask after `{"` walked the whole trie into a
    # lexer state per word prefix (17 ms); the slices now apply through the pattern's
    # alternatives. Masks with and without slices must be equal.
    words = ["Normal", "Fighting", "Flying", "Fire", "Water"]
    schema = {
        "type": "object",
        "patternProperties": {"|".join(words): {"type": "number"}},
        "required": words,
        "additionalProperties": False,
    }
    text = '{"Normal": 1, "Fighting": 2, "xFirey": 0, "Flying": 1, "Fire": 2, "Water": 0.5}'

    def in_key(lexer, state):
        return any(not lexer.exprs.emptiness_is_trivial(e) for _, e in lexer.pairs_of(state))

    assert _sliced_masks_at(schema, text, in_key) >= 1


def test_a_pattern_dot_run_is_sliced_and_its_masks_equal_whole_walks():
    # `.` leaves out U+2028 and U+2029 (line terminators), so the string-text slices hold
    # neither: inside `.+` of a value pattern (MaskBench `Github_medium---o90224`) they
    # apply wholesale instead of a whole-trie walk at each new state. Masks with and
    # without slices must be equal, a plain string beside it (with a U+2028 in its text,
    # whose bytes only the walked tokens spell) too.
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string", "pattern": "^file:.+\\.km[lz]$"}, "note": {"type": "string"}},
    }
    text = '{"path": "file:../commondata/kml/paris.kml", "note": "line\u2028break"}'

    def in_dot_run(lexer, state):
        return any("km[lz]" in lexer.exprs.to_str(e) for _, e in lexer.pairs_of(state))

    assert _sliced_masks_at(schema, text, in_dot_run) >= 5


@pytest.mark.parametrize("taken", [False, True])
def test_an_optional_chain_equals_its_rules_made_one_by_one(taken):
    # `maxItems` becomes a chain of optional items, made in one pass: the same
    # nonterminals, names and rules, in the same order, as `rule` one at a time, also
    # where a name is taken (then numbered past it).
    def build(chained: bool) -> GrammarBuilder:
        b = GrammarBuilder()
        item = b.nonterminal("item")
        b.rule(item, [b.literal("x")])
        if taken:
            b.nonterminal("items#3")
        names = ["items"] + [f"items#{k}" for k in range(2, 7)]
        if chained:
            b.optional_chain(item, names)
        else:
            tail = None
            for name in names:
                t = b.nonterminal(name, fresh=True)
                b.rule(t, [item] if tail is None else [item, tail])
                b.rule(t, [])
                tail = t
        b.rule(b.nonterminal("start"), [b.nonterminal("items#6")])
        return b

    chained, plain = build(True), build(False)
    assert chained.nonterminals == plain.nonterminals
    assert chained.rules == plain.rules
    assert chained._size == plain._size
