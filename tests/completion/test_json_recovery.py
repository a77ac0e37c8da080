"""Re-anchoring a JSON Schema constraint inside a document that breaks the schema
(completion/json_recovery.py and CompletionEngine._reanchor)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from midword.completion.json_recovery import anchored_schema, anchors, open_values, subschema_at
from midword.engine import Grammar, Matcher
from midword.engine.matcher import MatcherError, mask_to_ids


def bundled_schema_text(name: str) -> str:
    return resources.files("midword.grammars").joinpath("schemas", name).read_text(encoding="utf-8")


def pointers(text: str, max_depth: int = 64) -> list[tuple[int, str]]:
    return [(v.start, v.pointer) for v in open_values(text.encode(), max_depth)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": {"b": [1, {"c": "x', [(0, ""), (6, "/a"), (12, "/a/b"), (16, "/a/b/1"), (22, "/a/b/1/c")]),
        ('{"a": 1, "b": tr', [(0, ""), (14, "/b")]),
        ('{"a": {"b": 2}, "c": [', [(0, ""), (21, "/c")]),
        # comments (JSONC), and a key with an escaped quote and a slash
        ('{"a" // c\n: /* x */ {"q', [(0, ""), (20, "/a")]),
        ('{"k\\"/": {', [(0, ""), (9, '/k"~1')]),
        # the cursor inside a key: the object is the innermost value
        ('{"a": "x", "b": {"c": 1, "d', [(0, ""), (16, "/b")]),
        # brackets inside strings are text
        ('{"a": "{[", "b": [', [(0, ""), (17, "/b")]),
        # a broken document: a missing comma, a closer that matches nothing open
        ('{"a": 1 "b": {"c": ]}, "d": {', [(0, ""), (28, "/d")]),
    ],
)
def test_open_values_finds_the_enclosing_values_and_their_pointers(text, expected):
    assert pointers(text) == expected


def test_open_values_is_bounded_by_depth_on_deep_nesting():
    text = b"[" * 200_000 + b"1"
    values = open_values(text, 256)
    assert len(values) == 256  # the scalar sits deeper than the kept frames: not reported
    assert values[-1].path == (0,) * 255


SCHEMA = {
    "type": "object",
    "definitions": {"port": {"type": "integer", "minimum": 1}},
    "properties": {
        "server": {
            "type": "object",
            "properties": {
                "port": {"$ref": "#/definitions/port"},
                "hosts": {"type": "array", "items": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "pair": {"prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": {"type": "null"}},
        "combo": {"allOf": [{"properties": {"x": {"type": "string"}}}, {"properties": {"x": {"maxLength": 3}}}]},
        "either": {"anyOf": [{"properties": {"y": {"type": "string"}}}, {"properties": {"y": {"type": "number"}}}]},
    },
    "patternProperties": {"^x-": {"type": "string"}},
    "additionalProperties": {"type": "boolean"},
}


def test_subschema_at_follows_the_keywords_that_place_a_value():
    assert subschema_at(SCHEMA, ("server", "port")) == {"$ref": "#/definitions/port"}  # resolved where compiled
    assert subschema_at(SCHEMA, ("server", "hosts", 7)) == {"type": "string"}
    assert subschema_at(SCHEMA, ("server", "other")) is None  # additionalProperties: false
    assert subschema_at(SCHEMA, ("pair", 1)) == {"type": "boolean"}
    assert subschema_at(SCHEMA, ("pair", 5)) == {"type": "null"}
    assert subschema_at(SCHEMA, ("x-trace",)) == {"type": "string"}
    assert subschema_at(SCHEMA, ("anything",)) == {"type": "boolean"}
    assert subschema_at(SCHEMA, ("combo", "x")) == {"allOf": [{"type": "string"}, {"maxLength": 3}]}
    assert subschema_at(SCHEMA, ("either", "y")) == {"anyOf": [{"type": "string"}, {"type": "number"}]}


def test_subschema_at_gives_up_on_reference_cycles_and_other_documents():
    looping = {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "properties": {"p": {"$ref": "#/$defs/a"}},
    }
    assert subschema_at(looping, ("p", "q")) is None
    remote = {"properties": {"p": {"$ref": "https://example.com/schema.json"}}}
    assert subschema_at(remote, ("p", "q")) is None


def test_anchored_schema_keeps_the_roots_definitions():
    sub = subschema_at(SCHEMA, ("server",))
    schema = anchored_schema(SCHEMA, sub)
    grammar = Grammar.from_json_schema(schema)
    assert "properties" not in schema and schema["definitions"] == SCHEMA["definitions"]
    assert grammar is not None


def _accepts(tok, grammar: Grammar, data: bytes) -> bool:
    try:
        Matcher(tok, grammar).consume_bytes(data)
    except MatcherError:
        return False
    return True


def test_a_broken_package_json_is_constrained_from_the_innermost_value(llama3):
    schema = json.loads(bundled_schema_text("package.json"))
    # one value of the wrong type above the cursor
    doc = b'{\n  "name": "demo",\n  "version": "1.0.0",\n  "private": "yes",\n  "repository": {"type": "git", "url": '
    assert not _accepts(llama3, Grammar.from_json_schema(schema), doc)
    found = list(anchors(schema, doc, max_depth=64, max_anchors=4))
    assert [v.pointer for v, _ in found] == ["/repository"]
    value, sub = found[0]
    grammar = Grammar.from_json_schema(sub)
    m = Matcher(llama3, grammar)
    m.consume_bytes(doc[value.start :])
    allowed = mask_to_ids(m.compute_mask(), llama3.vocab_size)
    texts = {llama3.token_bytes(int(t)) for t in allowed if not llama3.is_special(int(t))}
    assert texts and all(t.lstrip(b" ").startswith(b'"') for t in texts if t.strip())  # the url is a string
    assert b"1" not in texts and b"true" not in texts


def test_no_anchor_is_offered_where_the_schema_cannot_place_the_value():
    schema = {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": False}}}
    # nothing may sit at /a/b, so neither /a/b/c nor /a/b is an anchor; /a is
    assert [v.pointer for v, _ in anchors(schema, b'{"a": {"b": {"c": ', max_depth=64, max_anchors=4)] == ["/a"]


def test_anchors_are_tried_innermost_first_and_capped():
    schema = {"type": "array", "items": {"$ref": "#"}}
    found = list(anchors(schema, b"[[[[[[[[[", max_depth=64, max_anchors=3))
    assert [v.pointer for v, _ in found] == ["/0/0/0/0/0/0/0/0", "/0/0/0/0/0/0/0", "/0/0/0/0/0/0"]


@pytest.mark.slow
def test_the_engine_keeps_a_schema_constraint_below_a_broken_value():
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec

    schema = bundled_schema_text("package.json")
    prefix = '{\n  "name": "demo",\n  "version": "1.0.0",\n  "private": "yes",\n  "repository": {"type": "git", "url": '
    engine = CompletionEngine()
    engine.load()
    done = engine.complete(
        CompletionRequest(
            prefix=prefix,
            suffix="}\n}\n",
            language="json",
            grammar=GrammarSpec(kind="json_schema", source=schema),
            max_tokens=16,
        )
    )
    assert done.note.startswith("grammar constrains /repository only"), done.note
    assert done.text.lstrip().startswith('"'), done.text


def test_an_editor_schema_with_unique_items_is_relaxed_and_says_so():
    # No grammar can check uniqueItems; the engine API refuses it by default, but an
    # editor's schema must still constrain the rest, with the relaxation reported.
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec

    spec = GrammarSpec(
        kind="json_schema", source='{"type": "array", "items": {"type": "integer"}, "uniqueItems": true}'
    )
    engine = CompletionEngine()
    grammar, whole_document, note = engine.grammar_for(CompletionRequest(prefix="[", language="json", grammar=spec))
    assert grammar is not None and whole_document
    assert note.startswith("schema relaxed:") and "uniqueItems" in note


def test_an_editor_schema_with_an_overlapping_one_of_is_relaxed_and_says_so():
    # A oneOf the compiler can neither prove exclusive nor complement (each branch beside
    # the other three's complements would ask for three members): refused by the engine
    # API, but an editor's document keeps its constraint, as anyOf, with a note.
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec

    schema = {
        "type": "object",
        "properties": {
            "style": {
                "oneOf": [
                    {"type": "object", "properties": {"color": {"type": "string"}}},
                    {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}},
                    {"type": "object", "patternProperties": {"^y-": {"type": "integer"}}},
                    {"type": "object", "patternProperties": {"^z-": {"type": "integer"}}},
                ]
            }
        },
    }
    spec = GrammarSpec(kind="json_schema", source=json.dumps(schema))
    grammar, whole_document, note = CompletionEngine().grammar_for(
        CompletionRequest(prefix='{"style": {', language="json", grammar=spec)
    )
    assert grammar is not None and whole_document
    assert note.startswith("schema relaxed: oneOf at #/properties/style: compiled as anyOf"), note


def test_a_closed_schema_still_allows_the_documents_own_schema_key(llama3):
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec

    schema = {"type": "object", "properties": {"port": {"type": "integer"}}, "additionalProperties": False}
    spec = GrammarSpec(kind="json_schema", source=json.dumps(schema))
    doc = '{"$schema": "./server.schema.json", "port": '
    grammar, _, note = CompletionEngine().grammar_for(CompletionRequest(prefix=doc, language="json", grammar=spec))
    assert grammar is not None and note == ""
    assert _accepts(llama3, grammar, doc.encode())
    assert not _accepts(llama3, grammar, b'{"other": 1')  # still closed to every other key
