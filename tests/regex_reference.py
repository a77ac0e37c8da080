"""Plain reference answers about an `ExprSet` expression, by derivatives one byte at a
time, for tests that check the engine's faster paths against them."""

from __future__ import annotations


def matches(es, e: int, data: bytes) -> bool:
    """Whether expression `e` of `es` matches the whole of `data`."""
    for b in data:
        e = es.derivative(e, b)
        if e == 0:
            return False
    return es.nullable(e)


def most_chained(es, e: int, strings) -> int:
    """The most whole matches of `e` that one of `strings` holds back to back, anywhere in
    it (by trying every split: quadratic, for short strings)."""
    best = 0
    for s in strings:
        chain = [0] * (len(s) + 1)
        for i in range(1, len(s) + 1):
            chain[i] = max([chain[j] + 1 for j in range(i) if matches(es, e, s[j:i])], default=0)
        best = max([best, *chain])
    return best


def random_patterns(atoms, depth: int = 2):
    """A hypothesis strategy of regex texts: sequences, alternations and bounded or open
    repeats of `atoms`, nested `depth` deep."""
    from hypothesis import strategies as st

    @st.composite
    def pattern(draw, depth):
        if depth == 0:
            return draw(st.sampled_from(atoms))
        kind = draw(st.sampled_from(["atom", "seq", "alt", "rep"]))
        if kind == "atom":
            return draw(st.sampled_from(atoms))
        if kind == "seq":
            return draw(pattern(depth - 1)) + draw(pattern(depth - 1))
        if kind == "alt":
            return "(?:" + draw(pattern(depth - 1)) + "|" + draw(pattern(depth - 1)) + ")"
        lo = draw(st.integers(0, 2))
        hi = draw(st.one_of(st.none(), st.integers(lo, 3)))
        return "(?:" + draw(pattern(depth - 1)) + ")" + ("{%d,}" % lo if hi is None else "{%d,%d}" % (lo, hi))

    return pattern(depth)
