"""Two readings of a pattern the compiler takes without a search.

- A pattern that asks only for some character of a set (`.+`, `\\S`, `[a-z]`,
  unanchored) is `(C - c)*·c·C*`, and the keys it does not match are `(C - c)*`, not
  the complement of `C*·c·C*`.
- A pattern's shortest string, read off its parse, shows that a length limit leaves
  some string without the emptiness search.
- A pattern of plain-text branches (`Normal|Fighting`, `^x-`) matches a listed key by a
  substring test instead of a state per character on the linear-time engine.

Each is checked against the definition: Python's search with the pattern's own
translation (`_Pattern.matches`), and the compiled grammar on keys and strings.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.engine.jsonschema import compile_json_schema
from midword.engine.jsonschema.patterns import pattern_to_regex
from midword.engine.limits import GrammarError
from midword.engine.recognizer import grammar_accepts
from midword.engine.regex import ExprSet, LazyDFA

CHARACTER_PRESENCE = [".+", ".{1,}", "\\S", "[a-c]", "x|[0-9]", "[a-z]{1,3}", "\\s+", "\\d"]
OTHER_SHAPES = ["^a", "ab", "a{2}", "^.+$", "^(?!x).", "[a-z]{2,}", "a*", "x|yz"]

# Characters that cross the pattern classes and JSON's escapes.
_ALPHABET = ["a", "b", "x", "z", "0", "7", " ", "\t", "\n", "\r", "\u2028", '"', "\\", "é", "\u00a0", "\x01"]
_texts = st.lists(st.sampled_from(_ALPHABET), max_size=6).map("".join)


def _body_matches(expr, text: str) -> bool:
    es = ExprSet()
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    return LazyDFA(es, es.build(expr)).matches(body.encode("utf-8"))


def test_the_character_presence_shape_is_recognised_and_no_other():
    for pattern in CHARACTER_PRESENCE:
        assert pattern_to_regex(pattern).char_set, pattern
    for pattern in OTHER_SHAPES:
        assert pattern_to_regex(pattern).char_set is None, pattern


@settings(max_examples=150, deadline=None)
@given(pattern=st.sampled_from(CHARACTER_PRESENCE + OTHER_SHAPES), text=_texts)
def test_the_read_up_to_the_first_character_form_matches_as_the_pattern(pattern, text):
    translated = pattern_to_regex(pattern)
    assert _body_matches(translated.expr, text) == translated.matches(text), (pattern, text)


@pytest.mark.parametrize("pattern", ["\\S", ".+", "[0-9]"])
@settings(max_examples=60, deadline=None)
@given(key=_texts)
def test_keys_outside_a_character_pattern_go_to_additional_properties(pattern, key):
    schema = {
        "type": "object",
        "properties": {"listed": {}},
        "patternProperties": {pattern: {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    grammar = compile_json_schema(schema)
    matched = pattern_to_regex(pattern).matches(key)
    if key == "listed":
        return
    as_string = json.dumps({key: "s"}, ensure_ascii=False).encode()
    as_integer = json.dumps({key: 1}, ensure_ascii=False).encode()
    assert grammar_accepts(grammar, as_string) == matched, (pattern, key)
    assert grammar_accepts(grammar, as_integer) == (not matched), (pattern, key)
    # A listed key the pattern matches takes the pattern's schema too; beside it the
    # key is still judged alone.
    listed = "s" if pattern_to_regex(pattern).matches("listed") else True
    assert grammar_accepts(
        grammar, json.dumps({"listed": listed, key: "s" if matched else 1}, ensure_ascii=False).encode()
    )
    assert not grammar_accepts(
        grammar, json.dumps({"listed": listed, key: 1 if matched else "s"}, ensure_ascii=False).encode()
    )


@pytest.mark.parametrize(
    "pattern,fewest",
    [
        ("^a{2,}b$", 3),
        ("x|yz", 1),
        ("^$", 0),
        ("^(ab|c)d?$", 1),
        ("^[a-z]{3}(-[0-9]+)*$", 3),
        ("^(?=a).{2}$", None),  # a lookahead: no witness read off the parse
        ("^(?=a)b|^cc$", 2),  # the branch without one still gives a witness
    ],
)
def test_fewest_characters_read_off_the_parse(pattern, fewest):
    assert pattern_to_regex(pattern).fewest_chars == fewest


@pytest.mark.parametrize(
    "string,fits,misses",
    [
        ({"pattern": "^(?:\\S+\\s+){0,11}\\S+$", "maxLength": 120}, "two words", "x" * 121),
        ({"pattern": "^[a-z]{3}$", "minLength": 3, "maxLength": 3}, "abc", "abcd"),
        ({"pattern": "^(?=x).{2,}$", "maxLength": 4}, "xyz", "yyy"),  # the search decides
    ],
)
def test_a_pattern_under_limits_keeps_its_strings(string, fits, misses):
    grammar = compile_json_schema({"type": "string", **string})
    assert grammar_accepts(grammar, json.dumps(fits).encode())
    assert not grammar_accepts(grammar, json.dumps(misses).encode())


@pytest.mark.parametrize(
    "string",
    [
        {"pattern": "^a{5}$", "maxLength": 3},
        {"pattern": "^[a-z]{3}$", "minLength": 4},
        {"pattern": "^(?=x)y", "maxLength": 9},
    ],
)
def test_a_pattern_no_string_within_the_limits_fits_is_refused(string):
    with pytest.raises(GrammarError):
        compile_json_schema({"type": "string", **string})


def test_a_string_found_without_a_search_spares_the_lexer_its_own():
    # A word-count pattern beside maxLength: its shortest string (one character) fits,
    # so the compiler knows the lexeme has a string and tells the expression set; the
    # lexer then makes the lexeme's start state without the window analysis.
    from midword.engine.lexer import START_UNDECIDED, Lexer

    schema = {"type": "string", "pattern": "^(?:\\S+\\s+){0,11}\\S+$", "maxLength": 120}
    g = compile_json_schema(schema)
    lexer = Lexer(g)
    constrained = [i for i, lx in enumerate(g.lexemes) if lx.expr is not None]
    assert constrained
    for i in constrained:
        assert lexer.start_codes[i] != START_UNDECIDED
        assert lexer.exprs.emptiness_known(lexer.lexeme_expr[i]) is False
    # And the answer is right: a fitting string is accepted, one past the limit is not.
    assert grammar_accepts(g, json.dumps("two words").encode())
    assert not grammar_accepts(g, json.dumps("w " * 60 + "w").encode())


_LITERAL_PIECES = st.lists(st.sampled_from(["a", "b", "x", "é", "\\.", "\\$", "\\n", " "]), max_size=3).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    branches=st.lists(st.tuples(st.booleans(), _LITERAL_PIECES, st.booleans()), min_size=1, max_size=3),
    text=st.lists(st.sampled_from(["a", "b", "x", "é", ".", "$", "\n", " ", "ab", "\u2028"]), max_size=5).map("".join),
)
def test_plain_text_branches_match_as_the_pattern(branches, text):
    pattern = "|".join(("^" if start else "") + body + ("$" if end else "") for start, body, end in branches)
    pr = pattern_to_regex(pattern)
    assert pr.literals is not None, pattern
    expected = _body_matches(pr.expr, text)
    assert pr.matches_literally(text) == expected, (pattern, text)
    assert pr.matches(text) == expected


def test_plain_text_is_read_only_where_the_pattern_is_plain_text():
    assert pattern_to_regex("Normal|Fighting").literals == ((False, False, "Normal"), (False, False, "Fighting"))
    assert pattern_to_regex("^x-").literals == ((True, False, "x-"),)
    assert pattern_to_regex("^a$|b").literals == ((True, True, "a"), (False, False, "b"))
    for other in ("a.c", "a{2}", "^(?!x)a", "[ab]", "a|b+", "\\d"):
        assert pattern_to_regex(other).literals is None, other


def test_listed_keys_matching_plain_text_patterns_take_both_schemas():
    # "Fire" and "Ember (night)" match the pattern, so their values are numbers at most 4
    # as well as what their own properties say; "Ice" matches nothing and gets
    # additionalProperties.
    schema = {
        "type": "object",
        "properties": {"Fire": {"type": "integer"}, "Ice": {"type": "string"}, "Ember (night)": {"minimum": 1}},
        "patternProperties": {"Fire|Ember": {"type": "number", "maximum": 4}},
        "additionalProperties": {"type": "boolean"},
    }
    g = compile_json_schema(schema)

    def accepts(value) -> bool:
        return grammar_accepts(g, json.dumps(value).encode())

    assert accepts({"Fire": 3, "Ice": "x", "Ember (night)": 2, "other": True})
    assert not accepts({"Fire": 5})
    assert not accepts({"Fire": 2.5})
    assert not accepts({"Ember (night)": 0})
    assert not accepts({"Ember (night)": 5})
    assert not accepts({"other": 1})
    assert accepts({"Firefly": 4})
