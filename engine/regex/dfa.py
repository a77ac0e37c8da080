"""A lazily built DFA over one expression's derivatives."""

from __future__ import annotations

import numpy as np

from ..limits import LimitExceeded
from .exprset import ExprSet


class LazyDFA:
    """DFA of one regex built lazily: table[state, byte] -> state; -1 = not yet
    computed; state 0 is dead (the empty language).

    `table` and `accepting` are reallocated when they grow: re-read the attributes
    after a `step` rather than keeping references across it.
    """

    def __init__(self, exprs: ExprSet, root: int):
        self.exprs = exprs
        self.root = root
        self._exprs: list[int] = [0]
        self._state_of: dict[int, int] = {0: 0}
        cap = 16
        self.table = np.full((cap, 256), -1, dtype=np.int32)
        self.table[0] = 0
        self.accepting = np.zeros(cap, dtype=bool)
        self._class_arrays: dict[bytes, np.ndarray] = {}
        self.initial = self._state(root)

    @property
    def n_states(self) -> int:
        return len(self._exprs)

    def state_expr(self, state: int) -> int:
        return self._exprs[state]

    def _state(self, expr: int) -> int:
        s = self._state_of.get(expr)
        if s is not None:
            return s
        es = self.exprs
        if es._has_bool[expr] and es.is_empty(expr):
            # Semantically empty: share the dead state so walks stop early.
            self._state_of[expr] = 0
            return 0
        s = len(self._exprs)
        limit = es.limits.max_lexer_states
        if s >= limit:
            raise LimitExceeded("max_lexer_states", limit, f"DFA of {es.to_str(self.root, 200)}")
        cap = self.table.shape[0]
        if s >= cap:
            table = np.full((cap * 2, 256), -1, dtype=np.int32)
            table[:cap] = self.table
            self.table = table
            accepting = np.zeros(cap * 2, dtype=bool)
            accepting[:cap] = self.accepting
            self.accepting = accepting
        self._exprs.append(expr)
        self._state_of[expr] = s
        self.accepting[s] = es._nullable[expr]
        return s

    def step(self, state: int, byte: int) -> int:
        t = int(self.table[state, byte])
        if t >= 0:
            return t
        es = self.exprs
        expr = self._exprs[state]
        t = self._state(es.derivative(expr, byte))
        # Every byte of the class has the same derivative: fill them all at once.
        cm = es.byte_classes(expr)
        arr = self._class_arrays.get(cm)
        if arr is None:
            arr = np.frombuffer(cm, dtype=np.uint8)
            self._class_arrays[cm] = arr
        self.table[state, arr == cm[byte]] = t
        return t

    def matches(self, data: bytes) -> bool:
        s = self.initial
        table = self.table
        for b in data:
            t = table[s, b]
            if t < 0:
                t = self.step(s, b)
                table = self.table
            if t == 0:
                return False
            s = t
        return bool(self.accepting[s])
