"""The Lark front end: every construct compiles to the expected IR, errors say where.

Acceptance checks run the engine's recognizer (`grammar_accepts`); a property test
compares random EBNF, compiled both as rules and as one terminal, with Python's `re`.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.engine.grammar import Grammar
from midword.engine.lark import MAX_NESTING, common_terminals, compile_lark
from midword.engine.limits import GrammarError, LimitExceeded, Limits
from midword.engine.recognizer import grammar_accepts
from midword.grammars import read_grammar


def lexemes(g: Grammar) -> dict[str, tuple[str, bytes | None, str]]:
    return {lx.name: (lx.regex, lx.literal, lx.flags) for lx in g.lexemes}


def rules(g: Grammar) -> set[str]:
    return {line for line in str(g).splitlines() if " -> " in line}


def accepts(g: Grammar, s: str) -> bool:
    return grammar_accepts(g, s.encode("utf-8"))


def lark_error(text: str, **kw) -> GrammarError:
    with pytest.raises(GrammarError) as info:
        compile_lark(text, **kw)
    return info.value


# ---------------------------------------------------------------------------------------
# Constructs and their IR


def test_rule_with_literals_becomes_literal_lexemes():
    g = compile_lark('start: "ab" "c"\n')
    assert rules(g) == {'start -> "ab" "c"'}
    assert lexemes(g) == {'"ab"': ("ab", b"ab", ""), '"c"': ("c", b"c", "")}
    assert g.nonterminals[g.start] == "start"
    assert Grammar.from_lark('start: "ab" "c"\n').fingerprint() == g.fingerprint()


def test_case_insensitive_literal():
    g = compile_lark('start: "select"i\n')
    assert lexemes(g) == {'"select"i': ("select", None, "i")}
    assert accepts(g, "SeLeCt") and not accepts(g, "selec")


def test_lark_string_escapes_are_decoded_like_lark():
    g = compile_lark(r'start: "\x41\u00e9\n\t\"\\" "\d"' + "\n")
    lits = [lx.literal for lx in g.lexemes]
    assert lits == ['Aé\n\t"\\'.encode(), b"\\d"]  # unknown escapes keep their backslash, as in Lark


@pytest.mark.parametrize(
    "regex, flags",
    [("/a.b/", ""), ("/a.b/s", "s"), ("/abc/imu", "i"), ("/a b # c\n  d/x", "x"), (r"/a\/b/", "")],
)
def test_regex_in_rule_keeps_pattern_and_flags(regex, flags):
    g = compile_lark(f"start: {regex}\n")
    (lx,) = g.lexemes
    body = regex[1 : regex.rindex("/")]
    assert (lx.name, lx.regex, lx.flags, lx.literal) == (regex, body, flags, None)


def test_verbose_regex_matches_without_its_spaces():
    g = compile_lark("start: /a b # c\n  d/x\n")
    assert accepts(g, "abd") and not accepts(g, "a b d")


def test_terminal_is_one_lexeme_with_references_inlined():
    g = compile_lark('start: A\nA: B "x" | C\nB: /[0-9]+/\nC: "c" "d"\n')
    assert lexemes(g) == {"A": ("[0-9]+x|cd", None, "")}
    assert rules(g) == {"start -> A"}
    assert accepts(g, "12x") and accepts(g, "cd") and not accepts(g, "x")


def test_inlined_regex_alternation_is_grouped():
    g = compile_lark('start: A\nA: "<" B ">"\nB: /a|b/\n')
    assert g.lexemes[0].regex == r"\<(?:a|b)\>"
    assert accepts(g, "<b>") and not accepts(g, "<a|b>")


def test_flagged_terminal_is_scoped_when_inlined():
    g = compile_lark('start: A B\nA: B "x"\nB: /ab/i\n')
    assert lexemes(g) == {"A": ("(?i:ab)x", None, ""), "B": ("ab", None, "i")}
    assert accepts(g, "ABxaB") and not accepts(g, "ABXab")


def test_string_terminal_is_a_literal_lexeme_shared_with_anonymous_uses():
    g = compile_lark('start: PLUS "+"\nPLUS: "+"\n')
    assert lexemes(g) == {"PLUS": (r"\+", b"+", "")}
    assert rules(g) == {"start -> PLUS PLUS"}


def test_character_ranges_in_rules_and_terminals():
    g = compile_lark('start: "a".."f" HEX\nHEX: "0".."9" | "A".."F"\n')
    assert lexemes(g) == {'"a".."f"': ("[a-f]", None, ""), "HEX": ("[0-9]|[A-F]", None, "")}
    assert accepts(g, "c7") and accepts(g, "fF") and not accepts(g, "gA")
    g2 = compile_lark('start: "!".."/"\n')
    assert g2.lexemes[0].regex == r"[\x21-\x2f]"
    assert accepts(g2, "+") and not accepts(g2, "0")


def test_ebnf_operators_desugar_to_bnf():
    g = compile_lark('start: "a"* "b"+ "c"? ["d"] ("e" | "f")\n')
    assert rules(g) == {
        "start@star -> ε",
        'start@star -> start@star "a"',  # left recursion: linear for Earley
        'start@plus -> "b"',
        'start@plus -> start@plus "b"',
        'start@opt -> "c"',
        "start@opt -> ε",
        'start@opt#2 -> "d"',
        "start@opt#2 -> ε",
        'start@group -> "e"',
        'start@group -> "f"',
        "start -> start@star start@plus start@opt start@opt#2 start@group",
    }
    for s, ok in [("bf", True), ("aabbcde", True), ("be", True), ("b", False), ("bcce", False), ("ae", False)]:
        assert accepts(g, s) == ok, s


@pytest.mark.parametrize(
    "op, lo, hi",
    [("{3}", 3, 3), ("{1,3}", 1, 3), ("{2,}", 2, 99), ("{,2}", 0, 2), ("~ 2", 2, 2), ("~ 0..2", 0, 2), ("{0}", 0, 0)],
)
def test_repetition_counts_in_rules_and_terminals(op, lo, hi):
    as_rule = compile_lark(f'start: "x" "a"{op} "y"\n')
    as_term = compile_lark(f'start: T\nT: "x" "a"{op} "y"\n')
    assert len(as_term.lexemes) == 1
    for n in range(9):
        for g in (as_rule, as_term):
            assert accepts(g, "x" + "a" * n + "y") == (lo <= n <= hi), (op, n)


def test_repetition_of_a_group_in_a_rule():
    g = compile_lark('start: ("a" "b"){2}\n')
    assert accepts(g, "abab") and not accepts(g, "ab") and not accepts(g, "ababab")


def test_alternatives_continue_on_lines_starting_with_bar_and_inside_brackets():
    g = compile_lark('start: "a"\n     | "b"\n\n     | ("c"\n  | "d")\nother: "z"\n')
    assert {s: accepts(g, s) for s in "abcdz"} == {"a": True, "b": True, "c": True, "d": True, "z": False}


def test_modifiers_priorities_aliases_and_comments_are_accepted():
    g = compile_lark(
        "// a comment\n"
        "?start: item+ -> items   // trailing comment\n"
        "!item.2: KW -> kw | NAME # hash comment\n"
        'KW.3: "if"\n'
        "NAME.-1: /[a-z]+/\n"
    )
    assert rules(g) == {
        "start@plus -> item",
        "start@plus -> start@plus item",
        "start -> start@plus",
        "item -> KW",
        "item -> NAME",
    }
    assert accepts(g, "ifx")


def test_only_rules_reachable_from_start_are_emitted():
    g = compile_lark('start: a\na: "x"\nunused: "y" UNUSED\nUNUSED: "z"\n')
    assert set(g.nonterminals) == {"start", "a"}
    assert set(lexemes(g)) == {'"x"'}


def test_start_can_be_another_rule_or_a_terminal():
    text = 'expr: NUM ("+" NUM)*\nNUM: /[0-9]+/\n'
    g = compile_lark(text, start="expr")
    assert g.nonterminals[g.start] == "expr" and accepts(g, "1+22")
    g2 = compile_lark(text, start="NUM")
    assert accepts(g2, "42") and not accepts(g2, "1+2")


def test_ignore_accepts_terminal_names_literals_and_regexes():
    g = compile_lark('start: "a" "b"\n%ignore WS\n%ignore "~"\n%ignore /#[^\\n]*/\n%ignore /x/i\nWS: /[ \\t]+/\n')
    assert g.ignore == ["[ \\t]+", "\\~", "#[^\\n]*", "(?i:x)"]
    assert accepts(g, "a ~ #c\nX b") is False  # '\n' is not ignored
    assert accepts(g, "a ~ #c") is False  # the comment swallows "b"
    assert accepts(g, "a x  ~b")
    # As in llguidance, ignored text goes between lexemes: not first (unless
    # allow_initial_skip), and not last (the engine ends instead of padding).
    assert g.allow_initial_skip is False and not accepts(g, " a b")
    assert not accepts(g, "a b ")


def test_llguidance_options_allow_initial_skip():
    g = compile_lark('%llguidance {\n  "allow_initial_skip": true\n}\nstart: "a" "b"\n%ignore " "\n')
    assert g.allow_initial_skip and accepts(g, "  a b") and accepts(g, " a  b")
    assert compile_lark('%llguidance {"allow_initial_skip": false}\nstart: "a"\n').allow_initial_skip is False


def test_import_common_forms():
    g = compile_lark(
        "start: NUMBER SP INT WORD\n%import common.NUMBER\n%import common.WS_INLINE -> SP\n%import common (INT, WORD)\n"
    )
    assert set(lexemes(g)) == {"NUMBER", "SP", "INT", "WORD"}
    assert accepts(g, "1.5e3 7abc") and not accepts(g, "1.5e3 7")


def test_imported_terminal_keeps_its_own_dependencies():
    # The user's INT does not change what common.NUMBER means.
    g = compile_lark('start: NUMBER\n%import common.NUMBER\nINT: "0"\n')
    assert accepts(g, "123.5") and accepts(g, "7")


REQUIRED_COMMON = (
    "WS WS_INLINE NEWLINE CR LF INT SIGNED_INT DECIMAL NUMBER SIGNED_NUMBER FLOAT SIGNED_FLOAT "
    "ESCAPED_STRING CNAME WORD LETTER DIGIT HEXDIGIT LCASE_LETTER UCASE_LETTER C_COMMENT CPP_COMMENT SH_COMMENT"
).split()


@pytest.mark.parametrize(
    "name, good, bad",
    [
        ("WS", [" \t\n\r\f"], ["", "x"]),
        ("WS_INLINE", [" \t "], ["\n"]),
        ("NEWLINE", ["\n", "\r\n\n"], ["\r"]),
        ("CR", ["\r"], ["\n"]),
        ("LF", ["\n"], ["\r"]),
        ("INT", ["0", "0123"], ["-1", "1.0"]),
        ("SIGNED_INT", ["-3", "+3", "3"], ["--3"]),
        ("DECIMAL", ["1.5", "1.", ".5"], ["1", "."]),
        ("FLOAT", ["1e5", "1.5E-3", ".5e+2", "2."], ["1", "e5"]),
        ("SIGNED_FLOAT", ["-1.5", "+.5e1"], ["-1"]),
        ("NUMBER", ["1", "1.5", "1e9"], ["-1", "abc"]),
        ("SIGNED_NUMBER", ["-1", "+2.5e3", "7"], ["--1"]),
        ("ESCAPED_STRING", ['""', r'"a\"b"', r'"\\"', '"a\nb"'], ['"a', r'"\"', '"a\\\nb"']),
        ("CNAME", ["_a1", "abc", "A_9"], ["1a", ""]),
        ("WORD", ["Hello"], ["a1", "a_b"]),
        ("LETTER", ["q", "Q"], ["1", "qq"]),
        ("DIGIT", ["5"], ["55", "a"]),
        ("HEXDIGIT", ["a", "F", "7"], ["g"]),
        ("LCASE_LETTER", ["a"], ["A"]),
        ("UCASE_LETTER", ["A"], ["a"]),
        ("C_COMMENT", ["/* a */", "/***/", "/* * / **/"], ["/* a", "/*/", "/* */ */"]),
        ("CPP_COMMENT", ["// x", "//"], ["// x\n"]),
        ("SH_COMMENT", ["# x", "#"], ["# x\ny"]),
        ("SQL_COMMENT", ["-- x"], ["- x"]),
    ],
)
def test_common_terminals(name, good, bad):
    assert name in common_terminals()
    g = compile_lark(f"start: {name}\n%import common.{name}\n")
    for s in good:
        assert accepts(g, s), (name, s)
    for s in bad:
        assert not accepts(g, s), (name, s)


def test_required_common_terminals_are_all_there():
    assert set(REQUIRED_COMMON) <= set(common_terminals())


# ---------------------------------------------------------------------------------------
# Errors: line:column, what was expected, what was found


ERRORS = [
    ("start: a\n", (1, 8), ["undefined rule 'a'", "used in rule 'start'"]),
    ("start: value\nvalue: NUMBR\nNUMBER: /1/\n", (2, 8), ["undefined terminal 'NUMBR'", "did you mean NUMBER?"]),
    ('start: "a"\n%ignore SPACE\n', (2, 9), ["undefined terminal 'SPACE'", "%ignore"]),
    ('start: A\nA: "x" B\nB: "y" A\n', (3, 8), ["terminal A is recursive", "A -> B -> A"]),
    ('start: A\nA: A "x"\n', (2, 4), ["terminal A is recursive (A -> A)"]),
    ('start: "abc\n', (1, 8), ["unterminated string", "expected '\"'", "found end of line"]),
    ("start: /abc\n", (1, 8), ["unterminated regex", "found end of line"]),
    ('start "a"\n', (1, 7), ["expected ':' after the rule name 'start'", 'found string "a"']),
    ('start: ("a" | "b"\n', (2, 1), ["expected ')' to close the '(' at 1:8", "found end of input"]),
    ('start: "a" )\n', (1, 12), ["expected end of line after the definition of 'start'", "found ')'"]),
    ('start: "a" | | "b" ->\n', (1, 22), ["expected a lowercase alias name after '->'", "found end of line"]),
    ('start: "a"\n%declare FOO\n', (2, 1), ["%declare is not supported"]),
    ('start: "a"\n%override start: "b"\n', (2, 1), ["%override is not supported"]),
    ('start: "a"\n%extend start: "b"\n', (2, 1), ["%extend is not supported"]),
    ('start: "a"\n%frobnicate\n', (2, 1), ["unknown directive %frobnicate"]),
    ('%llguidance {"no_forcing": true}\nstart: "a"\n', (1, 13), ["unsupported %llguidance option 'no_forcing'"]),
    ('%llguidance {"allow_initial_skip": 1}\nstart: "a"\n', (1, 13), ["must be true or false"]),
    ('%llguidance {"allow_initial_skip" true}\nstart: "a"\n', (1, 35), ["bad JSON after %llguidance"]),
    ("%llguidance start\n", (1, 13), ["expected a JSON object after %llguidance", "found 's'"]),
    ('start: "a"\npair{x}: x x\n', (2, 5), ["templates are not supported"]),
    ("start: pair{NUM}\n", (1, 8), ["templates are not supported"]),
    ('start: "a"{3,2}\n', (1, 11), ["bad repetition", "maximum 2 is below the minimum 3"]),
    ('start: "a"~\n', (1, 12), ["expected a repetition count after '~'", "found end of line"]),
    ("start: NUM\nNUM: /(?=1)1/\n", (2, 7), ["in the regex of terminal NUM", "lookahead"]),
    ("start: NUM\nNUM: /(1)\\1/\n", (2, 10), ["terminal NUM", "backreference \\1"]),
    ("start: NUM\nNUM: /^1/\n", (2, 7), ["terminal NUM", "anchor ^"]),
    ("start: /a(?<!b)c/\n", (1, 10), ["of rule 'start'", "lookbehind"]),
    ("start: NUM\nNUM:   /ab(c/\n", (2, 11), ["in the regex of terminal NUM", "missing ), unterminated subpattern"]),
    ("start: /[a-/\n", (1, 9), ["of rule 'start'"]),
    ("start: /a*/\n", (1, 8), ["matches the empty string"]),
    ('start: WS\nWS: " "*\n', (2, 1), ["terminal WS matches the empty string"]),
    ('start: ""\n', (1, 8), ["empty string"]),
    ('start: "a"\n%ignore /x*/\n', (2, 1), ["%ignore matches the empty string"]),
    ('start: A\nA: "a" b\nb: "x"\n', (2, 8), ["terminal A uses rule 'b'"]),
    ('start: "a"\nstart: "b"\n', (2, 1), ["start is defined twice (first at 1:1)"]),
    ('start: "a" Foo\n', (1, 12), ["mixes upper and lower case"]),
    ("start: /a/q\n", (1, 11), ["unknown regex flag 'q'"]),
    ('start: "a"\n%import foo.BAR\n', (2, 9), ["only '%import common' is supported", "found rule name 'foo'"]),
    ('start: "a"\n%import common.NUMBR\n', (2, 16), ["'common' has no terminal NUMBR", "did you mean NUMBER?"]),
    ('start: "\\x4"\n', (1, 9), ["bad escape \\x", "expected 2 hex digits"]),
    ('start: "ab".."z"\n', (1, 8), ["one-character strings"]),
    ('start: "z".."a"\n', (1, 8), ["empty character range"]),
    ('start: "a" @\n', (1, 12), ["unexpected character '@'"]),
    ('"a": b\n', (1, 1), ["expected a rule or terminal definition or a %directive", 'found string "a"']),
    ("start: |\n  )\n", (2, 3), ["expected a rule or terminal definition or a %directive", "found ')'"]),
    ('start: "a"..\n', (1, 13), ["expected a string after '..' in a character range", "found end of line"]),
]


@pytest.mark.parametrize("text, loc, parts", ERRORS)
def test_errors_name_line_column_expected_and_found(text, loc, parts):
    err = lark_error(text)
    msg = str(err)
    assert msg.startswith(f"{loc[0]}:{loc[1]}: "), msg
    assert (err.line, err.column) == loc
    for p in parts:
        assert p in msg, (p, msg)
    # The message quotes the source line with a caret under the column.
    src_line = text.split("\n")[loc[0] - 1]
    assert f"\n    {src_line}\n    {' ' * (loc[1] - 1)}^" in msg


def test_missing_start_rule_is_named():
    msg = str(lark_error('stat: "a"\n'))
    assert "no rule 'start'" in msg and "did you mean 'stat'?" in msg
    assert "no rule 'expr'" in str(lark_error('start: "a"\n', start="expr"))


def test_regex_error_offsets_map_into_multiline_verbose_regex():
    err = lark_error("start: /a\n  b(\n  c/x\n")
    assert (err.line, err.column) == (2, 4)


# ---------------------------------------------------------------------------------------
# Limits


def test_deep_bracket_nesting_is_bounded():
    depth = MAX_NESTING + 5
    with pytest.raises(LimitExceeded) as info:
        compile_lark("start: " + "(" * depth + '"a"' + ")" * depth + "\n")
    assert info.value.limit == "lark_nesting_depth"
    compile_lark("start: " + "(" * 20 + '"a"' + ")" * 20 + "\n")


def test_huge_repetition_count_is_bounded():
    with pytest.raises(LimitExceeded):
        compile_lark('start: "a"{0,99999999999}\n')
    with pytest.raises(LimitExceeded):
        compile_lark('start: "a"~9000000\n', limits=Limits(max_grammar_size=1000))


def test_exponential_terminal_inlining_is_bounded():
    lines = ['start: T20\nT0: "ab"\n'] + [f"T{i}: T{i - 1} T{i - 1}\n" for i in range(1, 21)]
    with pytest.raises(LimitExceeded) as info:
        compile_lark("".join(lines), limits=Limits(max_regex_nodes=10_000))
    assert info.value.limit == "max_regex_nodes"


def test_long_terminal_chains_do_not_recurse():
    n = 3000
    lines = ["start: T0\n"] + [f"T{i}: T{i + 1}\n" for i in range(n)] + [f'T{n}: "z"\n']
    g = compile_lark("".join(lines))
    assert lexemes(g) == {"T0": ("z", b"z", "")}


# ---------------------------------------------------------------------------------------
# Property: EBNF compiled as rules and as one terminal agrees with Python's re


def _ebnf():
    leaf = st.sampled_from(["a", "b", "c"]).map(lambda ch: (f'"{ch}"', ch))

    def extend(inner):
        def seq(parts):
            return (" ".join(p[0] for p in parts), "".join(f"(?:{p[1]})" for p in parts))

        def alt(parts):
            return ("(" + " | ".join(p[0] for p in parts) + ")", "|".join(f"(?:{p[1]})" for p in parts))

        def rep(args):
            (lark, rx), op = args
            lark_op, rx_op = op
            return (f"({lark}){lark_op}", f"(?:{rx}){rx_op}")

        ops = st.sampled_from(
            [("*", "*"), ("+", "+"), ("?", "?"), ("{2}", "{2}"), ("{0,2}", "{0,2}"), ("~ 1..2", "{1,2}")]
        )
        return st.one_of(
            st.lists(inner, min_size=1, max_size=3).map(seq),
            st.lists(inner, min_size=2, max_size=3).map(alt),
            st.tuples(inner, ops).map(rep),
        )

    return st.recursive(leaf, extend, max_leaves=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ebnf(), st.lists(st.text(alphabet="abc", max_size=6), min_size=6, max_size=6))
def test_random_ebnf_matches_python_re(expr, samples):
    lark, rx = expr
    pattern = re.compile(rx)
    as_rules = compile_lark(f'start: {lark} "!"\n')
    try:
        as_term = compile_lark(f'start: T\nT: {lark} "!"\n')
    except GrammarError:
        as_term = None
    # Words the expression itself produces, plus random ones.
    for s in samples + ["", "a", "ab", "abc", "aa", "cba"]:
        want = pattern.fullmatch(s) is not None
        assert accepts(as_rules, s + "!") == want, (lark, s)
        if as_term is not None:
            assert accepts(as_term, s + "!") == want, (lark, s)


# ---------------------------------------------------------------------------------------
# The shipped JSON grammar


@pytest.fixture(scope="module")
def json_grammar() -> Grammar:
    return compile_lark(read_grammar("json.lark"))


def test_json_grammar_ir(json_grammar):
    names = set(lexemes(json_grammar))
    assert names == {"STRING", "NUMBER", '"true"', '"false"', '"null"', '"{"', '"}"', '"["', '"]"', '","', '":"'}
    assert json_grammar.ignore == ["[ \\t\\n\\r]+"]


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json_values, st.booleans(), st.sampled_from([None, 0, 2]))
def test_json_grammar_accepts_json_dumps(json_grammar, value, ascii_only, indent):
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate written raw: not UTF-8, not our case
        data = json.dumps(value, indent=indent).encode()
    assert grammar_accepts(json_grammar, data), text


def _json_ok(text: str) -> bool:
    """json.loads, minus NaN/Infinity, and minus whitespace around the value: the
    engine skips %ignore'd text only between lexemes (llguidance's rule)."""

    def refuse(name):
        raise ValueError(name)

    if text[:1] in (" ", "\t", "\n", "\r") or text[-1:] in (" ", "\t", "\n", "\r"):
        return False

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError:
        return False
    return True


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _json_values,
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["delete", "insert", "truncate"]),
    st.sampled_from(list('{}[],:"\\0123456789.eE+-tfn aü\x01')),
)
def test_json_grammar_agrees_with_json_loads_on_broken_text(json_grammar, value, where, how, ch):
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value)
    i = where % (len(text) + 1)
    if how == "delete":
        broken = text[:i] + text[i + 1 :]
    elif how == "insert":
        broken = text[:i] + ch + text[i:]
    else:
        broken = text[:i]
    assert grammar_accepts(json_grammar, broken.encode("utf-8")) == _json_ok(broken), broken


@pytest.mark.parametrize(
    "text, ok",
    [
        ("[1, 2.5e-3, true, null]", True),
        ('{"a": {"b": []}}', True),
        ('"\\u00e9\\n\\/"', True),
        ("-0.0E+12", True),
        ("01", False),
        ("[1,]", False),
        ("1.", False),
        (".5", False),
        ("+1", False),
        ('"\\x41"', False),
        ('"\\u12"', False),
        ('"a\tb"', False),
        ("NaN", False),
        ('{"a" 1}', False),
        ("[] []", False),
        ("", False),
        (" 1", False),  # no %ignore before the first lexeme (allow_initial_skip is off)
        ("1 ", False),
        ('{ "a" :\n[ 1 ,2 ] }', True),
    ],
)
def test_json_grammar_samples(json_grammar, text, ok):
    assert accepts(json_grammar, text) == ok
    assert _json_ok(text) == ok


def test_crlf_line_endings_compile_the_same(json_grammar):
    text = read_grammar("json.lark").replace("\n", "\r\n")
    assert compile_lark(text).fingerprint() == json_grammar.fingerprint()
