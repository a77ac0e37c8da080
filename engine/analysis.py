"""Rule analysis: what the grammar's rules derive, computed over flat arrays.

The parser's rule tables (dot positions, each nonterminal's rules, nullable
nonterminals) and the marks a front end prunes with (productive nonterminals,
reachable symbols) are properties of the rules alone, as lark keeps them in
`grammar_analysis` apart from its parsers. Here they sit below both the parser and
the JSON Schema compiler, which prunes its own rules before the parser sees them.
Each analysis is a compiled function over `flatten_rules`' arrays with a plain-Python
twin (`*_py`) that tests compare.
"""

from __future__ import annotations

from itertools import chain, compress
from typing import TYPE_CHECKING

import numpy as np

from ._jit import compiled_once, njit, njit_calling
from .limits import GrammarError

if TYPE_CHECKING:
    from .grammar import Grammar

END = 1 << 30  # dot_symbol of a position at the end of its rule


def mark_derivers_py(lhs, rhs_len, rhs_flat, lexemes_count, marked):
    """Marks each nonterminal with a rule whose right side is all marked nonterminals
    and, where `lexemes_count`, lexemes (productive: derives a finite string); else a
    rule with a lexeme never counts (nullable: derives the empty string). A worklist over
    the occurrences of each nonterminal on right sides, so every rule is looked at a
    bounded number of times whatever order the rules come in. Returns per rule the
    occurrences of nonterminals in it not marked (0: all are; -1: it has a lexeme that
    does not count)."""
    n_rules = lhs.shape[0]
    n_nt = marked.shape[0]
    missing = np.zeros(n_rules, dtype=np.int64)
    occ_ptr = np.zeros(n_nt + 1, dtype=np.int64)
    sym_at = 0
    for r in range(n_rules):
        blocked = False
        for _ in range(rhs_len[r]):
            s = rhs_flat[sym_at]
            sym_at += 1
            if s >= 0:
                missing[r] += 1
                occ_ptr[s + 1] += 1
            elif not lexemes_count:
                blocked = True
        if blocked:
            missing[r] = -1
    for nt in range(n_nt):
        occ_ptr[nt + 1] += occ_ptr[nt]
    occ_rule = np.zeros(occ_ptr[n_nt], dtype=np.int64)
    filled_at = occ_ptr[:n_nt].copy()
    sym_at = 0
    for r in range(n_rules):
        for _ in range(rhs_len[r]):
            s = rhs_flat[sym_at]
            sym_at += 1
            if s >= 0:
                occ_rule[filled_at[s]] = r
                filled_at[s] += 1
    work = np.zeros(n_rules, dtype=np.int64)  # each rule pushes its left side at most once
    n_work = 0
    marked[:] = False
    for r in range(n_rules):
        if missing[r] == 0:
            work[n_work] = lhs[r]
            n_work += 1
    while n_work > 0:
        n_work -= 1
        nt = work[n_work]
        if marked[nt]:
            continue
        marked[nt] = True
        for k in range(occ_ptr[nt], occ_ptr[nt + 1]):
            r = occ_rule[k]
            if missing[r] > 0:
                missing[r] -= 1
                if missing[r] == 0:
                    work[n_work] = lhs[r]
                    n_work += 1
    return missing


mark_derivers = mark_derivers_py
mark_derivers_jit = njit(mark_derivers_py)


def rule_tables_py(lhs, rhs_len, rhs_flat, dot_symbol, dot_lhs, first_pos, nullable, rule_first, rule_ptr):
    """Fills the parser's rule tables from rules given flat: rule r is `lhs[r] ->` the
    next `rhs_len[r]` symbols of `rhs_flat`. dot_symbol/dot_lhs get one position per
    symbol plus one (END) per rule, first_pos each rule's first position, nullable each
    nonterminal that derives the empty string, and rule_first[rule_ptr[nt]:rule_ptr[nt +
    1]] the first positions of nt's rules in rule order. One pass each, so a new
    grammar's tables cost a few microseconds instead of a Python loop per rule."""
    n_rules = lhs.shape[0]
    n_nt = nullable.shape[0]
    at = 0
    sym_at = 0
    for r in range(n_rules):
        first_pos[r] = at
        for _ in range(rhs_len[r]):
            dot_symbol[at] = rhs_flat[sym_at]
            dot_lhs[at] = lhs[r]
            at += 1
            sym_at += 1
        dot_symbol[at] = END
        dot_lhs[at] = lhs[r]
        at += 1
    # Rules by left side, stable (a counting sort).
    rule_ptr[:] = 0
    for r in range(n_rules):
        rule_ptr[lhs[r] + 1] += 1
    for nt in range(n_nt):
        rule_ptr[nt + 1] += rule_ptr[nt]
    placed = rule_ptr[:n_nt].copy()
    for r in range(n_rules):
        rule_first[placed[lhs[r]]] = first_pos[r]
        placed[lhs[r]] += 1
    # Nullable: derives the empty string, which no rule with a lexeme does.
    # np.bool_: a literal True or False would compile a version of the kernel of its own.
    mark_derivers(lhs, rhs_len, rhs_flat, np.bool_(False), nullable)


rule_tables_jit = njit_calling(rule_tables_py, mark_derivers=mark_derivers_jit)


def flatten_rules(rules, extra=()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`rules` and then `extra` ((lhs, rhs) pairs) as the arrays the compiled analyses
    read: left sides, right-side lengths, and the right sides end to end (int64)."""
    lhs_of, rhs_of = zip(*rules, *extra, strict=False) if rules or extra else ((), ())
    n_rules = len(lhs_of)
    lengths = list(map(len, rhs_of))
    lhs = np.fromiter(lhs_of, dtype=np.int64, count=n_rules)
    rhs_len = np.fromiter(lengths, dtype=np.int64, count=n_rules)
    rhs_flat = np.fromiter(chain.from_iterable(rhs_of), dtype=np.int64, count=sum(lengths))
    return lhs, rhs_len, rhs_flat


def grammar_marks_py(lhs, rhs_len, rhs_flat, start, productive, reach, lexeme_used, kept):
    """What pruning a grammar keeps, for rules given flat (see rule_tables_py):
    productive[nt], a nonterminal that derives some finite string; reach[nt] and
    lexeme_used[j], the symbols met from `start` through rules whose nonterminals are
    all productive; kept[r], such a rule with a reachable left side. Returns the number
    of rules kept. Worklists, so every rule is looked at a bounded number of times
    whatever order the rules come in."""
    n_rules = lhs.shape[0]
    n_nt = productive.shape[0]
    # Productive: as nullable in rule_tables_py, with lexemes counting as productive.
    missing = mark_derivers(lhs, rhs_len, rhs_flat, np.bool_(True), productive)
    work = np.zeros(n_nt, dtype=np.int64)  # each nonterminal is reached once
    # Reachable through the rules left (all nonterminals productive), by left side.
    first_sym = np.zeros(n_rules + 1, dtype=np.int64)
    by_ptr = np.zeros(n_nt + 1, dtype=np.int64)
    for r in range(n_rules):
        first_sym[r + 1] = first_sym[r] + rhs_len[r]
        if missing[r] == 0:
            by_ptr[lhs[r] + 1] += 1
    for nt in range(n_nt):
        by_ptr[nt + 1] += by_ptr[nt]
    by_rule = np.zeros(by_ptr[n_nt], dtype=np.int64)
    filled_at = by_ptr[:n_nt].copy()
    for r in range(n_rules):
        if missing[r] == 0:
            by_rule[filled_at[lhs[r]]] = r
            filled_at[lhs[r]] += 1
    reach[:] = False
    lexeme_used[:] = False
    if productive[start]:
        reach[start] = True
        work[0] = start
        n_work = 1
        while n_work > 0:
            n_work -= 1
            nt = work[n_work]
            for k in range(by_ptr[nt], by_ptr[nt + 1]):
                r = by_rule[k]
                for at in range(first_sym[r], first_sym[r + 1]):
                    s = rhs_flat[at]
                    if s < 0:
                        lexeme_used[-1 - s] = True
                    elif not reach[s]:
                        reach[s] = True
                        work[n_work] = s
                        n_work += 1
    n_kept = 0
    for r in range(n_rules):
        kept[r] = missing[r] == 0 and reach[lhs[r]]
        if kept[r]:
            n_kept += 1
    return n_kept


grammar_marks_jit = njit_calling(grammar_marks_py, mark_derivers=mark_derivers_jit)


def productive_rules(grammar: Grammar, use_jit: bool = True) -> list:
    """`grammar.rules` without those naming a nonterminal that derives no finite string
    (so every lexeme the parser allows can be completed); GrammarError when that is the
    start symbol."""
    productive = np.empty(len(grammar.nonterminals), dtype=np.bool_)
    args = (*flatten_rules(grammar.rules), True, productive)
    missing = compiled_once(mark_derivers_jit if use_jit else mark_derivers_py, args)(*args)
    if not productive[grammar.start]:
        raise GrammarError(
            f"start symbol {grammar.nonterminals[grammar.start]!r} derives no finite string "
            "(every alternative recurses forever)"
        )
    # A rule is kept when all its nonterminals are productive.
    return list(compress(grammar.rules, (missing == 0).tolist()))
