"""The shortcuts that keep JSON Schema compilation fast, each against the plain
definition it replaces: character-set algebra, literal escaping, pruning without a
second builder, object member states, and oneOf disjointness on separately parsed
regexes.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from midword.engine.grammar import GrammarBuilder, regex_escape_bytes, validate
from midword.engine.jsonschema import compile_json_schema
from midword.engine.limits import GrammarError
from midword.engine.recognizer import grammar_accepts
from midword.engine.regex import charset
from midword.engine.regex.charset import ALL as _ALL
from midword.engine.regex.charset import ECMA_DOT as _DOT
from midword.engine.regex.charset import WORD as _WORDS
from midword.engine.regex.charset import complement as _cs_complement
from midword.engine.regex.charset import intersect as _cs_intersect
from midword.engine.regex.charset import normalize as _cs

_SPECIAL = charset.normalize([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])

_SURROGATES = set(range(0xD800, 0xE000))


# Code points where character sets are interesting (near 0, around the surrogates, at
# the top); the whole universe is too big to list for every set.
_PROBE_RANGES = ((0, 0x10F), (0xD7E0, 0xE01F), (0x10FEF0, 0x10FFFF))
_PROBE = {cp for lo, hi in _PROBE_RANGES for cp in range(lo, hi + 1)}


def _points(s: tuple) -> set[int]:
    return {cp for lo, hi in s for plo, phi in _PROBE_RANGES for cp in range(max(lo, plo), min(hi, phi) + 1)}


def _random_set(rnd: random.Random) -> tuple:
    ranges = []
    for _ in range(rnd.randrange(5)):
        # Near 0, around the surrogates and near the top: where the edge cases are.
        a = rnd.choice([rnd.randrange(0x100), rnd.randrange(0xD7F0, 0xE010), rnd.randrange(0x10FF00, 0x110000)])
        ranges.append((a, min(0x10FFFF, a + rnd.choice([0, 1, 7, 40]))))
    return _cs(ranges)


def _is_normal(s: tuple) -> bool:
    return all(lo <= hi for lo, hi in s) and all(a[1] + 1 < b[0] for a, b in zip(s, s[1:], strict=False))


def test_charset_algebra_matches_point_sets():
    rnd = random.Random(7)
    sets = [_random_set(rnd) for _ in range(60)] + [(), _ALL, _DOT, _SPECIAL, _WORDS]
    points = {s: _points(s) for s in sets}
    for a in sets:
        comp = _cs_complement(a)
        assert _is_normal(comp)
        assert _points(comp) == _PROBE - points[a] - _SURROGATES
    for a, b in itertools.product(sets, sets):
        both = _cs_intersect(a, b)
        assert _is_normal(both)
        assert _points(both) == points[a] & points[b]


def test_regex_escape_bytes_is_per_character():
    def reference(text: str) -> str:
        out = []
        for ch in text:
            o = ord(ch)
            if o >= 0x80 or ch.isalnum() or ch == "_":
                out.append(ch)
            elif 0x20 < o < 0x7F:
                out.append("\\" + ch)
            else:
                out.append(f"\\x{o:02x}")
        return "".join(out)

    text = "".join(chr(i) for i in range(0x100)) + "é\u2028😀"
    assert regex_escape_bytes(text.encode()) == reference(text)
    assert regex_escape_bytes(b"\xff\x00") == "(?#bytes:ff00)"


def test_builder_literal_is_stable_across_str_and_bytes():
    b = GrammarBuilder()
    comma = b.literal(",")
    assert b.literal(b",") == comma == b.literal(",")
    assert b.lexeme("other name", "\\,") == comma
    assert b.lexemes[~comma].literal == b","


def _reachable_and_used(g) -> tuple[bool, bool]:
    by_lhs: dict[int, list] = {}
    for r in g.rules:
        by_lhs.setdefault(r.lhs, []).append(r)
    seen, stack, lexemes = {g.start}, [g.start], set()
    while stack:
        for r in by_lhs.get(stack.pop(), ()):
            for s in r.rhs:
                if s < 0:
                    lexemes.add(~s)
                elif s not in seen:
                    seen.add(s)
                    stack.append(s)
    return len(seen) == len(g.nonterminals), len(lexemes) == len(g.lexemes)


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {}},
            "required": ["b"],
        },
        {
            "type": "object",
            "properties": {k: {"type": "boolean"} for k in "abcdef"},
            "required": ["a", "d"],
            "minProperties": 3,
            "maxProperties": 4,
        },
        {"type": "object", "properties": {"x": {"type": "null"}}, "additionalProperties": False},
        # Pruning has work to do: the first branch needs a value of an impossible schema.
        {
            "anyOf": [
                {"type": "object", "properties": {"a": {"not": {}}}, "required": ["a"]},
                {"type": "array", "items": {"type": "string"}},
            ]
        },
        {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
    ],
)
def test_pruned_grammars_are_valid_and_tight(schema):
    g = compile_json_schema(schema)
    validate(g)
    assert _reachable_and_used(g) == (True, True)


def test_object_member_states_keep_counts():
    # Required members first among optional ones, with a member-count window: the states
    # made only for reachable counts must still count exactly.
    schema = {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in "abcd"},
        "required": ["b"],
        "minProperties": 2,
        "maxProperties": 3,
        "additionalProperties": False,
    }
    g = compile_json_schema(schema, whitespace="compact")
    for n in range(5):
        for keys in itertools.combinations("abcd", n):
            text = json.dumps({k: 1 for k in keys}, separators=(",", ":"))
            want = "b" in keys and 2 <= n <= 3
            assert grammar_accepts(g, text.encode()) == want, text
    loose = compile_json_schema(
        {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"], "minProperties": 3},
        whitespace="compact",
    )
    assert grammar_accepts(loose, b'{"a":1,"b":2,"z":3}')
    assert grammar_accepts(loose, b'{"b":2,"y":0,"z":3}')
    assert not grammar_accepts(loose, b'{"a":1,"b":2}')
    assert not grammar_accepts(loose, b'{"a":1,"y":0,"z":3}')


def test_one_of_string_branches_disjoint_by_pattern():
    schema = {
        "oneOf": [
            {"type": "string", "pattern": "^a+$"},
            {"type": "string", "pattern": "^b+$"},
            {"type": "string", "pattern": "^[ab]c$"},
        ]
    }
    g = compile_json_schema(schema, whitespace="compact")
    for text, ok in (('"aa"', True), ('"bbb"', True), ('"ac"', True), ('"ab"', False), ('""', False)):
        assert grammar_accepts(g, text.encode()) == ok, text
    # Overlapping patterns are not disjoint: compiled as "one and not the others".
    g = compile_json_schema(
        {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]}, whitespace="compact"
    )
    assert grammar_accepts(g, b'"ax"') and grammar_accepts(g, b'"xb"')
    assert not grammar_accepts(g, b'"ab"')


def test_untyped_schema_shortcut_keeps_errors():
    # A schema with no type keyword and no type-specific keyword accepts anything...
    g = compile_json_schema({"description": "anything", "x-extra": 1}, whitespace="compact")
    for text in ("1", '"s"', "[]", "{}", "null", "true"):
        assert grammar_accepts(g, text.encode())
    # ...and type-specific keywords are still checked where present.
    with pytest.raises(GrammarError, match=r"minLength at #/properties/a/minLength"):
        compile_json_schema({"properties": {"a": {"minLength": -1}}})
    with pytest.raises(GrammarError, match=r"unsupported keyword 'extends' at #/properties/a"):
        compile_json_schema({"properties": {"a": {"extends": {}}}})
    with pytest.raises(GrammarError, match=r"multipleOf 0.97 at #/properties/n"):
        compile_json_schema({"properties": {"n": {"type": "number", "multipleOf": 0.97}}})


def test_keys_other_than_the_listed_ones_reach_the_lexer_as_one_exclusion():
    from midword.engine.jsonschema.strings import CANON_BODY, quoted
    from midword.engine.regex import ExprSet, term

    schema = {
        "type": "object",
        "properties": {"a b": {}, 'q"': {}, "ünï": {}},
        "additionalProperties": {"type": "integer"},
    }
    g = compile_json_schema(schema)
    (key,) = [lx for lx in g.lexemes if lx.name == "key"]
    # Built from its parts, never written as text for the lexer to parse: the listed
    # keys' encoded text taken out of the string body by one exclusion node.
    assert key.expr == quoted(term.excl(CANON_BODY, [b"a b", b'q\\"', "ünï".encode()]))
    es = ExprSet.shared()
    opening, rest = es._args[es.build(key.expr)]
    assert es.kind_name(es._args[rest][0]) == "exclude"
    assert grammar_accepts(g, '{"a b": {}, "ünï": 1, "zz": 3, "ün": 2, "q": 4}'.encode())
    assert not grammar_accepts(g, '{"ünï": 1, "ünï": 2}'.encode())  # a listed key is no other key
    assert not grammar_accepts(g, b'{"q\\"": 1, "q\\"": 2}')
    assert not grammar_accepts(g, b'{"zz": "3"}')  # other keys take integers
