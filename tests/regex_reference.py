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
