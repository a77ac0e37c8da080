"""Bounds on work the engine may do for one grammar or one input.

Adversarial grammars and inputs can make a derivative lexer or an Earley parser
do unbounded work (exploding DFA, ambiguous grammars with huge rows). Every such
loop checks one of these limits and raises `LimitExceeded`, naming the limit, so a
caller gets a clear error instead of a hang.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator


class GrammarError(ValueError):
    """A grammar (Lark text, regex, JSON Schema) that cannot be compiled.

    The message names the place: a line and column, a regex offset or a JSON pointer.
    Errors in grammar text also carry that place as `line` and `column` (1-based).
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column


class LimitExceeded(RuntimeError):
    """Work on a grammar or input went past one of the `Limits`."""

    # The JSON pointer of the subschema being compiled, set by the schema compiler.
    schema_path: str | None = None

    def __init__(self, limit: str, value: float, detail: str = ""):
        self.limit = limit
        self.value = value
        msg = f"limit {limit}={value} exceeded"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class GrammarLimitExceeded(GrammarError, LimitExceeded):
    """Compiling a grammar went past one of the `Limits`: the grammar is refused (a
    GrammarError) and the message names the limit (a LimitExceeded) and the place."""

    def __init__(self, limit: str, value: float, detail: str = ""):
        LimitExceeded.__init__(self, limit, value, detail)


@dataclass(frozen=True)
class Limits:
    # Derivative steps spent computing one mask (lexer table misses).
    lexer_fuel: int = 2_000_000
    # Distinct lexer states (sets of lexeme derivatives) per grammar.
    max_lexer_states: int = 200_000
    # Distinct regex expressions hash-consed for one grammar.
    max_regex_nodes: int = 2_000_000
    # Earley items in a single row.
    max_items_per_row: int = 50_000
    # Total rules + symbols in a grammar after desugaring.
    max_grammar_size: int = 500_000
    # Parser steps (rows) spent computing one mask.
    parser_fuel: int = 1_000_000
    # JSON Schema: subschema (and enum/const value) nesting followed.
    max_schema_depth: int = 200
    # JSON Schema: alternatives of one union after anyOf/allOf expansion.
    max_union_parts: int = 20_000
    # JSON Schema: nonterminals made for intersections of $refs.
    max_synthetic_refs: int = 20_000
    # JSON Schema: states of one object's member machine (listed keys x counts).
    max_object_states: int = 20_000
    # JSON Schema: patternProperties of different value schemas on one object.
    max_pattern_groups: int = 16
    # JSON Schema: classes of an object's extra keys by the patterns they match at once
    # (sets of pairwise overlapping patterns), each a key lexeme of its own.
    max_key_classes: int = 64
    # JSON Schema: `contains` constraints combined on one array.
    max_contains: int = 3
    # JSON Schema: values an array's elements may take where uniqueItems is enforced
    # (its grammar has a state per set of values used so far).
    max_unique_values: int = 10
    # JSON Schema: states explored deciding at compile time whether a lexeme with & or ~
    # (a length bound beside patterns, say) matches anything.
    max_emptiness_states: int = 10_000
    # JSON Schema: residues of the divisibility automaton built for an integer multipleOf.
    max_multiple_of_states: int = 128
    # JSON Schema: JSON values (counting nested ones) in one schema's enum/const.
    max_const_values: int = 50_000
    # JSON Schema: elements a minItems/maxItems bound spells out as grammar rules.
    max_counted_items: int = 100_000
    # JSON Schema: characters of one regex written for a pattern, number range or multipleOf.
    max_regex_chars: int = 200_000
    # JSON Schema: steps checking enum/const values against subschemas.
    max_validation_steps: int = 200_000
    # Wall-clock seconds one grammar compilation may take where the caller runs it under
    # a CompileBudget (the completion engine's compile executor does); a JSON Schema's
    # compiler keeps this bound on its own clock as well.
    max_compile_seconds: float = 10.0


DEFAULT_LIMITS = Limits()


class CompileCancelled(LimitExceeded):
    """A compilation was cancelled by its caller (the document that wanted the grammar
    changed it or closed): not a verdict on the grammar, so never cached as one."""

    def __init__(self, detail: str = "compilation cancelled"):
        LimitExceeded.__init__(self, "compile_cancelled", 0, detail)


class CompileTimeExceeded(GrammarLimitExceeded):
    """A compilation ran past its CompileBudget's deadline: the grammar is refused."""


# What a budget raises: code that treats a LimitExceeded as "unsure" and carries on
# (emptiness checks, oneOf proofs) re-raises these instead, so no verdict is cached.
BUDGET_ERRORS = (CompileCancelled, CompileTimeExceeded)


class CompileBudget:
    """A cooperative time budget and cancel switch for one compilation.

    Compilation is plain Python in loops the engine owns (schema walks, regex parsing
    and emptiness checks, Unicode tables, desugaring); each of those calls
    `check_compile_budget()`, which is free when no budget is active and otherwise looks
    at the clock and the cancel event every `CHECK_EVERY` calls. A compile past its
    deadline is refused (`CompileTimeExceeded`, a GrammarError naming
    max_compile_seconds); a cancelled one raises `CompileCancelled`. Once tripped, every
    later check raises again. The budget is per thread (a ContextVar), so a compile
    running on an executor never slows or stops the mask computations of another thread."""

    CHECK_EVERY = 64

    def __init__(self, seconds: float | None = None, cancel: threading.Event | None = None):
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.cancel = cancel
        self._countdown = 0
        # The error the budget raised, if it did: code that swallowed it still finishes,
        # and the caller must not keep what it made.
        self.tripped: LimitExceeded | None = None

    def check(self) -> None:
        self._countdown -= 1
        if self._countdown > 0:
            return
        self._countdown = self.CHECK_EVERY
        if self.cancel is not None and self.cancel.is_set():
            self._countdown = 0
            self.tripped = CompileCancelled()
            raise self.tripped
        if self.deadline is not None and time.monotonic() > self.deadline:
            self._countdown = 0
            self.tripped = CompileTimeExceeded(
                "max_compile_seconds", self.seconds or 0, f"compilation took longer than {self.seconds:g} s"
            )
            raise self.tripped


_budget: ContextVar[CompileBudget | None] = ContextVar("midword_compile_budget", default=None)


def check_compile_budget() -> None:
    """Raises when the compilation running on this thread is cancelled or past its
    deadline (see CompileBudget); nothing when none is active."""
    budget = _budget.get()
    if budget is not None:
        budget.check()


@contextmanager
def compile_budget(budget: CompileBudget | None) -> Iterator[CompileBudget | None]:
    """Runs the block under `budget` (None: no budget, as outside any)."""
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)
