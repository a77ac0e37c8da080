"""midword's grammar engine: tokenizers as byte tables, the flat token trie, the derivative
regex lexer, the Earley parser, grammar front ends, the matcher and fast-forward.

Knows nothing of models or LSP. Attributes load lazily so `import midword.engine` stays
cheap (numba is only imported by the modules that need it).
"""

from importlib import import_module

from . import frontends as _frontends

_EXPORTS = {
    "Tokenizer": ".tokenizer",
    "TokenTrie": ".trie",
    "Grammar": ".grammar",
    "GrammarBuilder": ".grammar",
    "GrammarError": ".limits",
    "LimitExceeded": ".limits",
    "Limits": ".limits",
    "Matcher": ".matcher",
    "MatcherError": ".matcher",
    "TokenAutomaton": ".matcher",
    "trie_for": ".matcher",
    "mask_to_ids": ".matcher",
    "mask_words": ".trie",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


# The front ends behind Grammar's constructors (see frontends.py), each imported on its
# first use: the JSON Schema compiler brings numba, which a Lark-only caller never needs.
def _compile_lark(text: str, *, start: str = "start"):
    from .lark import compile_lark

    return compile_lark(text, start=start)


def _compile_json_schema(schema, **options):
    from .jsonschema import compile_json_schema

    return compile_json_schema(schema, **options)


_frontends.bind("lark", _compile_lark)
_frontends.bind("json_schema", _compile_json_schema)
