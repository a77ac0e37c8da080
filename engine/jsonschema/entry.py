"""The public entry points: a schema to a `Grammar`, an instance to the grammar's key order."""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, TypeVar

from ..grammar import Grammar
from ..limits import (
    BUDGET_ERRORS,
    DEFAULT_LIMITS,
    CompileCancelled,
    GrammarError,
    GrammarLimitExceeded,
    LimitExceeded,
    Limits,
)
from .compiler import NeedsDynamicScope, _Compiler
from .generate import _Generator
from .ir import NOTHING

T = TypeVar("T")

# --------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------


def compile_json_schema(
    schema: Any,
    *,
    whitespace: str = "flexible",
    key_order: str = "any",
    strict: bool = False,
    lenient: bool = False,
    formats: str = "assert",
    one_of: str = "exact",
    documents: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Grammar:
    """Compile a JSON Schema (a parsed value, or its JSON text) to a `Grammar`.

    whitespace: "flexible" skips JSON whitespace between lexemes (an `%ignore`),
    "compact" allows none. key_order: "any" (the default) accepts an object's keys
    in any order, each listed key at most once; "schema" lists properties in schema
    order, then additional ones (what generation in schema order wants). "any" is
    exact for any number of keys: the parser keeps the keys each object has written
    (`_Generator.object_any_order`, `GrammarBuilder.object_open`). strict: a relaxed keyword (see
    RELAXED_KEYWORDS) is an error instead of a warning. lenient: compile `uniqueItems`
    without enforcing it (refused otherwise: no grammar can check it). formats: "assert"
    (the default: a known `format` constrains the string, which is what generation
    wants) or "annotation" (the spec's default: `format` constrains nothing). one_of:
    "exact" (the default) refuses a oneOf whose branches can be neither proved exclusive
    nor complemented (an object branch with patternProperties, a recursive branch);
    "any_of" compiles it as anyOf, which accepts an instance matching two branches (what
    an editor wants rather than no constraint at all). documents: other schema
    documents by URI (no fragment), for `$ref`s beyond this one; besides those, only
    the JSON Schema drafts' metaschemas are known (bundled), and nothing is fetched.
    The grammar's `warnings` attribute lists every relaxation applied.
    """
    if whitespace not in ("flexible", "compact"):
        raise ValueError(f"whitespace must be 'flexible' or 'compact', not {whitespace!r}")
    if formats not in ("assert", "annotation"):
        raise ValueError(f"formats must be 'assert' or 'annotation', not {formats!r}")
    if key_order not in ("any", "schema"):
        raise ValueError(f"key_order must be 'any' or 'schema', not {key_order!r}")
    if one_of not in ("exact", "any_of"):
        raise ValueError(f"one_of must be 'exact' or 'any_of', not {one_of!r}")
    if isinstance(schema, (str, bytes, bytearray)):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(f"schema is not valid JSON: {e.msg} at line {e.lineno}:{e.colno}") from None
    try:
        options: dict[str, Any] = {
            "strict": strict,
            "limits": limits,
            "lenient": lenient,
            "formats": formats,
            "one_of": one_of,
            "documents": documents,
            "members_asked": key_order == "any",
        }
        comp, grammar = _compiled_with_fallback(schema, options, key_order, whitespace)
    except RecursionError:
        # Depth guards cover schema nesting; this catches pathological values (enum/const).
        raise GrammarLimitExceeded(
            "max_schema_depth", limits.max_schema_depth, "schema or constant nested too deeply"
        ) from None
    except LimitExceeded as e:
        if isinstance(e, (GrammarError, CompileCancelled)):  # a cancel is no verdict on the schema
            raise
        # A refusal of this schema: a GrammarError naming the limit and the subschema.
        where = getattr(e, "schema_path", None)
        detail = e.args[0].split(": ", 1)[1] if ": " in e.args[0] else ""
        if where and where not in detail:
            detail = f"{detail} (in the schema at {where})" if detail else f"in the schema at {where}"
        raise GrammarLimitExceeded(e.limit, e.value, detail) from e
    grammar.warnings = list(comp.warnings)
    return grammar


def _tracking_scope_if_needed(schema: Any, options: dict, use: Callable[[_Compiler], T]) -> tuple[_Compiler, T]:
    """(compiler, use(compiler)), by a compiler that tracks the dynamic scope only where
    `use` meets a $dynamicRef without one (references unfold as late as the grammar's
    build, so it may first show there): schemas without pay nothing for the scope."""
    try:
        comp = _Compiler(schema, **options)
        return comp, use(comp)
    except NeedsDynamicScope:
        comp = _Compiler(schema, dynamic_scope=True, **options)
        return comp, use(comp)


def _compiled_with_fallback(schema: Any, options: dict, key_order: str, whitespace: str) -> tuple[_Compiler, Grammar]:
    """(compiler, grammar); where a refusal follows a complement of a reference worked
    out late (a recursive schema's), compiled again without those: the refusal, or the
    relaxation of a oneOf, then comes where it did before they existed."""
    made: list[_Compiler] = []

    def build(comp: _Compiler) -> Grammar:
        made.append(comp)
        return _generated(comp, key_order, whitespace)

    try:
        return _tracking_scope_if_needed(schema, options, build)
    except (GrammarError, LimitExceeded, RecursionError) as e:
        if isinstance(e, BUDGET_ERRORS) or not any(c.made_lazy_complements for c in made):
            raise
    return _tracking_scope_if_needed(
        schema, {**options, "lazy_complements": False}, lambda c: _generated(c, key_order, whitespace)
    )


def _generated(comp: _Compiler, key_order: str, whitespace: str) -> Grammar:
    root = comp.root()
    if root is NOTHING:
        raise GrammarError("the schema at # accepts no JSON value")
    return _Generator(comp, comp.limits, key_order).build(root, whitespace)


def schema_ordered(schema: Any, value: Any, documents: Mapping[str, Any] | None = None) -> Any:
    """`value` with every object's keys in the order the grammar of `schema` writes them
    (listed properties in schema order, then the rest in their original order).

    Validity against a schema does not depend on key order but the grammar's does; this
    turns a valid instance into one the grammar accepts. Where alternatives apply, the
    first alternative the value satisfies decides the order.
    """
    if isinstance(schema, (str, bytes, bytearray)):
        schema = json.loads(schema)
    options: dict[str, Any] = {
        "strict": False,
        "limits": DEFAULT_LIMITS,
        "lenient": True,
        "one_of": "any_of",
        "documents": documents,
    }
    return _tracking_scope_if_needed(schema, options, lambda comp: comp.reorder(comp.root(), value, 0))[1]
