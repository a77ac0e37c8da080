"""key_order "any": an object's keys in any order, each listed key at most once."""

import itertools
import json

import pytest

from midword.engine.jsonschema import compile_json_schema
from midword.engine.limits import GrammarError, Limits
from midword.engine.recognizer import grammar_accepts


def accepts(g, value) -> bool:
    text = value if isinstance(value, str) else json.dumps(value)
    return grammar_accepts(g, text.encode())


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "version": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name", "version"],
    "additionalProperties": False,
}


def test_every_order_of_listed_keys_is_accepted_and_required_still_enforced():
    g = compile_json_schema(SCHEMA)
    assert g.warnings == []
    members = [("name", "x"), ("version", "1"), ("n", 3)]
    for k in (2, 3):
        for perm in itertools.permutations(members, k):
            doc = dict(perm)
            assert accepts(g, doc) == ({"name", "version"} <= doc.keys()), doc
    assert accepts(g, '{"version": "1", "name": "x"}')  # the package.json shape
    assert not accepts(g, '{"name":"x","version":"1","name":"y"}')  # a key twice
    assert not accepts(g, '{"n":1,"version":"1","n":2,"name":"x"}')
    assert not accepts(g, '{"version":"1","name":"x","extra":1}')  # additionalProperties false
    assert not accepts(g, '{"version":1,"name":"x"}')  # each value keeps its schema
    assert not accepts(g, "{}")


def test_schema_order_is_kept_on_request():
    g = compile_json_schema(SCHEMA, key_order="schema")
    assert accepts(g, '{"name":"x","version":"1"}')
    assert not accepts(g, '{"version":"1","name":"x"}')
    with pytest.raises(ValueError, match="key_order"):
        compile_json_schema(SCHEMA, key_order="sorted")


def test_object_constants_and_enum_values_take_their_members_in_any_order():
    # JSON Schema compares objects member by member (the official suite's const.json,
    # "same object with different property order is valid").
    value = {"a": 1, "b": [1, {"x": "y", "z": None}]}
    for schema in ({"const": value}, {"enum": [value, {}, "other"]}):
        g = compile_json_schema(schema)
        assert accepts(g, value)
        assert accepts(g, '{"b": [1, {"z": null, "x": "y"}], "a": 1}')
        assert accepts(g, '{"a": 1.0, "b": [1, {"x": "y", "z": null}]}')  # numbers by value
        assert not accepts(g, '{"a": 1}')  # every member
        assert not accepts(g, '{"a": 1, "a": 1, "b": [1, {"x": "y", "z": null}]}')  # once
        assert not accepts(g, '{"a": 1, "b": [1, {"x": "y", "z": null}], "c": 2}')  # no other
        assert not accepts(g, '{"a": 1, "b": [{"x": "y", "z": null}, 1]}')  # arrays keep order
    in_order = compile_json_schema({"const": value}, key_order="schema")
    assert accepts(in_order, value)
    assert not accepts(in_order, '{"b": [1, {"x": "y", "z": null}], "a": 1}')


def test_additional_pattern_properties_and_property_names_beside_any_order():
    schema = {
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "patternProperties": {"^x-": {"type": "boolean"}},
        "additionalProperties": {"type": "null"},
        "propertyNames": {"maxLength": 3},
        "required": ["b"],
    }
    g = compile_json_schema(schema)
    assert accepts(g, '{"x-1": true, "b": "s", "zz": null, "a": 1}')
    assert accepts(g, '{"zz": null, "b": "s"}')
    assert not accepts(g, '{"x-1": 1, "b": "s"}')  # a pattern property's schema
    assert not accepts(g, '{"zz": 1, "b": "s"}')  # additionalProperties' schema
    assert not accepts(g, '{"long": null, "b": "s"}')  # propertyNames
    assert not accepts(g, '{"a": 1, "b": "s", "a": 2}')
    assert not accepts(g, '{"a": 1, "zz": null}')  # required b


def test_min_and_max_properties_count_members_in_any_order():
    schema = {
        "properties": {k: {"type": "integer"} for k in "abcd"},
        "additionalProperties": False,
        "minProperties": 2,
        "maxProperties": 3,
    }
    g = compile_json_schema(schema)
    assert accepts(g, '{"d":1,"a":2}') and accepts(g, '{"c":1,"b":2,"a":3}')
    assert not accepts(g, '{"d":1}') and not accepts(g, '{"d":1,"c":1,"b":2,"a":3}')


def test_many_optional_keys_take_any_order_exactly_in_a_linear_grammar():
    n = 300
    props = {f"k{i}": {"type": "integer"} for i in range(n)}
    schema = {"type": "object", "properties": props, "required": ["k7", "k250"], "additionalProperties": False}
    g = compile_json_schema(schema)
    assert g.warnings == []
    assert g.size() < 10 * n  # a member per key, no state per set of keys
    assert accepts(g, '{"k250": 1, "k3": 2, "k7": 3, "k299": 4}')
    assert not accepts(g, '{"k250": 1, "k3": 2}')
    assert not accepts(g, '{"k250": 1, "k7": 2, "k250": 3}')  # a required key twice
    assert not accepts(g, '{"k250": 1, "k3": 1, "k7": 2, "k3": 3}')  # an optional key twice
    assert not accepts(g, '{"k250": 1, "k7": 2, "k300": 3}')
    assert not accepts(g, '{"k250": 1, "k7": 2, "k3": "s"}')


def test_a_key_is_once_per_object_not_per_document():
    inner = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}}, "required": ["a"]}
    schema = {"type": "object", "properties": {"a": inner, "b": {"type": "array", "items": inner}}, "required": ["a"]}
    g = compile_json_schema(schema)
    assert accepts(g, '{"b": [{"a": 1}, {"b": {"a": 2, "a": 3}, "a": 2}], "a": {"a": 1}}')
    assert not accepts(g, '{"b": [{"a": 1, "a": 1}], "a": {"a": 1}}')
    assert not accepts(g, '{"b": [{"b": 1}], "a": {"a": 1}}')  # required a inside
    assert not accepts(g, '{"a": {"a": 1}, "b": [], "a": {"a": 1}}')


def test_max_properties_counts_members_with_extra_keys():
    props = {f"k{i}": {"type": "integer"} for i in range(8)}
    schema = {"properties": props, "required": ["k1"], "maxProperties": 3}
    g = compile_json_schema(schema)
    assert g.warnings == []
    assert accepts(g, '{"k5": 1, "k1": 2, "zz": 3}')
    assert not accepts(g, '{"k5": 1, "k1": 2, "zz": 3, "k0": 4}')
    assert not accepts(g, '{"k5": 1, "k0": 2}')
    assert not accepts(g, '{"k5": 1, "k1": 2, "k5": 3}')


def test_many_required_keys_take_any_order():
    props = {f"k{i}": {"type": "integer"} for i in range(30)}
    required = [f"k{i}" for i in reversed(range(30))]
    schema = {"properties": {**props, "opt": {"type": "string"}}, "required": required, "additionalProperties": False}
    g = compile_json_schema(schema)
    assert g.warnings == []

    def doc(order, opt_at=None):
        members = [f'"k{i}":{i}' for i in order]
        if opt_at is not None:
            members.insert(opt_at, '"opt":"s"')
        return "{" + ",".join(members) + "}"

    assert accepts(g, doc(range(30))) and accepts(g, doc(reversed(range(30))))
    assert accepts(g, doc([1, 0] + list(range(2, 30)), opt_at=3))
    assert not accepts(g, doc(range(29)))  # k29 missing
    assert not accepts(g, doc(list(range(30)) + [3]))  # a required key twice
    assert not accepts(g, doc(range(30), opt_at=0)[:-1] + ',"opt":"t"}')  # opt twice


def test_max_properties_beyond_the_state_limit_is_refused_by_name():
    schema = {"properties": {"a": {}}, "maxProperties": 50}
    with pytest.raises(GrammarError, match="max_object_states"):
        compile_json_schema(schema, limits=Limits(max_object_states=20))


def test_bundled_package_json_schema_takes_keys_in_the_authors_order():
    from pathlib import Path

    import midword.grammars as grammars

    schema = json.loads((Path(grammars.__file__).parent / "schemas" / "package.json").read_text())
    g = compile_json_schema(schema)
    order = list(schema["properties"])
    assert order.index("name") < order.index("version") < order.index("scripts")
    doc = {
        "scripts": {"test": "jest"},
        "version": "1.0.0",
        "description": "x",
        "name": "pkg",
        "dependencies": {"a": "^1.0.0"},
    }
    assert accepts(g, json.dumps(doc, indent=2))
    assert not accepts(g, json.dumps({**doc, "version": 1}))
    assert g.warnings == []
    assert not accepts(g, json.dumps(doc)[:-1] + ', "name": "again"}')  # a key twice
