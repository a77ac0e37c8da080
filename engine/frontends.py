"""Which front end compiles which source language into a `Grammar`.

grammar.py holds the IR that every front end builds, so it cannot import them: its
constructors (`Grammar.from_lark`, `Grammar.from_json_schema`) look their front end up
here, and the package's `__init__`, above every module, binds each one. This module
imports nothing, so grammar.py and the package can both import it without a cycle.
"""

from __future__ import annotations

from typing import Any, Callable

_bound: dict[str, Callable[..., Any]] = {}


def bind(language: str, compile_fn: Callable[..., Any]) -> None:
    """Makes `compile_fn` the front end of `language` (replacing any before it)."""
    _bound[language] = compile_fn


def front_end(language: str) -> Callable[..., Any]:
    compile_fn = _bound.get(language)
    if compile_fn is None:
        raise LookupError(f"no front end is bound for {language!r} (bound: {', '.join(sorted(_bound)) or 'none'})")
    return compile_fn
