"""The lexer: sets of lexeme derivatives, with every transition cached in a flat table.

A lexer state is the set `{(lexeme i, regex R_i)}` of lexemes still possible after the
bytes read since the lexeme began, where `R_i` is the derivative of lexeme i's regex
by those bytes (seeds/what_makes_it_fast.md, "Lexer construction"). States are
hash-consed to ints and transitions live in `table[state, byte]`, so walking the
token trie is almost always one array lookup; the derivative engine runs only on a
miss (-1 in the table). A state's first miss computes one byte class; a second fills
the state's whole row (such states are met from many trie nodes), which halves the
derivatives computed against filling every row and keeps returns from the compiled
walk few. Bytes no live regex can start with go to DEAD on the first miss already (no
derivative needed), so a state whose other bytes are all dead, like the middle of a
literal, never misses twice. Regexes live in the process-wide `ExprSet.shared()`, so
lexemes that grammars have in common (strings, numbers, formats) are parsed and derived
once.

Lexing is greedy with one byte of lookahead: a lexeme ends when the next byte cannot
extend any live lexeme and the current state accepts. Which lexemes may start is up
to the parser: `initial_state(allowed)` builds the start state from the lexemes the
current Earley row allows, plus the `%ignore` pseudo-lexeme (whitespace between
lexemes), which the parser never sees.
"""

from __future__ import annotations

import numpy as np

from .grammar import Grammar
from .limits import DEFAULT_LIMITS, LimitExceeded, Limits
from .regex import ExprSet, refine_byte_sets

DEAD = 0  # the empty state: no lexeme can continue
UNKNOWN = -1  # table entry not computed yet
NO_ACCEPT = -1  # lex_accept: the state accepts no lexeme
IGNORE_ONLY = -2  # lex_accept: only the %ignore pseudo-lexeme accepts here

_ALL_BYTES = (1 << 256) - 1
# Index arrays of the bytes in a byte set, by set (the bytes no live regex starts with,
# a byte-headed row's blocks): few distinct sets recur across states and lexers.
_member_arrays: dict[int, np.ndarray] = {}
_MAX_MEMBER_ARRAYS = 10_000


def _members(byte_set: int) -> np.ndarray:
    """The bytes in a bitmask, as an index array (shared: few distinct sets recur)."""
    got = _member_arrays.get(byte_set)
    if got is None:
        bits = np.frombuffer(byte_set.to_bytes(32, "little"), dtype=np.uint8)
        got = np.flatnonzero(np.unpackbits(bits, bitorder="little"))
        got.flags.writeable = False  # shared by every lexer
        if len(_member_arrays) < _MAX_MEMBER_ARRAYS:
            _member_arrays[byte_set] = got
    return got


class Lexer:
    def __init__(self, grammar: Grammar, exprs: ExprSet | None = None, limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        self.exprs = exprs if exprs is not None else ExprSet.shared(limits)
        self.num_lexemes = len(grammar.lexemes)
        self.lexeme_names = [lx.name for lx in grammar.lexemes]
        self.lexeme_expr: list[int] = []
        from .limits import GrammarError

        for lx in grammar.lexemes:
            try:
                if lx.literal is not None:
                    e = self.exprs.literal(lx.literal)
                else:
                    flags = lx.flags.replace("E", "")
                    e = self.exprs.parse(lx.regex, flags, extended="E" in lx.flags)
            except GrammarError as err:
                raise GrammarError(f"in lexeme {lx.name}: {err}") from None
            self.lexeme_expr.append(e)
        # The %ignore pseudo-lexeme has index num_lexemes.
        self.ignore_index = self.num_lexemes
        if grammar.ignore:
            parts = [self.exprs.parse(rx) for rx in grammar.ignore]
            self.ignore_expr = self.exprs.alt(*parts)
        else:
            self.ignore_expr = ExprSet.NOTHING
        self.has_ignore = self.ignore_expr != ExprSet.NOTHING and not self.exprs.is_empty(self.ignore_expr)
        # Start states carry this marker (dropped by the first byte), so "no byte of the
        # lexeme read yet" is never confused with a state that derivatives lead back to.
        self.start_marker = self.num_lexemes + 1

        self._state_index: dict[tuple[tuple[int, int], ...], int] = {}
        self.states: list[tuple[tuple[int, int], ...]] = []
        self.table = np.full((64, 256), UNKNOWN, dtype=np.int32)
        self.accept = np.full(64, NO_ACCEPT, dtype=np.int32)
        # Lexeme sets (the accepted lexemes of a state) hash-consed to ids for the parser.
        self._lexset_index: dict[frozenset[int], int] = {}
        self.lexsets: list[frozenset[int]] = []
        self._initial_cache: dict[tuple[frozenset[int], bool], int] = {}
        self.fuel_used = 0
        self._classes: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}
        self._live: dict[int, tuple[tuple[tuple[int, int, int], ...], int]] = {}
        self._missed: set[int] = set()
        self._dead: dict[int, np.ndarray] = {}
        self._intern(())  # DEAD == 0
        self.table[DEAD, :] = DEAD

    # States ---------------------------------------------------------------------
    def _intern(self, pairs: tuple[tuple[int, int], ...]) -> int:
        sid = self._state_index.get(pairs)
        if sid is not None:
            return sid
        sid = len(self.states)
        if sid >= self.limits.max_lexer_states:
            raise LimitExceeded("max_lexer_states", self.limits.max_lexer_states, "lexer DFA grew too large")
        self.states.append(pairs)
        self._state_index[pairs] = sid
        if sid >= self.table.shape[0]:
            grow = self.table.shape[0]
            self.table = np.concatenate([self.table, np.full((grow, 256), UNKNOWN, dtype=np.int32)])
            self.accept = np.concatenate([self.accept, np.full(grow, NO_ACCEPT, dtype=np.int32)])
        real = frozenset(i for i, e in pairs if i < self.num_lexemes and self.exprs.nullable(e))
        if real:
            self.accept[sid] = self.lexset_id(real)
        elif any(i == self.ignore_index and self.exprs.nullable(e) for i, e in pairs):
            self.accept[sid] = IGNORE_ONLY
        return sid

    def lexset_id(self, lexemes: frozenset[int]) -> int:
        lid = self._lexset_index.get(lexemes)
        if lid is None:
            lid = len(self.lexsets)
            self.lexsets.append(lexemes)
            self._lexset_index[lexemes] = lid
        return lid

    def initial_state(self, allowed: frozenset[int], with_ignore: bool = True) -> int:
        """The state at the start of a lexeme when the parser allows `allowed`."""
        sid = self._initial_cache.get((allowed, with_ignore))
        if sid is None:
            pairs = [(i, self.lexeme_expr[i]) for i in sorted(allowed) if not self.exprs.is_empty(self.lexeme_expr[i])]
            if self.has_ignore and with_ignore:
                pairs.append((self.ignore_index, self.ignore_expr))
            pairs.append((self.start_marker, ExprSet.EPSILON))
            sid = self._intern(tuple(pairs))
            self._initial_cache[(allowed, with_ignore)] = sid
        return sid

    def step(self, state: int, byte: int) -> int:
        """table[state, byte], computing it with derivatives on a miss (for the byte's
        whole class: bytes no live regex tells apart share the transition)."""
        t = int(self.table[state, byte])
        if t != UNKNOWN:
            return t
        if state in self._missed:
            # A second miss: the state is met with several bytes (in a trie walk, from
            # many nodes), so fill the row at once and spare the walk more returns.
            self.fill_row(state)
            return int(self.table[state, byte])
        # A first miss computes just this byte's class: most states are only ever
        # met with one (the middle of a keyword).
        self._missed.add(state)
        if self._fill_byte_headed(state):
            return int(self.table[state, byte])
        classes, reps = self._byte_classes(state)
        c = classes[byte]
        t = self._transition(state, reps[c])
        row = self.table[state]
        row[classes == c] = t
        # Bytes no live regex can start with lead to DEAD without a derivative. The walk
        # tries them all the time (sibling tokens), and each would be a second miss:
        # a return from the compiled walk and a whole row of derivatives.
        dead = self._dead.get(state)
        if dead is not None:
            row[dead] = DEAD
        return t

    def _fill_byte_headed(self, state: int) -> bool:
        """Fills the row of a state whose live regexes all begin with a byte set (inside
        literals, keys and keywords: a third of the states a walk meets), where a byte
        leads to the tails of the regexes whose set holds it. That needs neither
        derivatives nor byte classes, and the whole row costs about what one class costs
        the general way, so such a state never misses twice. False, with nothing
        changed, for other states."""
        byte_head = self.exprs.byte_head
        heads = []
        for i, e in self.states[state]:
            if i != self.start_marker:
                head = byte_head(e)
                if head is None:
                    return False
                heads.append((i, head[0], head[1]))
        is_empty = self.exprs.is_empty
        if len(heads) == 1:
            i, byte_set, tail = heads[0]
            parts = [(byte_set, ((i, tail),))]
        else:
            # Bytes that the same byte sets hold lead to the same target.
            blocks = refine_byte_sets(byte_set for _, byte_set, _ in heads)
            parts = [(block, tuple((i, tail) for i, byte_set, tail in heads if byte_set & block)) for block in blocks]
        targets = []
        for block, pairs in parts:
            # Same pairs, in the same order, as `_transition` would build.
            pairs = tuple(p for p in pairs if not is_empty(p[1]))
            if pairs:
                self.fuel_used += 1
                if self.fuel_used > self.limits.lexer_fuel:
                    raise LimitExceeded("lexer_fuel", self.limits.lexer_fuel, "too many derivative computations")
                sid = self._state_index.get(pairs)
                targets.append((block, sid if sid is not None else self._intern(pairs)))
        # Interning may have grown (reallocated) the table: index it afresh.
        row = self.table[state]
        row[:] = DEAD
        for block, target in targets:
            row[_members(block)] = target
        return True

    def fill_row(self, state: int) -> None:
        """Computes every missing transition of `state`, one derivative per byte class."""
        classes, reps = self._byte_classes(state)
        known = self.table[state, list(reps)].tolist()
        targets = [t if t != UNKNOWN else self._transition(state, rep) for t, rep in zip(known, reps)]
        # _transition may have grown (reallocated) the table: index it afresh.
        self.table[state] = np.array(targets, dtype=np.int32)[classes]

    def _live_of(self, state: int) -> tuple[tuple[tuple[int, int, int], ...], int]:
        """(live (lexeme, expr, first-byte mask) triples, union of the masks)."""
        got = self._live.get(state)
        if got is None:
            first_bytes = self.exprs.first_bytes
            # States often hold dozens of lexemes (every key of an object) of which a
            # byte keeps a few: first-byte masks skip the others without a derivative.
            live = tuple((i, e, first_bytes(e)) for i, e in self.states[state] if i != self.start_marker)
            starts = 0
            for _, _, first in live:
                starts |= first
            got = (live, starts)
            self._live[state] = got
            if starts != _ALL_BYTES:
                self._dead[state] = _members(_ALL_BYTES ^ starts)
        return got

    def _transition(self, state: int, byte: int) -> int:
        self.fuel_used += 1
        if self.fuel_used > self.limits.lexer_fuel:
            raise LimitExceeded("lexer_fuel", self.limits.lexer_fuel, "too many derivative computations")
        live = self._live.get(state)
        live = live[0] if live is not None else self._live_of(state)[0]
        live_derivative = self.exprs.live_derivative
        pairs = []
        for i, e, first in live:
            if (first >> byte) & 1:
                d = live_derivative(e, byte)
                if d != ExprSet.NOTHING:
                    pairs.append((i, d))
        key = tuple(pairs)
        sid = self._state_index.get(key)
        return sid if sid is not None else self._intern(key)

    def _byte_classes(self, state: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """(class id per byte, smallest byte per class): bytes no live regex of the
        state tells apart share their transition."""
        cached = self._classes.get(state)
        if cached is not None:
            return cached
        maps = frozenset(self.exprs.byte_classes(e) for i, e in self.states[state] if i != self.start_marker)
        combined = self.exprs.combined_classes(maps)
        self._classes[state] = combined
        return combined

    # Introspection ----------------------------------------------------------------
    def accepted(self, state: int) -> int:
        return int(self.accept[state])

    def possible_lexemes(self, state: int) -> list[int]:
        return [i for i, _ in self.states[state] if i < self.num_lexemes]

    def can_extend(self, state: int) -> bool:
        """Whether some byte keeps the state alive (computed with derivatives, no table fill)."""
        return any(self.exprs.next_bytes(e).any() for i, e in self.states[state] if i != self.start_marker)

    def describe_state(self, state: int) -> str:
        names = [self.lexeme_names[i] if i < self.num_lexemes else "%ignore" for i, _ in self.states[state] if i != self.start_marker]
        return "{" + ", ".join(names) + "}"
