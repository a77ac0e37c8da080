"""The parser kernels generation uses (rule flattening and marks for pruning), imported
in this one place."""

from ..analysis import flatten_rules, grammar_marks_jit

__all__ = ["flatten_rules", "grammar_marks_jit"]
