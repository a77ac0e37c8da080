"""Tests for midword.engine.regex: derivative regexes over UTF-8 bytes.

The main check renders random regex ASTs to Python pattern strings and compares
`LazyDFA.matches` with `re.fullmatch(..., re.ASCII)`; `&`/`~` are checked against
a naive substring-DP reference matcher.
"""

from __future__ import annotations

import itertools
import re
import time
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from regex_reference import random_patterns

from midword.engine.limits import GrammarError, LimitExceeded, Limits
from midword.engine.regex import ExprSet, LazyDFA, _class_map, _split_class_map, refine_byte_sets, term, utf8_sequences
from midword.engine.regex.nodes import AND

JSON_CHAR = r'[^"\\\x00-\x1F\x7F]'
JSON_STRING_BODY = r'([^"\\\x00-\x1F\x7F]|\\(["\\/bfnrt]|u[a-fA-F0-9]{4}))*"'


def match(pattern: str, data: bytes | str, flags: str = "", extended: bool = False) -> bool:
    es = ExprSet()
    if isinstance(data, str):
        data = data.encode("utf-8")
    return LazyDFA(es, es.parse(pattern, flags, extended=extended)).matches(data)


# --------------------------------------------------------------------------------------
# Random regexes compared with Python's re
# --------------------------------------------------------------------------------------

# Caseless multibyte characters, so `re.ASCII|re.I` and midword agree on them.
ALPHABET = ["a", "b", "c", "A", "B", "z", "Z", "0", "7", "_", " ", "\n", "\t", "-", ".", "€", "中", "😀", "→"]
CLASS_RANGES = [("a", "c"), ("A", "Z"), ("0", "9"), ("a", "z"), ("€", "中"), (" ", "0"), ("Z", "a"), ("→", "😀")]
CLASS_ESCAPES = [r"\d", r"\w", r"\s", r"\D", r"\W", r"\S"]


def _esc_class(ch: str) -> str:
    return "\\" + ch if ch in "\\]^-[" else ("\\n" if ch == "\n" else ("\\t" if ch == "\t" else ch))


leaf = st.one_of(
    st.sampled_from(ALPHABET).map(lambda c: ("lit", c)),
    st.just(("dot",)),
    st.sampled_from(CLASS_ESCAPES).map(lambda e: ("esc", e)),
    st.tuples(
        st.booleans(),
        st.lists(
            st.one_of(
                st.sampled_from(ALPHABET).map(lambda c: ("c", c)),
                st.sampled_from(CLASS_RANGES).map(lambda r: ("r",) + r),
                st.sampled_from(CLASS_ESCAPES).map(lambda e: ("e", e)),
            ),
            min_size=1,
            max_size=4,
        ),
    ).map(lambda t: ("class", t[0], tuple(t[1]))),
)

QUANTS = ["*", "+", "?", "{2}", "{1,}", "{0,2}", "{1,3}", "{,2}", "{3}"]


def _extend(children):
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("cat", tuple(xs))),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("alt", tuple(xs))),
        st.tuples(children, st.sampled_from(QUANTS), st.booleans()).map(lambda t: ("rep",) + t),
        st.tuples(st.sampled_from(["(", "(?:", "(?P<"]), children).map(lambda t: ("group",) + t),
        st.tuples(st.sampled_from(["i", "s", "-i"]), children).map(lambda t: ("flags",) + t),
    )


regex_ast = st.recursive(leaf, _extend, max_leaves=8)


def render(ast, names=None) -> str:
    names = [0] if names is None else names
    k = ast[0]
    if k == "lit":
        return re.escape(ast[1])
    if k == "dot":
        return "."
    if k == "esc":
        return ast[1]
    if k == "class":
        body = ""
        for item in ast[2]:
            if item[0] == "c":
                body += _esc_class(item[1])
            elif item[0] == "r":
                body += _esc_class(item[1]) + "-" + _esc_class(item[2])
            else:
                body += item[1]
        return "[" + ("^" if ast[1] else "") + body + "]"
    if k == "cat":
        return "".join("(?:" + render(x, names) + ")" if x[0] == "alt" else render(x, names) for x in ast[1])
    if k == "alt":
        return "|".join(render(x, names) for x in ast[1])
    if k == "rep":
        return "(?:" + render(ast[1], names) + ")" + ast[2] + ("?" if ast[3] else "")
    if k == "group":
        if ast[1] == "(?P<":
            names[0] += 1
            return f"(?P<g{names[0]}>" + render(ast[2], names) + ")"
        return ast[1] + render(ast[2], names) + ")"
    if k == "flags":
        return f"(?{ast[1]}:" + render(ast[2], names) + ")"
    raise AssertionError(k)


def sample(ast, rnd, icase=False) -> str:
    """A string built to (usually) match `ast`, so the comparison sees positives."""
    k = ast[0]
    if k == "lit":
        c = ast[1]
        return c.swapcase() if icase and c.isascii() and rnd.random() < 0.5 else c
    if k in ("dot", "esc"):
        return rnd.choice(ALPHABET)
    if k == "class":
        cands = list(ALPHABET)
        for item in ast[2]:
            if item[0] == "c":
                cands += [item[1]] * 3
            elif item[0] == "r":
                cands += [item[1], item[2]] * 2
        return rnd.choice(cands)
    if k == "cat":
        return "".join(sample(x, rnd, icase) for x in ast[1])
    if k == "alt":
        return sample(rnd.choice(ast[1]), rnd, icase)
    if k == "rep":
        lo, hi = {
            "*": (0, 3),
            "+": (1, 3),
            "?": (0, 1),
            "{2}": (2, 2),
            "{1,}": (1, 3),
            "{0,2}": (0, 2),
            "{1,3}": (1, 3),
            "{,2}": (0, 2),
            "{3}": (3, 3),
        }[ast[2]]
        return "".join(sample(ast[1], rnd, icase) for _ in range(rnd.randint(lo, hi)))
    if k == "group":
        return sample(ast[2], rnd, icase)
    if k == "flags":
        return sample(ast[2], rnd, icase or ast[1] == "i")
    raise AssertionError(k)


def mutate(s: str, rnd) -> str:
    if not s or rnd.random() < 0.3:
        return s + rnd.choice(ALPHABET)
    i = rnd.randrange(len(s))
    op = rnd.random()
    if op < 0.4:
        return s[:i] + s[i + 1 :]
    if op < 0.8:
        return s[:i] + rnd.choice(ALPHABET) + s[i + 1 :]
    return s[:i] + rnd.choice(ALPHABET) + s[i:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regex_ast, st.randoms(use_true_random=False), st.sampled_from(["", "i", "s"]))
def test_matches_python_re(ast, rnd, flags):
    pattern = render(ast)
    py = re.compile(pattern, re.ASCII | (re.I if "i" in flags else 0) | (re.S if "s" in flags else 0))
    es = ExprSet()
    dfa = LazyDFA(es, es.parse(pattern, flags))
    strings = set()
    for _ in range(12):
        s = sample(ast, rnd, "i" in flags)
        strings.add(s)
        strings.add(mutate(s, rnd))
    strings.add("".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 6))))
    for s in strings:
        expected = py.fullmatch(s) is not None
        assert dfa.matches(s.encode()) == expected, (pattern, flags, s)


@settings(max_examples=100, deadline=None)
@given(
    regex_ast,
    st.lists(
        st.sampled_from(
            [
                b"a",
                b"B",
                b"0",
                b"\n",
                b"\xe2",
                b"\x82",
                b"\xac",
                b"\xff",
                "中".encode(),
                b"\xf0\x9f",
                b"\xc0\x80",
                b"\xed\xa0\x80",
            ]
        ),
        max_size=6,
    ),
)
def test_bytes_valid_utf8_only(ast, parts):
    """Every parsed pattern matches valid UTF-8 only; on valid input it agrees with re."""
    pattern = render(ast)
    data = b"".join(parts)
    got = match(pattern, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        assert not got, (pattern, data)
        return
    assert got == (re.fullmatch(pattern, text, re.ASCII) is not None), (pattern, data)


@settings(max_examples=60, deadline=None)
@given(regex_ast)
def test_byte_classes_share_derivatives(ast):
    """Bytes in one class of `byte_classes` really have the same derivative."""
    es = ExprSet()
    e = es.parse(render(ast))
    frontier = [e]
    seen = {e}
    while frontier and len(seen) < 30:
        x = frontier.pop()
        for b in range(256):
            d = es._derive(x, b)
            assert d == es.derivative(x, b)
            if d not in seen:
                seen.add(d)
                frontier.append(d)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(0, 255).map(lambda b: 1 << b),
            st.integers(1, (1 << 256) - 1),
            st.tuples(st.integers(0, 255), st.integers(0, 255)).map(
                lambda r: sum(1 << b for b in range(min(r), max(r) + 1))
            ),
        ),
        max_size=12,
    )
)
def test_class_map_names_each_byte_by_the_smallest_byte_of_its_block(byte_sets):
    blocks = refine_byte_sets(byte_sets)
    signature = [tuple((s >> b) & 1 for s in byte_sets) for b in range(256)]
    expected = bytes(signature.index(signature[b]) for b in range(256))
    assert _class_map(blocks) == expected


# --------------------------------------------------------------------------------------
# & and ~ against a reference matcher
# --------------------------------------------------------------------------------------

ext_leaf = st.one_of(
    st.sampled_from(["a", "b", "c"]).map(lambda c: ("lit", c)),
    st.just(("class", "ab")),
    st.just(("dot",)),
    st.just(("eps",)),
)


def _ext_extend(children):
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("cat", tuple(xs))),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("alt", tuple(xs))),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ("and", tuple(xs))),
        children.map(lambda x: ("not", x)),
        st.tuples(children, st.sampled_from([(0, None), (1, None), (0, 1), (2, 3), (1, 2)])).map(
            lambda t: ("rep", t[0], t[1][0], t[1][1])
        ),
    )


ext_ast = st.recursive(ext_leaf, _ext_extend, max_leaves=7)


def render_ext(ast) -> str:
    k = ast[0]
    if k == "lit":
        return ast[1]
    if k == "class":
        return "[" + ast[1] + "]"
    if k == "dot":
        return "."
    if k == "eps":
        return "()"
    if k == "cat":
        return "".join("(" + render_ext(x) + ")" for x in ast[1])
    if k in ("alt", "and"):
        return ("|" if k == "alt" else "&").join("(" + render_ext(x) + ")" for x in ast[1])
    if k == "not":
        return "~(" + render_ext(ast[1]) + ")"
    if k == "rep":
        return "(" + render_ext(ast[1]) + ")" + "{%d,%s}" % (ast[2], "" if ast[3] is None else ast[3])
    raise AssertionError(k)


def reference_match(ast, s: str) -> bool:
    @lru_cache(maxsize=None)
    def m(node, i, j):
        k = node[0]
        if k == "lit":
            return j == i + 1 and s[i] == node[1]
        if k == "class":
            return j == i + 1 and s[i] in node[1]
        if k == "dot":
            return j == i + 1 and s[i] != "\n"
        if k == "eps":
            return i == j
        if k == "cat":
            return cat(node[1], i, j)
        if k == "alt":
            return any(m(x, i, j) for x in node[1])
        if k == "and":
            return all(m(x, i, j) for x in node[1])
        if k == "not":
            return not m(node[1], i, j)
        if k == "rep":
            return rep(node[1], node[2], node[3], i, j)
        raise AssertionError(k)

    @lru_cache(maxsize=None)
    def cat(items, i, j):
        if len(items) == 1:
            return m(items[0], i, j)
        return any(m(items[0], i, p) and cat(items[1:], p, j) for p in range(i, j + 1))

    @lru_cache(maxsize=None)
    def rep(node, lo, hi, i, j):
        if i == j and lo == 0:
            return True
        if hi == 0:
            return False
        nlo, nhi = max(lo - 1, 0), None if hi is None else hi - 1
        # One non-empty repetition first (ε repetitions never help beyond lo == 0).
        if any(m(node, i, p) and rep(node, nlo, nhi, p, j) for p in range(i + 1, j + 1)):
            return True
        return lo > 0 and m(node, i, i) and rep(node, nlo, nhi, i, j)

    return m(ast, 0, len(s))


@settings(max_examples=200, deadline=None)
@given(ext_ast, st.lists(st.text(alphabet="abcx", max_size=5), min_size=8, max_size=8))
def test_extended_against_reference(ast, strings):
    pattern = render_ext(ast)
    es = ExprSet()
    e = es.parse(pattern, extended=True)
    dfa = LazyDFA(es, e)
    any_match = False
    for s in strings + ["", "a", "ab", "ba", "abc"]:
        expected = reference_match(ast, s)
        any_match |= expected
        assert dfa.matches(s.encode()) == expected, (pattern, s)
    if any_match:
        assert not es.is_empty(e), pattern
    # next_bytes: a byte is allowed iff some continuation matches
    nb = es.next_bytes(e)
    for ch in "abc":
        d = es.derivative(e, ord(ch))
        assert nb[ord(ch)] == (not es.is_empty(d))
    # first_bytes over-approximates the live bytes, & and ~ included.
    first = es.first_bytes(e)
    assert all((first >> int(b)) & 1 for b in np.flatnonzero(nb)), pattern


def test_first_bytes_of_an_intersection_are_those_all_its_parts_allow():
    es = ExprSet()
    keys = es.parse("ab|cd")
    other_keys = es.parse("[a-z]*&~(ab|cd)", extended=True)
    lowercase = sum(1 << b for b in range(ord("a"), ord("z") + 1))
    # Not every byte, as ~(ab|cd) alone would have it: the walk then skips the rest
    # without a derivative.
    assert es.first_bytes(other_keys) == lowercase
    # A byte no excluded word starts with: ~(ab|cd) goes on as every string.
    assert es.derivative(es.not_(keys), ord("x")) == es.ALL
    assert es.derivative(other_keys, ord("x")) == es.parse("[a-z]*")
    assert es.derivative(other_keys, ord("A")) == ExprSet.NOTHING
    after_ab = LazyDFA(es, es.derivative(es.derivative(other_keys, ord("a")), ord("b")))
    assert not after_ab.matches(b"") and after_ab.matches(b"q")


@settings(max_examples=200, deadline=None)
@given(ext_ast, ext_ast, ext_ast, st.lists(st.text(alphabet="abcx", max_size=4), min_size=6, max_size=6))
def test_a_shadow_has_the_same_derivative_outside_its_guard(kept, excluded, tail, strings):
    # The shape of a key other than the listed ones: (body & ~keys)·rest.
    ast = ("cat", (("and", (kept, ("not", excluded))), tail))
    es = ExprSet()
    e = es.parse(render_ext(ast), extended=True)
    shadow = es.shadow(e)
    if shadow is None:
        return
    guard, plain = shadow
    assert es.nullable(plain) == es.nullable(e)
    for ch in "abcx":
        byte = ord(ch)
        if (guard >> byte) & 1:
            continue
        # The shadow's derivative, the one `derivative` now answers with, against the
        # reference matcher on the whole expression: no excluded word starts with ch.
        dfa = LazyDFA(es, es.derivative(plain, byte))
        assert es.derivative(e, byte) == es.derivative(plain, byte)
        for s in strings + [""]:
            assert dfa.matches(s.encode()) == reference_match(ast, ch + s), (render_ext(ast), ch, s)
    # The expression's byte classes come from the shadow's, split at the guard: whole
    # matches through them agree with the reference too.
    dfa = LazyDFA(es, e)
    for s in strings + ["a", "ab", "ba", "x", "xa", "abc"]:
        assert dfa.matches(s.encode()) == reference_match(ast, s), (render_ext(ast), s)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, (1 << 256) - 1), max_size=4), st.lists(st.integers(0, 255), max_size=6), st.booleans())
def test_splitting_a_class_map_refines_it_by_single_bytes(byte_sets, singles, take_smallest):
    cm = _class_map(refine_byte_sets(byte_sets))
    if take_smallest:
        singles.append(cm[255])  # a class's smallest byte leaves it
    mask = sum({1 << b for b in singles})
    expected = _class_map(refine_byte_sets(byte_sets + [1 << b for b in singles]))
    assert _split_class_map(cm, mask) == expected


def test_a_key_other_than_the_listed_ones_shadows_the_plain_string():
    es = ExprSet()
    other_key = es.parse('([a-z]*&~(ab|cd))"', extended=True)
    string = es.parse('[a-z]*"')
    guard, plain = es.shadow(other_key)
    assert plain == string and guard == (1 << ord("a")) | (1 << ord("c"))
    # Outside the guard the key state goes on as a plain string; inside, it remembers
    # what it excludes.
    assert es.derivative(other_key, ord("x")) == es.derivative(string, ord("x"))
    after_a = es.derivative(other_key, ord("a"))
    assert after_a != es.derivative(string, ord("a"))
    assert es.shadow(after_a)[0] == 1 << ord("b")
    # Typed a whole listed key: ~(ε) is not nullable, and a shadow without it would
    # accept the closing quote the key state refuses.
    after_ab = es.derivative(after_a, ord("b"))
    assert es.shadow(es.parse("[a-z]*&~(ab|cd)", extended=True)) is not None
    assert es.shadow(after_ab) is None
    assert not LazyDFA(es, after_ab).matches(b'"') and LazyDFA(es, after_ab).matches(b'q"')
    assert es.shadow(string) is None


# --------------------------------------------------------------------------------------
# Unit tests
# --------------------------------------------------------------------------------------


def test_seed_derivative_examples():
    es = ExprSet()
    a = ord("a")
    assert es.derivative(es.parse("[ab][cd]"), a) == es.parse("[cd]")
    assert es.derivative(es.parse("[ab]+"), a) == es.parse("[ab]*")
    assert es.derivative(es.parse("[ab]"), a) == ExprSet.EPSILON
    assert es.derivative(es.parse("[ab]c"), ord("c")) == ExprSet.NOTHING


def test_hash_consing_and_simplification():
    es = ExprSet()
    a, b = es.literal(b"a"), es.literal(b"b")
    assert es.parse("a|b") == es.parse("[ab]") == es.alt(b, a) == es.byte_set([97, 98])
    assert es.parse("(a*)*") == es.parse("a*") == es.star(es.star(a))
    assert es.parse("(?:a|b|a)") == es.parse("b|a")
    assert es.not_(es.not_(a)) == a
    assert es.repeat(a, 1, 1) == a
    assert es.repeat(a, 0, 0) == ExprSet.EPSILON
    assert es.concat(a, ExprSet.EPSILON, b) == es.literal(b"ab")
    assert es.concat(es.concat(a, b), a) == es.concat(a, es.concat(b, a))
    assert es.concat(a, ExprSet.NOTHING) == ExprSet.NOTHING
    assert es.and_(a, ExprSet.NOTHING) == ExprSet.NOTHING
    assert es.alt(a, ExprSet.NOTHING) == a
    assert es.parse("(a?){0,3}") == es.parse("a{0,3}")
    assert es.parse("(?:x|)", "") == es.parse("x?")
    assert es.byte_set([]) == ExprSet.NOTHING
    assert es.parse("[^\\x00-\\U0010FFFF]") == ExprSet.NOTHING
    n = len(es)
    es.parse("a|b")
    assert len(es) == n


def test_bounded_repeats():
    assert match("(ab){2,5}", "abab")
    assert match("(ab){2,5}", "ababababab")
    assert not match("(ab){2,5}", "ab")
    assert not match("(ab){2,5}", "abababababab")
    assert not match("(ab){2,5}", "ababa")
    es = ExprSet()
    e = es.parse("a{1,10000}")
    n = len(es)
    dfa = LazyDFA(es, e)
    assert dfa.matches(b"a" * 10000)
    assert not dfa.matches(b"a" * 10001)
    assert not dfa.matches(b"")
    assert es.max_length(e) == 10000
    # one repeat node per remaining count, nothing expanded up front
    assert n < 10
    assert len(es) < n + 3 * 10001


def test_utf8_classes():
    greek = "αβγδεζηθικλμνξοπρστυφχψω"
    for ch in greek:
        assert match("[α-ω]", ch)
    for ch in ["a", "Α", "ϊ", "€", ""]:
        assert not match("[α-ω]", ch)
    for ch in ["b", "é", "中", "😀", "\n"]:
        assert match("[^a]", ch)
    assert not match("[^a]", "a")
    for bad in [b"\xff", b"\xc3", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xe2\x82"]:
        assert not match("[^a]", bad), bad
        assert not match(".", bad), bad
        assert not match(".", bad, "s"), bad
    assert not match(".", "\n")
    assert match(".", "\n", "s")
    assert match(".", "\U0010ffff")


@pytest.mark.parametrize(
    "lo,hi",
    [
        (0, 0x10FFFF),
        (0x7F, 0x80),
        (0x7FF, 0x800),
        (0xFFFF, 0x10000),
        (0xD000, 0xE100),
        (0x3B1, 0x3C9),
        (0x10000, 0x10FFFF),
        (0x1234, 0x5678),
        (0xE000, 0xFFFD),
    ],
)
def test_utf8_sequences_exact(lo, hi):
    """The sequences encode each code point of the range exactly once, and nothing else."""
    import random

    rnd = random.Random(lo ^ hi)
    seqs = utf8_sequences([(lo, hi)])
    total = 0
    for seq in seqs:
        size = 1
        for a, b in seq:
            assert a <= b
            size *= b - a + 1
        total += size
        for _ in range(20):
            data = bytes(rnd.randint(a, b) for a, b in seq)
            cp = ord(data.decode("utf-8"))  # strict: must be valid UTF-8
            assert lo <= cp <= hi
    surrogates = max(0, min(hi, 0xDFFF) - max(lo, 0xD800) + 1)
    assert total == hi - lo + 1 - surrogates


def test_case_insensitive():
    assert match("(?i:abc)", "AbC")
    assert match("abc", "ABC", "i")
    assert not match("abc", "ABC")
    assert match("(?i)[a-c]+", "aBC")
    assert not match("(?i)[^a]", "A")
    assert match("(?i:é)", "É")  # small non-ASCII class: folded via str.lower/upper
    assert match("(?i:[α-ω])", "Ω")
    assert match("(?i:a(?-i:b))", "Ab")
    assert not match("(?i:a(?-i:b))", "AB")


def test_flags_and_syntax():
    assert match("a b # comment\n c", "abc", "x")
    assert match("(?x) a \\  b", "a b")
    assert match("[ #]", " ")  # not verbose: literal class
    assert match(r"\x41\u00e9\U0001F600\N{EM DASH}\0\101\n\t", "Aé😀—\x00A\n\t")
    assert match(r"[\x41-\x43\d]+", "AB1C")
    assert match(r"[\w.-]+@[\w.-]+", "a.b-c@d_e.f")
    assert match(r"\s\S\d\D\w\W", " x1x_-")
    assert match("a{,}", "aaaa")
    assert match("a{", "a{")
    assert match("x{}", "x{}")
    assert match("a{x}", "a{x}")
    assert match("[]a]+", "]a")
    assert match("[^]a]", "b")
    assert match(r"[\d-]+", "1-2")
    assert match("a(?#comment)*", "aaa")
    assert match("(?P<x>a)(?P<y>b)", "ab")
    assert match("a*?b+?c??d{1,2}?e*+", "abbdd")
    assert match("]}", "]}")
    # & and ~ are ordinary characters unless extended
    assert match("a&b~c", "a&b~c")
    assert match(r"a\&b\~c", "a&b~c", extended=True)
    assert match("[&~]+", "&~", extended=True)


def test_intersection_and_complement():
    pat = "[a-z]+&~(foo)"
    for w, exp in [("foo", False), ("fo", True), ("fooo", True), ("", False), ("abc", True), ("Abc", False)]:
        assert match(pat, w, extended=True) == exp, w
    for w, exp in [("", False), ("a", False), ("aa", False), ("b", True), ("ab", True), ("é", True)]:
        assert match("~(a*)", w, extended=True) == exp, w
    # `&` binds looser than concatenation, tighter than `|`
    assert match("ab&a.|c", "ab", extended=True)
    assert match("ab&a.|c", "c", extended=True)
    assert not match("ab&a.|c", "ac", extended=True)
    # `~` takes the following quantified atom
    assert match("~a*b", "bb", extended=True)  # (~(a*))b
    assert not match("~a*b", "ab", extended=True)
    assert match("~~a", "a", extended=True)
    # complement is over bytes: ~(a) contains invalid UTF-8
    assert match("~a", b"\xff", extended=True)


def test_is_empty():
    es = ExprSet()
    assert es.is_empty(es.parse("a&b", extended=True))
    assert es.is_empty(es.parse("[a-z]&~[a-z]", extended=True))
    assert es.is_empty(es.parse("ab&ac", extended=True))
    assert es.is_empty(es.parse("(a|b)+&~(a|b)*", extended=True))
    assert es.is_empty(ExprSet.NOTHING)
    assert not es.is_empty(ExprSet.EPSILON)
    assert not es.is_empty(es.parse("a+&~a", extended=True))
    assert not es.is_empty(es.parse("[a-z]+"))
    assert not es.is_empty(es.parse("~(a*)", extended=True))
    assert es.is_empty(es.parse("~(.*)&a", "s", extended=True))
    # semantically empty states are mapped to the dead state
    dfa = LazyDFA(es, es.parse("x(ab&ac)|y", extended=True))
    assert dfa.step(dfa.initial, ord("x")) == 0
    assert dfa.step(dfa.initial, ord("y")) != 0


def test_next_bytes():
    es = ExprSet()
    nb = es.next_bytes(es.parse("[a-c]x|d"))
    assert nb.dtype == bool and nb.shape == (256,)
    assert set(np.flatnonzero(nb)) == {97, 98, 99, 100}
    nb = es.next_bytes(es.parse("ab&ac|x", extended=True))
    assert set(np.flatnonzero(nb)) == {ord("x")}
    nb = es.next_bytes(es.parse("é|a"))
    assert set(np.flatnonzero(nb)) == {0xC3, 97}
    assert not es.next_bytes(ExprSet.EPSILON).any()
    nb = es.next_bytes(es.parse("."))
    assert nb[0x41] and not nb[0x0A] and not nb[0x80] and not nb[0xC0] and not nb[0xFF] and nb[0xC2] and nb[0xF4]


def test_max_length():
    es = ExprSet()
    assert es.max_length(es.parse("(ab){2,5}")) == 10
    assert es.max_length(es.parse("[α-ω]{3}")) == 6
    assert es.max_length(es.parse("a*")) is None
    assert es.max_length(es.parse("abc|de")) == 3
    assert es.max_length(es.parse("a*&b{0,4}", extended=True)) == 4
    assert es.max_length(es.parse("~a", extended=True)) is None
    assert es.max_length(ExprSet.EPSILON) == 0
    assert es.max_length(es.parse("()*")) == 0
    assert es.max_length(es.parse("😀")) == 4


def test_prefix_contains_seed_examples():
    es = ExprSet()
    s10 = es.parse(JSON_CHAR + "{1,10}")
    s30 = es.parse(JSON_CHAR + "{1,30}")
    s11_30 = es.parse(JSON_CHAR + "{11,30}")
    splus = es.parse(JSON_CHAR + "+")
    max20 = es.parse(JSON_CHAR + '{0,20}"')
    body = es.parse(JSON_STRING_BODY)
    quoted = es.parse('"' + JSON_STRING_BODY[:-1] + '"')
    assert es.prefix_contains(s10, max20)
    assert es.prefix_contains(s10, body)
    assert not es.prefix_contains(s30, max20)
    assert not es.prefix_contains(s11_30, max20)
    assert es.prefix_contains(s30, body)
    assert es.prefix_contains(splus, body)
    assert not es.prefix_contains(splus, max20)
    # not before the opening quote, but after it (the lexer's derivative)
    assert not es.prefix_contains(s10, quoted)
    assert es.prefix_contains(s10, es.derivative(quoted, ord('"')))
    # a lexeme among alternatives
    assert es.prefix_contains(s10, es.alt(es.parse('foo"'), body))
    # a class that is not contained
    assert not es.prefix_contains(es.parse("[a-z\\x00]{1,10}"), body)
    # with exclusions: (X{m,n} & ~E) T
    excl = es.parse('([a-z]{0,20}&~(if|for|while))"', extended=True)
    assert es.prefix_contains(es.parse("[a-z]{1,10}"), excl)
    assert not es.prefix_contains(es.parse("[a-z]{1,30}"), excl)
    short = es.parse('([a-z]{0,3}&~(if|for|while))"', extended=True)
    assert not es.prefix_contains(es.parse("[a-z]{1,2}"), short)  # n <= max|E|: unsure


def test_prefix_contains_is_sound():
    """Whenever prefix_contains says yes, every sampled S-string is a prefix of L."""
    import random

    rnd = random.Random(7)
    es = ExprSet()
    slices = [es.parse(JSON_CHAR + r) for r in ("{1,10}", "{1,30}", "{11,30}", "+")]
    lexemes = [
        es.parse(p, extended=True)
        for p in [
            JSON_CHAR + '{0,20}"',
            JSON_STRING_BODY,
            '([a-z ]{0,20}&~(if|for))"',
            "[a-z]*",
            "abc",
            f'(ab{JSON_CHAR}*|{JSON_CHAR}{{0,4}}x)"',
            f'((ab|{JSON_CHAR}*)c)"',
            f'(a{JSON_CHAR}{{0,12}}|b)z"',
        ]
    ]
    alphabet = "ab z€中😀"
    for sl in slices:
        for lx in lexemes:
            if not es.prefix_contains(sl, lx):
                continue
            dfa = LazyDFA(es, lx)
            for _ in range(50):
                w = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 10)))
                if not LazyDFA(es, sl).matches(w.encode()):
                    continue
                s = dfa.initial
                for b in w.encode():
                    s = dfa.step(s, b)
                assert s != 0, (es.to_str(sl), es.to_str(lx), w)


def test_prefix_contains_beside_finitely_many_excluded_words():
    """A JSON key other than the listed ones is a string minus finitely many words: every
    slice word goes on as a string in endless ways, and the listed keys take only a few."""
    es = ExprSet()
    s10 = es.parse(JSON_CHAR + "{1,10}")
    splus = es.parse(JSON_CHAR + "+")
    # The shape the JSON Schema compiler makes: an ASCII fast lane, then any character.
    key = es.parse(f'(([ -!#-\\[\\]-~]*{JSON_CHAR}*")&~(by"|photos_by"))', extended=True)
    assert es.prefix_contains(s10, key)
    assert es.prefix_contains(splus, key)
    # A sequence whose nullable head is skipped: P(H·T) holds P(T) where H takes ε.
    assert es.prefix_contains(es.parse("[a-z]{1,10}"), es.parse('[0-9]*[a-z]*"'))
    # Excluded words of unbounded length, or a bounded string: unsure, so no.
    assert not es.prefix_contains(es.parse("[a-z]{1,3}"), es.parse('([a-z]*&~(a[a-z]*))"', extended=True))
    assert not es.prefix_contains(es.parse("[a-z]{1,3}"), es.parse('([a-z]{0,4}[0-9]&~(ab0))"', extended=True))


def test_prefix_contains_past_a_character_the_slice_lacks():
    """A key that a pattern `.{1,}` matches (MaskBench `Github_medium---o45263`): line
    breaks, then one other character, then any. The slice holds U+2028, which `.` does
    not: no shape of the expression settles it, the search over pairs of derivatives
    does, since every slice word goes on to a match."""
    es = ExprSet()
    line_break = "(?:\\\\[nr]|\u2028|\u2029)"
    not_line_break = r'[^"\\\x00-\x1F\x7F\u2028\u2029]'
    key = es.parse(f'{line_break}*{not_line_break}{JSON_CHAR}*"')
    assert es.prefix_contains(es.parse(JSON_CHAR + "+"), key)
    # Not where some slice word starts no key: a `\` after a character (`a\`), or a
    # word past a bounded key.
    assert not es.prefix_contains(es.parse(r'[^"\x00-\x1F\x7F]+'), key)
    bounded = es.parse(f'{line_break}*{not_line_break}{JSON_CHAR}{{0,5}}"')
    assert not es.prefix_contains(es.parse(JSON_CHAR + "+"), bounded)


def _assert_every_short_word_goes_on(es: ExprSet, s: int, lang: int, longest: int) -> None:
    """Every word of S over "abc" up to `longest` bytes leaves the lexeme L alive."""
    sl, dfa = LazyDFA(es, s), LazyDFA(es, lang)
    for n in range(1, longest + 1):
        for chars in itertools.product("abc", repeat=n):
            w = "".join(chars).encode()
            if not sl.matches(w):
                continue
            state = dfa.initial
            for b in w:
                state = dfa.step(state, b)
            assert state != 0, (es.to_str(s), es.to_str(lang), w)


@settings(max_examples=300, deadline=None)
@given(
    pattern=random_patterns(("a", "b", "[ab]", "[abc]", "c*", "[ab]*", "(?:ab)?")),
    slice_=st.sampled_from(("[ab]{1,3}", "a+", "[abc]{1,2}", "b", "[ab]+")),
)
def test_prefix_contains_is_sound_on_random_plain_expressions(pattern, slice_):
    """Every word of S up to five bytes that prefix_contains lets through leaves the
    lexeme alive: the search over pairs of derivatives answers yes only when it is so."""
    es = ExprSet()
    lang = es.parse(pattern + 'c"')
    s = es.parse(slice_)
    if es.prefix_contains(s, lang):
        _assert_every_short_word_goes_on(es, s, lang, 5)


_PIECES = ("[ab]*", "a*", "[abc]*", "[ab]{0,2}", "c", "b?", "[abc]{1,3}")


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=3),
    excluded=st.lists(st.text(alphabet="abc", min_size=0, max_size=4), max_size=3),
    tail=st.sampled_from(['"', "", 'c"']),
    slice_=st.sampled_from(("[ab]{1,3}", "a{1,2}", "[ab]+", "[abc]{1,4}", "b")),
)
def test_prefix_contains_beside_excluded_words_is_sound(pieces, excluded, tail, slice_):
    """Whenever prefix_contains says yes, every word of S (all of them up to four bytes)
    leaves the lexeme alive, with words excluded beside it."""
    es = ExprSet()
    body = "".join(pieces)
    if excluded:
        words = "|".join(w or "()" for w in excluded)
        pattern = f"(({body})&~({words})){tail}"
    else:
        pattern = body + tail
    lang = es.parse(pattern, extended=True)
    s = es.parse(slice_)
    if es.prefix_contains(s, lang):
        _assert_every_short_word_goes_on(es, s, lang, 4)


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abc", min_size=1, max_size=3), min_size=2, max_size=4),
    around=st.sampled_from(("[abc]*", "[ab]*", "a*", "")),
    excluded=st.lists(st.text(alphabet="abc", min_size=0, max_size=4), max_size=3),
    tail=st.sampled_from(['"', 'c"']),
    slice_=st.sampled_from(("[ab]{1,3}", "a{1,2}", "[ab]+", "[abc]{1,4}", "b")),
)
def test_prefix_contains_through_alternatives_is_sound(words, around, excluded, tail, slice_):
    """An unanchored pattern of alternatives, as a key beside listed ones writes it
    (`(C*·w1·C* | C*·w2·C*)·"` minus the listed keys): whenever prefix_contains says yes,
    every word of S up to four bytes leaves the lexeme alive."""
    es = ExprSet()
    body = "|".join(f"{around}{w}{around}" for w in words)
    if excluded:
        listed = "|".join(w or "()" for w in excluded)
        pattern = f"(({body}){tail})&~({listed})"
    else:
        pattern = f"({body}){tail}"
    lang = es.parse(pattern, extended=True)
    s = es.parse(slice_)
    if es.prefix_contains(s, lang):
        _assert_every_short_word_goes_on(es, s, lang, 4)


def test_prefix_contains_reaches_a_word_inside_any_text_through_alternatives():
    # Github_medium---o48427: keys that contain one of several words, beside the listed
    # ones; every string-text slice goes on in them, so the first mask inside such a key
    # ORs the slices in instead of walking the whole trie into a new lexer state per word
    # prefix.
    es = ExprSet()
    s10 = es.parse(JSON_CHAR + "{1,10}")
    words = ("Normal", "Fire", "Water")
    alternatives = "|".join(f"{JSON_CHAR}*{w}{JSON_CHAR}*" for w in words)
    lang = es.parse(f'(({alternatives})")&~({"|".join(w + chr(34) for w in words)})', extended=True)
    assert es.prefix_contains(s10, lang)
    # A bounded text around the words has no room for every slice word.
    bounded = "|".join(f"{JSON_CHAR}{{0,3}}{w}" for w in words)
    assert not es.prefix_contains(s10, es.parse(f'({bounded})"'))


def test_complement_joins_find_the_union_of_pattern_keys_and_the_other_keys():
    # `patternProperties` beside `additionalProperties`: the keys a pattern matches, and
    # the others. Apart, neither has every slice word among its prefixes (`.` leaves out
    # U+2028; "ab" goes on only as a matched key); together they are any key.
    es = ExprSet()
    s10 = es.parse(JSON_CHAR + "{1,10}")
    for pattern in (r"[^\n\r\u2028\u2029]*", "ab[a-z]+"):
        matched = es.parse(f'({pattern})"')
        others = es.parse(f'({JSON_CHAR}*&~({pattern}))"', extended=True)
        assert not es.prefix_contains(s10, matched) or not es.prefix_contains(s10, others)
        joins = es.complement_joins([matched, others])
        assert joins == [es.parse(JSON_CHAR + '*"')]
        assert es.prefix_contains(s10, joins[0])
    # Unrelated lexemes join nothing.
    assert es.complement_joins([es.parse('a"'), es.parse('([a-z]*&~(b))"', extended=True)]) == []


@settings(max_examples=200, deadline=None)
@given(
    a=st.sampled_from(("[abc]*", "[ab]*", "a[abc]*", "[abc]{0,3}")),
    b=st.sampled_from(("a*", "ab[abc]*", "[ab]*c", "b", "(ab)*")),
    tail=st.sampled_from(['"', "", "c"]),
    slice_=st.sampled_from(("[ab]{1,3}", "a{1,2}", "[abc]+", "[abc]{1,4}")),
    partner=st.sampled_from((None, "c", "a*")),
)
def test_a_complement_join_holds_only_prefixes_of_the_pair(a, b, tail, slice_, partner):
    """Where a join has the slice among its prefixes, every slice word (all of them up to
    four bytes) leaves one of the two lexemes alive; the second lexeme is the excluded
    part's own, or (`partner`) another."""
    es = ExprSet()
    kept = es.parse(f"({partner or b}){tail}")
    others = es.parse(f"(({a})&~({b})){tail}", extended=True)
    s = es.parse(slice_)
    joins = [j for j in es.complement_joins([kept, others]) if es.prefix_contains(s, j)]
    if not joins:
        return
    sl, dfas = LazyDFA(es, s), (LazyDFA(es, kept), LazyDFA(es, others))
    for n in range(1, 5):
        for chars in itertools.product("abc", repeat=n):
            w = "".join(chars).encode()
            if not sl.matches(w):
                continue
            alive = False
            for dfa in dfas:
                state = dfa.initial
                for byte in w:
                    state = dfa.step(state, byte)
                alive = alive or state != 0
            assert alive, (a, b, tail, slice_, w)


@settings(max_examples=200, deadline=None)
@given(
    a=st.sampled_from(("[abc]*", "[ab]*", "a[abc]*")),
    b=st.sampled_from(("a*", "ab[abc]*", "[ab]*c", "b")),
    tail=st.sampled_from(['"', ""]),
    listed=st.lists(st.sampled_from(("", "a", "ab", "b", "abc", "ca")), max_size=3),
    outside=st.booleans(),
)
def test_a_complement_join_beside_listed_words_holds_only_strings_of_the_pair(a, b, tail, listed, outside):
    """Beside listed keys both lexemes leave them out: `((A & ~B) \\ W)·T` (or the
    exclusion around the sequence) and `(B·T) \\ W·T`. Their join is found, and every
    string it matches (all up to five bytes) one of the two matches."""
    es = ExprSet()
    words = [w.encode() for w in listed]
    ended = [w + tail.encode() for w in words]
    kept = es._exclude(es.parse(f"({b}){tail}"), ended)
    core = es.parse(f"({a})&~({b})", extended=True)
    if outside:
        others = es._exclude(es.concat(core, es.literal(tail.encode())), ended)
    else:
        others = es.concat(es._exclude(core, words), es.literal(tail.encode()))
    joins = es.complement_joins([kept, others])
    if a == "[abc]*" and b != "b":
        # Any key but an endless pattern's stays `&` of a complement (a finite pattern
        # folds into an exclusion, which needs no join; other pairs may simplify).
        assert joins, (a, b, tail, listed, outside)
    dfas = [LazyDFA(es, j) for j in joins]
    pair = (LazyDFA(es, kept), LazyDFA(es, others))
    for n in range(6):
        for chars in itertools.product('abc"', repeat=n):
            w = "".join(chars).encode()
            if any(d.matches(w) for d in dfas):
                assert any(d.matches(w) for d in pair), (a, b, tail, listed, outside, w)


def test_prefix_contains_looks_into_a_partly_matched_pattern():
    """A JSON string with an unanchored pattern, partly matched, is `(rest·C* | C*·match)"`:
    the slice is among the prefixes of the second branch, though not of the first."""
    es = ExprSet()
    s10 = es.parse(JSON_CHAR + "{1,10}")
    cidr = es.parse(f'([0-9]{{1,3}}/[0-9]{{1,2}}{JSON_CHAR}*|{JSON_CHAR}*0\\.0\\.0\\.0/0)"')
    assert es.prefix_contains(s10, cidr)
    # a head that is a sequence whose own head holds them
    assert es.prefix_contains(s10, es.parse(f'(({JSON_CHAR}*|ab)x)"'))
    # no branch holds them: both are bounded below ten characters, or a literal
    assert not es.prefix_contains(s10, es.parse(f'(ab{JSON_CHAR}{{0,3}}|cd)"'))
    assert not es.prefix_contains(s10, es.parse(f'(ab|{JSON_CHAR}{{0,8}})x"'))


@pytest.mark.parametrize(
    "pattern,offset,words",
    [
        ("ab^", 2, "anchor '^'"),
        ("ab$", 2, "anchor '$'"),
        (r"a\b", 1, "word boundary"),
        (r"\Aa", 0, "anchor \\A"),
        (r"a\Z", 1, "anchor \\Z"),
        (r"(a)\1", 3, "backreference"),
        ("(?P<n>a)(?P=n)", 8, "backreference"),
        ("(?=a)", 0, "lookahead"),
        ("a(?!b)", 1, "lookahead"),
        ("(?<=a)b", 0, "lookbehind"),
        ("(?(1)a|b)", 0, "conditional"),
        ("(ab", 0, "missing ), unterminated subpattern"),
        ("ab)", 2, "unbalanced parenthesis"),
        ("x[ab", 1, "unterminated character set"),
        ("*a", 0, "nothing to repeat"),
        ("a|+", 2, "nothing to repeat"),
        ("a**", 2, "multiple repeat"),
        ("a{3,2}", 1, "min repeat greater than max repeat"),
        (r"x\ud800", 1, "surrogate"),
        (r"\U00110000", 0, "above U+10FFFF"),
        ("[z-a]", 1, "bad character range"),
        (r"[\d-z]", 1, "bad character range"),
        (r"a\q", 1, "bad escape \\q"),
        (r"\x4", 0, "incomplete escape"),
        ("a\\", 1, "bad escape (end of pattern)"),
        ("a(?i)", 1, "global flags not at the start"),
        ("(?P<1>a)", 4, "bad character in group name"),
        ("(?P<a>x)(?P<a>y)", 12, "redefinition of group name"),
        ("(?>a)", 0, "atomic groups"),
        ("(?L:a)", 2, "locale flag"),
        ("(?)", 0, "unknown extension"),
        ("(?i", 0, "missing -, : or )"),
        ("(?-i)a", 0, "scoped group"),
        ("(" * 100 + ")" * 100, 64, "nested more than"),
    ],
)
def test_grammar_errors(pattern, offset, words):
    es = ExprSet()
    with pytest.raises(GrammarError) as info:
        es.parse(pattern)
    msg = str(info.value)
    assert words in msg, msg
    assert f"at offset {offset} " in msg, msg


@pytest.mark.parametrize(
    "pattern,offset,words",
    [
        ("a&", 1, "right operand of '&'"),
        ("&a", 0, "left operand of '&'"),
        ("a|~", 2, "'~' needs an operand"),
        ("~*", 1, "nothing to repeat"),
    ],
)
def test_grammar_errors_extended(pattern, offset, words):
    with pytest.raises(GrammarError) as info:
        ExprSet().parse(pattern, extended=True)
    assert words in str(info.value) and f"at offset {offset} " in str(info.value), str(info.value)


def test_bad_flags_and_api_errors():
    with pytest.raises(GrammarError, match="unknown regex flag"):
        ExprSet().parse("a", "q")
    es = ExprSet()
    with pytest.raises(GrammarError):
        es.char_class([(0x41, 0x110000)])
    with pytest.raises(GrammarError):
        es.repeat(es.literal(b"a"), 3, 2)
    with pytest.raises(ValueError):
        es.byte_set([256])


def test_limit_exceeded_on_exploding_boolean_regex():
    # X & ~Y with X ⊆ Y is empty, but no rewrite sees it (Y = X·[ab]? is no alternation
    # holding X itself once its branches share their head): deciding it walks the
    # 2^12-state DFA of `[ab]*a[ab]{12}`.
    pat = "([ab]*a[ab]{12})&~([ab]*a[ab]{12}|[ab]*a[ab]{12}a|[ab]*a[ab]{12}b)"
    es = ExprSet(Limits(max_lexer_states=500))
    e = es.parse(pat, extended=True)
    with pytest.raises(LimitExceeded) as info:
        es.is_empty(e)
    assert info.value.limit == "max_lexer_states"
    es = ExprSet(Limits(max_regex_nodes=3000))
    with pytest.raises(LimitExceeded) as info:
        e = es.parse(pat, extended=True)
        es.is_empty(e)
    assert info.value.limit == "max_regex_nodes"
    es = ExprSet(Limits(max_lexer_states=300))
    dfa = LazyDFA(es, es.parse("[ab]*a[ab]{15}"))
    with pytest.raises(LimitExceeded):
        for i in range(1 << 12):
            dfa.matches(format(i, "012b").replace("0", "a").replace("1", "b").encode() + b"a" * 16)


def test_lazy_dfa_table():
    es = ExprSet()
    dfa = LazyDFA(es, es.parse("[a-z]{3,40}"))
    assert dfa.table.dtype == np.int32 and dfa.table.shape[1] == 256
    assert dfa.step(0, 5) == 0 and not dfa.accepting[0]
    s1 = dfa.step(dfa.initial, ord("q"))
    # the whole class [a-z] was filled by one derivative
    assert all(dfa.table[dfa.initial, b] == s1 for b in range(ord("a"), ord("z") + 1))
    assert dfa.table[dfa.initial, ord("A")] == -1
    assert dfa.matches(b"a" * 40) and not dfa.matches(b"a" * 41) and not dfa.matches(b"ab")
    assert dfa.table.shape[0] >= 42  # grew by doubling from 16
    assert es.to_str(dfa.state_expr(dfa.initial)) == "[a-z]{3,40}"
    assert dfa.accepting[dfa.step(dfa.step(dfa.step(dfa.initial, 97), 97), 97)]


def test_to_str_readable():
    es = ExprSet()
    assert es.to_str(es.parse("(ab){2,5}|c*")) in ("(ab){2,5}|c*", "c*|(ab){2,5}")
    assert es.to_str(es.parse("[a-z]+&~(foo)", extended=True)) == "[a-z]+&~(foo)"
    assert es.to_str(es.parse(JSON_CHAR + "{1,10}")) == r'[^\x00-\x1f"\\\x7f]{1,10}'
    assert es.to_str(es.parse(".+")) == ".+"
    assert es.to_str(es.parse("(?i:é)")) == "[Éé]"
    assert es.to_str(es.parse("(ab|c)?d")) == "(ab|c)?d"
    assert es.to_str(ExprSet.NOTHING) == "∅"
    assert es.to_str(ExprSet.EPSILON) == "ε"
    assert len(es.to_str(es.parse("(abcdefghij){0,3}" * 50), max_chars=100)) <= 101


def test_long_and_deep_expressions():
    es = ExprSet()
    lit = es.literal(b"x" * 5000)
    assert es.max_length(lit) == 5000 and not es.is_empty(lit)
    assert LazyDFA(es, lit).matches(b"x" * 5000)
    e = es.parse("y" * 3000 + "|" + "a?" * 3000)
    dfa = LazyDFA(es, e)
    assert dfa.matches(b"y" * 3000) and dfa.matches(b"a" * 2999) and not dfa.matches(b"a" * 3001)
    e = es.parse("|".join(f"kw{i}" for i in range(5000)))
    dfa = LazyDFA(es, e)
    assert dfa.matches(b"kw4999") and not dfa.matches(b"kw5000")
    # genuinely nested expressions are bounded instead of overflowing the stack
    x = es.literal(b"a")
    with pytest.raises(LimitExceeded) as info:
        for i in range(1000):
            x = es.alt(es.concat(x, es.literal(b"b")), es.literal(b"c%d" % i))
    assert info.value.limit == "max_regex_height"


@settings(max_examples=150, deadline=None)
@given(ext_ast)
def test_to_str_round_trips(ast):
    """For ASCII expressions, to_str prints a pattern that parses back to the same node."""
    es = ExprSet()
    e = es.parse(render_ext(ast), extended=True)
    text = es.to_str(e)
    if "ε" in text or "∅" in text or re.search(r"\\x[89a-f]", text):
        return  # ε/∅ and UTF-8 byte sequences have no pattern spelling
    assert es.parse(text, extended=True) == e, (render_ext(ast), text)


def test_json_string_performance():
    start = time.perf_counter()
    es = ExprSet()
    dfa = LazyDFA(es, es.parse('"' + JSON_STRING_BODY))
    piece = 'hello wörld \\n \\u00e9 中文 😀 \\" x'.encode()
    data = b'"' + piece * (100_000 // len(piece)) + b'"'
    assert len(data) > 99_000
    assert dfa.matches(data)
    assert not dfa.matches(data[:-1])
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, elapsed


def _parse_without_group_cache(es: ExprSet, pattern: str, flags: str = "", extended: bool = False) -> int:
    from midword.engine.regex import _Parser

    parser = _Parser(es, pattern, flags, extended)
    parser._group_ends = {}  # no group is looked up or stored
    return parser.parse()


@settings(max_examples=150, deadline=None)
@given(regex_ast, regex_ast, st.sampled_from(["", "i", "s"]))
def test_shared_group_parses_equal_fresh_parses(a, b, flags):
    """Groups parsed once per process (by text and flags) give the expression a parse of
    the whole pattern would: hash-consing makes equal expressions equal ids."""
    es = ExprSet()
    pa, pb = render(a), render(b)
    for pattern in (f"({pa})", f"(?:{pb})+({pa})", f"x(?:({pa})|[()\\]]({pb}))*", f"(?i:{pa})({pa})"):
        try:
            expected = _parse_without_group_cache(es, pattern, flags)
        except GrammarError as err:
            with pytest.raises(GrammarError) as got:
                es.parse(pattern, flags)
            assert str(got.value) == str(err)
            continue
        assert es.parse(pattern, flags) == expected, pattern


def test_group_cache_leaves_what_the_scan_cannot_see_to_the_parser():
    es = ExprSet()
    body = r'(?:[^"\\]|\\["\\n])*'
    with_keys = es.parse(f'"(?:{body}&~(?:id|name))"', extended=True)
    assert (body[:-1], 0, True) in es._groups  # the string body, without its '*'
    assert es.parse(f'"(?:{body}&~(?:id|other))"', extended=True) != with_keys
    # A class whose first member is ']' and escaped parentheses do not confuse the scan.
    assert LazyDFA(es, es.parse(r"(a[](]b)\((c)")).matches(b"a(b(c")
    # Comments and verbose mode hide parentheses from the scan: no group is shared.
    n = len(es._groups)
    assert LazyDFA(es, es.parse("(?x)(a # )\n b)c")).matches(b"abc")
    assert LazyDFA(es, es.parse("(a(?#(x))b")).matches(b"ab")
    assert len(es._groups) == n
    # Names stay unique within a pattern whatever was shared before.
    es.parse("(?:(?P<n>a)b)")
    with pytest.raises(GrammarError, match="redefinition"):
        es.parse("(?:(?P<n>a)b)(?P<n>c)")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(b'abc"\xff'), min_size=1, max_size=12).map(bytes), min_size=1, max_size=6))
def test_literal_builds_the_nodes_concatenation_builds(words):
    # literal() makes new links itself; they must be the very nodes _concat2 makes (runs
    # of one byte merge into repeats), whichever of the two comes first.
    literal_first, concat_first = ExprSet(), ExprSet()
    for data in words:
        by_literal = literal_first.literal(data)
        assert literal_first.concat(*[literal_first.byte_set([b]) for b in data]) == by_literal
        by_concat = concat_first.concat(*[concat_first.byte_set([b]) for b in data])
        assert concat_first.literal(data) == by_concat
        assert literal_first.to_str(by_literal) == concat_first.to_str(by_concat)
        assert LazyDFA(literal_first, by_literal).matches(data)
        # Links literal() makes itself carry what _new would have given each, down the chain.
        for k in range(len(data)):
            suffix = literal_first.concat(*[literal_first.byte_set([b]) for b in data[k:]])
            suffix_by_concat = concat_first.concat(*[concat_first.byte_set([b]) for b in data[k:]])
            for attr in ("_min_len", "_height", "_max_count", "_nullable", "_has_bool", "_kind"):
                assert getattr(literal_first, attr)[suffix] == getattr(concat_first, attr)[suffix_by_concat], attr
    assert len(literal_first) == len(concat_first)


def test_literal_links_count_against_the_node_limit():
    # literal() makes its links without _new: the node limit must still hold there.
    es = ExprSet(Limits(max_regex_nodes=40))
    with pytest.raises(LimitExceeded) as info:
        for i in range(10):
            es.literal(b"key_%d_with_a_long_tail" % i)
    assert info.value.limit == "max_regex_nodes"
    assert len(es) <= 40


# Words as JSON keys come: any text, with quotes, backslashes, control characters,
# regex metacharacters, repeated letters (which literal() and concatenation merge into
# repeats) and non-ASCII.
_exclusion_words = st.lists(
    st.text(alphabet=st.sampled_from(list('ab"\\|()[]{}*.?&~ \n\x01é中') + ["\U0001f600"]), max_size=6).map(
        lambda t: t.encode("utf-8")
    ),
    min_size=1,
    max_size=6,
)


@given(
    _exclusion_words, st.sampled_from([r"[^\"\\]*", r"(?:[a-z]|\\[\"n])*", "x{2,3}"]), st.sampled_from(['"', "'", "é"])
)
@settings(max_examples=200, deadline=None)
def test_an_exclusion_term_builds_what_the_parser_makes_of_its_text(words, body, quote):
    # A JSON object's keys other than its listed ones, as the JSON Schema front end
    # builds them: one exclusion node, the very expression the parser makes of the
    # same language written out (`render`), so both meet in the hash-consed set.
    es = ExprSet()
    q = quote.encode()
    t = term.seq(term.lit(q), term.excl(term.src(body), words), term.lit(q))
    built = es.build(t)
    assert es.parse(term.render(t), extended=True) == built
    assert LazyDFA(es, built).matches(q + q) == (b"" not in words and re.fullmatch(body, "") is not None)
    for w in words:
        assert not LazyDFA(es, built).matches(q + w + q)


_term_leaves = st.one_of(
    # UTF-8 only: midword's syntax spells code points, so other bytes have no rendering.
    st.text(alphabet="ab|*(é", max_size=3).map(lambda t: term.lit(t.encode())),
    st.sampled_from([[(0x61, 0x63)], [(0x30, 0x39), (0xE9, 0xE9)], [(0x4E2D, 0x4E2D)]]).map(term.cls),
    st.sampled_from(["a*", "[^ab]", "x|yz"]).map(term.src),
)
_terms = st.recursive(
    _term_leaves,
    lambda inner: st.one_of(
        st.lists(inner, min_size=0, max_size=3).map(lambda ts: term.seq(*ts)),
        st.lists(inner, min_size=1, max_size=3).map(lambda ts: term.alt(*ts)),
        st.lists(inner, min_size=1, max_size=2).map(lambda ts: term.and_(*ts)),
        inner.map(term.not_),
        st.tuples(inner, st.integers(0, 2), st.sampled_from([None, 2, 3])).map(lambda a: term.rep(*a)),
    ),
    max_leaves=6,
)


@given(_terms, st.lists(st.binary(max_size=4), max_size=8))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_term_means_what_its_rendering_means(t, inputs):
    # The lexer builds a term from its parts, never from `render`'s text; the two must
    # still agree on every string, or listings and messages would show another lexeme.
    es = ExprSet()
    built = LazyDFA(es, es.build(t))
    parsed = LazyDFA(es, es.parse(term.render(t), extended=True))
    for data in inputs + [b"", b"a", b"ab", b"x", "é".encode()]:
        assert built.matches(data) == parsed.matches(data), (t, data)


def test_terms_are_keys_by_structure():
    # Equal terms share one lexeme; different expressions never share a key, even
    # where their renderings would read alike.
    from midword.engine.grammar import GrammarBuilder

    b = GrammarBuilder()
    a1 = b.lexeme_expr("x", term.seq(term.lit(b"a"), term.rep(term.src("b"), 0, None)))
    a2 = b.lexeme_expr("y", term.seq(term.lit(b"a"), term.rep(term.src("b"), 0, None)))
    other = b.lexeme_expr("z", term.seq(term.lit(b"a"), term.rep(term.lit(b"b"), 1, None)))
    assert a1 == a2 != other
    # `a|b` then `c`, and `a|bc`: one text once written out flat, two languages.
    split = term.seq(term.src("a|b"), term.lit(b"c"))
    assert b.lexeme_expr("s", split) != b.lexeme_expr("t", term.src("a|bc"))
    es = ExprSet()
    assert es.build(split) == es.parse("(?:a|b)c") != es.build(term.src("a|bc"))
    assert term.lit(b"ab") != term.seq(term.lit(b"a"), term.lit(b"b"))
    with pytest.raises(ValueError, match="not a regex term"):
        ExprSet().build(("bogus",))


# --------------------------------------------------------------------------------------
# Exclusions: `R & ~W` with W finitely many words is one node
# --------------------------------------------------------------------------------------


def _uses(ast, kinds: set[str]) -> bool:
    k = ast[0]
    if k in kinds:
        return True
    if k in ("cat", "alt", "and"):
        return any(_uses(x, kinds) for x in ast[1])
    return k in ("not", "rep") and _uses(ast[1], kinds)


@settings(max_examples=300, deadline=None)
@given(ext_ast)
def test_finite_words_are_exactly_the_matches(ast):
    if _uses(ast, {"and", "not", "dot"}):
        return  # `.` is 255 words of its own; & and ~ are never spelled out
    es = ExprSet()
    e = es.parse(render_ext(ast), extended=True)
    words = es._finite_words(e)
    longest = es.max_length(e)
    if longest is None:
        assert words is None
        return
    assert words is not None and list(words) == sorted(words)
    assert all(reference_match(ast, w.decode()) for w in words)
    if longest <= 5:
        # And nothing else: every string over the leaves' letters up to the longest match.
        matched = set()
        frontier = [""]
        for _ in range(longest + 1):
            matched.update(s for s in frontier if reference_match(ast, s))
            frontier = [s + c for s in frontier for c in "abcx"]
        assert set(words) == {s.encode() for s in matched}


def test_an_exclusion_of_finitely_many_words_is_one_node():
    es = ExprSet()
    other_keys = es.parse("[a-z]*&~(ab|cd|c)", extended=True)
    assert es.kind_name(other_keys) == "exclude"
    assert es.to_str(other_keys) == "[a-z]*&~(ab|c|cd)"
    assert es.parse(es.to_str(other_keys), extended=True) == other_keys
    # Its derivatives are exclusions of the words that go on with the byte, and the
    # body alone once none does.
    after_c = es.derivative(other_keys, ord("c"))
    assert es.kind_name(after_c) == "exclude" and es.to_str(after_c) == "[a-z]*&~(()|d)"
    assert not es.nullable(after_c) and es.nullable(other_keys)
    assert es.derivative(after_c, ord("d")) == es.parse("[a-z]*&~()", extended=True)
    assert es.derivative(other_keys, ord("x")) == es.parse("[a-z]*")
    assert es.derivative(other_keys, ord("A")) == ExprSet.NOTHING
    assert not es.is_empty(after_c) and not es.is_empty(es.derivative(after_c, ord("d")))
    # Intersections of exclusions pool their words, in any order and spelling.
    assert es.and_(other_keys, es.not_(es.literal(b"q"))) == es.parse("[a-z]*&~(q|ab|c|cd)", extended=True)
    assert es.parse("~(ab)&[a-z]*&~(c|cd)", extended=True) == es.parse("[a-z]*&~(ab|c|cd)", extended=True)
    assert es.parse("[a-z]*&~([ac]b|c)", extended=True) == es.parse("[a-z]*&~(ab|cb|c)", extended=True)
    # A complement alone stays one, and a finite body leaves a plain alternation.
    assert es.kind_name(es.parse("~(ab)", extended=True)) == "not"
    assert es.parse("(ab|cd|ef)&~(ab)", extended=True) == es.parse("cd|ef")
    assert es.parse("(ab)&~(ab)", extended=True) == ExprSet.NOTHING
    # Too many words to spell out: still an intersection, and still right.
    many = es.parse("[a-z]*&~([a-z]{3})", extended=True)
    assert es.kind_name(many) == "and"
    assert not LazyDFA(es, many).matches(b"abc") and LazyDFA(es, many).matches(b"abcd")


def test_an_exclusion_with_the_empty_word_has_no_shadow():
    es = ExprSet()
    e = es.parse('([a-z]*&~(|ab))"', extended=True)
    assert es.shadow(e) is None  # the body alone would accept `"` at once
    dfa = LazyDFA(es, e)
    assert not dfa.matches(b'"') and not dfa.matches(b'ab"')
    assert dfa.matches(b'a"') and dfa.matches(b'abc"')
    # The slicer's question: string bodies of up to 10 bytes are all prefixes of it.
    body = es.parse("[a-z]{1,10}")
    assert es.prefix_contains(body, e)
    assert not es.prefix_contains(es.parse('[a-z"]{1,10}'), e)  # `""` starts no match


# --------------------------------------------------------------------------------------
# Clamped repeat counts
# --------------------------------------------------------------------------------------


def test_clamped_counts():
    es = ExprSet()
    assert es.clamped(es.parse('a{0,300}"'), 128) == es.parse('a*"')
    assert es.clamped(es.parse("a{200,300}"), 128) == es.parse("a{129,}")
    # a repetition takes the least length of what it repeats: (ab) two bytes, so a token
    # of 128 bytes holds 64 of them at most
    assert es.clamped(es.parse("(ab){0,100}"), 128) == es.parse("(ab)*")
    assert es.clamped(es.parse("(ab){0,64}"), 128) == es.parse("(ab){0,64}")
    assert es.clamped(es.parse("(ab){65,100}"), 128) == es.parse("(ab){65,}")
    words = es.parse(r"(?:\S+\s+){0,99}\S+")
    assert es.clamped(words, 128) == es.parse(r"(?:\S+\s+)*\S+")
    assert es.clamped(es.parse(r"(?:\S+\s+){0,50}\S+"), 128) == es.parse(r"(?:\S+\s+){0,50}\S+")
    assert es.clamped(es.parse("[a-z]{1,100}x"), 128) == es.parse("[a-z]{1,100}x")
    # with & or ~ the expression comes back as it is: clamping could make an empty one non-empty
    empty = es.parse("a{0,300}&a{400,500}", extended=True)
    assert es.clamped(empty, 128) == empty
    # literals append their links inline: every node has its count
    es.literal(b"abcabc" * 40)
    assert len(es._max_count) == len(es) == len(es._min_len)
    assert not es.has_count_above([(0, es.parse("(ab){0,64}")), (1, es.literal(b"xy" * 150))], 128)
    assert es.has_count_above([(0, es.parse("(ab){0,65}"))], 128)
    assert es.clamped(es.literal(b"x" * 300), 128) == es.parse("x{129,}")  # a run is a repeat
    assert es.has_count_above([(0, es.parse("(ab){0,100}")), (1, es.parse("[0-9]{129}"))], 128)


def _same_up_to(es, a, b, depth, alphabet):
    """Both expressions agree on every string of at most `depth` bytes over `alphabet`,
    as matches and as prefixes of matches (a non-∅ derivative, without & and ~)."""
    seen = set()
    todo = [(a, b, 0)]
    while todo:
        x, y, n = todo.pop()
        if (x, y, n) in seen:
            continue
        seen.add((x, y, n))
        assert es.nullable(x) == es.nullable(y)
        assert (x == 0) == (y == 0)
        if n < depth and x:
            for byte in alphabet:
                todo.append((es.derivative(x, byte), es.derivative(y, byte), n + 1))


def test_clamped_variable_length_groups_agree_on_short_strings():
    es = ExprSet()
    for pattern in ("(a+b+){0,5}a+", "(a+b+){3,5}a*", "(ab?c){2,9}", "((ab){1,2}c){0,4}"):
        e = es.parse(pattern)
        for depth in (3, 4, 6, 7):
            c = es.clamped(e, depth)
            _same_up_to(es, e, c, depth, b"abcd")
    assert es.clamped(es.parse("(a+b+){0,5}a+"), 6) == es.parse("(a+b+)*a+")
    assert es.clamped(es.parse("(ab?c){2,9}"), 4) == es.parse("(ab?c){2,}")


@settings(max_examples=150, deadline=None)
@given(regex_ast, st.integers(1, 3))
def test_clamped_expression_agrees_on_short_strings(ast, depth):
    es = ExprSet()
    e = es.parse(render(ast))
    c = es.clamped(e, depth)
    alphabet = sorted({b for ch in ALPHABET for b in ch.encode()} | {0x80, 0xFF})[:14]
    _same_up_to(es, e, c, depth, alphabet)
    assert es.clamped(c, depth) == c


def test_an_intersection_with_the_complement_of_a_cover_is_empty_at_once():
    # A & ~B is ∅ where B holds A by its shape: B is A, a branch of B is A, or a branch
    # is A between nullable factors. Built as ∅, with no search of states.
    es = ExprSet(Limits(max_lexer_states=5))
    x = es.parse("[ab]*a[ab]{12}")
    for cover in ("[ab]*a[ab]{12}", "[ab]*a[ab]{12}|c", "c*([ab]*a[ab]{12})d?", "b|c*([ab]*a[ab]{12})(d|)"):
        assert es.and_(x, es.not_(es.parse(cover))) == 0, cover
    # Not a cover: a factor that must be read, or a branch of only part of A.
    for other in ("c([ab]*a[ab]{12})", "[ab]*aa[ab]{11}|c", "([ab]*a[ab]{12})d"):
        assert es.and_(x, es.not_(es.parse(other))) != 0, other
    # The derivative of a key no pattern matches, once the pattern has matched: the
    # JSON-like `S* & ~(S*·D+·S*)` read past a D byte.
    s_star = es.parse('[^"]*')
    keys = es.and_(s_star, es.not_(es.parse('[^"]*[a-z]+[^"]*')))
    assert keys != 0 and es.nullable(keys)
    assert es.derivative(keys, ord("q")) == 0
    assert es.derivative(keys, ord("7")) != 0


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_cover_rewrite_agrees_with_the_search(data):
    # Where the rewrite makes A & ~B empty, the language is empty by the state search on
    # a copy built without the rewrite; both agree on which strings match.
    atoms = ["a", "b", "ab", "[ab]", "[ab]*", "a*", "(ab)*", "b?"]
    a = data.draw(st.sampled_from(atoms))
    parts = data.draw(st.lists(st.sampled_from(atoms + [a]), min_size=1, max_size=3))
    branch = "".join(f"({p})" for p in parts)
    other = data.draw(st.sampled_from(atoms))
    pattern = f"({a})&~({branch}|{other})"
    es = ExprSet()
    dfa = LazyDFA(es, es.parse(pattern, extended=True))
    for n in range(5):
        for word in itertools.product(b"ab", repeat=n):
            w = bytes(word)
            want = re.fullmatch(a, w.decode()) is not None and not (
                re.fullmatch(branch, w.decode()) or re.fullmatch(other, w.decode())
            )
            assert dfa.matches(w) == want, (pattern, w)


# Codes for the count rewrite: sets of words none of which is a prefix of another, and
# one whose sequences split two ways (`ab` is `a·b`), where the rewrite must not fire.
_CODES = [["a", "b"], ["a", "bc", "bb"], ["ab", "b", "c"], ["a", "ab", "b"]]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_counts_of_one_code_meet_as_one_repetition(data):
    # `A{l1,h1} & B{l2,h2}` and `A{l1,h1} & ~B{l2,h2}`, A a part of the code B: the
    # rewrite (`ExprSet._meet_counts`) matches what the definition does, word by word.
    code = data.draw(st.sampled_from(_CODES))
    part = data.draw(st.lists(st.sampled_from(code), min_size=1, unique=True))
    inner, outer = "|".join(part), "|".join(code)
    if data.draw(st.booleans()):
        inner, outer = outer, inner
    l1, l2 = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    h1 = data.draw(st.one_of(st.none(), st.integers(l1, 4)))
    h2 = data.draw(st.one_of(st.none(), st.integers(l2, 4)))
    negated = data.draw(st.booleans())

    def counts(lo, hi):
        return f"{{{lo},{'' if hi is None else hi}}}"

    left, right = f"({inner}){counts(l1, h1)}", f"({outer}){counts(l2, h2)}"
    pattern = f"{left}&~{right}" if negated else f"{left}&{right}"
    es = ExprSet()
    dfa = LazyDFA(es, es.parse(pattern, extended=True))
    for n in range(8):
        for word in itertools.product("abc", repeat=n):
            w = "".join(word)
            in_right = re.fullmatch(right, w) is not None
            want = re.fullmatch(left, w) is not None and (not in_right if negated else in_right)
            assert dfa.matches(w.encode()) == want, (pattern, w)


def test_a_limit_on_whole_characters_is_a_repetition():
    # JSON string characters (UTF-8 sequences and escapes) are a prefix code, so a
    # maxLength on `.*` and a failed minLength need no intersection.
    es = ExprSet()
    char = es.parse(r'[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}')
    dot = es.parse(r'[^"\\\x00-\x1f\n]|\\["\\/bfnrt]')
    assert es.is_prefix_code(char) and es.is_prefix_code(dot)
    assert not es.is_prefix_code(es.parse("a|ab"))
    assert es.and_(es.star(dot), es.repeat(char, 0, 30)) == es.repeat(dot, 0, 30)
    assert es.and_(es.star(dot), es.not_(es.repeat(char, 20, None))) == es.repeat(dot, 0, 19)
    # The limit narrows like a plain maxLength: a walk of at most 30 bytes cannot tell
    # it from the star.
    limit = es.repeat(dot, 0, 30)
    assert es.window_reach(limit) == 30 and es.without_windows(limit) == es.star(dot)
    assert es.window_reach(es.repeat(dot, 0, 3)) is None


@settings(max_examples=200, deadline=None)
@given(regex_ast, regex_ast, st.booleans())
def test_inclusion_by_pairs_of_derivatives_agrees_with_the_complement_search(a, b, within):
    # `_plain_inclusion` (Y ⊆ X by a search over pairs of derivatives) against its twin,
    # the emptiness of Y & ~X; `within` makes X hold Y as a branch, but in other words.
    es = ExprSet()
    y = es.parse(render(a))
    x = es.alt(es.parse(render(b)), es.star(y)) if within else es.parse(render(b))
    got = es._plain_inclusion(y, x, 10_000)
    # Past its bound the search says it does not know (a few `.` in a bounded repeat of
    # `.*` pair up beyond it), and callers take that as "not shown": the property is
    # that an answer is right. Hypothesis fails the test if it must discard too many.
    assume(got is not None)
    assert got == es._is_empty(es.and_(y, es.not_(x)), 10_000), (render(a), render(b))


def test_a_key_no_pattern_matches_has_the_classes_of_its_members():
    # `C* & ~P` (a key that a pattern property's pattern does not match) shadows C* at
    # the bytes P cannot start with; P starts with a whole character set, so a class per
    # guard byte would be a derivative per byte. Its classes are the members' instead,
    # and every byte of a class has the class's derivative.
    es = ExprSet()
    char = es.parse(r'[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}')
    dot = es.parse(r'[^"\\\x00-\x1f\n]|\\["\\/bfnrt]')
    key = es.and_(es.star(char), es.not_(es.repeat(dot, 1, None)))
    assert es.shadow(key) is not None
    classes = es.byte_classes(key)
    assert len(set(classes)) <= 32
    for b in range(256):
        assert es._derive(key, b) == es._derive(key, classes[b]), b


@settings(max_examples=200, deadline=None)
@given(
    a=random_patterns(("a", "b", "[ab]", "c*", "[abc]*", "(?:ab)?")),
    b=random_patterns(("a", "b", "[bc]", "a*", "[abc]*", "(?:ba)?")),
    negate=st.booleans(),
)
def test_intersections_kept_by_their_members_match_both(a, b, negate):
    """`and_` keeps what it made by its members: asked again, in either order, it gives
    the same node, whose words are those of both sides, as are those of the node met
    with one side again (every word over "abc" up to four bytes)."""
    es = ExprSet()
    x, y = es.parse(a), es.parse(b)
    y = es.not_(y) if negate else y
    made = es.and_(x, y)
    assert es.and_(y, x) == made
    again = LazyDFA(es, es.and_(made, x))
    dfa, dx, dy = LazyDFA(es, made), LazyDFA(es, x), LazyDFA(es, y)
    for n in range(5):
        for chars in itertools.product("abc", repeat=n):
            w = "".join(chars).encode()
            both = dx.matches(w) and dy.matches(w)
            assert dfa.matches(w) == both, (a, b, negate, w)
            assert again.matches(w) == both, (a, b, negate, w)


def test_an_intersection_whose_complement_holds_its_plain_member_is_empty_at_once():
    # JsonSchemaStore---venvironment-basic-schema: `^(?!.*(...)).*\.blf$` came to
    # `X & ~(C* | ...)`, X a run of the string's characters then `.blf`, which C* holds.
    # The search walked every derivative state (57, 12 ms in Python) before it could
    # say "empty"; the complement's branch holding X says it after a few.
    es = ExprSet()
    member = es.parse(r"[a-k]{0,24}\.blf")
    complement = es.not_(es.alt(es.parse("[a-z.]*"), es.parse("[a-z]*q[a-z]*")))
    meet = es.concat(es.and_(member, complement), es.literal(b'"'))
    before = len(es._empty)
    assert es.is_empty(meet)
    assert len(es._empty) - before <= 12  # the states marked: the search stopped early
    # Where no branch holds the member, the search decides as before.
    open_meet = es.and_(member, es.not_(es.alt(es.parse("[a-j]*"), es.parse("[a-z]*q"))))
    assert not es.is_empty(open_meet)
    assert LazyDFA(es, open_meet).matches(b"k.blf")


@settings(max_examples=150, deadline=None)
@given(
    member=st.sampled_from(("[ab]{0,6}c", "a[ab]*", "(ab){1,4}", "[abc]{2,5}")),
    branch=st.sampled_from(("[ab]*c", "[abc]*", "a*", "(ab)*", "[ab]{0,3}c?")),
    other=st.sampled_from(("c[abc]*", "b", "[ab]*cc")),
)
def test_a_complement_cover_proves_only_empty_intersections(member, branch, other):
    es = ExprSet()
    meet = es.and_(es.parse(member), es.not_(es.alt(es.parse(branch), es.parse(other))))
    if meet == 0 or es._kind[meet] != AND:
        return  # folded into another shape when made
    if es._complement_covers(meet):
        dfa = LazyDFA(es, meet)
        for n in range(8):
            for chars in itertools.product("abc", repeat=n):
                assert not dfa.matches("".join(chars).encode()), (member, branch, other)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 3000)), min_size=1, max_size=6), st.booleans())
def test_a_character_class_is_a_prefix_code_as_its_derivatives_say(ranges, negate):
    # A class is known a prefix code when made (UTF-8 is one); the walk of its
    # derivatives, which `is_prefix_code` makes for other expressions, agrees.
    es = ExprSet()
    cls = es.char_class([(lo, min(lo + n, 0x10FFFF)) for lo, n in ranges], negate)
    if cls == ExprSet.NOTHING:
        return
    assert es._prefix_codes.get(cls) is True
    del es._prefix_codes[cls]
    es._PREFIX_CODE_STATES = 1 << 20  # the walk not cut short
    assert es.is_prefix_code(cls) is True


@pytest.mark.parametrize("name", ["L", "LC", "Nd", "Cn", "Zs"])
def test_a_general_category_is_the_code_points_unicodedata_names(name):
    # The categories are read off one pass over every code point, as runs; the
    # definition is a code point at a time.
    import unicodedata

    from midword.engine.regex import charset

    ranges, start = [], None
    for cp in range(charset.MAX_CODE_POINT + 2):
        c = unicodedata.category(chr(cp)) if cp <= charset.MAX_CODE_POINT else ""
        hit = c == name or (len(name) == 1 and c[:1] == name) or (name == "LC" and c in ("Lu", "Ll", "Lt"))
        if hit and start is None:
            start = cp
        elif not hit and start is not None:
            ranges.append((start, cp - 1))
            start = None
    assert charset.category_set(name) == charset.normalize(ranges)
