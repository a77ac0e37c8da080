"""An alternation whose members share a head is kept as one member, the head before the
alternation of their tails (`ExprSet._factored_heads`): words become a trie of them, and
an unanchored pattern of words (`"pattern": "(use1-az1|use1-az2|...)"`, which the
compiler turns into `.*w1.* | .*w2.* | ...`) one `.*` before that trie. A derivative by
a byte is then a member already made, not a new alternation of every word the byte
starts or continues (JSON Schema Store's `config_schema`: 250 zone ids, whose every mask
in such a string made one per lexer state). The languages are what Python's `re` says."""

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from regex_reference import matches

from midword.engine.regex import ExprSet
from midword.engine.regex.nodes import AND, CONCAT, EXCL, NOT, OR, REPEAT

JSON_CHAR = r'[^"\\\x00-\x1F\x7F]'
_WORDS = [bytes(w) for n in range(7) for w in itertools.product(b"abc-", repeat=n)]


def _zone_ids(n: int) -> list[str]:
    regions = ["use", "usw", "euw", "euc", "apne", "apse", "afs", "cac", "mes", "sae"]
    return [f"{r}{k}-az{z}" for r in regions for k in range(1, 1 + n // 30) for z in range(1, 4)][:n]


def _widest_alternation(es: ExprSet, e: int) -> int:
    """The most members of any alternation in `e`."""
    widest, seen, todo = 0, set(), [e]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        if es._kind[x] == OR:
            widest = max(widest, len(es._args[x]))
        kind, args = es._kind[x], es._args[x]
        if kind in (CONCAT, OR, AND):
            todo.extend(args)
        elif kind in (NOT, REPEAT, EXCL):
            todo.append(args[0])
    return widest


def test_a_derivative_of_words_sharing_a_head_is_a_member_already_made():
    es = ExprSet()
    words = es.parse("apex|apricot|avocado|banana|blueberry")
    made = len(es._kind)
    after_a = es.derivative(words, ord("a"))
    after_ap = es.derivative(after_a, ord("p"))
    after_b = es.derivative(words, ord("b"))
    assert len(es._kind) == made
    assert matches(es, after_ap, b"ex") and matches(es, after_ap, b"ricot")
    assert not matches(es, after_ap, b"ocado")
    assert matches(es, after_b, b"anana") and not matches(es, after_b, b"pple")


def test_an_unanchored_pattern_of_many_words_stays_narrow():
    ids = _zone_ids(240)
    es = ExprSet()
    # What the compiler makes of `"pattern": "(id1|id2|...)"` inside a JSON string.
    body = "|".join(f"{JSON_CHAR}*{re.escape(w)}{JSON_CHAR}*" for w in ids)
    string = es.parse(f'(?:{body})"')
    assert _widest_alternation(es, string) <= 40
    text = b"zones: euw3-az2, apne1-az"
    d = string
    for k, b in enumerate(text):
        d = es.derivative(d, b)
        assert _widest_alternation(es, d) <= 40, (k, text[: k + 1])
    # "euw3-az2" matched: anything may follow; "apne1-az" alone would need one more digit.
    assert matches(es, d, b'"') and matches(es, d, b'7 and more"')
    partial = es.derivative(es.derivative(string, ord("x")), ord("a"))
    assert not matches(es, partial, b'pne1-az"') and matches(es, partial, b'pne1-az3"')


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([w for w in _WORDS if len(w) <= 5]), min_size=1, max_size=12),
    st.sampled_from(["", "[abc]*", "a?", "(?:ab)*"]),
    st.sampled_from(["", "[abc-]*", "c", "-?"]),
)
def test_alternations_of_words_keep_the_language(words, before, after):
    es = ExprSet()
    alternation = "|".join(f"{before}{re.escape(w.decode())}{after}" for w in words)
    e = es.parse(alternation)
    for w in _WORDS:
        assert matches(es, e, w) == (re.fullmatch(alternation, w.decode()) is not None), (alternation, w)
