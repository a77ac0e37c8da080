"""Bounds on work the engine may do for one grammar or one input.

Adversarial grammars and inputs can make a derivative lexer or an Earley parser
do unbounded work (exploding DFA, ambiguous grammars with huge rows). Every such
loop checks one of these limits and raises `LimitExceeded`, naming the limit, so a
caller gets a clear error instead of a hang.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    def __init__(self, limit: str, value: int, detail: str = ""):
        self.limit = limit
        self.value = value
        msg = f"limit {limit}={value} exceeded"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class GrammarLimitExceeded(GrammarError, LimitExceeded):
    """Compiling a grammar went past one of the `Limits`: the grammar is refused (a
    GrammarError) and the message names the limit (a LimitExceeded) and the place."""

    def __init__(self, limit: str, value: int, detail: str = ""):
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
    # JSON Schema, key_order "any": nonterminals tracking the set of keys an object has
    # written (2^keys tracked); beyond it optional keys go untracked (see jsonschema).
    max_key_set_states: int = 16
    # JSON Schema: patternProperties groups an object's extra keys may fall in.
    max_pattern_groups: int = 4
    # JSON Schema: `contains` constraints combined on one array.
    max_contains: int = 3
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


DEFAULT_LIMITS = Limits()
