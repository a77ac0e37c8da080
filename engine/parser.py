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
advances over it), so completion never needs to look at the row being built. Items
predicted in a row depend only on which nonterminals are predicted, so each
nonterminal's prediction closure is computed once per grammar and added wholesale.
Non-productive rules are dropped up front so every allowed lexeme can be completed.
"""

from __future__ import annotations

import numpy as np

from .grammar import Grammar, Rule, is_lexeme
from .limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits

END = 1 << 30  # dot_symbol of a position at the end of its rule


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
        # Positions a prediction of each nonterminal adds (its rules' first positions).
        self._predicted: list[tuple[int, ...]] = [tuple(first_pos[ri] for ri in rl) for rl in self.rules_by_lhs]
        # Rows are kept only as what later rows need from them, in parallel lists (no
        # object per row, so the garbage collector has little to scan).
        # `row_advanced[r][sym]` holds the items of row r with `sym` after the dot, already
        # moved past it: completing `sym` later, or scanning it when it is a lexeme, adds
        # exactly these. The items themselves are not kept.
        self.row_advanced: list[dict[int, tuple[tuple[int, int], ...]]] = []
        self.row_allowed: list[frozenset[int]] = []  # shared: one object per distinct set
        self.row_accepting: list[bool] = []
        self.row_parent: list[int] = []
        self.row_depth: list[int] = []
        self._lexeme_sets: dict[frozenset[int], frozenset[int]] = {}
        self._predictions: dict[int, tuple[tuple[int, ...], frozenset[int]]] = {}
        self._children: dict[tuple[int, int], int] = {}
        self.steps_used = 0
        self.root = self._make_row([(first_pos[-1], 0)], parent=-1)

    # Rows -------------------------------------------------------------------------
    def _make_row(self, kernel: list[tuple[int, int]], parent: int) -> int:
        row_id = len(self.row_advanced)
        dot_symbol = self._dot_symbol
        dot_rule = self._dot_rule
        rule_lhs = self._rule_lhs
        nullable = self.nullable
        row_advanced = self.row_advanced
        max_items = self.limits.max_items_per_row
        # Items that started in this row (predictions) depend only on which nonterminals
        # are predicted: they come as precomputed closures, as bare positions. Only the
        # items that started earlier are closed over one by one.
        items: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        predicted_nts: set[int] = set()
        predicted: list[int] = []
        predicted_seen: set[int] = set()
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
                for it in row_advanced[origin].get(rule_lhs[dot_rule[pos]], ()):
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
            elif sym >= 0:
                if sym not in predicted_nts:
                    positions, nts = self._prediction(sym)
                    predicted_nts.update(nts)
                    for p in positions:
                        if p not in predicted_seen:
                            predicted_seen.add(p)
                            predicted.append(p)
                if nullable[sym]:
                    it = (pos + 1, origin)
                    if it not in seen:
                        seen.add(it)
                        items.append(it)
            if len(items) + len(predicted) > max_items:
                raise LimitExceeded("max_items_per_row", max_items, "grammar too ambiguous")
        items.extend((p, row_id) for p in predicted)
        advanced: dict[int, list[tuple[int, int]]] = {}
        allowed = set()
        accepting = False
        for pos, origin in items:
            sym = dot_symbol[pos]
            if sym == END:
                if pos == self.accept_pos and origin == 0:
                    accepting = True
                continue
            lst = advanced.get(sym)
            if lst is None:
                advanced[sym] = [(pos + 1, origin)]
            else:
                lst.append((pos + 1, origin))
            if sym < 0:
                allowed.add(~sym)
        frozen = frozenset(allowed)
        frozen = self._lexeme_sets.setdefault(frozen, frozen)
        row_advanced.append({k: tuple(v) for k, v in advanced.items()})
        self.row_allowed.append(frozen)
        self.row_accepting.append(accepting)
        self.row_parent.append(parent)
        self.row_depth.append(0 if parent < 0 else self.row_depth[parent] + 1)
        return row_id

    def _prediction(self, nt: int) -> tuple[tuple[int, ...], frozenset[int]]:
        """(positions, nonterminals) that predicting `nt` adds to a row, with the origin
        that row: its rules' first positions, transitively, and past nullable symbols."""
        hit = self._predictions.get(nt)
        if hit is not None:
            return hit
        dot_symbol, nullable = self._dot_symbol, self.nullable
        positions: list[int] = []
        seen: set[int] = set()
        nts = {nt}
        todo = [nt]
        while todo:
            stack = list(self._predicted[todo.pop()])
            while stack:
                p = stack.pop()
                if p in seen:
                    continue
                seen.add(p)
                positions.append(p)
                sym = dot_symbol[p]
                if sym != END and sym >= 0:
                    if sym not in nts:
                        nts.add(sym)
                        todo.append(sym)
                    if nullable[sym]:
                        stack.append(p + 1)
        hit = (tuple(positions), frozenset(nts))
        self._predictions[nt] = hit
        return hit

    def scan(self, row_id: int, lexset_id: int, lexemes: frozenset[int]) -> int:
        """The row after scanning any of `lexemes` in row `row_id`, or -1 if none is expected."""
        key = (row_id, lexset_id)
        child = self._children.get(key)
        if child is not None:
            return child
        self.steps_used += 1
        if self.steps_used > self.limits.parser_fuel:
            raise LimitExceeded("parser_fuel", self.limits.parser_fuel, "too many Earley rows built")
        advanced = self.row_advanced[row_id]
        kernel = []
        for lx in lexemes:
            kernel.extend(advanced.get(~lx, ()))
        child = self._make_row(kernel, row_id) if kernel else -1
        self._children[key] = child
        return child

    def allowed_lexemes(self, row_id: int) -> frozenset[int]:
        return self.row_allowed[row_id]

    def is_accepting(self, row_id: int) -> bool:
        return self.row_accepting[row_id]

    def expected_names(self, row_id: int) -> list[str]:
        return sorted(self.grammar.lexemes[i].name for i in self.row_allowed[row_id])


def _productive(g: Grammar) -> list[bool]:
    return _fixpoint(g.rules, len(g.nonterminals), lexemes_count=True)


def _nullable(rules, n: int) -> list[bool]:
    return _fixpoint(rules, n, lexemes_count=False)


def _fixpoint(rules, n: int, lexemes_count: bool) -> list[bool]:
    """Marks each nonterminal with a rule whose right side is all marked: productive
    (lexemes count as marked) or nullable (lexemes never do). A worklist: every rule
    is looked at a bounded number of times, whatever order the rules come in."""
    marked = [False] * n
    waiting: dict[int, list[int]] = {}  # nonterminal -> rules it blocks
    missing = []
    work = []
    for i, (lhs, rhs) in enumerate(rules):
        blockers = set()
        dead = False
        for s in rhs:
            if s < 0:
                if not lexemes_count:
                    dead = True
                    break
            else:
                blockers.add(s)
        if dead:
            missing.append(-1)
            continue
        missing.append(len(blockers))
        for s in blockers:
            waiting.setdefault(s, []).append(i)
        if not blockers:
            work.append(lhs)
    while work:
        nt = work.pop()
        if marked[nt]:
            continue
        marked[nt] = True
        for i in waiting.get(nt, ()):
            missing[i] -= 1
            if missing[i] == 0:
                work.append(rules[i][0])
    return marked


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
