"""The Earley parser over lexemes, with rows hash-consed into a tree.

Rules are flattened into arrays of dot positions: position `p` is "rule r with the dot
before its k-th symbol", `dot_symbol[p]` is that symbol (or END), and advancing an item
is `p + 1`. An Earley item is `(p, origin)`, where `origin` is the id of the row the
rule started in.

A row is the item set after scanning one more lexeme. Rows are identified by where
they came from: scanning lexeme set L from row r always gives the same row, so
`scan(r, L)` is computed once and cached as the child `(r, L)` (this generalises the
seed's row-reuse trick: when the trie walk backs up and scans the same lexeme again,
the row is already there). A parse state is therefore just a row id; rolling back is
going back to an ancestor id.

Nullable nonterminals use the Aycock–Horspool rule (predicting a nullable symbol also
advances over it), so completion never needs to look at the row being built.
Non-productive rules are dropped up front so every allowed lexeme can be completed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .grammar import Grammar, Rule, is_lexeme
from .limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits

END = 1 << 30  # dot_symbol of a position at the end of its rule


@dataclass
class Row:
    items: list[tuple[int, int]]
    # symbol after the dot -> indices into items (only for symbols that can be scanned or completed)
    by_symbol: dict[int, list[int]]
    allowed_lexemes: frozenset[int]
    accepting: bool
    parent: int
    depth: int


class EarleyParser:
    def __init__(self, grammar: Grammar, limits: Limits = DEFAULT_LIMITS):
        self.grammar = grammar
        self.limits = limits
        n_nt = len(grammar.nonterminals)
        if grammar.size() > limits.max_grammar_size:
            raise LimitExceeded("max_grammar_size", limits.max_grammar_size, f"grammar has size {grammar.size()}")
        productive = _productive(grammar)
        if not productive[grammar.start]:
            raise GrammarError(
                f"start symbol {grammar.nonterminals[grammar.start]!r} derives no finite string "
                "(every alternative recurses forever)"
            )
        rules = [r for r in grammar.rules if all(is_lexeme(s) or productive[s] for s in r.rhs)]
        # Augmented start: the accepting item is (start' -> start ., origin root).
        self.augmented = n_nt
        rules.append(Rule(self.augmented, (grammar.start,)))
        self.rule_lhs = np.array([r.lhs for r in rules], dtype=np.int32)
        first_pos = []
        dot_symbol: list[int] = []
        dot_rule: list[int] = []
        for ri, r in enumerate(rules):
            first_pos.append(len(dot_symbol))
            for s in r.rhs:
                dot_symbol.append(s)
                dot_rule.append(ri)
            dot_symbol.append(END)
            dot_rule.append(ri)
        self.rule_first_pos = np.array(first_pos, dtype=np.int32)
        self.dot_symbol = np.array(dot_symbol, dtype=np.int64)
        self.dot_rule = np.array(dot_rule, dtype=np.int32)
        self.rules_by_lhs: list[list[int]] = [[] for _ in range(n_nt + 1)]
        for ri, r in enumerate(rules):
            self.rules_by_lhs[r.lhs].append(ri)
        self.nullable = _nullable(rules, n_nt + 1)
        self._dot_symbol = dot_symbol  # plain list: faster to index from Python
        self._dot_rule = dot_rule
        self._rule_lhs = self.rule_lhs.tolist()
        self._rule_first_pos = first_pos
        self.accept_pos = first_pos[-1] + 1
        self.rows: list[Row] = []
        self._children: dict[tuple[int, int], int] = {}
        self.steps_used = 0
        self.root = self._make_row([(first_pos[-1], 0)], parent=-1)

    # Rows -------------------------------------------------------------------------
    def _make_row(self, kernel: list[tuple[int, int]], parent: int) -> int:
        row_id = len(self.rows)
        dot_symbol = self._dot_symbol
        dot_rule = self._dot_rule
        rule_lhs = self._rule_lhs
        first_pos = self._rule_first_pos
        rules_by_lhs = self.rules_by_lhs
        nullable = self.nullable
        rows = self.rows
        max_items = self.limits.max_items_per_row
        items: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        for it in kernel:
            if it not in seen:
                seen.add(it)
                items.append(it)
        j = 0
        while j < len(items):
            pos, origin = items[j]
            j += 1
            sym = dot_symbol[pos]
            if sym == END:
                if origin == row_id:
                    continue  # an empty derivation: Aycock-Horspool advanced over it at prediction
                lhs = rule_lhs[dot_rule[pos]]
                orow = rows[origin]
                for k in orow.by_symbol.get(lhs, ()):
                    p2, o2 = orow.items[k]
                    it = (p2 + 1, o2)
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
            elif sym >= 0:
                for ri in rules_by_lhs[sym]:
                    it = (first_pos[ri], row_id)
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
                if nullable[sym]:
                    it = (pos + 1, origin)
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
            if len(items) > max_items:
                raise LimitExceeded("max_items_per_row", max_items, "grammar too ambiguous")
        by_symbol: dict[int, list[int]] = {}
        allowed = set()
        accepting = False
        for k, (pos, origin) in enumerate(items):
            sym = dot_symbol[pos]
            if sym == END:
                if pos == self.accept_pos and origin == 0:
                    accepting = True
                continue
            by_symbol.setdefault(sym, []).append(k)
            if sym < 0:
                allowed.add(~sym)
        depth = 0 if parent < 0 else rows[parent].depth + 1
        rows.append(Row(items, by_symbol, frozenset(allowed), accepting, parent, depth))
        return row_id

    def scan(self, row_id: int, lexset_id: int, lexemes: frozenset[int]) -> int:
        """The row after scanning any of `lexemes` in row `row_id`, or -1 if none is expected."""
        key = (row_id, lexset_id)
        child = self._children.get(key)
        if child is not None:
            return child
        self.steps_used += 1
        if self.steps_used > self.limits.parser_fuel:
            raise LimitExceeded("parser_fuel", self.limits.parser_fuel, "too many Earley rows built")
        row = self.rows[row_id]
        kernel = []
        for lx in lexemes:
            for k in row.by_symbol.get(~lx, ()):
                pos, origin = row.items[k]
                kernel.append((pos + 1, origin))
        child = self._make_row(kernel, row_id) if kernel else -1
        self._children[key] = child
        return child

    def allowed_lexemes(self, row_id: int) -> frozenset[int]:
        return self.rows[row_id].allowed_lexemes

    def is_accepting(self, row_id: int) -> bool:
        return self.rows[row_id].accepting

    def expected_names(self, row_id: int) -> list[str]:
        return sorted(self.grammar.lexemes[i].name for i in self.rows[row_id].allowed_lexemes)


def _productive(g: Grammar) -> list[bool]:
    productive = [False] * len(g.nonterminals)
    changed = True
    while changed:
        changed = False
        for r in g.rules:
            if not productive[r.lhs] and all(is_lexeme(s) or productive[s] for s in r.rhs):
                productive[r.lhs] = True
                changed = True
    return productive


def _nullable(rules, n: int) -> list[bool]:
    nullable = [False] * n
    changed = True
    while changed:
        changed = False
        for r in rules:
            if not nullable[r.lhs] and all(not is_lexeme(s) and nullable[s] for s in r.rhs):
                nullable[r.lhs] = True
                changed = True
    return nullable


def grammar_accepts(grammar: Grammar, data: bytes) -> bool:
    """Whether `data` is a complete sentence of `grammar` (lexer + parser, no tokenizer)."""
    from .recognizer import Recognizer

    rec = Recognizer.for_grammar(grammar)
    state = rec.initial()
    for b in data:
        state = rec.step(state, b)
        if state is None:
            return False
    return rec.is_accepting(state)
