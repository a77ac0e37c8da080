"""Every schema compiles within the Limits or is refused with a GrammarError naming the
limit and the place: no unbounded allocation, no RecursionError, no hang."""

import json
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.engine.jsonschema import compile_json_schema
from midword.engine.limits import GrammarError, GrammarLimitExceeded, LimitExceeded, Limits


def nested(depth: int, make) -> dict:
    s: dict = {"type": "integer"}
    for _ in range(depth):
        s = make(s)
    return s


@pytest.mark.parametrize(
    "schema,limit,where",
    [
        ({"type": "integer", "multipleOf": 0.123456789}, "max_multiple_of_states", "#"),
        ({"properties": {"n": {"type": "integer", "multipleOf": 2**40}}}, "max_multiple_of_states", "#/properties/n"),
        (nested(5000, lambda s: {"properties": {"a": s}}), "max_schema_depth", "#/properties/a/properties/a"),
        (nested(5000, lambda s: {"items": s}), "max_schema_depth", "#/items/items"),
        (nested(5000, lambda s: {"anyOf": [s, {"type": "null"}]}), "max_schema_depth", "#/anyOf/0/anyOf/0"),
        ({"type": "array", "minItems": 10**8}, "max_counted_items", "#"),
        ({"properties": {"a": {"maxItems": 10**9}}}, "max_counted_items", "#/properties/a"),
        ({"enum": list(range(200_000))}, "max_const_values", "#"),
        ({"properties": {"c": {"const": [[0] * 1000] * 100}}}, "max_const_values", "#/properties/c"),
        ({"type": "string", "minLength": 10**12}, "max_repeat_count", "#"),
    ],
)
def test_oversized_schemas_are_refused_naming_limit_and_path(schema, limit, where):
    with pytest.raises(GrammarError) as e:
        compile_json_schema(schema)
    assert isinstance(e.value, GrammarLimitExceeded) and isinstance(e.value, LimitExceeded)
    assert e.value.limit == limit and limit in str(e.value) and where in str(e.value)


def test_a_deep_value_in_const_is_refused_not_a_recursion_error():
    value: list = []
    for _ in range(5000):
        value = [value]
    with pytest.raises(GrammarLimitExceeded):
        compile_json_schema({"const": value})


def test_huge_max_length_is_no_bound_and_says_so():
    g = compile_json_schema({"type": "string", "maxLength": 10**12})
    assert any("no bound" in w for w in g.warnings)


def test_a_compile_outside_any_budget_keeps_to_max_compile_seconds():
    # allOf over anyOf branches of wide objects: 8^4 meets of 160-property objects, each
    # within every size limit, so only the clock stops it: the compiler's own, where no
    # caller set a budget.
    import time

    from midword.engine.limits import CompileBudget, CompileTimeExceeded, compile_budget

    schema = {
        "allOf": [
            {"anyOf": [{"properties": {f"p{k}_{i}_{j}": {"type": "string"} for j in range(40)}} for i in range(8)]}
            for k in range(4)
        ]
    }
    started = time.monotonic()
    with pytest.raises(CompileTimeExceeded, match="max_compile_seconds=0.5 exceeded"):
        compile_json_schema(schema, limits=Limits(max_compile_seconds=0.5))
    assert time.monotonic() - started < 30  # stopped by the budget, not by finishing
    # A caller's own budget stays in charge.
    with compile_budget(CompileBudget(0.3)):
        with pytest.raises(CompileTimeExceeded, match="max_compile_seconds=0.3 exceeded"):
            compile_json_schema(schema, limits=Limits(max_compile_seconds=100))


def test_recursive_refs_compile_to_recursive_rules():
    schema = {
        "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "null"}]}, "b": {"items": {"$ref": "#/$defs/a"}}},
        "$ref": "#/$defs/a",
    }
    assert compile_json_schema(schema).size() < 1000
    with pytest.raises(GrammarError, match="accepts no finite JSON value"):
        compile_json_schema({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})


# A schema generator over the keywords that drive compile cost: counts, numbers,
# nesting, enums, patterns and references, with values reaching far past the limits.
_counts = st.one_of(st.integers(0, 5), st.integers(0, 10**12))
_numbers = st.one_of(st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
_patterns = st.sampled_from(["^a+$", "[0-9]{1,5}", "^(ab|cd){2,99999}$", "\\p{L}+", "x{0,100000}y", "(", "^$"])


def _schemas(children):
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("integer")},
            optional={
                "multipleOf": st.one_of(st.integers(1, 10**9), st.floats(1e-9, 1e3, allow_nan=False)),
                "minimum": _numbers,
                "maximum": _numbers,
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("string")}, optional={"minLength": _counts, "maxLength": _counts, "pattern": _patterns}
        ),
        st.fixed_dictionaries(
            {"type": st.just("array")},
            optional={"items": children, "minItems": _counts, "maxItems": _counts, "contains": children},
        ),
        st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), children, max_size=12),
                "required": st.lists(st.text("abcdefgh", min_size=1, max_size=3), max_size=8),
                "maxProperties": _counts,
                "additionalProperties": children,
            },
        ),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=4)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=3)),
        st.builds(lambda n: {"enum": list(range(n))}, st.integers(0, 100_000)),
    )


_schema = st.recursive(st.just({}), _schemas, max_leaves=12)


def _compile_with_watch(schema) -> BaseException | None:
    """Compile in a thread, so that a hang fails the test instead of stopping it (the
    bound is for hangs only: speed is `midword bench jsts`'s business)."""
    out: list = [None]

    def run():
        try:
            compile_json_schema(schema, limits=Limits())
        except BaseException as e:  # noqa: BLE001 - reported below
            out[0] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(600)
    assert not th.is_alive(), f"compile did not finish: {json.dumps(schema)[:300]}"
    return out[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_schema)
def test_generated_schemas_compile_or_refuse_cleanly(schema):
    err = _compile_with_watch(schema)
    # Refusals are GrammarErrors (a LimitExceeded too when a limit refused it); nothing
    # else: no RecursionError, MemoryError, IndexError, ...
    assert err is None or isinstance(err, GrammarError), f"{type(err).__name__}: {err}"
