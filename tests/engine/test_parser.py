"""The Earley parser's rows: the compiled row builder against its plain-Python twin,
and both against a textbook Earley recognizer written independently here."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.analysis import END
from midword.engine.grammar import GrammarBuilder
from midword.engine.limits import LimitExceeded, Limits
from midword.engine.parser import NEED_PREDICTION, ROW_BUILT, EarleyParser

N_LEXEMES = 4


@st.composite
def grammars(draw):
    """Random BNF over a few lexemes, with empty rules, left and right recursion."""
    b = GrammarBuilder()
    lexemes = [b.lexeme(f"L{i}", chr(ord("a") + i), literal=chr(ord("a") + i).encode()) for i in range(N_LEXEMES)]
    nts = [b.nonterminal(f"n{i}") for i in range(draw(st.integers(1, 5)))]
    symbols = lexemes + nts
    for nt in nts:
        for _ in range(draw(st.integers(1, 3))):
            b.rule(nt, draw(st.lists(st.sampled_from(symbols), max_size=4)))
        b.rule(nt, [draw(st.sampled_from(lexemes))])  # keeps every nonterminal productive
    return b.build(nts[0])


def textbook(grammar, seq):
    """(accepts seq, lexemes that may come next): Earley sets closed to a fixpoint, so
    nullable symbols need no special rule."""
    rules = [(r.lhs, tuple(r.rhs)) for r in grammar.rules]
    start = grammar.start

    def close(items, i, chart):
        items = set(items)
        changed = True
        while changed:
            changed = False
            for ri, dot, origin in list(items):
                lhs, rhs = rules[ri]
                if dot < len(rhs) and rhs[dot] >= 0:
                    for rj, (l2, _) in enumerate(rules):
                        if l2 == rhs[dot] and (rj, 0, i) not in items:
                            items.add((rj, 0, i))
                            changed = True
                elif dot == len(rhs):
                    source = items if origin == i else chart[origin]
                    for rk, d2, o2 in list(source):
                        l3, rhs3 = rules[rk]
                        if d2 < len(rhs3) and rhs3[d2] == lhs and (rk, d2 + 1, o2) not in items:
                            items.add((rk, d2 + 1, o2))
                            changed = True
        return items

    chart = [close({(ri, 0, 0) for ri, (lhs, _) in enumerate(rules) if lhs == start}, 0, [])]
    for i, lx in enumerate(seq):
        nxt = {(ri, dot + 1, o) for (ri, dot, o) in chart[i] if dot < len(rules[ri][1]) and rules[ri][1][dot] == ~lx}
        chart.append(close(nxt, i + 1, chart))
    last = chart[-1]
    accepts = any(rules[ri][0] == start and dot == len(rules[ri][1]) and o == 0 for (ri, dot, o) in last)
    allowed = {~rules[ri][1][dot] for (ri, dot, o) in last if dot < len(rules[ri][1]) and rules[ri][1][dot] < 0}
    return accepts, allowed


def walk(parser, seq):
    row = parser.root
    for lx in seq:
        row = parser.scan(row, lx, frozenset([lx]))
        if row < 0:
            return None
    return row


@settings(max_examples=80, deadline=None)
@given(grammars(), st.integers(0, 2**32 - 1))
def test_rows_agree_with_textbook_earley_and_the_twin(grammar, seed):
    rng = random.Random(seed)
    compiled = EarleyParser(grammar)
    twin = EarleyParser(grammar, use_jit=False)
    seq: list[int] = []
    for _ in range(12):
        row = walk(compiled, seq)
        accepts, allowed = textbook(grammar, seq)
        assert row is not None
        assert compiled.is_accepting(row) == accepts, seq
        assert compiled.allowed_lexemes(row) == allowed, seq
        twin_row = walk(twin, seq)
        assert compiled.row_items(row) == twin.row_items(twin_row)
        # A lexeme the row does not expect scans to nothing.
        for lx in range(N_LEXEMES):
            if lx not in allowed:
                assert compiled.scan(row, lx, frozenset([lx])) == -1
        if not allowed:
            break
        seq.append(rng.choice(sorted(allowed)))


def test_scanning_a_set_of_lexemes_unions_their_items():
    b = GrammarBuilder()
    a, c = b.lexeme("A", "a", literal=b"a"), b.lexeme("C", "c", literal=b"c")
    s, x, y = b.nonterminal("s"), b.nonterminal("x"), b.nonterminal("y")
    b.rule(s, [x]), b.rule(s, [y])
    b.rule(x, [a, a]), b.rule(y, [c, c])
    p = EarleyParser(b.build(s))
    both = p.scan(p.root, 99, frozenset([0, 1]))
    assert p.allowed_lexemes(both) == {0, 1}
    only_a = p.scan(both, 0, frozenset([0]))
    assert p.is_accepting(only_a) and p.allowed_lexemes(only_a) == frozenset()


def test_rows_grow_past_their_first_scratch_and_pool_sizes():
    # One nonterminal with 2,000 alternatives: the first row holds them all.
    b = GrammarBuilder()
    lexemes = [b.lexeme(f"K{i}", f"k{i}x", literal=f"k{i}x".encode()) for i in range(2000)]
    s = b.nonterminal("s")
    for lx in lexemes:
        b.rule(s, [lx, lx])
    p = EarleyParser(b.build(s))
    assert len(p.allowed_lexemes(p.root)) == 2000
    row = p.scan(p.root, 7, frozenset([7]))
    assert p.allowed_lexemes(row) == {7}
    assert p.is_accepting(p.scan(row, 7, frozenset([7])))


@pytest.mark.parametrize("use_jit", [True, False])
def test_a_row_meeting_many_new_nonterminals_is_built_in_two_passes(use_jit):
    # s -> x a_i b_i: scanning x leaves 400 items before b_0 ... b_399, none predicted
    # yet. Each pass used to stop at the first such nonterminal, so the row was built
    # 401 times (seconds for a JSON Schema oneOf of many objects); a pass now names them
    # all, so one round of closures serves it.
    b = GrammarBuilder()
    x = b.lexeme("X", "x", literal=b"x")
    s = b.nonterminal("s")
    n = 400
    for i in range(n):
        a = b.lexeme(f"A{i}", f"a{i};", literal=f"a{i};".encode())
        nt = b.nonterminal(f"b{i}")
        b.rule(nt, [a])
        b.rule(s, [x, nt])
    p = EarleyParser(b.build(s), use_jit=use_jit)
    calls = []
    build = p._build_fn

    def counted(*args):
        got = build(*args)
        calls.append(got[0])
        return got

    p._build = counted
    row = p.scan(p.root, 0, frozenset([0]))
    assert p.allowed_lexemes(row) == set(range(1, n + 1))
    assert calls.count(NEED_PREDICTION) == 1
    assert calls[-1] == ROW_BUILT
    assert p.is_accepting(p.scan(row, n, frozenset([n])))


def test_row_item_limit_is_a_limit_error():
    b = GrammarBuilder()
    lexemes = [b.lexeme(f"K{i}", f"k{i}x", literal=f"k{i}x".encode()) for i in range(300)]
    s = b.nonterminal("s")
    for lx in lexemes:
        b.rule(s, [lx])
    with pytest.raises(LimitExceeded, match="max_items_per_row"):
        EarleyParser(b.build(s), Limits(max_items_per_row=100))


def test_json_schema_grammars_flagged_all_productive_are(maskbench_dev):
    # The parser trusts the flag and skips its own analysis: check the flag on the
    # MaskBench development schemas (recursive $refs, contradictions pruned away).
    import json

    import numpy as np

    from midword.engine import Grammar
    from midword.engine.analysis import flatten_rules, mark_derivers_py
    from midword.engine.limits import GrammarError

    files = sorted(maskbench_dev.glob("*.json"))[:120]
    assert files, f"MaskBench development set empty at {maskbench_dev}"
    checked = 0
    for path in files:
        try:
            g = Grammar.from_json_schema(json.loads(path.read_text())["schema"])
        except (GrammarError, LimitExceeded):
            continue
        assert g.all_productive
        productive = np.zeros(len(g.nonterminals), dtype=np.bool_)
        mark_derivers_py(*flatten_rules(g.rules), True, productive)
        assert productive[g.start]
        assert all(productive[s] for r in g.rules for s in r.rhs if s >= 0), path.name
        checked += 1
    assert checked > 80


def test_parser_tables_from_the_front_ends_flat_rules_equal_its_own(maskbench_dev):
    # The JSON Schema compiler hands the parser the flat rules its pruning made; the
    # parser's tables from them must be those it makes flattening the rules itself.
    import dataclasses
    import json

    import numpy as np

    from midword.engine import Grammar
    from midword.engine.analysis import flatten_rules
    from midword.engine.limits import GrammarError

    checked = 0
    for path in sorted(maskbench_dev.glob("*.json"))[:60]:
        try:
            g = Grammar.from_json_schema(json.loads(path.read_text())["schema"])
        except (GrammarError, LimitExceeded):
            continue
        if g.flat_rules is None:
            continue
        for own, fresh in zip(g.flat_rules, flatten_rules(g.rules), strict=True):
            assert np.array_equal(own, fresh), path.name
            assert not own.flags.writeable  # shared by every matcher's parser
        given = EarleyParser(g)
        plain = EarleyParser(dataclasses.replace(g, flat_rules=None))
        for name in ("dot_symbol", "dot_lhs", "nullable", "rule_first", "rule_ptr"):
            assert np.array_equal(getattr(given, name), getattr(plain, name)), (path.name, name)
        assert given.accept_pos == plain.accept_pos
        checked += 1
    assert checked > 40


def test_step_table_rehash_keeps_every_step():
    import numpy as np

    from midword.engine.recognizer import LEXSET_BITS, STEP_EMPTY, rehash_steps_jit, rehash_steps_py, step_slot

    rng = random.Random(3)
    bits = 8
    keys = np.full(1 << bits, STEP_EMPTY, dtype=np.int64)
    vals = np.full(1 << bits, -1, dtype=np.int32)
    entries = {}
    while len(entries) < 100:
        row, lexset = rng.randrange(5000), rng.randrange(300)
        entries[(row << LEXSET_BITS) | lexset] = rng.randrange(-1, 9000)
    for key, val in entries.items():
        slot = step_slot(key >> LEXSET_BITS, key & ((1 << LEXSET_BITS) - 1), bits)
        while keys[slot] != STEP_EMPTY:
            slot = (slot + 1) & ((1 << bits) - 1)
        keys[slot], vals[slot] = key, val
    for fn in (rehash_steps_py, rehash_steps_jit):
        new_keys = np.full(1 << (bits + 1), STEP_EMPTY, dtype=np.int64)
        new_vals = np.full(1 << (bits + 1), -1, dtype=np.int32)
        assert fn(keys, vals, new_keys, new_vals, bits + 1) == len(entries)
        for key, val in entries.items():
            slot = step_slot(key >> LEXSET_BITS, key & ((1 << LEXSET_BITS) - 1), bits + 1)
            while new_keys[slot] != key:
                assert new_keys[slot] != STEP_EMPTY
                slot = (slot + 1) & ((1 << (bits + 1)) - 1)
            assert new_vals[slot] == val


def test_the_step_table_rehash_is_loaded_with_the_first_recognizer():
    # In a fresh process: the compiled rehash is loaded (or compiled) when the first
    # recognizer is made, so the mask that first grows a step table does not pause for it.
    import subprocess
    import sys

    script = """
import json
from midword.engine import Grammar
from midword.engine.recognizer import Recognizer, rehash_steps_jit
assert not rehash_steps_jit.signatures
rec = Recognizer(Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}))
loaded = list(rehash_steps_jit.signatures)
assert loaded
bits = rec.step_bits
state = rec.initial()
for k in range(400):
    state = rec.step_bytes(state, (b"[" if k == 0 else b", ") + str(k).encode())
    assert state is not None
assert rec.step_bits > bits, "the test must grow the step table"
assert list(rehash_steps_jit.signatures) == loaded
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_large_rows_are_sorted_stably_by_symbol():
    # More than 32 entries take the merge sort: a row predicting 40 nonterminals at once.
    b = GrammarBuilder()
    lexemes = [b.lexeme(f"K{i}", f"k{i}x", literal=f"k{i}x".encode()) for i in range(40)]
    s = b.nonterminal("s")
    for i, lx in enumerate(lexemes):
        nt = b.nonterminal(f"n{i}")
        b.rule(s, [nt, lx])
        b.rule(nt, [lx])
    for use_jit in (True, False):
        p = EarleyParser(b.build(s), use_jit=use_jit)
        lo, hi = int(p.row_start[p.root]), int(p.row_end[p.root])
        syms = p.adv_sym[lo:hi].tolist()
        assert hi - lo > 32 and syms == sorted(syms)
        assert p.allowed_lexemes(p.root) == set(range(40))


def _closure_by_definition(parser, nt):
    """(positions, nonterminals) that predicting `nt` adds, as sets: its rules' first
    positions, transitively through the nonterminals after each dot, and past nullable
    symbols. Rule starts are read off the flat arrays (a position after an END)."""
    dot = parser.dot_symbol.tolist()
    lhs = parser.dot_lhs.tolist()
    nullable = parser.nullable.tolist()
    end = END
    firsts: dict[int, list[int]] = {}
    for p in range(len(dot)):
        if p == 0 or dot[p - 1] == end:
            firsts.setdefault(lhs[p], []).append(p)
    positions, nts = set(), {nt}
    todo = list(firsts.get(nt, []))
    while todo:
        p = todo.pop()
        if p in positions:
            continue
        positions.add(p)
        sym = dot[p]
        if sym != end and sym >= 0:
            if sym not in nts:
                nts.add(sym)
                todo.extend(firsts.get(sym, []))
            if nullable[sym]:
                todo.append(p + 1)
    return positions, nts


@settings(max_examples=80, deadline=None)
@given(grammars())
def test_prediction_closures_compiled_equal_the_twin_and_the_definition(grammar):
    compiled = EarleyParser(grammar)
    twin = EarleyParser(grammar, use_jit=False)
    for nt in range(compiled.augmented + 1):
        for parser in (compiled, twin):
            if parser.pred_start[nt] < 0:
                parser._add_prediction(nt)
        got = [
            (
                p.pred_pool[p.pred_start[nt] : p.pred_end[nt]].tolist(),
                p.prednt_pool[p.prednt_start[nt] : p.prednt_end[nt]].tolist(),
            )
            for p in (compiled, twin)
        ]
        assert got[0] == got[1]  # the same order too: it fixes the order of row items
        positions, nts = got[0]
        assert len(set(positions)) == len(positions) and len(set(nts)) == len(nts)
        assert (set(positions), set(nts)) == _closure_by_definition(compiled, nt)


@st.composite
def rule_lists(draw):
    """Rules as (lhs, rhs) over up to 6 nonterminals and lexemes -1..-3, in any order,
    with repeated symbols and empty right sides, and nonterminals with no rule."""
    n_nt = draw(st.integers(1, 6))
    symbols = st.integers(-3, n_nt - 1)
    rules = draw(
        st.lists(st.tuples(st.integers(0, n_nt - 1), st.lists(symbols, max_size=4).map(tuple)), min_size=1, max_size=12)
    )
    return n_nt, rules


@given(rule_lists())
@settings(max_examples=300, deadline=None)
def test_rule_tables_compiled_and_plain_match_the_definitions(case):
    import numpy as np

    from midword.engine.analysis import rule_tables_jit, rule_tables_py

    n_nt, rules = case
    # Nullable by its definition: iterate "some rule's right side is all nullable
    # nonterminals" until nothing changes.
    nullable = [False] * n_nt
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if not nullable[lhs] and all(s >= 0 and nullable[s] for s in rhs):
                nullable[lhs] = changed = True
    positions, first = [], []
    for lhs, rhs in rules:
        first.append(len(positions))
        positions += [(s, lhs) for s in rhs] + [(END, lhs)]
    by_lhs = [[first[r] for r in range(len(rules)) if rules[r][0] == nt] for nt in range(n_nt)]
    for fn in (rule_tables_py, rule_tables_jit):
        lhs = np.array([r[0] for r in rules], dtype=np.int64)
        rhs_len = np.array([len(r[1]) for r in rules], dtype=np.int64)
        rhs_flat = np.array([s for r in rules for s in r[1]], dtype=np.int64)
        size = len(positions)
        out = (
            np.full(size, 7, dtype=np.int64),
            np.full(size, 7, dtype=np.int64),
            np.full(len(rules), 7, dtype=np.int64),
            np.ones(n_nt, dtype=np.bool_),
            np.full(len(rules), 7, dtype=np.int64),
            np.full(n_nt + 1, 7, dtype=np.int64),
        )
        fn(lhs, rhs_len, rhs_flat, *out)
        dot_symbol, dot_lhs, first_pos, got_nullable, rule_first, rule_ptr = out
        assert list(zip(dot_symbol.tolist(), dot_lhs.tolist(), strict=False)) == positions
        assert first_pos.tolist() == first
        assert got_nullable.tolist() == nullable
        assert [rule_first[rule_ptr[nt] : rule_ptr[nt + 1]].tolist() for nt in range(n_nt)] == by_lhs


@given(rule_lists(), st.integers(0, 5), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_grammar_marks_compiled_and_plain_match_the_definitions(case, start, n_lexemes):
    import numpy as np

    from midword.engine.analysis import flatten_rules, grammar_marks_jit, grammar_marks_py

    n_nt, rules = case
    start %= n_nt
    n_lexemes = max(n_lexemes, 3)  # rule_lists uses lexemes -1..-3
    # The definitions, iterated to a fixpoint: productive when some rule's nonterminals
    # all are; reachable from start through rules whose nonterminals are all productive.
    productive = [False] * n_nt
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if not productive[lhs] and all(s < 0 or productive[s] for s in rhs):
                productive[lhs] = changed = True
    usable = [all(s < 0 or productive[s] for s in rhs) for _, rhs in rules]
    reach = [False] * n_nt
    used = [False] * n_lexemes
    if productive[start]:
        reach[start] = changed = True
        while changed:
            changed = False
            for (lhs, rhs), ok in zip(rules, usable, strict=False):
                if ok and reach[lhs]:
                    for s in rhs:
                        if s < 0:
                            used[-1 - s] = True
                        elif not reach[s]:
                            reach[s] = changed = True
    kept = [ok and reach[lhs] for (lhs, _), ok in zip(rules, usable, strict=False)]
    for fn in (grammar_marks_py, grammar_marks_jit):
        out = (
            np.ones(n_nt, dtype=np.bool_),
            np.ones(n_nt, dtype=np.bool_),
            np.ones(n_lexemes, dtype=np.bool_),
            np.ones(len(rules), dtype=np.bool_),
        )
        assert fn(*flatten_rules(rules), start, *out) == sum(kept)
        assert [a.tolist() for a in out] == [productive, reach, used, kept]
