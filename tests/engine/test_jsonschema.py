"""Tests for the JSON Schema front end (engine/jsonschema.py).

Three layers: the regex builders against Python's `re` and exact arithmetic, the
compiled grammars against hand-written instances through the real lexer and Earley
parser (`grammar_accepts`), and the MaskBench development set.
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
from decimal import Decimal

import jsonschema
import pytest

from midword.engine.grammar import Grammar
from midword.engine.jsonschema import (
    RELAXED_KEYWORDS,
    SUPPORTED_FORMATS,
    compile_json_schema,
    integer_range_regex,
    multiple_of_regex,
    number_range_regex,
    pattern_to_regex,
    schema_ordered,
)
from midword.engine.limits import GrammarError
from midword.engine.recognizer import grammar_accepts
from midword.engine.regex import ExprSet, LazyDFA

MASKBENCH = "/work/shared/data/maskbench-dev"


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def accepts(grammar: Grammar, text: str) -> bool:
    return grammar_accepts(grammar, text.encode("utf-8"))


def dumps_all(value) -> list[str]:
    """The spellings an instance is checked in: compact, default separators, indented."""
    return [
        json.dumps(value, ensure_ascii=False, separators=(",", ":")),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, ensure_ascii=False, indent=2),
    ]


def check(schema, valid=(), invalid=(), **options):
    g = compile_json_schema(schema, **options)
    for v in valid:
        # The grammar writes listed properties in schema order (validity ignores order).
        v = schema_ordered(schema, v, options.get("documents"))
        for text in dumps_all(v):
            assert accepts(g, text), f"valid instance rejected: {text!r}\n{g}"
    for v in invalid:
        for text in dumps_all(v):
            assert not accepts(g, text), f"invalid instance accepted: {text!r}\n{g}"
    return g


def midword_match(regex: str, text: str, extended: bool = False) -> bool:
    es = ExprSet()
    return LazyDFA(es, es.parse(regex, "", extended=extended)).matches(text.encode("utf-8"))


def term_match(expr: tuple, text: str) -> bool:
    es = ExprSet()
    return LazyDFA(es, es.build(expr)).matches(text.encode("utf-8"))


# --------------------------------------------------------------------------------------
# number regexes
# --------------------------------------------------------------------------------------

_INT_WINDOW = range(-1300, 1301)
_BOUNDS = [None, -1000, -999, -101, -100, -99, -10, -9, -1, 0, 1, 7, 9, 10, 11, 99, 100, 123, 999, 1000, 1234]


def test_integer_range_regex_matches_exactly_the_range():
    for lo in _BOUNDS:
        for hi in _BOUNDS:
            r = integer_range_regex(lo, hi)
            if lo is not None and hi is not None and lo > hi:
                assert r is None
                continue
            c = re.compile(r)
            for n in _INT_WINDOW:
                want = (lo is None or n >= lo) and (hi is None or n <= hi)
                assert (c.fullmatch(str(n)) is not None) == want, (lo, hi, n, r)
            # Only canonical JSON integers.
            for bad in ("007", "-0" if (lo is not None and lo > 0) else "01", "+5", "1.0", "", "-"):
                assert c.fullmatch(bad) is None, (lo, hi, bad, r)


def test_integer_range_regex_large_bounds():
    lo, hi = -(10**20) + 7, 10**25 - 3
    c = re.compile(integer_range_regex(lo, hi))
    rnd = random.Random(1)
    for _ in range(3000):
        n = rnd.randint(lo - 10**21, hi + 10**26)
        assert (c.fullmatch(str(n)) is not None) == (lo <= n <= hi), n
    for n in (lo, hi, lo - 1, hi + 1):
        assert (c.fullmatch(str(n)) is not None) == (lo <= n <= hi)


def _number_samples():
    rnd = random.Random(7)
    out = {"0", "-0", "0.0", "1", "-1", "10", "0.5", "-0.5", "1e-06", "1.5e-07", "1e+16", "2.5E3", "-1e-05", "9.999"}
    for _ in range(1500):
        i = rnd.choice(["0", str(rnd.randint(1, 40)), str(rnd.randint(1, 3000))])
        frac = rnd.choice(["", "." + str(rnd.randint(0, 999)).zfill(rnd.randint(1, 4)), ".0", ".50", ".001"])
        sign = rnd.choice(["", "-"])
        out.add(sign + i + frac)
    return sorted(out)


def test_number_range_regex_exact_against_decimal_arithmetic():
    samples = _number_samples()
    bounds = [
        None,
        Decimal("0"),
        Decimal("1"),
        Decimal("-1"),
        Decimal("0.5"),
        Decimal("-2.25"),
        Decimal("12.75"),
        Decimal("100"),
        Decimal("0.001"),
        Decimal("-0.05"),
        Decimal("3.14159"),
    ]
    for lo in bounds:
        for hi in bounds:
            for lox in (False, True):
                for hix in (False, True):
                    if lo is None and lox or hi is None and hix:
                        continue
                    r = number_range_regex(lo, lox, hi, hix)
                    empty = lo is not None and hi is not None and (lo > hi or (lo == hi and (lox or hix)))
                    if empty:
                        assert r is None
                        continue
                    c = re.compile(r)
                    for t in samples:
                        d = Decimal(t)
                        inside = (lo is None or d > lo or (d == lo and not lox)) and (
                            hi is None or d < hi or (d == hi and not hix)
                        )
                        m = c.fullmatch(t) is not None
                        if m:
                            assert inside, (lo, lox, hi, hix, t, r)
                        # Plain decimals in range are always matched; "-0" spellings may not be.
                        elif inside and "e" not in t.lower() and not t.startswith("-0"):
                            raise AssertionError((lo, lox, hi, hix, t, r))


def test_number_range_exponent_forms_only_where_in_range():
    c = re.compile(number_range_regex(Decimal(0), False, None, False))
    assert c.fullmatch("1e-06") and c.fullmatch("1e+16") and c.fullmatch("0")
    assert not c.fullmatch("-1e-06")
    c = re.compile(number_range_regex(Decimal(0), True, Decimal(1), False))
    assert c.fullmatch("1e-06") and not c.fullmatch("0e-06") and not c.fullmatch("1e+16")
    c = re.compile(number_range_regex(Decimal(5), False, Decimal(20), False))
    assert not c.fullmatch("1e-06") and not c.fullmatch("1e+1")  # 10, but spelled with exponent: not generated


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 16, 20, 25, 30, 50, 60, 125, 150])
def test_multiple_of_regex(k):
    # Read by midword's own regex engine: a k with a factor prime to 10 and one dividing a
    # power of 10 (12, 30, 150) meets the two with `&`.
    r = multiple_of_regex(k)
    assert r is not None
    es = ExprSet()
    dfa = LazyDFA(es, es.parse(r, "", extended=True))
    for n in range(-2500, 2501):
        assert dfa.matches(str(n).encode()) == (n % k == 0), (k, n)
    # -0 is zero; no other spelling with a leading zero is JSON.
    assert dfa.matches(b"-0") and not dfa.matches(b"00") and not dfa.matches(b"012") and not dfa.matches(b"")


def _decimal_spellings() -> list[str]:
    rng = random.Random(5)
    whole = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 25, 30, 45, 75, 99, 100, 105, 120, 225, 1234]
    fraction = ["", ".0", ".00", ".5", ".50", ".25", ".75", ".2", ".3", ".6", ".05", ".15", ".45", ".125", ".35", ".1"]
    return sorted({rng.choice(["", "-"]) + str(rng.choice(whole)) + rng.choice(fraction) for _ in range(600)})


@pytest.mark.parametrize("mult", ["1.5", "0.5", "2.5", "0.25", "0.75", "1.2", "0.3", "0.15", "7.5", "0.125", "0.01"])
@pytest.mark.parametrize("kind", ["number", "integer"])
def test_multiple_of_a_decimal_is_exact(mult, kind):
    """A multiple of any decimal k/10^c, checked against exact arithmetic on spellings
    with 0 to 3 decimals and trailing zeros (the suite's `multipleOf: 1.5`)."""
    from fractions import Fraction

    g = compile_json_schema({"type": kind, "multipleOf": json.loads(mult)})
    step = Fraction(Decimal(mult))
    negated: Grammar | None = None
    if kind == "number" or step.numerator != 1:
        negated = compile_json_schema({"type": kind, "not": {"multipleOf": json.loads(mult)}})
    else:
        # Every integer is a multiple of 1/q: nothing is left, and the compiler says so.
        with pytest.raises(GrammarError, match="accepts no JSON value"):
            compile_json_schema({"type": kind, "not": {"multipleOf": json.loads(mult)}})
    for text in _decimal_spellings():
        value = Fraction(Decimal(text))
        right_kind = kind == "number" or value.denominator == 1
        multiple = (value / step).denominator == 1
        assert grammar_accepts(g, text.encode()) == (multiple and right_kind), (mult, kind, text)
        if negated is not None:
            assert grammar_accepts(negated, text.encode()) == (not multiple and right_kind), ("not", mult, kind, text)
    if negated is not None and kind == "number":
        # The multiples' regexes spell no exponent, so the complement refuses every
        # exponent spelling rather than let a multiple through in that dress.
        assert not grammar_accepts(negated, b"15e-1") and not grammar_accepts(negated, b"3E0")


def test_number_regexes_parse_in_midword_engine():
    assert midword_match(multiple_of_regex(6), "-36", True) and not midword_match(multiple_of_regex(6), "-34", True)
    assert midword_match(integer_range_regex(-17, 2345), "-17")
    assert not midword_match(integer_range_regex(-17, 2345), "-18")
    assert midword_match(number_range_regex(Decimal("-1.5"), True, Decimal("20.25"), False), "20.25")
    assert not midword_match(number_range_regex(Decimal("-1.5"), True, Decimal("20.25"), False), "-1.5")


# --------------------------------------------------------------------------------------
# patterns
# --------------------------------------------------------------------------------------

_PATTERN_CASES = [
    ("^abc$", ["abc"], ["abcd", "xabc", ""]),
    ("abc", ["abc", "xxabcxx"], ["ab", "acb"]),
    ("^a+b?$", ["a", "aab"], ["b", "abb"]),
    ("^[a-z0-9_-]{2,4}$", ["ab", "a-_9"], ["a", "abcde", "AB"]),
    (r"^\d{3}-\d{4}$", ["555-1234"], ["5551234", "٣٣٣-1234"]),
    (r"^\w+@\w+\.com$", ["a@b.com"], ["a@b.org", "é@b.com"]),
    (r"^[^\s]+$", ["abc", 'a"b'], ["a b", "a\tb", "a\u00a0b"]),
    ("^(foo|bar)baz$", ["foobaz", "barbaz"], ["baz", "foobarbaz"]),
    ("^a|b$", ["axx", "xxb"], ["xax"]),
    ("^.$", ["x", "é", '"', "\\"], ["\n", "ab", ""]),
    (r"^\p{Lu}+$", ["ABC", "ÀÉ"], ["abc", "A1"]),
    ('^[^"]*$', ["abc"], ['a"b']),
    (r"^\u00e9\x41$", ["éA"], ["eA"]),
    ("^(?!foo).*$", ["bar", "fo"], ["foo", "foobar"]),
    ("^(?=.*[0-9]).{3}$", ["a1b", "123"], ["abc", "a1bc"]),
    ("^[\\]a-]+$", ["]a-"], ["b"]),
    ("^([^,]|$)", ["", "a", "ab"], [",", ",a"]),
    ("(a|^b)c", ["xac", "bc"], ["xbc"]),
    ("^((?!(c|C)lyde).)*$", ["bob", "cly de"], ["clyde", "xxClydeyy"]),
    ("x{2}y{1,}", ["xxy", "axxyyb"], ["xy"]),
    ("^\\\\$", ["\\"], ["\\\\"]),
]


@pytest.mark.parametrize("pattern,good,bad", _PATTERN_CASES)
def test_pattern_translation_both_sides(pattern, good, bad):
    p = pattern_to_regex(pattern)
    for s in good:
        assert p.matches(s), (pattern, s)
        body = json.dumps(s, ensure_ascii=False)[1:-1]
        assert term_match(p.expr, body), (pattern, s, p.expr)
    for s in bad:
        assert not p.matches(s), (pattern, s)
        body = json.dumps(s, ensure_ascii=False)[1:-1]
        assert not term_match(p.expr, body), (pattern, s, p.expr)


def test_pattern_translation_agrees_with_python_search_on_plain_patterns():
    # Patterns where ECMA and Python agree: the py side is a fullmatch of the
    # search language, so it must equal re.search.
    rnd = random.Random(3)
    patterns = ["ab", "^ab", "ab$", "^a.c$", "[xyz]+", "^(a|bc)*$", "a{2,3}", "^[^a]b", "(ab|cd)e?f"]
    alphabet = "abcdefxyz"
    for pat in patterns:
        p = pattern_to_regex(pat)
        for _ in range(300):
            s = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))
            assert p.matches(s) == (re.search(pat, s) is not None), (pat, s)


@pytest.mark.parametrize(
    "pattern",
    [
        r"^(\/?((\.{2})|([a-z0-9\-]*))($|\/))*$",  # a path pattern of real schemas
        r"a($|b)c?",
        r"(a$)*b",
        r"(?:a|b$){2,3}",
        r"^(a(b|$))+$",
        r"^(ab|$)+",
        r"(?:^[\*]|[a-z0-9])\.[a-z]",  # a host pattern of JSON Schema Store
        r"(^a|b)+c",
        r"(?:b|^a){1,3}$",
        r"(^|/)ab",
        r"c(^|$)",
    ],
)
def test_anchors_inside_a_pattern(pattern):
    # A `$` inside a group ends the text, a `^` starts it: the matches through one are
    # a branch of their own, anchored there.
    import random

    g = compile_json_schema({"type": "string", "pattern": pattern})
    rnd = random.Random(pattern)
    for _ in range(300):
        text = "".join(rnd.choice("ab/c.-*") for _ in range(rnd.randint(0, 7)))
        assert grammar_accepts(g, json.dumps(text).encode()) == (re.search(pattern, text) is not None), text
    # Text after a `$` (before a `^`) that cannot match the empty string: no string
    # matches at all.
    for never in ("^(a)*$(b)", "a(^b)"):
        with pytest.raises(GrammarError, match="accepts no JSON value"):
            compile_json_schema({"type": "string", "pattern": never})


@pytest.mark.parametrize(
    "pattern,msg",
    [
        (r"(a)\1", "backreference"),
        (r"(?<=a)b", "lookbehind"),
        (r"\bfoo", "word boundary"),
        ("a(?!b)c", "lookahead"),
        ("[a", "unterminated"),
        ("a**", "nothing to repeat"),
        (r"\p{Script=Greek}", "unicode property"),
    ],
)
def test_unsupported_patterns_fail_with_pointer(pattern, msg):
    with pytest.raises(GrammarError) as e:
        compile_json_schema({"properties": {"x": {"type": "string", "pattern": pattern}}})
    assert msg in str(e.value) and "#/properties/x/pattern" in str(e.value)


# --------------------------------------------------------------------------------------
# schemas: types, strings, numbers
# --------------------------------------------------------------------------------------


def test_empty_schema_and_true_accept_any_json():
    values = [None, True, 0, -1.5e10, "x", [], {}, {"a": [1, {"b": None}]}, [[[]]], 'é\n"\\']
    check({}, valid=values)
    check(True, valid=values)
    g = compile_json_schema({})
    assert not accepts(g, "{") and not accepts(g, "01") and not accepts(g, "'a'") and not accepts(g, "[1,]")
    assert accepts(g, '"\\u00e9\\/\\ud83d\\ude00"')
    assert not accepts(g, '"\\ud83d"') and not accepts(g, '"\x01"')


def test_false_root_is_an_error():
    with pytest.raises(GrammarError, match="accepts no JSON value"):
        compile_json_schema(False)
    with pytest.raises(GrammarError):
        compile_json_schema({"type": "integer", "minimum": 5, "maximum": 4})


def test_type_keyword():
    check({"type": "null"}, valid=[None], invalid=[0, "null", False])
    check({"type": "boolean"}, valid=[True, False], invalid=[0, None])
    check({"type": ["string", "null"]}, valid=["a", None], invalid=[1, [], {}])
    check({"type": "integer"}, valid=[0, -5, 10**20], invalid=[1.5, "1", None])
    check({"type": "number"}, valid=[0, -5, 1.5, 1e-7, 1e300], invalid=["1", None, True])
    check({"type": "array"}, valid=[[], [1, "a", None]], invalid=[{}, "[]"])
    check({"type": "object"}, valid=[{}, {"a": 1}], invalid=[[], "{}"])
    with pytest.raises(GrammarError, match="unknown type 'str'"):
        compile_json_schema({"type": "str"})


def test_string_lengths_count_characters_not_bytes():
    g = check(
        {"type": "string", "minLength": 2, "maxLength": 3}, valid=["ab", "abc", "éé", "a\n"], invalid=["a", "abcd", ""]
    )
    assert accepts(g, '"\\ud83d\\ude00a"')  # a surrogate pair is one character
    assert not accepts(g, '"\\ud83d\\ude00"')
    assert accepts(g, '"\\u0041\\/"')  # unconstrained spellings: any JSON escape


def test_string_pattern_and_length_are_one_lexeme():
    g = check(
        {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
        valid=["abc", "abcde"],
        invalid=["", "abcdef", "ABC", "ab1"],
    )
    strings = [lx for lx in g.lexemes if lx.name.startswith("string")]
    assert len(strings) == 1 and strings[0].expr is not None and "&" in strings[0].regex


def test_pattern_is_checked_on_decoded_text():
    # '\n' in the pattern is the decoded newline, spelled \n in JSON.
    check({"type": "string", "pattern": "^a\nb$"}, valid=["a\nb"], invalid=["anb", "a\\nb"])
    check({"type": "string", "pattern": '^"[^"]*"$'}, valid=['"quoted"'], invalid=["quoted", '"a"b"'])


@pytest.mark.parametrize(
    "fmt,good,bad",
    [
        ("date", ["2024-02-29", "1999-12-31"], ["2024-13-01", "2024-04-31", "24-01-01"]),
        ("time", ["10:20:30Z", "23:59:60+01:00", "01:02:03.5-05:30"], ["24:00:00Z", "10:20:30", "1:2:3Z"]),
        (
            "date-time",
            ["2024-01-02T03:04:05Z", "2024-01-02t03:04:05.123+02:00"],
            ["2024-01-02 03:04:05Z", "2024-01-02"],
        ),
        ("duration", ["P1Y2M", "PT5M", "P3W", "P1DT2H"], ["P", "PT", "P1W2D", "1Y"]),
        ("email", ["a.b@example.com", "x+y@sub.example.org"], ["a@", "@b.com", "a b@c.com"]),
        ("hostname", ["example.com", "a-b.c"], ["-a.com", "a..b", "a_b.com"]),
        ("ipv4", ["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "1.2.3", "01.2.3.4"]),
        ("ipv6", ["::1", "2001:db8::ff00:42:8329", "::ffff:192.0.2.1"], ["1:2:3", "12345::", ":::"]),
        (
            "uuid",
            ["123e4567-e89b-12d3-a456-426614174000"],
            ["123e4567e89b12d3a456426614174000", "g23e4567-e89b-12d3-a456-426614174000"],
        ),
        ("uri", ["https://example.com/a?b=c#d", "urn:isbn:123"], ["example.com", "http://a b", "1http://x"]),
        # Shapes the first table missed (the suite's optional format tests have more).
        ("date", ["2024-02-29", "2000-02-29", "0000-02-29"], ["2023-02-29", "2100-02-29", "1900-02-29"]),
        ("duration", ["P1Y2M3D", "PT1H2M3S"], ["P1Y2D", "PT1H2S"]),
        ("ipv6", ["1::d6:192.168.0.1", "1:2:3:4:5:6:1.2.3.4"], ["::ffff:01.2.3.4", "1:2:3:4:5:6:7:8:9"]),
        ("email", ["a@[127.0.0.1]", "o'brien+tag@b.example"], ["a@[127.0.0.1", "a.@b.c", "a@[256.0.0.1]"]),
        ("uri", ["http://[v1.fe]/", "http://u:p@[::1]:80/x"], ["http://example.com:abc/", "http:/[::1]"]),
        ("hostname", ["a" * 63 + "." + "b" * 63], [".".join(["a" * 63] * 4) + "x", "a" * 64]),
        ("uri-reference", ["//example.com/a", "../b?c#d", ""], ["\\\\host\\x", "#frag#"]),
        ("iri", ["http://ƒøø.ßår/?∂éœ=πîx#πîüx"], ["/abc", "http://[::ffff:192.168.0.01]"]),
        ("iri-reference", ["//ƒøø.com/a", "#ƒrägmênt"], ["#ƒräg\\mênt"]),
        ("uri-template", ["http://example.com/{term:1}/{term}", "{+var}", ""], ["{}", "{v:0}", "{a,}"]),
        ("json-pointer", ["", "/a~1b/~0", "/"], ["a", "/~2", "#/a"]),
        ("relative-json-pointer", ["0", "1/a", "2#"], ["01", "-1/a", "/a", "1#/a"]),
        ("idn-email", ["실례@실례.테스트", "café@example.com"], ["user＠example.com", "2962"]),
    ],
)
def test_formats(fmt, good, bad):
    assert fmt in SUPPORTED_FORMATS
    g = check({"type": "string", "format": fmt}, valid=good, invalid=bad)
    assert g.warnings == []


def test_unknown_format_is_a_recorded_relaxation():
    g = check({"type": "string", "format": "color"}, valid=["#fff", "anything"])
    assert any("format 'color'" in w for w in g.warnings)
    assert "format" in RELAXED_KEYWORDS
    with pytest.raises(GrammarError, match="strict"):
        compile_json_schema({"type": "string", "format": "color"}, strict=True)
    # Formats of other types are annotations: no warning.
    assert compile_json_schema({"type": "integer", "format": "int32"}).warnings == []


def test_integer_bounds():
    check({"type": "integer", "minimum": -3, "maximum": 12}, valid=[-3, 0, 12], invalid=[-4, 13, 1.5])
    check({"type": "integer", "exclusiveMinimum": 0}, valid=[1, 10**12], invalid=[0, -1])
    check({"type": "integer", "exclusiveMaximum": -10}, valid=[-11, -1000], invalid=[-10, 0, 5])
    check({"type": "integer", "minimum": 0.5, "maximum": 2.5}, valid=[1, 2], invalid=[0, 3])
    # draft-04 boolean form
    check({"type": "integer", "minimum": 5, "exclusiveMinimum": True}, valid=[6], invalid=[5])
    check({"type": "integer", "maximum": 5, "exclusiveMaximum": True}, valid=[4], invalid=[5])


@pytest.mark.parametrize(
    "dialect, zero_fraction_is_integer",
    [
        (None, True),
        ("https://json-schema.org/draft/2020-12/schema", True),
        ("http://json-schema.org/draft-07/schema#", True),
        ("http://json-schema.org/draft-06/schema#", True),
        ("http://json-schema.org/draft-04/schema#", False),
        ("http://json-schema.org/draft-03/schema#", False),
    ],
)
def test_an_integer_with_a_zero_fraction_follows_the_dialect(dialect, zero_fraction_is_integer):
    # From draft-06 on an integer is any number with a zero fractional part; draft-03 and
    # draft-04 say an integer has no fraction part (MaskBench's Github_easy---o24544, a
    # draft-04 schema, lists `"id": 12345.0` as invalid). A multiple of an integer is a
    # matter of value in every draft.
    head = {} if dialect is None else {"$schema": dialect}
    shapes = [
        {"type": "integer"},
        {"type": "integer", "minimum": 0, "maximum": 99999},
        {"type": "integer", "minimum": 0},
        {"type": "integer", "multipleOf": 5},
        {"type": "object", "properties": {"id": {"type": "integer"}}},
    ]
    for shape in shapes:
        g = compile_json_schema({**head, **shape})
        whole, fraction = ("12345", "12345.0") if "properties" not in shape else ('{"id":12345}', '{"id":12345.0}')
        assert accepts(g, whole)
        assert accepts(g, fraction) == zero_fraction_is_integer, (dialect, shape)
    g = compile_json_schema({**head, "type": "number", "multipleOf": 5})
    assert accepts(g, "12345.0") and accepts(g, "12345.00")
    assert not accepts(g, "12346.0")


def test_number_bounds():
    check({"type": "number", "minimum": 0}, valid=[0, 0.5, 1e-6, 1e16, 3], invalid=[-0.5, -1, -1e-6])
    check({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, valid=[0.5, 1, 1e-6], invalid=[0, 1.01, -0.5])
    check({"type": "number", "minimum": -2.5, "maximum": 2.5}, valid=[-2.5, 0, 2.49, 2.5], invalid=[-2.51, 2.5001, 3])
    check(
        {"type": "number", "exclusiveMinimum": 1.25, "exclusiveMaximum": 1.5},
        valid=[1.3, 1.4999],
        invalid=[1.25, 1.5, 1],
    )


def test_multiple_of():
    check({"type": "integer", "multipleOf": 3}, valid=[0, 3, -9, 300], invalid=[1, -4, 1.5])
    check({"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 50}, valid=[0, 7, 49], invalid=[1, 56, -7])
    check({"type": "number", "multipleOf": 5}, valid=[10, 10.0, -5], invalid=[2, 2.5])
    check({"type": "number", "multipleOf": 0.01}, valid=[1.25, 3, 0.1], invalid=[1.255, 0.001])
    check({"type": "integer", "multipleOf": 1.5}, valid=[0, 3, 6], invalid=[1, 2, 1.5])
    with pytest.raises(GrammarError, match="multipleOf 0.97 at #"):
        compile_json_schema({"type": "number", "multipleOf": 0.97})
    with pytest.raises(GrammarError, match="multipleOf 97 at #"):
        compile_json_schema({"type": "integer", "multipleOf": 97})


def test_anyof_integer_or_number_overlapping_lexemes():
    check(
        {"anyOf": [{"type": "integer"}, {"type": "number", "minimum": 100}]},
        valid=[1, -3, 150.5, 100],
        invalid=[1.5, "x"],
    )


# --------------------------------------------------------------------------------------
# schemas: enum, const
# --------------------------------------------------------------------------------------


def test_enum_and_const():
    check(
        {"enum": ["red", 1, None, [1, 2], {"a": True}]},
        valid=["red", 1, None, [1, 2], {"a": True}],
        invalid=["blue", 2, [2, 1], {"a": False}, True],
    )
    check({"const": 'a"b\n'}, valid=['a"b\n'], invalid=['a"b'])
    check({"type": "string", "enum": ["a", 1, "b"]}, valid=["a", "b"], invalid=[1])
    check({"enum": ["x"], "const": "x"}, valid=["x"])
    # Numbers by value, a JSON integer at any size (the suite's 2^53 case).
    g = check({"const": 2**53}, valid=[2**53, float(2**53)], invalid=[2**53 - 1, float(2**53 - 1)])
    assert not accepts(g, "9007199254740992.5")
    g = check({"enum": [-(10**20)]}, valid=[-(10**20)], invalid=[-(10**20) - 1])
    assert accepts(g, "-100000000000000000000.00")
    with pytest.raises(GrammarError, match="accepts no"):
        compile_json_schema({"type": "integer", "enum": ["a"]})
    g = compile_json_schema({"enum": ["on", "off"]})
    assert {lx.literal for lx in g.lexemes} >= {b'"on"', b'"off"'}


# --------------------------------------------------------------------------------------
# schemas: objects
# --------------------------------------------------------------------------------------


def test_properties_required_in_schema_order():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"],
        "additionalProperties": False,
    }
    g = check(
        schema,
        valid=[{"b": "x"}, {"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": True}, {"b": "x", "c": False}],
        invalid=[{}, {"a": 1}, {"b": 1}, {"b": "x", "d": 1}, {"a": 1, "a2": 2, "b": "x"}],
        key_order="schema",
    )
    # Schema order: a property out of order, or twice, is rejected.
    assert not accepts(g, '{"b":"x","a":1}')
    assert not accepts(g, '{"a":1,"a":2,"b":"x"}')
    assert not accepts(g, '{"a":1,,"b":"x"}') and not accepts(g, '{"b":"x",}')


def test_additional_properties_default_schema_and_exclusion_of_listed_names():
    schema = {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    g = check(schema, valid=[{}, {"a": 1}, {"a": 1, "x": "s"}, {"x": "s", "y": "t"}], invalid=[{"x": 1}, {"a": "s"}])
    # A listed name cannot come back as an additional property (nor be spelled with escapes).
    assert not accepts(g, '{"a":1,"a":"s"}')
    assert not accepts(g, '{"\\u0061":"s"}')
    # Default: anything goes after the listed properties.
    check({"properties": {"a": {"type": "integer"}}}, valid=[{"a": 1, "b": [None]}, {"z": {}}], invalid=[{"a": "s"}])


def test_required_without_properties_and_additional_false():
    check({"required": ["k"]}, valid=[{"k": 1}, {"k": None, "z": 2}], invalid=[{}, {"z": 1}])
    with pytest.raises(GrammarError, match="accepts no"):
        compile_json_schema({"type": "object", "required": ["k"], "additionalProperties": False})


def test_pattern_properties():
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string"}, "^n_": {"type": "number"}},
        "additionalProperties": False,
    }
    check(
        schema,
        valid=[{"id": 1, "x-a": "s", "n_b": 2}, {"x-": "", "n_": 0}],
        invalid=[{"x-a": 1}, {"n_b": "s"}, {"other": 1}, {"id": "s"}],
    )
    # A key matching two patterns must satisfy both schemas.
    both = {"patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 10}}, "additionalProperties": False}
    check(both, valid=[{"ab": 10, "a": 1, "b": 20}], invalid=[{"ab": 5}, {"ab": 10.5}, {"b": 5}, {"c": 1}])
    # A listed property also matching a pattern must satisfy both.
    check(
        {"properties": {"x-y": {"type": "string"}}, "patternProperties": {"^x-": {"minLength": 2}}},
        valid=[{"x-y": "ab"}],
        invalid=[{"x-y": "a"}, {"x-z": "a"}],
    )


def test_many_pattern_properties_told_apart_by_prefix():
    # Nine patterns of different schemas (the shape of JSON Schema Store's pyrseas schema):
    # pairwise disjoint, so a key falls in one class per pattern, plus none.
    kinds = ["table", "view", "function", "sequence", "type", "domain", "aggregate", "collation", "foreign table"]
    schema = {
        "type": "object",
        "patternProperties": {
            f"^{k} ": {"type": "object", "properties": {"n": {"const": i}}} for i, k in enumerate(kinds)
        },
        "additionalProperties": {"type": "string"},
    }
    check(
        schema,
        valid=[{"table t": {"n": 0}, "foreign table f": {"n": 8}, "view v": {}}, {"owner": "me"}],
        invalid=[{"table t": {"n": 1}}, {"view v": "x"}, {"owner": 1}, {"collation c": {"n": 6}}],
    )
    # Overlapping ones still meet: a key matching two patterns satisfies both, and one
    # matching none gets additionalProperties.
    overlapping = {
        "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 10}, "^z": {"type": "string"}},
        "additionalProperties": False,
    }
    check(overlapping, valid=[{"ab": 10, "zb": "s", "a": 1}], invalid=[{"ab": 5}, {"zb": 3}, {"c": 1}])
    # Past Limits.max_key_classes ways to overlap, a refusal naming the limit.
    crowded = {"patternProperties": {f"^a{'.' * i}x": {"maxLength": i + 1} for i in range(7)}}
    with pytest.raises(GrammarError, match="max_key_classes=64 exceeded"):
        compile_json_schema(crowded)


def test_min_max_properties():
    schema = {"properties": {"a": {}, "b": {}}, "minProperties": 1, "maxProperties": 2}
    check(
        schema,
        valid=[{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"z": 1}, {"a": 1, "z": 2}],
        invalid=[{}, {"a": 1, "b": 2, "c": 3}, {"x": 1, "y": 2, "z": 3}],
    )
    check(
        {"type": "object", "minProperties": 2},
        valid=[{"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}],
        invalid=[{}, {"a": 1}],
    )


def test_unevaluated_properties_without_applicators():
    check({"properties": {"a": {}}, "unevaluatedProperties": False}, valid=[{"a": 1}, {}], invalid=[{"b": 1}])
    with pytest.raises(GrammarError, match="unevaluatedProperties.*dependentSchemas"):
        compile_json_schema({"dependentSchemas": {"a": {"properties": {"b": {}}}}, "unevaluatedProperties": False})


def test_unevaluated_properties_beside_all_of_and_ref():
    # allOf and $ref evaluate what they declare, at any depth: an extended base, closed.
    extended = {
        "allOf": [{"$ref": "#/$defs/base"}],
        "properties": {"b": {"type": "string"}},
        "unevaluatedProperties": False,
        "$defs": {"base": {"properties": {"a": {}}, "allOf": [{"patternProperties": {"^x": {"type": "boolean"}}}]}},
    }
    check(
        extended,
        valid=[{"a": None, "b": "s", "x1": True}, {}, "not an object", [1]],
        invalid=[{"c": 1}, {"b": 1}, {"x1": 1}, {"a": 1, "y": True}],
    )
    typed_rest = {
        "$ref": "#/$defs/base",
        "properties": {"b": {"type": "string"}},
        "unevaluatedProperties": {"type": "integer"},
        "$defs": {"base": {"properties": {"a": {}}}},
    }
    check(typed_rest, valid=[{"a": None, "b": "s", "c": 3}], invalid=[{"c": "s"}, {"b": 1}, {"a": 1, "d": 1.5}])
    # An additionalProperties in a subschema evaluates every property.
    check({"allOf": [{"additionalProperties": True}], "unevaluatedProperties": False}, valid=[{"z": 1}])
    check({"$ref": "#/$defs/open", "unevaluatedProperties": False, "$defs": {"open": {}}}, invalid=[{"z": 1}])
    # A nested unevaluatedProperties evaluates every property of its scope.
    check(
        {"allOf": [{"unevaluatedProperties": True}], "unevaluatedProperties": False},
        valid=[{"z": 1}, {}],
    )
    # Both beside allOf: no property, no item.
    check(
        {"allOf": [{}], "unevaluatedProperties": False, "unevaluatedItems": False},
        valid=[{}, [], "s", 1],
        invalid=[{"a": 1}, [1]],
    )


def test_unevaluated_properties_beside_what_an_instance_decides():
    # anyOf: what every branch the instance matches evaluates, here two at once.
    any_of = {
        "properties": {"a": {}},
        "anyOf": [{"properties": {"b": {"type": "integer"}}}, {"properties": {"c": {"type": "integer"}}}],
        "unevaluatedProperties": False,
    }
    check(
        any_of,
        valid=[{"a": 1}, {"a": 1, "b": 2}, {"b": 1, "c": 2}, "s"],
        invalid=[{"d": 1}, {"b": "s", "c": "t"}, {"a": 1, "b": 2, "e": 3}],
    )
    # oneOf: the one branch matched; the other's names stay unevaluated.
    one_of = {
        "oneOf": [
            {"properties": {"kind": {"const": "a"}, "x": {}}, "required": ["kind"]},
            {"properties": {"kind": {"const": "b"}, "y": {}}, "required": ["kind"]},
        ],
        "unevaluatedProperties": False,
    }
    check(
        one_of,
        valid=[{"kind": "a", "x": 1}, {"kind": "b", "y": 1}, {"kind": "b"}],
        invalid=[{"kind": "a", "y": 1}, {"kind": "b", "x": 1}, {"kind": "c"}],
    )
    # if without then and else: what `if` evaluates counts where it matches; `not`
    # evaluates nothing.
    check(
        {"if": {"patternProperties": {"foo": {"type": "string"}}}, "unevaluatedProperties": False},
        valid=[{"foo": "a"}, {"xfoo": "b"}, {}],
        invalid=[{"foo": 1}, {"bar": "a"}],
    )
    check(
        {"properties": {"a": {}}, "not": {"not": {"properties": {"b": {}}}}, "unevaluatedProperties": False},
        valid=[{"a": 1}],
        invalid=[{"b": 1}],
    )
    # if/then/else: the if and then branch, or the else branch alone.
    check(
        {
            "if": {"properties": {"t": {"const": 1}}, "required": ["t"]},
            "then": {"properties": {"x": {}}},
            "else": {"properties": {"y": {}}},
            "unevaluatedProperties": False,
        },
        valid=[{"t": 1, "x": 0}, {"y": 0}, {}],
        invalid=[{"t": 1, "y": 0}, {"t": 2}, {"x": 0}],
    )


def test_dependencies():
    check({"dependentRequired": {"a": ["b"]}}, valid=[{}, {"b": 1}, {"a": 1, "b": 2}, 5], invalid=[{"a": 1}])
    check(
        {"dependencies": {"a": ["b"]}, "properties": {"a": {}, "b": {}}}, valid=[{"a": 1, "b": 2}], invalid=[{"a": 1}]
    )
    check(
        {"dependentSchemas": {"a": {"required": ["c"]}}}, valid=[{"c": 1}, {"a": 1, "c": 2}], invalid=[{"a": 1, "b": 2}]
    )
    check(
        {"dependencies": {"a": {"properties": {"b": {"type": "string"}}}}},
        valid=[{"b": 1}, {"a": 1, "b": "s"}],
        invalid=[{"a": 1, "b": 1}],
    )


# --------------------------------------------------------------------------------------
# schemas: arrays
# --------------------------------------------------------------------------------------


def test_items_and_bounds():
    check(
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        valid=[[1], [1, 2, 3]],
        invalid=[[], [1, 2, 3, 4], ["a"], [1, "a"]],
    )
    check({"type": "array", "items": False}, valid=[[]], invalid=[[1]])
    check({"type": "array", "maxItems": 0}, valid=[[]], invalid=[[None]])


def test_prefix_items_2020_and_draft04_tuple_form():
    s2020 = {"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": {"type": "boolean"}}
    check(s2020, valid=[[], [1], [1, "a"], [1, "a", True, False]], invalid=[["a"], [1, 2], [1, "a", 3]])
    s04 = {"items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False, "minItems": 1}
    check(s04, valid=[[1], [1, "a"]], invalid=[[], [1, "a", True], ["a"]])
    check({"items": [{"type": "integer"}], "minItems": 3}, valid=[[1, "x", None]], invalid=[[1, "x"], ["x", 1, 2]])
    check(
        {"prefixItems": [{"const": 1}, {"const": 2}], "items": False, "minItems": 2},
        valid=[[1, 2]],
        invalid=[[1], [1, 2, 3]],
    )


def test_unique_items_is_refused_by_default_and_a_recorded_relaxation_when_lenient():
    with pytest.raises(GrammarError, match="uniqueItems at #/uniqueItems.*lenient=True"):
        compile_json_schema({"type": "array", "uniqueItems": True})
    g = check({"type": "array", "uniqueItems": True}, valid=[[1, 2]], lenient=True)
    assert accepts(g, "[1,1]")  # not enforced...
    assert g.warnings and "uniqueItems" in g.warnings[0] and "#" in g.warnings[0]  # ...and said so
    assert "uniqueItems" in RELAXED_KEYWORDS
    assert compile_json_schema({"type": "array", "uniqueItems": False}).warnings == []
    assert compile_json_schema({"type": "array", "uniqueItems": True, "maxItems": 1}).warnings == []
    with pytest.raises(GrammarError, match="uniqueItems"):
        compile_json_schema({"type": "array", "uniqueItems": True}, strict=True, lenient=True)


# Object branches that overlap, each with patternProperties: neither provably exclusive
# nor complementable, since each branch beside the complements of the other three must
# hold three members it does not ask for (`MAX_OBJECT_WITNESSES`).
_OVERLAPPING_ONE_OF = {
    "properties": {
        "style": {
            "oneOf": [
                {"type": "object", "properties": {"color": {"type": "string"}}},
                {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}},
                {"type": "object", "patternProperties": {"^y-": {"type": "integer"}}},
                {"type": "object", "patternProperties": {"^z-": {"type": "integer"}}},
            ]
        }
    }
}


def test_a_one_of_beside_the_complement_of_an_open_object_is_exact():
    # Two branches: each needs the other's complement, an object holding a member the
    # other rejects (a color that is no string, an x- key that is no integer).
    schema = {"properties": {"style": {"oneOf": _OVERLAPPING_ONE_OF["properties"]["style"]["oneOf"][:2]}}}
    g = check(
        schema,
        valid=[
            {"style": {"color": 1}},
            {"style": {"color": 1, "x-size": 3}},
            {"style": {"color": "red", "x-size": "a"}},
            {"style": {"color": "red", "z": None, "x-a": [], "x-b": 1}},
        ],
        invalid=[
            {"style": 3},
            {"style": {}},
            {"style": {"color": "red"}},
            {"style": {"color": "red", "x-size": 3}},
            {"style": {"color": 1, "x-size": "a"}},
        ],
    )
    assert g.warnings == []

    with pytest.raises(GrammarError, match=r"oneOf at #/properties/style: cannot prove.*one_of='any_of'"):
        compile_json_schema(_OVERLAPPING_ONE_OF)
    g = check(
        _OVERLAPPING_ONE_OF,
        valid=[{"style": {"color": "red"}}, {"style": {"x-size": 3}}],
        invalid=[{"style": 3}, {"style": {"color": 1, "x-size": "a", "y-size": "b", "z-size": "c"}}],
        one_of="any_of",
    )
    # The relaxation: an object matching both branches is accepted, and the warning says so.
    assert accepts(g, '{"style": {"color": "red", "x-size": 3}}')
    assert len(g.warnings) == 1 and g.warnings[0].startswith("oneOf at #/properties/style: compiled as anyOf")
    assert "oneOf" in RELAXED_KEYWORDS
    # A oneOf it can build exactly stays exact, with no warning.
    exact = check(
        {"oneOf": [{"type": "integer"}, {"minimum": 2}]}, valid=[1, 2.5, "a"], invalid=[3, 1.5], one_of="any_of"
    )
    assert exact.warnings == []
    with pytest.raises(GrammarError, match="oneOf at #/properties/style.*strict mode"):
        compile_json_schema(_OVERLAPPING_ONE_OF, strict=True, one_of="any_of")
    with pytest.raises(ValueError, match="one_of must be 'exact' or 'any_of'"):
        compile_json_schema({}, one_of="anyOf")


@pytest.mark.parametrize(
    "schema",
    [
        {"items": {"enum": ["a", "b", 1]}, "uniqueItems": True},
        {"items": {"enum": ["a", "b", 1]}, "uniqueItems": True, "minItems": 2, "maxItems": 2},
        {"prefixItems": [{"type": "boolean"}, {"const": "a"}], "items": {"enum": ["b", 1]}, "uniqueItems": True},
        {"allOf": [{"uniqueItems": True, "items": {"enum": ["a", "b", 1, 2]}}, {"items": {"not": {"const": 2}}}]},
    ],
)
def test_unique_items_enforced_where_the_elements_take_few_values(schema):
    import itertools

    g = compile_json_schema({"type": "array", **schema})
    assert g.warnings == []
    pool = ["a", "b", 1, 1.0, True, False]
    for n in range(5):
        for arr in itertools.product(pool, repeat=n):
            values = list(arr)
            fits = jsonschema.Draft202012Validator({"type": "array", **schema}).is_valid(values)
            assert grammar_accepts(g, json.dumps(values).encode()) == fits, (schema, values)


def test_unique_items_of_few_values_is_checked_in_constants_and_refused_negated():
    few = {"items": {"enum": ["a", "b"]}, "uniqueItems": True}
    with pytest.raises(GrammarError, match="accepts no JSON value"):
        compile_json_schema({**few, "const": ["a", "a"]})
    check({**few, "enum": [["a", "a"], ["a", "b"]]}, valid=[["a", "b"]], invalid=[["a", "a"]])
    with pytest.raises(GrammarError, match="uniqueItems"):
        compile_json_schema({"type": "array", "not": few})
    # Beside contains, or with more values than Limits.max_unique_values: refused by name.
    with pytest.raises(GrammarError, match="uniqueItems at #/uniqueItems"):
        compile_json_schema({**few, "contains": {"const": "a"}})
    with pytest.raises(GrammarError, match="more than 10 values"):
        compile_json_schema({"items": {"enum": list(range(11))}, "uniqueItems": True})


def test_contains():
    check({"type": "array", "contains": {"type": "string"}}, valid=[["a"], [1, "a", 2]], invalid=[[], [1, 2]])
    check(
        {"prefixItems": [{"type": "integer"}], "contains": {"type": "integer"}, "maxItems": 2},
        valid=[[1], [1, 2], [1, "a"]],
        invalid=[[], ["a"], ["a", 1, 2]],
    )
    check(
        {"allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}]},
        valid=[[2, 1], [1, 3, 2]],
        invalid=[[1], [2, 2]],
    )
    check({"contains": {"const": 1}, "minContains": 0}, valid=[[], [2]])
    # Items `contains` matches are evaluated: unevaluatedItems judges only the others.
    check(
        {"prefixItems": [True], "contains": {"type": "string"}, "unevaluatedItems": False},
        valid=[[1, "a"], ["a"], [1, "a", "b"]],
        invalid=[[1, 2], [1, 2, "a"], [1]],
    )
    check(
        {"contains": {"type": "string"}, "minContains": 0, "unevaluatedItems": {"type": "integer"}},
        valid=[[], ["a", 1], [2, 3]],
        invalid=[[None], ["a", 1.5]],
    )


@pytest.mark.parametrize("least,most", [(2, None), (0, 1), (1, 2), (2, 3), (3, 3), (0, 0), (3, 2)])
def test_min_and_max_contains_count_the_matches(least, most):
    """minContains/maxContains against counting, on every array of 0 to 5 elements
    drawn from 1, 2 and "a", and beside minItems/maxItems and other witnesses."""
    import itertools

    schema: dict = {"contains": {"const": 1}, "minContains": least}
    if most is not None:
        schema["maxContains"] = most
    both = {"allOf": [schema, {"contains": {"type": "string"}}], "maxItems": 4}
    g, g_both = compile_json_schema(schema), compile_json_schema(both)
    for n in range(6):
        for arr in itertools.product([1, 2, "a"], repeat=n):
            count = arr.count(1)
            fits = count >= least and (most is None or count <= most)
            text = json.dumps(list(arr)).encode()
            assert grammar_accepts(g, text) == fits, (schema, arr)
            assert grammar_accepts(g_both, text) == (fits and "a" in arr and n <= 4), (both, arr)
    # Not an array: the counts ask nothing.
    assert grammar_accepts(g, b'"x"')


def test_min_and_max_contains_negated_and_refused():
    check(
        {"type": "array", "not": {"contains": {"const": 1}, "minContains": 2, "maxContains": 3}},
        valid=[[], [1], [1, 1, 1, 1], [2]],
        invalid=[[1, 1], [1, 2, 1, 1]],
    )
    with pytest.raises(GrammarError, match="minContains/maxContains at #: not supported beside prefixItems"):
        compile_json_schema({"prefixItems": [{}], "contains": {"const": 1}, "minContains": 2})
    # maxContains needs the elements its schema rejects: those of an open object's
    # patterns are objects holding a member it rejects...
    check(
        {
            "type": "array",
            "contains": {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
            "maxContains": 1,
        },
        valid=[[{}], [{"xa": 1}, {"xa": "a"}], [{"xa": "a"}, {"b": 1}, {"xa": 2, "xb": "c"}]],
        invalid=[[], [{}, {"xa": 1}], [{"b": 1}, 3, {"xa": 1}]],
    )
    # ... and refused where no complement exists (a complement's complement).
    with pytest.raises(GrammarError, match="maxContains: cannot tell the elements its schema rejects"):
        compile_json_schema({"contains": {"not": {"patternProperties": {"^x": {"type": "integer"}}}}, "maxContains": 1})
    with pytest.raises(GrammarError, match="max_counted_items"):
        compile_json_schema({"contains": {"const": 1}, "minContains": 10**9})


def test_property_names():
    schema = {"properties": {"ab": {}, "toolong": {}}, "propertyNames": {"maxLength": 3, "pattern": "^[a-z]+$"}}
    check(schema, valid=[{"ab": 1}, {"ab": 1, "xyz": 2}, {}], invalid=[{"toolong": 1}, {"abcd": 1}, {"A": 1}])
    check({"propertyNames": {"enum": ["a", "b"]}}, valid=[{"a": 1, "b": 2}], invalid=[{"c": 1}])
    with pytest.raises(GrammarError, match="accepts no"):
        compile_json_schema({"type": "object", "required": ["x"], "propertyNames": {"const": "y"}})


# --------------------------------------------------------------------------------------
# schemas: combinators
# --------------------------------------------------------------------------------------


def test_anyof():
    check(
        {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10}]},
        valid=["ab", 10, 99],
        invalid=["abc", 9, None],
    )


def test_oneof_disjoint_by_type_const_or_discriminator():
    check({"oneOf": [{"type": "string"}, {"type": "number"}]}, valid=["a", 1.5], invalid=[None])
    shape = {
        "oneOf": [
            {"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
            {"properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind", "side"]},
        ]
    }
    check(
        shape,
        valid=[{"kind": "circle", "r": 1}, {"kind": "square", "side": 2}],
        invalid=[{"kind": "circle", "side": 1}, {"kind": "tri"}],
    )
    check(
        {"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"}]},
        valid=["ab", "ba"],
        invalid=["c"],
    )


def test_oneof_overlapping_branches_use_exact_complements():
    # {} matches neither; {"a":..,"b":..} matches both, so oneOf rejects it.
    schema = {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    check(schema, valid=[{"a": 1}, {"b": 1}, {"a": 1, "c": 2}], invalid=[{}, {"a": 1, "b": 2}, {"c": 1}])
    # Integers are numbers: a oneOf of both means "non-integer number or string".
    check(
        {"oneOf": [{"type": "number"}, {"type": "integer"}, {"type": "string"}]},
        valid=[1.5, "s", -0.25],
        invalid=[1, 0, None],
    )
    # Strings matching both formats are excluded.
    check(
        {"oneOf": [{"format": "ipv4"}, {"format": "hostname"}], "type": "string"},
        valid=["example.com", "999.1.1.1"],
        invalid=["10.0.0.1"],
    )


def test_oneof_overlapping_arrays():
    # [] matches both branches, so oneOf excludes it.
    check(
        {"oneOf": [{"type": "array", "items": {"type": "number"}}, {"type": "array", "items": {"type": "string"}}]},
        valid=[[1], ["a"]],
        invalid=[[], [1, "a"], None],
    )


def test_oneof_of_open_objects_is_exact_and_a_fourth_branch_is_an_error():
    # {} satisfies both; "some member is not an integer" is an object asking for a member.
    two = [{"additionalProperties": {"type": "integer"}}, {"additionalProperties": {"type": "string"}}]
    check(
        {"properties": {"p": {"type": "object", "oneOf": two}}},
        valid=[{"p": {"a": 1}}, {"p": {"a": "s", "b": "t"}}, {}],
        invalid=[{"p": {}}, {"p": {"a": 1, "b": "s"}}, {"p": {"a": None}}, {"p": 1}],
    )
    # A third and a fourth: each branch beside three complements would ask for three.
    three = [*two, {"additionalProperties": {"type": "boolean"}}]
    check(
        {"properties": {"p": {"type": "object", "oneOf": three}}},
        valid=[{"p": {"a": True}}, {"p": {"a": 1}}, {"p": {"a": "s", "b": "t"}}],
        invalid=[{"p": {}}, {"p": {"a": 1, "b": "s"}}, {"p": {"a": True, "b": 2}}],
    )
    with pytest.raises(GrammarError, match=r"oneOf at #/properties/p"):
        compile_json_schema(
            {"properties": {"p": {"type": "object", "oneOf": [*three, {"additionalProperties": {"type": "null"}}]}}}
        )


def test_allof_merges():
    check(
        {"allOf": [{"type": ["integer", "string"]}, {"type": ["integer", "null"]}, {"minimum": 3}]},
        valid=[3, 10],
        invalid=[2, "a", None],
    )
    merged = {
        "allOf": [
            {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"a": {"maximum": 5}, "b": {"type": "string"}}, "required": ["b"]},
        ]
    }
    check(merged, valid=[{"a": 1, "b": "x"}], invalid=[{"a": 6, "b": "x"}, {"a": 1}, {"b": "x"}])
    check(
        {"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 3}, {"pattern": "^a"}]},
        valid=["ab", "abc"],
        invalid=["a", "abcd", "bc"],
    )
    check(
        {"allOf": [{"items": {"type": "integer"}}, {"maxItems": 2}, {"prefixItems": [{"minimum": 1}]}]},
        valid=[[1, 2]],
        invalid=[[0], [1, 2, 3], ["a"]],
    )
    check(
        {
            "allOf": [
                {"additionalProperties": {"type": "integer"}},
                {"properties": {"a": {}}, "additionalProperties": False},
            ]
        },
        valid=[{"a": 3}, {}],
        invalid=[{"a": "s"}, {"b": 1}],
    )
    check({"allOf": [{"type": "integer", "multipleOf": 2}, {"multipleOf": 3}]}, valid=[0, 6, 12], invalid=[2, 3, 4])
    with pytest.raises(GrammarError, match="accepts no"):
        compile_json_schema({"allOf": [{"type": "integer"}, {"type": "string"}]})


def test_not_if_then_else():
    check({"not": {"type": "string"}}, valid=[1, None, [], {}], invalid=["a"])
    check({"type": "string", "not": {"enum": ["a", "b"]}}, valid=["c", "ab"], invalid=["a", "b"])
    check({"type": "object", "not": {"required": ["x"]}}, valid=[{}, {"y": 1}], invalid=[{"x": 1}])
    check({"type": "integer", "not": {"multipleOf": 3}}, valid=[1, 2, 4], invalid=[0, 3, -6])
    check({"type": "number", "not": {"type": "integer"}}, valid=[1.5, -0.25], invalid=[1, 0])
    cond = {
        "type": "object",
        "if": {"properties": {"k": {"const": "a"}}, "required": ["k"]},
        "then": {"required": ["x"]},
        "else": {"required": ["y"]},
    }
    check(
        cond, valid=[{"k": "a", "x": 1}, {"k": "b", "y": 1}, {"y": 1}], invalid=[{"k": "a", "y": 1}, {"k": "b", "x": 1}]
    )
    check({"type": "number", "not": {"const": 0}}, valid=[1, -0.5], invalid=[0, 0.0, -0.0])
    check(
        {"type": "array", "not": {"prefixItems": [{"type": "integer"}], "items": {"type": "string"}}},
        valid=[["a"], [1, 2]],
        invalid=[[], [1], [1, "a"]],
    )
    # An open object's complement: a member it rejects somewhere among the others.
    check(
        {"not": {"additionalProperties": {"type": "integer"}}},
        valid=[{"a": "s"}, {"a": 1, "b": None}, {"b": 2, "a": [1]}],
        invalid=[{}, {"a": 1}, {"a": 1, "b": -2}, 3, "s"],
    )
    # Its complement again is refused: "every member of some language" is no pattern.
    with pytest.raises(GrammarError, match="not at #/not: cannot express the complement of an object schema that asks"):
        compile_json_schema({"not": {"not": {"additionalProperties": {"type": "integer"}}}})


# --------------------------------------------------------------------------------------
# schemas: $ref
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dialect, siblings_apply",
    [
        ("http://json-schema.org/draft-04/schema#", False),
        ("http://json-schema.org/draft-06/schema#", False),
        ("http://json-schema.org/draft-07/schema#", False),
        ("https://json-schema.org/draft/2019-09/schema", True),
        ("https://json-schema.org/draft/2020-12/schema", True),
        (None, True),
    ],
)
def test_ref_siblings_follow_the_dialect(dialect, siblings_apply):
    # Up to draft-07 a $ref object's other keywords are ignored; from 2019-09 on they
    # apply beside it. MaskBench's WashingtonPost---wp_105 (draft-04, outside the dev
    # set) writes {"$ref": <no type>, "type": "object"} and a string instance.
    schema = {
        "definitions": {"dictionary": {"properties": {"basic": {"type": "string"}}, "required": ["basic"]}},
        "type": "object",
        "properties": {"description": {"$ref": "#/definitions/dictionary", "type": "object", "maxProperties": 1}},
    }
    if dialect is not None:
        schema["$schema"] = dialect
    g = compile_json_schema(schema)
    assert accepts(g, '{"description": {"basic": "x"}}')
    assert not accepts(g, '{"description": {"other": "x"}}')  # the referenced schema holds
    assert accepts(g, '{"description": "Image description"}') != siblings_apply
    assert accepts(g, '{"description": {"basic": "x", "more": "y"}}') != siblings_apply
    # In a oneOf, whose branches are told apart by their kinds.
    one_of = {
        "definitions": schema["definitions"],
        "oneOf": [{"$ref": "#/definitions/dictionary", "type": "object"}, {"type": "string"}],
    }
    if dialect is not None:
        one_of["$schema"] = dialect
    g = compile_json_schema(one_of)
    # Where the siblings are ignored both branches take a string, so oneOf refuses it,
    # and a number fits the referenced schema alone.
    assert accepts(g, '"text"') == siblings_apply
    assert accepts(g, "5") != siblings_apply
    assert accepts(g, '{"basic": "x"}')


def test_refs_defs_definitions_and_pointer_escapes():
    schema = {
        "$defs": {"a/b": {"type": "integer"}, "t~x": {"type": "string"}, "a b": {"type": "integer"}},
        "definitions": {"n": {"type": "null"}},
        "properties": {
            "p": {"$ref": "#/$defs/a~1b"},
            "q": {"$ref": "#/$defs/t~0x"},
            "r": {"$ref": "#/definitions/n"},
            "s": {"$ref": "#/properties/p"},
            "u": {"$ref": "#/$defs/a%20b"},
        },
    }
    check(
        schema,
        valid=[{"p": 1, "q": "s", "r": None, "s": 2, "u": 3}],
        invalid=[{"p": "x"}, {"q": 1}, {"s": "x"}, {"u": "x"}],
    )


def test_recursive_ref():
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    }
    check(
        tree,
        valid=[{"v": 1}, {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}],
        invalid=[{"v": 1, "kids": [{"w": 2}]}, {"kids": []}],
    )
    # Whole-document recursion, with siblings of $ref merged in.
    check({"type": ["array", "integer"], "items": {"$ref": "#"}}, valid=[1, [1, [2, [3]]], []], invalid=[["a"]])
    # An allOf around a recursive reference inside itself.
    rec = {
        "$defs": {"A": {"properties": {"x": {"allOf": [{"$ref": "#/$defs/A"}, {"required": ["y"]}]}}}},
        "$ref": "#/$defs/A",
    }
    check(
        rec, valid=[{}, {"x": {"y": 1}}, {"x": {"y": 1, "x": {"y": 2}}}], invalid=[{"x": {}}, {"x": {"y": 1, "x": {}}}]
    )


def test_id_relative_refs():
    schema = {
        "$id": "http://example.com/root.json",
        "properties": {
            "a": {"$ref": "item.json"},
            "b": {"$ref": "http://example.com/item.json#/properties/v"},
            "c": {"$ref": "#foo"},
        },
        "$defs": {
            "item": {"$id": "item.json", "properties": {"v": {"type": "integer"}}, "required": ["v"]},
            "anch": {"$anchor": "foo", "type": "boolean"},
        },
    }
    check(schema, valid=[{"a": {"v": 1}, "b": 2, "c": True}], invalid=[{"a": {}}, {"b": "x"}, {"c": 1}])
    # A $dynamicAnchor is a plain-name fragment for $ref as well.
    dynamic = {"items": {"$ref": "#it"}, "$defs": {"s": {"$dynamicAnchor": "it", "type": "string"}}}
    check(dynamic, valid=[["a", "b"], []], invalid=[["a", 1]])
    # Without a $dynamicAnchor of its name anywhere in scope, $dynamicRef is a $ref.
    check(
        {"items": {"$dynamicRef": "#it"}, "$defs": {"s": {"$anchor": "it", "type": "string"}}},
        valid=[["a"]],
        invalid=[[1]],
    )
    # A pointer fragment inside a resource with a `urn:` $id is a pointer into that
    # resource, though urllib joins nothing to a urn.
    urn = "urn:uuid:deadbeef-4321-ffff-ffff-1234feebdaed"
    nested = {"$ref": urn, "$defs": {"foo": {"$id": urn, "$defs": {"bar": {"type": "string"}}, "$ref": "#/$defs/bar"}}}
    check(nested, valid=["bar"], invalid=[12])


def test_dynamic_ref_follows_the_dynamic_scope():
    # A generic list whose item type the resource that reached it names: the same target
    # (genericList) compiles once per dynamic scope it is met in.
    generic = {
        "$id": "https://example.com/main",
        "if": {"properties": {"kind": {"const": "numbers"}}, "required": ["kind"]},
        "then": {"$ref": "numberList"},
        "else": {"$ref": "stringList"},
        "$defs": {
            "genericList": {
                "$id": "genericList",
                "properties": {"list": {"items": {"$dynamicRef": "#itemType"}}},
                "$defs": {"default": {"$dynamicAnchor": "itemType"}},
            },
            "numberList": {
                "$id": "numberList",
                "$defs": {"itemType": {"$dynamicAnchor": "itemType", "type": "number"}},
                "$ref": "genericList",
            },
            "stringList": {
                "$id": "stringList",
                "$defs": {"itemType": {"$dynamicAnchor": "itemType", "type": "string"}},
                "$ref": "genericList",
            },
        },
    }
    check(
        generic,
        valid=[{"kind": "numbers", "list": [1.5]}, {"kind": "strings", "list": ["a"]}],
        invalid=[{"kind": "numbers", "list": ["a"]}, {"kind": "strings", "list": [1.5]}],
    )
    # The outermost resource in scope wins, and a scope left behind no longer counts:
    # `if` entered first_scope, but `then` evaluates from second_scope.
    leaving = {
        "$id": "https://example.com/leaving",
        "if": {"$id": "first_scope", "$defs": {"t": {"$dynamicAnchor": "thingy", "type": "number"}}},
        "then": {
            "$id": "second_scope",
            "$ref": "start",
            "$defs": {"t": {"$dynamicAnchor": "thingy", "type": "null"}},
        },
        "$defs": {
            "start": {"$id": "start", "$dynamicRef": "inner_scope#thingy"},
            "thingy": {"$id": "inner_scope", "$dynamicAnchor": "thingy", "type": "string"},
        },
    }
    check(leaving, valid=[None], invalid=["a string", 42])

    # The outermost resource in scope that defines the name wins over the list's own;
    # an $anchor of the same name is no dynamic anchor, so the static target stays.
    def list_beside(anchor_keyword: str) -> dict:
        return {
            "$id": f"https://example.com/{anchor_keyword[1:]}",
            "$ref": "list",
            "$defs": {
                "foo": {anchor_keyword: "items", "type": "string"},
                "list": {
                    "$id": "list",
                    "items": {"$dynamicRef": "#items"},
                    "$defs": {"items": {"$dynamicAnchor": "items"}},
                },
            },
        }

    check(list_beside("$dynamicAnchor"), valid=[["a", "b"]], invalid=[["a", 1]])
    plain = list_beside("$anchor")
    check(plain, valid=[["a", 1]])


@pytest.mark.parametrize(
    "draft",
    ["https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#"],
)
def test_a_ref_to_a_metaschema_uses_the_bundled_one(draft):
    # The 2020-12 metaschema is vocabularies joined by `$dynamicRef: "#meta"`; its
    # `type` arrays ask uniqueItems, so it compiles leniently (as an editor does).
    g = check(
        {"$schema": draft, "$ref": draft},
        valid=[
            {"type": "object", "properties": {"a": {"type": ["string", "null"], "minLength": 1}}},
            {"items": {"enum": [1, 2]}, "required": ["a"]},
        ],
        invalid=[{"type": "strin"}, {"minLength": -1}, {"properties": {"a": {"type": 3}}}, {"required": "a"}],
        lenient=True,
    )
    assert any("uniqueItems" in w for w in g.warnings)
    with pytest.raises(GrammarError, match=r"uniqueItems at #/<https?:~1~1json-schema.org"):
        compile_json_schema({"$ref": draft})


def test_refs_into_documents_the_caller_gives():
    # The suite's shape: a document at one URI whose own $id differs, and refs relative
    # to that $id; nothing is fetched, so an unknown URI is still refused by name.
    documents = {
        "http://example.com/defs.json": {
            "$id": "http://example.com/moved/defs.json",
            "$defs": {
                "id": {"$ref": "int.json"},
                "name": {"type": "string", "minLength": 1},
                "flag": {"$anchor": "flag", "type": "boolean"},
            },
        },
        "http://example.com/moved/int.json": {"type": "integer"},
    }
    schema = {
        "properties": {
            "id": {"$ref": "http://example.com/defs.json#/$defs/id"},
            "name": {"$ref": "http://example.com/defs.json#/$defs/name"},
            "flag": {"$ref": "http://example.com/moved/defs.json#flag"},
        }
    }
    check(
        schema,
        valid=[{"id": 1, "name": "a", "flag": True}],
        invalid=[{"id": "1"}, {"name": ""}, {"flag": 1}],
        documents=documents,
    )
    with pytest.raises(GrammarError, match="cannot resolve 'http://example.com/defs.json'"):
        compile_json_schema(schema)
    # An anchor of a document nothing has reached yet.
    anchored = {"http://example.com/other.json": {"$defs": {"f": {"$anchor": "flag", "type": "boolean"}}}}
    check({"$ref": "http://example.com/other.json#flag"}, valid=[True], invalid=[1], documents=anchored)


def test_ref_errors_name_the_reference():
    with pytest.raises(GrammarError, match=r"\$ref '#/nope' at #/properties/a"):
        compile_json_schema({"properties": {"a": {"$ref": "#/nope"}}})
    with pytest.raises(GrammarError, match="only references into this document, the documents given and the JSON"):
        compile_json_schema({"$ref": "https://example.com/schema.json"})
    with pytest.raises(GrammarError, match="circular"):
        compile_json_schema({"$defs": {"a": {"$ref": "#/$defs/a", "type": "object"}}, "$ref": "#/$defs/a"})


# --------------------------------------------------------------------------------------
# errors, options, output shape
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw,value", [("$recursiveRef", "#"), ("extends", {})])
def test_unsupported_keyword_names_keyword_and_pointer(kw, value):
    with pytest.raises(GrammarError) as e:
        compile_json_schema({"properties": {"foo": {kw: value}}})
    assert f"unsupported keyword '{kw}' at #/properties/foo" == str(e.value)


def test_annotations_and_unknown_keywords_are_ignored():
    schema = {
        "title": "t",
        "description": "d",
        "examples": [1],
        "default": 2,
        "$comment": "c",
        "deprecated": True,
        "readOnly": True,
        "writeOnly": False,
        "contentMediaType": "text/plain",
        "x-foo": {"type": "string"},
        "discriminator": {"propertyName": "k"},
        "markdownDescription": "m",
        "type": "integer",
    }
    check(schema, valid=[1], invalid=["a"])


def test_bad_keyword_values():
    for schema, msg in [
        ({"minLength": -1}, "minLength at #/minLength"),
        ({"required": "a"}, "required at #"),
        ({"enum": 3}, "enum at #"),
        ({"properties": []}, "properties at #"),
        ({"anyOf": []}, "anyOf at #/anyOf"),
        ({"properties": {"a": 3}}, "schema at #/properties/a"),
    ]:
        with pytest.raises(GrammarError, match=re.escape(msg)):
            compile_json_schema(schema)
    with pytest.raises(GrammarError, match="not valid JSON"):
        compile_json_schema("{")
    with pytest.raises(ValueError):
        compile_json_schema({}, whitespace="loose")
    with pytest.raises(ValueError):
        compile_json_schema({}, key_order="sorted")


def test_compact_whitespace_rejects_spaces_and_flexible_allows_them():
    schema = {"properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    gc = compile_json_schema(schema, whitespace="compact")
    gf = compile_json_schema(schema)
    assert accepts(gc, '{"a":[1,2]}') and accepts(gf, '{"a":[1,2]}')
    assert not accepts(gc, '{"a": [1, 2]}') and accepts(gf, '{ "a" :\n[ 1 ,\t2 ] }')
    assert gc.ignore == [] and gf.ignore
    # Whitespace never enters a lexeme.
    assert not accepts(gf, '{"a":[1 2]}') and not accepts(gf, '{"a":[- 1]}')


def test_from_json_schema_and_text_input():
    g = Grammar.from_json_schema('{"type": "boolean"}', whitespace="compact")
    assert accepts(g, "true") and not accepts(g, "1")


def test_schema_ordered_reorders_to_grammar_order():
    schema = {"properties": {"a": {}, "b": {"properties": {"x": {}, "y": {}}}}}
    v = schema_ordered(schema, {"z": 0, "b": {"y": 1, "x": 2}, "a": 3})
    assert list(v) == ["a", "b", "z"] and list(v["b"]) == ["x", "y"]
    assert accepts(compile_json_schema(schema), json.dumps(v))


def test_combinatorial_blowup_and_deep_constants_are_bounded():
    from midword.engine.limits import LimitExceeded

    blowup = {"allOf": [{"anyOf": [{"type": "string", "pattern": f"a{i}{j}"} for j in range(10)]} for i in range(6)]}
    with pytest.raises(LimitExceeded, match="max_union_parts"):
        compile_json_schema(blowup)
    deep: list = [1]
    for _ in range(3000):
        deep = [deep]
    with pytest.raises(LimitExceeded, match="max_schema_depth"):
        compile_json_schema({"enum": [deep]})


def test_catastrophic_pattern_is_matched_in_linear_time():
    # Python's backtracking re would take ages on this enum value; the compiler matches
    # patterns with midword's derivative engine.
    g = compile_json_schema({"type": "string", "pattern": "^(a+)+$", "enum": ["a" * 40 + "b", "aaa"]})
    assert accepts(g, '"aaa"') and not accepts(g, '"' + "a" * 40 + 'b"')


def test_deep_nesting_is_bounded():
    schema: dict = {"type": "integer"}
    for _ in range(500):
        schema = {"items": schema}
    with pytest.raises(Exception) as e:
        compile_json_schema(schema)
    assert "max_schema_depth" in str(e.value)


# --------------------------------------------------------------------------------------
# MaskBench
# --------------------------------------------------------------------------------------


def _has_duplicate_items(v) -> bool:
    if isinstance(v, list):
        keys = [json.dumps(x, sort_keys=True) for x in v]
        if len(set(keys)) != len(keys):
            return True
        return any(_has_duplicate_items(x) for x in v)
    if isinstance(v, dict):
        return any(_has_duplicate_items(x) for x in v.values())
    return False


def run_maskbench(files: list[str]) -> dict:
    counts = {
        "files": 0,
        "compiled": 0,
        "all_correct": 0,
        "accepted_invalid": 0,
        "rejected_valid": 0,
        "relaxed_uniqueItems": 0,
        "grammar_errors": 0,
    }
    failures = []
    for path in files:
        with open(path) as f:
            case = json.load(f)
        counts["files"] += 1
        try:
            g = compile_json_schema(case["schema"], lenient=True)
        except GrammarError:
            counts["grammar_errors"] += 1
            continue
        counts["compiled"] += 1
        ok = True
        for t in case["tests"]:
            # The grammar lists properties in schema order; validity does not depend on order.
            data = schema_ordered(case["schema"], t["data"])
            texts = [json.dumps(data, ensure_ascii=False), json.dumps(data, ensure_ascii=False, indent=2)]
            for text in texts:
                got = accepts(g, text)
                if got == t["valid"]:
                    continue
                if got and any("uniqueItems" in w for w in g.warnings) and _has_duplicate_items(t["data"]):
                    counts["relaxed_uniqueItems"] += 1
                    break
                ok = False
                counts["accepted_invalid" if got else "rejected_valid"] += 1
                failures.append((os.path.basename(path), t["valid"], text[:200]))
                break
        counts["all_correct"] += ok
    counts["failures"] = failures
    return counts


def _maskbench_files() -> list[str]:
    files = sorted(glob.glob(os.path.join(MASKBENCH, "*.json")))
    if not files:
        pytest.skip("maskbench-dev data not available")
    return files


def test_maskbench_subset():
    files = _maskbench_files()[::12]
    counts = run_maskbench(files)
    assert not counts["failures"], counts["failures"]
    assert counts["compiled"] >= 0.85 * counts["files"], counts


@pytest.mark.slow
def test_maskbench_full():
    counts = run_maskbench(_maskbench_files())
    print({k: v for k, v in counts.items() if k != "failures"})
    assert not counts["failures"], counts["failures"]
    assert counts["compiled"] >= 0.9 * counts["files"], counts


# --------------------------------------------------------------------------------------
# Differential test against the reference validator
# --------------------------------------------------------------------------------------

_FUZZ_SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 10}, "b": {"type": "string", "maxLength": 2}},
        "required": ["a"],
        "additionalProperties": False,
    },
    {"anyOf": [{"type": "string", "pattern": "^a"}, {"type": "integer", "multipleOf": 3}, {"type": "null"}]},
    {"oneOf": [{"type": "number"}, {"type": "integer"}, {"type": "string", "minLength": 2}]},
    {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}], "properties": {"a": {}, "b": {}, "c": {}}},
    {
        "oneOf": [
            {"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
            {"properties": {"kind": {"const": "square"}}, "required": ["kind"]},
        ]
    },
    {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "items": {"type": "boolean"},
        "maxItems": 3,
    },
    {"type": "array", "items": {"type": ["integer", "string"]}, "contains": {"type": "string"}, "minItems": 2},
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "number"}}},
            {"properties": {"a": {"minimum": 2}}, "required": ["a"]},
        ]
    },
    {
        "type": "object",
        "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "number", "minimum": 3}},
        "additionalProperties": {"type": "string"},
    },
    {"not": {"anyOf": [{"type": "string"}, {"type": "object", "required": ["a"]}, {"type": "integer", "minimum": 3}]}},
    {
        "type": "object",
        "if": {"properties": {"a": {"const": 1}}, "required": ["a"]},
        "then": {"required": ["b"]},
        "else": {"properties": {"b": {"type": "string"}}},
    },
    {"type": "object", "dependentRequired": {"a": ["b"]}, "propertyNames": {"maxLength": 1}, "maxProperties": 2},
    {
        "$defs": {
            "t": {
                "type": ["object", "integer"],
                "properties": {"a": {"$ref": "#/$defs/t"}},
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/t",
    },
    {"type": "number", "exclusiveMinimum": -2.5, "maximum": 3, "not": {"const": 0}},
    {"enum": [1, "a", None, [1], {"a": 1}, 2.5]},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "not": {"contains": {"const": "a"}}},
    {
        "type": "object",
        "properties": {'a"': {"type": "string", "pattern": "^[^a]"}, "é": {"type": "boolean"}},
        "additionalProperties": {"type": "integer"},
    },
    {"type": "string", "not": {"enum": ["a", "ab"]}, "maxLength": 2},
    {"type": "array", "items": {"type": "number", "minimum": -1, "exclusiveMaximum": 2.5}, "maxItems": 2},
    {"type": "object", "minProperties": 1, "maxProperties": 2, "properties": {"a": {"type": "integer"}}},
]

_FUZZ_STRINGS = ["", "a", "b", "ab", "abc", "ba", "circle", "square", "kind", "r", "c", "x", "é", 'a"', "0", "\n", "\\"]
_FUZZ_NUMBERS = [0, 1, 2, 3, -1, -3, 5, 6, 7, 9, 10, 11, 12, 100, -100, 0.5, -2.25, 2.5, 3.75, -2.5, 1.25]


def _random_value(rnd: random.Random, keys: list[str], depth: int = 0):
    kind = rnd.choice("nbiisssaoo" if depth < 3 else "nbiisss")
    if kind == "n":
        return None
    if kind == "b":
        return rnd.random() < 0.5
    if kind == "i":
        return rnd.choice(_FUZZ_NUMBERS)
    if kind == "s":
        return rnd.choice(_FUZZ_STRINGS)
    if kind == "a":
        return [_random_value(rnd, keys, depth + 1) for _ in range(rnd.randint(0, 4))]
    return {rnd.choice(keys): _random_value(rnd, keys, depth + 1) for _ in range(rnd.randint(0, 3))}


def _guided_value(rnd: random.Random, s, keys: list[str], depth: int = 0):
    """A value shaped by the schema (often valid, sometimes not): random where the schema is silent."""
    if not isinstance(s, dict) or depth > 3:
        return _random_value(rnd, keys, 2)
    for key in ("oneOf", "anyOf", "allOf"):
        if key in s and rnd.random() < 0.7:
            return _guided_value(rnd, rnd.choice(s[key]), keys, depth + 1)
    if "const" in s:
        return s["const"]
    if "enum" in s:
        return rnd.choice(s["enum"])
    t = s.get("type")
    t = rnd.choice(t) if isinstance(t, list) else t
    if t == "object" or "properties" in s or "required" in s:
        out = {}
        for k, v in s.get("properties", {}).items():
            if k in s.get("required", []) or rnd.random() < 0.5:
                out[k] = _guided_value(rnd, v, keys, depth + 1)
        for k in s.get("required", []):
            out.setdefault(k, _random_value(rnd, keys, 2))
        if rnd.random() < 0.3:
            out[rnd.choice(keys)] = _random_value(rnd, keys, 2)
        return out
    if t == "array" or "items" in s or "prefixItems" in s:
        pre = [_guided_value(rnd, x, keys, depth + 1) for x in s.get("prefixItems", [])]
        return pre + [_guided_value(rnd, s.get("items", {}), keys, depth + 1) for _ in range(rnd.randint(0, 3))]
    if t in ("integer", "number"):
        return rnd.choice(_FUZZ_NUMBERS)
    if t == "string":
        return rnd.choice(_FUZZ_STRINGS)
    return _random_value(rnd, keys, 1)


def _schema_keys(schema) -> list[str]:
    out = {"a", "b", "c", "zz"}

    def walk(s):
        if isinstance(s, dict):
            for k, v in s.items():
                if k in ("properties", "patternProperties"):
                    out.update(v)
                if k in ("required",) and isinstance(v, list):
                    out.update(v)
                walk(v)
        elif isinstance(s, list):
            for x in s:
                walk(x)

    walk(schema)
    return sorted(out)


@pytest.mark.parametrize("index", range(len(_FUZZ_SCHEMAS)))
def test_agrees_with_reference_validator(index):
    jsonschema = pytest.importorskip("jsonschema")
    schema = _FUZZ_SCHEMAS[index]
    validator = jsonschema.Draft202012Validator(schema)
    g = compile_json_schema(schema)
    rnd = random.Random(index)
    keys = _schema_keys(schema)
    seen = {True: 0, False: 0}
    for _ in range(400):
        value = _random_value(rnd, keys) if rnd.random() < 0.5 else _guided_value(rnd, schema, keys)
        valid = validator.is_valid(value)
        seen[valid] += 1
        ordered = schema_ordered(schema, value)
        text = json.dumps(ordered, ensure_ascii=False, indent=2 if rnd.random() < 0.3 else None)
        assert accepts(g, text) == valid, (schema, text, valid)
    assert seen[True] and seen[False], seen


# --------------------------------------------------------------------------------------
# canonical spellings
# --------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_shared_encoders_spell_values_as_json_dumps_does(value):
    from midword.engine.jsonschema import _SPELLING_ENCODER, _canon

    assert _canon(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert _SPELLING_ENCODER.encode(value) == json.dumps(value, ensure_ascii=False)
