"""The code-brackets grammar and the open-context scanner.

Besides sample snippets, a generator builds well-formed code per language while
recording, at safe split points, the brackets and string/comment open there; the
scanner must report exactly that context, and the grammar for that context must
accept the rest of the code as a completion.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.engine.brackets import (
    MAX_OPEN_DEPTH,
    code_brackets_grammar,
    code_brackets_lark,
    known_languages,
    language_syntax,
    open_context_at,
)
from midword.engine.limits import GrammarError, LimitExceeded
from midword.engine.recognizer import grammar_accepts


def accepts(text: str, context: str = "", language: str | None = None) -> bool:
    return grammar_accepts(code_brackets_grammar(context, language=language), text.encode("utf-8"))


# ---------------------------------------------------------------------------------------
# Grammar shape


def test_generated_start_rules_close_innermost_first():
    text = code_brackets_lark("([{", language="python")
    assert "start: ctx3" in text
    assert 'ctx3: balanced | balanced "}" ctx2' in text
    assert 'ctx2: balanced | balanced "]" ctx1' in text
    assert 'ctx1: balanced | balanced ")" ctx0' in text
    assert "ctx0: balanced" in text


def test_string_context_continues_the_body_first():
    text = code_brackets_lark('("', language="python")
    assert "start: | DQ_OPEN | DQ_REST ctx1" in text
    g = code_brackets_grammar('("', language="python")
    names = {lx.name for lx in g.lexemes}
    assert {"DQ_OPEN", "DQ_REST", "TEXT", "DQ", "SQ", "TDQ", "TSQ", "LINE_HASH"} <= names


def test_every_language_and_opener_compiles():
    for lang in known_languages():
        syn = language_syntax(lang)
        code_brackets_grammar("", language=lang)
        for opener in syn.openers:
            g = code_brackets_grammar("[(" + opener, language=lang)
            assert g.nonterminals[g.start] == "start"


def test_language_aliases_and_unknown_languages():
    assert language_syntax("shellscript").name == "shell"
    assert language_syntax("typescriptreact").name == "typescript"
    assert language_syntax("PY").name == "python"
    assert language_syntax("haskell").name == "generic"
    assert language_syntax(None).name == "generic"


def test_bad_open_context_is_a_clear_error():
    with pytest.raises(GrammarError, match=r"'#' at offset 1 .* of c"):
        code_brackets_grammar("(#", language="c")
    with pytest.raises(GrammarError, match="only the last item"):
        code_brackets_grammar('("(', language="python")
    with pytest.raises(GrammarError, match=r"'x' at offset 0"):
        code_brackets_grammar("x")
    with pytest.raises(LimitExceeded):
        code_brackets_grammar("(" * (MAX_OPEN_DEPTH + 1))


def test_grammars_are_cached():
    assert code_brackets_grammar("({", language="go") is code_brackets_grammar("({", language="golang")


# ---------------------------------------------------------------------------------------
# Samples

SAMPLES = [
    # (completion, open context, language, accepted)
    ("f(x)", "", "python", True),
    ("f(x", "", "python", False),
    ("x)", "", "python", False),
    ("x)", "(", "python", True),
    ("x) + g(y)", "(", "python", True),
    ("x", "(", "python", True),
    ("x)]", "[(", "python", True),
    ("x])", "[(", "python", False),
    ("x)])", "[(", "python", False),
    ("'(' + x", "", "python", True),
    ("# )\n", "", "python", True),
    ("# )\n)", "(", "python", True),
    ('"""a)\n"""', "", "python", True),
    ('"""a)""', "", "python", False),
    ('f"{x}" + """"""', "", "python", True),
    ('"a\n"', "", "python", False),  # one-line strings do not span lines
    ("abc", '("', "python", True),
    ('abc")', '("', "python", True),
    ('abc"))', '("', "python", False),
    ('a\\"b"', '"', "python", True),
    ("x = 1 # it's fine", "", "python", True),
    ("a/b", "", "c", True),
    ("a // )\n", "", "c", True),
    ("a /* ) */", "", "c", True),
    ("a /* ) ", "", "c", False),
    ("//*\n( */", "", "c", False),
    ("char c = ')';", "", "c", True),
    (" done */ x)", "(/*", "c", True),
    (" more", "(/*", "c", True),
    (" done */ x))", "(/*", "c", False),
    (" rest\n)", "(#", "python", True),
    (" rest)", "(#", "python", True),  # still inside the comment
    ("`a ${b} (`", "", "javascript", True),
    ("`a\nb`", "", "go", True),
    ("`a\\`", "", "go", True),  # Go raw strings have no escapes
    ("'a' x", "", "rust", True),
    ("fn f<'a>(x: &'a str) -> char { '}' }", "", "rust", True),
    ('let s = "a\nb";', "", "rust", True),
    ("x'", "'", "rust", True),
    ("'", "'", "rust", True),
    ("echo ${#arr[@]}", "", "shell", True),
    ("echo $# # comment )\n", "", "shell", True),
    ("a#b)", "(", "shell", True),
    ("echo \\( 'it\\'", "", "shell", True),  # no escapes inside '...'
    ("echo 'a\nb'", "", "shell", True),
    ("it's (fine)", "", "yaml", True),
    ("x: 'it''s' # c", "", "yaml", True),
    ("key: value#not-a-comment)", "(", "yaml", True),
    ("a = '''x\n''' # c", "", "toml", True),
    ("a = 'c:\\'", "", "toml", True),  # literal strings have no escapes
    ("puts 'a\nb' # (", "", "ruby", True),
    ('{"a": [1, "]"]}', "", "json", True),
    ('{"a": [1, "]"]', "", "json", False),
    ("// c\n[1]", "", "jsonc", True),
    ("don't (stop)", "", None, True),
    ("x = 'a(' + b)", "(", None, True),
]


@pytest.mark.parametrize("completion, context, language, ok", SAMPLES)
def test_samples(completion, context, language, ok):
    assert accepts(completion, context, language) == ok


CONTEXT_SAMPLES = [
    # (code before the cursor, language, expected context)
    ("def f(x, y):\n    return g(x[", "python", "(["),
    ("print('(', x", "python", "("),
    ('print("abc', "python", '("'),
    ('x = """\n(\n', "python", '"""'),
    ("x = '''a", "python", "'''"),
    ("f(  # (\n  a", "python", "("),
    ("f( # comment", "python", "(#"),
    ("s = 'a\\' (", "python", "'"),
    ("s = 'a\nb(", "python", "("),  # a broken one-line string ends with its line
    ("a)", "python", ""),  # an unmatched closer is ignored
    ("[(]", "python", ""),  # a closer drops the unclosed openers inside it
    ("int main() { /* ( */ f(", "c", "{("),
    ("int main() { /* (", "c", "{/*"),
    ("x = a / b; // (", "c", "//"),
    ("x = a / (b", "c", "("),
    ("char c = '(';", "c", ""),
    ("const s = `(${", "javascript", "`"),
    ("fn f<'a>(x: &'a str", "rust", "("),
    ("let c = '(';", "rust", ""),
    ("let c = '", "rust", "'"),
    ("let c = '\\", "rust", "'"),
    ("echo ${#x[@]} $(( (", "shell", "((("),
    ("echo a#b (", "shell", "("),
    ("echo a #b (", "shell", "#"),
    ('echo \\( "', "shell", '"'),
    ("echo 'it\\'s", "shell", ""),
    ("msg: it's [a", "yaml", "["),
    ("msg: 'it''s [a", "yaml", "'"),
    ("k: v#x (", "yaml", "("),
    ('{"a": ["', "json", '{["'),
    ("it's (x", None, "("),
]


@pytest.mark.parametrize("prefix, language, context", CONTEXT_SAMPLES)
def test_open_context_at(prefix, language, context):
    assert open_context_at(prefix, language) == context


# ---------------------------------------------------------------------------------------
# Property: scanner and grammar agree on generated well-formed code

_PLAIN = "ab ()[]{}\"'`#/*"

_TEXT_TOKENS = {
    "common": [
        "x",
        "foo_1",
        "a = b",
        "1.5 + 2",
        "x, y",
        "x: y",
        "!ok",
        "a < b",
        "x ; y",
        "$v",
        "@d",
        "~z",
        "α β",
        "a\n  b",
    ],
    "slash": ["a / b", "a * b", "*p"],
    "noslash": ["a // b", "a /* b", "a / b"],
    "python": ["a \\\n b"],
    "shell": ["a#b", "$#", "\\(", 'echo \\"', "${#x}"],
    "yaml": ["a#b", "it's", "don't"],
    "generic": ["it's"],
    "rust": ["&'a str", "'static", "<'a>"],
}


def _text_token(rng: random.Random, lang: str, syn) -> str:
    pools = ["common"]
    slash = any(k in syn.kinds for k in ("LINE_SLASH", "BLOCK"))
    pools.append("slash" if slash else ("noslash" if "LINE_HASH" in syn.kinds else "common"))
    if lang in _TEXT_TOKENS:
        pools.append(lang)
    return rng.choice(_TEXT_TOKENS[rng.choice(pools)])


def _units(rng: random.Random, kind: str) -> list[str]:
    """Body units of a string/comment kind: split points go between them."""
    closer_char = {
        "DQ": '"',
        "DQ_ML": '"',
        "SQ": "'",
        "SQ_ML": "'",
        "SQ_RAW": "'",
        "SQ_RAW_ML": "'",
        "SQ_YAML": "'",
        "BT": "`",
        "BT_RAW": "`",
        "TDQ": '"',
        "TSQ": "'",
        "TSQ_RAW": "'",
    }.get(kind)
    escape = kind in ("DQ", "DQ_ML", "SQ", "SQ_ML", "BT", "TDQ", "TSQ")
    multiline = kind not in ("DQ", "SQ", "SQ_RAW", "LINE_SLASH", "LINE_HASH")
    plain = [c for c in _PLAIN if c != closer_char and not (escape and c == "\\")]
    if not escape:
        plain.append("\\")
    if multiline:
        plain.append("\n")
    if kind in ("LINE_SLASH", "LINE_HASH"):
        plain = [c for c in plain if c != "\n"]
    if kind == "BLOCK":
        plain = [c for c in plain if c != "*"]
    out = []
    for _ in range(rng.randrange(5)):
        u = rng.choice(plain)
        r = rng.random()
        if escape and r < 0.25:
            u = "\\" + rng.choice("\\n\"'`(x")
        elif kind in ("TDQ", "TSQ", "TSQ_RAW") and r < 0.45:
            u = closer_char * rng.choice([1, 2]) + u
        elif kind == "SQ_YAML" and r < 0.4:
            u = "''"
        elif kind == "BLOCK" and r < 0.4:
            u = "*" * rng.choice([1, 2]) + u.replace("/", "a")
        out.append(u)
    return out


def _literal(rng: random.Random, kind: str) -> tuple[str, list[str], str]:
    """(opener, body units, closer) of a random literal of `kind`."""
    openers = {
        "LINE_SLASH": "//",
        "LINE_HASH": "#",
        "BLOCK": "/*",
        "TDQ": '"""',
        "TSQ": "'''",
        "TSQ_RAW": "'''",
        "BT": "`",
        "BT_RAW": "`",
        "RUST_CHAR": "'",
    }
    opener = openers.get(kind, '"' if kind.startswith("DQ") else "'")
    if kind == "RUST_CHAR":
        return opener, [rng.choice(["a", "(", '"', "\\n", "\\'", "\\x41", "\\u{1F600}", "é"])], "'"
    closer = {"LINE_SLASH": "\n", "LINE_HASH": "\n", "BLOCK": "*/"}.get(kind, opener)
    return opener, _units(rng, kind), closer


def _document(rng: random.Random, lang: str | None):
    """Well-formed code and its safe split points: [(offset, open context)]."""
    syn = language_syntax(lang)
    parts: list[str] = []
    points: list[tuple[int, str]] = []
    size = [0]

    def emit(s: str) -> None:
        parts.append(s)
        size[0] += len(s)

    def balanced(stack: str, depth: int) -> None:
        for _ in range(rng.randrange(4)):
            points.append((size[0], stack))
            r = rng.random()
            if r < 0.3 and depth < 4:
                opener = rng.choice("([{")
                emit(opener + " ")  # the space keeps shell's `{#` (no comment) out of the way
                balanced(stack + opener, depth + 1)
                points.append((size[0], stack + opener))
                emit({"(": ")", "[": "]", "{": "}"}[opener])
            elif r < 0.65:
                kind = rng.choice(syn.kinds)
                opener, units, closer = _literal(rng, kind)
                emit(opener)
                points.append((size[0], stack + opener))
                for u in units:
                    emit(u)
                    if kind != "RUST_CHAR":
                        points.append((size[0], stack + opener))
                emit(closer)
            else:
                emit(_text_token(rng, lang or "generic", syn))
            emit(" ")

    balanced("", 0)
    points.append((size[0], ""))
    return "".join(parts), points


LANGS = ["python", "c", "javascript", "go", "rust", "shell", "yaml", "toml", "ruby", "json", "java", None]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LANGS), st.randoms(use_true_random=False))
def test_scanner_and_grammar_agree_on_generated_code(lang, rng):
    text, points = _document(rng, lang)
    assert accepts(text, "", lang), text
    assert open_context_at(text, lang) == ""
    for offset, context in rng.sample(points, min(4, len(points))):
        prefix, completion = text[:offset], text[offset:]
        assert open_context_at(prefix, lang) == context, (prefix, completion)
        assert accepts(completion, context, lang), (prefix, completion, context)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(alphabet="([{", max_size=5),
    st.lists(st.sampled_from([")", "]", "}", "x", "(y)", "'}'", "[]"]), max_size=6),
    st.sampled_from(["python", "c", None]),
)
def test_a_completion_closes_only_what_is_open_innermost_first(context, pieces, lang):
    completion = " ".join(pieces)
    # The reference: walk the completion with the context as the initial stack.
    stack = list(context)
    ok = True
    for p in pieces:
        if p in (")", "]", "}"):
            if stack and {"(": ")", "[": "]", "{": "}"}[stack[-1]] == p:
                stack.pop()
            else:
                ok = False
    assert accepts(completion, context, lang) == ok, (context, completion)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LANGS), st.randoms(use_true_random=False), st.sampled_from([")", "]", "}"]))
def test_an_extra_closer_is_rejected(lang, rng, closer):
    text, _ = _document(rng, lang)
    assert not accepts(text + closer, "", lang)
