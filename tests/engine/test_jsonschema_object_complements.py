"""The complement of an object schema with patternProperties, additionalProperties or
propertyNames, against the `jsonschema` validator.

Such an object is failed by a member it rejects, among any others: an object schema
asking for some member (`_Obj.some`). Real schemas meet it in `not` and, far more
often, in oneOf branches of closed objects (`additionalProperties: false`), which need
each other's complement to be exact (MaskBench's Github_easy---o37786, its
`colorSelector`; docs/benchmarks.md counts them)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.engine.jsonschema import compile_json_schema
from midword.engine.jsonschema.compiler import _Compiler
from midword.engine.limits import DEFAULT_LIMITS, GrammarError
from midword.engine.recognizer import grammar_accepts

KEYS = ["a", "b", "xa", "xb", "ya", "abc"]
PATTERNS = ["^x", "^y", "b$", "^[a-z]{1,2}$"]
VALUE_SCHEMAS = [
    True,
    False,
    {"type": "integer"},
    {"type": "string"},
    {"minimum": 2},
    {"const": 1},
    {"type": ["string", "null"]},
]
VALUES = [0, 1, 3, "s", None, True, [], {}]
# What an object's complement may still be refused for: a complement of one again, or
# more members asked for at once than MAX_OBJECT_WITNESSES.
STILL_REFUSED = ("asks for some member", "cannot combine the complements")


def _accepts(grammar, value) -> bool:
    return grammar_accepts(grammar, json.dumps(value, ensure_ascii=False).encode())


value_schemas = st.sampled_from(VALUE_SCHEMAS)


@st.composite
def object_schemas(draw) -> dict:
    schema: dict = {"type": "object"}
    props = draw(st.dictionaries(st.sampled_from(KEYS), value_schemas, max_size=3))
    if props:
        schema["properties"] = props
    patterns = draw(st.dictionaries(st.sampled_from(PATTERNS), value_schemas, max_size=2))
    if patterns:
        schema["patternProperties"] = patterns
    additional = draw(st.sampled_from([None, False, {"type": "integer"}, {"type": "string"}]))
    if additional is not None:
        schema["additionalProperties"] = additional
    names = draw(st.sampled_from([None, {"maxLength": 2}, {"enum": ["a", "xa", "ya", "b"]}, {"pattern": "a"}]))
    if names is not None:
        schema["propertyNames"] = names
    required = draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True))
    if required:
        schema["required"] = required
    if draw(st.booleans()):
        schema["minProperties"] = draw(st.integers(0, 2))
    if draw(st.booleans()):
        schema["maxProperties"] = draw(st.integers(1, 3))
    return schema


instances = st.lists(
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4),
    min_size=20,
    max_size=40,
)


def _agrees(schema: dict, values: list) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    try:
        grammar = compile_json_schema(schema)
    except GrammarError as e:
        if "accepts no" in str(e):
            # Constraints that contradict each other: no value may pass them.
            assert not any(validator.is_valid(v) for v in values), (schema, str(e))
            return
        assert any(reason in str(e) for reason in STILL_REFUSED), (schema, str(e))
        return
    for value in values:
        assert _accepts(grammar, value) == validator.is_valid(value), (schema, value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(object_schemas(), instances)
def test_the_complement_of_an_object_schema(schema, values):
    _agrees({"not": schema}, values + [1, "s", None])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(object_schemas(), object_schemas(), instances)
def test_an_object_beside_another_ones_complement(schema, other, values):
    _agrees({"allOf": [schema, {"not": other}]}, values)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(object_schemas(), object_schemas(), instances)
def test_a_one_of_of_two_object_schemas(first, second, values):
    _agrees({"oneOf": [first, second]}, values)


COLOR = {"oneOf": [{"type": "string", "pattern": "^#"}, {"type": "object", "required": ["hex"]}]}
# Github_easy---o37786's colorSelector, its $refs written out.
COLOR_SELECTOR = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"ios": COLOR, "android": COLOR},
            "required": ["ios", "android"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["ref"],
            "properties": {"ref": {"type": "string"}},
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"inherit": {"enum": [True]}},
            "required": ["inherit"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "patternProperties": {"^([0-9]\\.?[0-9]*)x$": COLOR},
            "additionalProperties": False,
            "minProperties": 1,
        },
        {
            "type": "object",
            "patternProperties": {"^[a-zA-Z][a-zA-Z][a-zA-Z]?(-[\\-a-zA-Z0-9]+)?$": COLOR},
            "additionalProperties": False,
            "minProperties": 1,
            "not": {"required": ["ios"]},
        },
    ]
}


def test_a_one_of_of_closed_objects_from_a_real_schema_is_exact():
    grammar = compile_json_schema(COLOR_SELECTOR, strict=True)
    assert grammar.warnings == []
    validator = jsonschema.Draft202012Validator(COLOR_SELECTOR)
    cases = [
        {"ios": "#fff", "android": {"hex": 1}},
        {"ref": "accent"},  # a locale key too, whose value is no color: only the reference
        {"ref": "#abc"},  # a reference and a locale color at once: neither
        {"inherit": True},
        {"2x": "#000", "3.5x": {"hex": "a"}},
        {"en": "#111", "fr-CA": "#222"},
        {"en": "#111", "2x": "#000"},
        {"ios": "#fff"},
        {},
    ]
    verdicts = [validator.is_valid(v) for v in cases]
    assert verdicts == [True, True, False, True, True, True, False, False, False]
    for value, valid in zip(cases, verdicts, strict=True):
        assert _accepts(grammar, value) == valid, value


def test_objects_whose_keys_no_pattern_shares_are_disjoint_without_a_complement():
    # Both need a member, and no key fits both: told apart by their key languages.
    digits = {"type": "object", "patternProperties": {"^[0-9]+x$": {}}, "additionalProperties": False}
    letters = {"type": "object", "patternProperties": {"^[a-z]{2}$": {}}, "additionalProperties": False}
    names = {"type": "object", "propertyNames": {"pattern": "^[A-Z]+$"}}
    comp = _Compiler({}, strict=True, limits=DEFAULT_LIMITS, lenient=False, formats="assert")
    comp.root()
    one = {"minProperties": 1}
    nodes = [comp.norm({**s, **one}, comp.root_base, ()) for s in (digits, letters, names)]
    assert comp.disjoint(nodes[0], nodes[1], 0)
    assert comp.disjoint(nodes[1], nodes[2], 0)
    # Without a member asked for, {} fits both.
    assert not comp.disjoint(comp.norm(digits, comp.root_base, ()), comp.norm(letters, comp.root_base, ()), 0)
    # Keys that could fit both: no proof.
    lower = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}, "minProperties": 1}
    assert not comp.disjoint(nodes[1], comp.norm(lower, comp.root_base, ()), 0)


def test_keys_in_schema_order_refuse_a_closed_objects_complement_as_before():
    # The grammar of an object asking for a member tracks keys in any order; in schema
    # order the complement is refused where it is taken, so a oneOf falls back to anyOf
    # with one_of="any_of", as it did before such complements existed.
    with pytest.raises(GrammarError, match="not at #/not: .*key_order='schema'"):
        compile_json_schema({"not": {"additionalProperties": False}}, key_order="schema")
    one_of = {"oneOf": [{"additionalProperties": {"type": "integer"}}, {"additionalProperties": {"type": "string"}}]}
    relaxed = compile_json_schema({"type": "object", **one_of}, key_order="schema", one_of="any_of")
    assert len(relaxed.warnings) == 1 and "compiled as anyOf" in relaxed.warnings[0]
    assert compile_json_schema({"type": "object", **one_of}).warnings == []


CONSTANTS = [
    {"not": {"const": {"a": 1, "b": [1, {"c": None}]}}},
    {"not": {"const": []}},
    {"not": {"const": [1, "x", [2]]}},
    {"not": {"enum": [{"a": True}, [False], {"a": {"a": {"a": 1}}}]}},
    {"type": "object", "not": {"const": {}}},
    {"not": {"const": {"a": 1.0}}},
]
CONSTANT_CASES = [
    *[0, 1, 1.0, "x", None, True, False, [], {}, [1], [0], [False]],
    *[[1, "x", [2]], [1, "x", [2.0]], [1, "x", [2], 3], {"a": True}, {"a": {"a": {"a": 1}}}, {"a": {"a": {"a": 2}}}],
    *[{"a": 1}, {"a": 1.0}, {"a": 1, "b": [1, {"c": None}]}, {"b": [1, {"c": None}], "a": 1}],
    {"a": 1, "b": [1, {"c": None}], "d": 0},
]


@pytest.mark.parametrize("schema", CONSTANTS)
def test_the_complement_of_an_array_or_object_constant(schema):
    # An object constant is its keys and no other, each value equal to its own: its
    # complement asks for a key it does not have, where that is all that differs.
    grammar = compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert {validator.is_valid(v) for v in CONSTANT_CASES} == {True, False}
    for value in CONSTANT_CASES:
        assert _accepts(grammar, value) == validator.is_valid(value), value


TREE = {
    "type": "object",
    "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
    "required": ["v"],
    "additionalProperties": False,
}
RECURSIVE = [
    {"$defs": {"node": TREE}, "not": {"$ref": "#/$defs/node"}},
    {
        "$defs": {"node": TREE},
        "oneOf": [{"$ref": "#/$defs/node"}, {"type": "object", "properties": {"v": {"type": "string"}}}],
    },
    # A color or a selector of colors by key, in a oneOf beside a reference object.
    {
        "$defs": {
            "color": {"oneOf": [{"type": "string"}, {"$ref": "#/$defs/selector"}]},
            "selector": {
                "type": "object",
                "patternProperties": {"^[a-z]+$": {"$ref": "#/$defs/color"}},
                "additionalProperties": False,
                "minProperties": 1,
            },
        },
        "oneOf": [
            {"$ref": "#/$defs/selector"},
            {
                "type": "object",
                "properties": {"ref": {"type": "string"}},
                "required": ["ref"],
                "additionalProperties": False,
            },
        ],
    },
]
leaves = st.sampled_from([1, "s", None, True])
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["v", "kids", "ref", "ab", "X"]), inner, max_size=2)
    ),
    max_leaves=8,
)


@pytest.mark.parametrize("schema", RECURSIVE)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(values, min_size=20, max_size=40))
def test_the_complement_of_a_recursive_schema(schema, instances):
    # Complemented where it is unfolded: its own references come out as complements.
    grammar = compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in instances:
        assert _accepts(grammar, value) == validator.is_valid(value), value
