"""Regular expressions over bytes, matched by Brzozowski derivatives.

One layer for every regex syntax the engine reads: `charset` (the code point set
algebra), `parser` (one parser, Python/Lark and ECMA-262 dialects), `exprset` (the
hash-consed expressions with `derivatives` and `analysis` over `store`), `printer`,
`dfa`, and `term` (expressions as values, for front ends that parse their own syntax).
"""

from .analysis import RepeatBounds
from .charset import utf8_sequences
from .dfa import LazyDFA
from .exprset import ExprSet
from .nodes import MAX_HEIGHT, MAX_NESTING, MAX_REPEAT_COUNT, refine_byte_sets
from .nodes import class_map as _class_map
from .nodes import split_class_map as _split_class_map
from .parser import _Parser
from .printer import regex_escape_bytes

__all__ = [
    "ExprSet",
    "RepeatBounds",
    "LazyDFA",
    "refine_byte_sets",
    "utf8_sequences",
    "regex_escape_bytes",
    "MAX_HEIGHT",
    "MAX_NESTING",
    "MAX_REPEAT_COUNT",
    "_class_map",
    "_split_class_map",
    "_Parser",
]
