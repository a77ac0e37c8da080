"""unevaluatedProperties and unevaluatedItems beside in-place applicators whose
branches an instance chooses (anyOf, oneOf, if), against the `jsonschema` validator: one
object (array) schema per combination of branches an instance may match, each closed
over what they evaluate."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.engine.jsonschema import compile_json_schema
from midword.engine.recognizer import grammar_accepts


def _agrees_with_reference(schema, values) -> None:
    grammar = compile_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in values:
        assert grammar_accepts(grammar, json.dumps(value, ensure_ascii=False).encode()) == validator.is_valid(value), (
            value
        )


UNEVALUATED = [
    {
        "properties": {"a": {}},
        "anyOf": [{"properties": {"b": {"type": "integer"}}}, {"properties": {"c": {"type": "integer"}}}],
        "unevaluatedProperties": False,
    },
    {
        "oneOf": [
            {"properties": {"kind": {"const": "a"}, "x": {}}, "required": ["kind"]},
            {"properties": {"kind": {"const": "b"}, "y": {}}, "required": ["kind"]},
        ],
        "unevaluatedProperties": False,
    },
    {"if": {"patternProperties": {"foo": {"type": "string"}}}, "unevaluatedProperties": False},
    {
        "if": {"properties": {"t": {"const": 1}}, "required": ["t"]},
        "then": {"properties": {"x": {}}},
        "else": {"properties": {"y": {}}},
        "unevaluatedProperties": {"type": "integer"},
    },
    {
        "allOf": [{"anyOf": [{"properties": {"a": {}}}, {"properties": {"xa": {"type": "integer"}}}]}],
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
        "properties": {"b": {}},
        "unevaluatedProperties": {"type": "string"},
    },
    {
        "$defs": {
            "one": {"oneOf": [{"$ref": "#/$defs/two"}, {"required": ["b"], "properties": {"b": True}}]},
            "two": {"required": ["x"], "properties": {"x": True}},
        },
        "allOf": [{"$ref": "#/$defs/one"}],
        "properties": {"a": True},
        "unevaluatedProperties": False,
    },
]
UNEVALUATED_KEYS = ["a", "b", "c", "x", "xa", "y", "t", "kind", "foo", "zfoo"]


@pytest.mark.parametrize("schema", UNEVALUATED)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(
        st.dictionaries(
            st.sampled_from(UNEVALUATED_KEYS), st.sampled_from([0, 1, 2, "a", "b", None, True]), max_size=3
        ),
        min_size=10,
        max_size=30,
    )
)
def test_unevaluated_properties_beside_branches_an_instance_chooses(schema, values):
    # One object schema per combination of branches an instance may match, each closed
    # over what those branches evaluate.
    _agrees_with_reference(schema, values)


UNEVALUATED_ITEMS = [
    {
        "prefixItems": [{"type": "string"}],
        "anyOf": [{"prefixItems": [True, True]}, {"contains": {"const": 1}}],
        "unevaluatedItems": False,
    },
    {
        "oneOf": [
            {"prefixItems": [{"const": "a"}], "items": {"type": "integer"}},
            {"prefixItems": [{"const": "b"}, True]},
        ],
        "unevaluatedItems": {"type": "string"},
    },
    {"if": {"prefixItems": [{"const": "x"}]}, "then": {"prefixItems": [True, True]}, "unevaluatedItems": False},
    {
        "allOf": [{"contains": {"type": "integer"}}],
        "not": {"prefixItems": [{"const": 0}]},
        "unevaluatedItems": {"const": "z"},
    },
]


@pytest.mark.parametrize("schema", UNEVALUATED_ITEMS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(
        st.lists(st.sampled_from([0, 1, 2, "a", "b", "x", "z", None]), max_size=4),
        min_size=10,
        max_size=30,
    )
)
def test_unevaluated_items_beside_branches_an_instance_chooses(schema, values):
    # Items past the prefixes the matched branches evaluate, that no `contains` of theirs
    # matches, pass unevaluatedItems.
    _agrees_with_reference(schema, values)
