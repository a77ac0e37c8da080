"""The IR: one immutable node per typed part of a schema, and its smart constructors."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Iterable

from ..limits import DEFAULT_LIMITS, GrammarError
from .patterns import pattern_to_regex
from .pointers import _canon

# --------------------------------------------------------------------------------------
# The IR
# --------------------------------------------------------------------------------------


class _Node:
    """Immutable IR node with structural equality (the key) and a cached hash."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: tuple):
        self.key = key
        self._hash = hash(key)

    def __eq__(self, other):
        return self is other or (type(self) is type(other) and self._hash == other._hash and self.key == other.key)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"{type(self).__name__}{self.key!r}"


class _AnyT(_Node):
    __slots__ = ()


class _NullT(_Node):
    __slots__ = ()


class _BoolT(_Node):
    __slots__ = ()


class _Num(_Node):
    """Numbers in a range; `integer`: integral values only, `fractional`: non-integral
    values only; `mult`: a multiple of it; `not_mult`: values that are multiples of
    none of these; `excluded`: values (Decimals) that may not occur."""

    __slots__ = ("integer", "lo", "lox", "hi", "hix", "mult", "fractional", "not_mult", "excluded")

    def __init__(
        self,
        integer=False,
        lo=None,
        lox=False,
        hi=None,
        hix=False,
        mult=None,
        fractional=False,
        not_mult=(),
        excluded=(),
    ):
        super().__init__(("num", integer, lo, lox, hi, hix, mult, fractional, not_mult, excluded))
        self.integer, self.lo, self.lox, self.hi, self.hix, self.mult = integer, lo, lox, hi, hix, mult
        self.fractional, self.not_mult, self.excluded = fractional, not_mult, excluded


class _Str(_Node):
    """Strings with a length range matching every pattern and none of `excluded`
    (string-kind nodes: `_Str` or string `_Const`)."""

    __slots__ = ("min_len", "max_len", "patterns", "excluded")

    def __init__(self, min_len=0, max_len=None, patterns=(), excluded=()):
        super().__init__(("str", min_len, max_len, patterns, excluded))
        self.min_len, self.max_len, self.patterns, self.excluded = min_len, max_len, patterns, excluded


class _Counted(_Node):
    """A `contains` entry other than "at least one": between `lo` and `hi` (None: no
    bound) of the elements after the prefix satisfy `node` (minContains, maxContains)."""

    __slots__ = ("node", "lo", "hi")

    def __init__(self, node: _Node, lo: int, hi: int | None):
        super().__init__(("counted", node, lo, hi))
        self.node, self.lo, self.hi = node, lo, hi


def contains_entry(node: _Node, lo: int, hi: int | None) -> _Node | None:
    """The `contains` entry for between lo and hi matches of `node`: the node itself for
    "at least one", None where the counts ask nothing, NOTHING where they cannot be met."""
    if hi is not None and hi < lo:
        return NOTHING
    if node is NOTHING:
        return NOTHING if lo > 0 else None  # no element matches: the count is 0
    if hi is None and lo <= 1:
        return node if lo == 1 else None
    return _Counted(node, lo, hi)


def witness_bounds(entry: _Node) -> tuple[_Node, int, int | None]:
    """(schema, least count, greatest count or None) of a `contains` entry."""
    if isinstance(entry, _Counted):
        return entry.node, entry.lo, entry.hi
    return entry, 1, None


class _Arr(_Node):
    """Arrays: element i satisfies prefix[i], later ones `items`; a length range; and for
    each entry in `contains`, some element after the prefix satisfies its schema (or,
    for a `_Counted` entry, between its bounds of them do); `unique`: no two elements
    equal (uniqueItems, kept only where every position admits finitely many values)."""

    __slots__ = ("prefix", "items", "min_items", "max_items", "contains", "unique")

    def __init__(self, prefix=(), items=None, min_items=0, max_items=None, contains=(), unique=False):
        items = ANY if items is None else items
        super().__init__(("arr", prefix, items, min_items, max_items, contains, unique))
        self.prefix, self.items, self.min_items, self.max_items = prefix, items, min_items, max_items
        self.contains = contains
        self.unique = unique


class _Obj(_Node):
    """Objects: `props` in schema order, `patterns` (patternProperties), `additional`
    for other keys, `required` names, a member count range, and `names`: the schema
    every key must satisfy (propertyNames; ANY when unconstrained). `some`: (key
    schema, value schema) pairs, each of which some member must meet besides the rest
    (what the complement of a closed object asks: a key it does not allow, or a value
    it rejects); a listed key may meet one, as may any other key."""

    __slots__ = ("props", "patterns", "additional", "required", "min_props", "max_props", "names", "some", "_by_name")

    def __init__(
        self, props=(), patterns=(), additional=None, required=(), min_props=0, max_props=None, names=None, some=()
    ):
        additional = ANY if additional is None else additional
        names = ANY if names is None else names
        super().__init__(("obj", props, patterns, additional, required, min_props, max_props, names, some))
        self.props, self.patterns, self.additional = props, patterns, additional
        self.required, self.min_props, self.max_props = required, min_props, max_props
        self.names = names
        self.some = some
        self._by_name: dict[str, _Node] | None = None

    def prop(self, name: str):
        if len(self.props) < 8:
            for k, v in self.props:
                if k == name:
                    return v
            return None
        # Merging and generating ask for every property by name: a scan each would be
        # quadratic in the number of properties.
        by_name = self._by_name
        if by_name is None:
            by_name = self._by_name = {}
            for k, v in self.props:
                by_name.setdefault(k, v)
        return by_name.get(name)


class _Const(_Node):
    __slots__ = ("value",)

    def __init__(self, value):
        super().__init__(("const", _canon(value)))
        self.value = value


class _Ref(_Node):
    """A lazily unfolded schema: `atoms` are base reference names (str) and IR nodes,
    and the schema is their intersection."""

    __slots__ = ("atoms",)

    def __init__(self, atoms: frozenset):
        super().__init__(("ref", atoms))
        self.atoms = atoms


class _NotRef(_Node):
    """The complement of the schema a reference name stands for, as an atom of a `_Ref`
    only: made where that schema is still being built (a recursive one) or recursion is
    suspected, and worked out when the reference is unfolded, by which time it is whole.
    Its own references to the name come out as complements again, so the recursion
    stops there."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        super().__init__(("notref", name))
        self.name = name


class _Union(_Node):
    __slots__ = ("parts",)

    def __init__(self, parts: tuple):
        super().__init__(("union", parts))
        self.parts = parts


ANY = _AnyT(("any",))
NOTHING = _Union(())
_NULL = _NullT(("null",))
_BOOL = _BoolT(("bool",))
# The unconstrained parts of each type: together they are ANY. A tuple, so that unions
# built from it come out in the same order in every process (a frozenset's order
# follows string hashing, which changes with PYTHONHASHSEED); the set is for subset tests.
ANY_PARTS_IN_ORDER = (_NULL, _BOOL, _Num(), _Str(), _Arr(), _Obj())
_ANY_PARTS = frozenset(ANY_PARTS_IN_ORDER)


def stable_order(x) -> str:
    """A sort key for IR nodes and their keys that is the same in every process: like
    repr, but with the members of frozensets sorted (their iteration order is not)."""
    if isinstance(x, _Node):
        return type(x).__name__ + stable_order(x.key)
    if isinstance(x, tuple):
        return "(" + ",".join(stable_order(v) for v in x) + ")"
    if isinstance(x, frozenset):
        return "{" + ",".join(sorted(stable_order(v) for v in x)) + "}"
    return repr(x)


def _kind(n: _Node) -> str:
    if isinstance(n, _Const):
        v = n.value
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, (int, float)):
            return "num"
        if isinstance(v, str):
            return "str"
        return "arr" if isinstance(v, list) else "obj"
    return {_NullT: "null", _BoolT: "bool", _Num: "num", _Str: "str", _Arr: "arr", _Obj: "obj"}[type(n)]


def _union(parts: Iterable[_Node]) -> _Node:
    flat: list[_Node] = []
    seen = set()
    for p in parts:
        if p is ANY:
            return ANY
        sub = p.parts if isinstance(p, _Union) else (p,)
        for q in sub:
            if q not in seen:
                seen.add(q)
                flat.append(q)
    if not flat:
        return NOTHING
    if len(flat) == 1:
        return flat[0]
    if _ANY_PARTS <= seen:
        return ANY
    return _Union(tuple(flat))


def _min_opt(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional upper bounds (None: unbounded)."""
    return b if a is None else (a if b is None else min(a, b))


def _apart(alo: int, ahi: int | None, blo: int, bhi: int | None) -> bool:
    """Whether two count ranges [alo, ahi] and [blo, bhi] do not overlap."""
    return (ahi is not None and ahi < blo) or (bhi is not None and bhi < alo)


def _elem(a: _Arr, i: int) -> _Node:
    return a.prefix[i] if i < len(a.prefix) else a.items


def _str_within_excluded(a: _Str, b: _Str) -> bool:
    """Whether every string of `a` is excluded by `b` (a structural, sufficient check)."""
    for x in b.excluded:
        if not isinstance(x, _Str) or x.excluded or not set(x.patterns) <= set(a.patterns):
            continue
        if x.min_len <= a.min_len and (x.max_len is None or (a.max_len is not None and a.max_len <= x.max_len)):
            return True
    return False


def _make_num(integer, lo, lox, hi, hix, mult, where, fractional=False, not_mult=(), excluded=()) -> _Node:
    if integer and fractional:
        return NOTHING
    if mult is not None and fractional and Fraction(mult).denominator == 1:
        return NOTHING  # a multiple of an integer is an integer
    if not not_mult:
        pass
    elif integer:
        # An integer is a multiple of p/q (lowest terms) exactly when it is one of p.
        not_mult = tuple(dict.fromkeys(Decimal(Fraction(k).numerator) for k in not_mult))
        if any(k == 1 for k in not_mult):
            return NOTHING
    elif fractional:
        # Non-integers are multiples of no integer.
        not_mult = tuple(k for k in not_mult if Fraction(k).denominator != 1)
    if mult is not None and any(Fraction(mult) % Fraction(k) == 0 for k in not_mult):
        return NOTHING
    if integer:
        # Integer bounds are inclusive integers.
        if lo is not None:
            c = lo.to_integral_value(rounding=ROUND_CEILING)
            lo, lox = (c + 1 if lox and c == lo else c), False
        if hi is not None:
            f = hi.to_integral_value(rounding=ROUND_FLOOR)
            hi, hix = (f - 1 if hix and f == hi else f), False
        if mult is not None:
            # Integer multiples of p/q (lowest terms) are the multiples of p.
            p = Fraction(mult).numerator
            mult = None if p == 1 else Decimal(p)
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lox or hix))):
        return NOTHING
    if lo is not None and lo == hi and lo in excluded:
        return NOTHING
    return _Num(integer, lo, lox, hi, hix, mult, fractional, tuple(not_mult), tuple(excluded))


def _make_str(lo, hi, patterns, excluded=()) -> _Node:
    if hi is not None and lo > hi:
        return NOTHING
    for p in patterns:
        if pattern_to_regex(p).expr is None:
            return NOTHING
    if _Str() in excluded:
        return NOTHING
    return _Str(lo, hi, patterns, excluded)


def _make_arr(
    prefix, items, lo, hi, contains=(), *, max_contains: int = DEFAULT_LIMITS.max_contains, unique: bool = False
) -> _Node:
    if NOTHING in contains:
        return NOTHING
    need = 0
    if contains:
        # The witnesses need elements after the prefix.
        need = max(witness_bounds(c)[1] for c in contains)
        lo = max(lo, len(prefix) + need)
    if hi is not None and lo > hi:
        return NOTHING
    # A position that admits no value caps the length there.
    for i, p in enumerate(prefix):
        if p is NOTHING:
            if i < lo:
                return NOTHING
            hi = i if hi is None else min(hi, i)
            prefix = prefix[:i]
            break
    if items is NOTHING:
        if lo > len(prefix):
            return NOTHING
        hi = len(prefix) if hi is None else min(hi, len(prefix))
    if hi is not None:
        prefix = prefix[:hi]
        if hi <= len(prefix):
            items = NOTHING
    if items is NOTHING and hi is None:
        hi = len(prefix)
    if need and (items is NOTHING or lo > (hi if hi is not None else lo)):
        return NOTHING
    if len(contains) > max_contains:
        raise GrammarError(f"an array may combine at most {max_contains} 'contains' constraints (Limits.max_contains)")
    if unique and (hi is None or hi > 1):
        if contains:
            raise GrammarError("uniqueItems beside contains is not supported")
        return _Arr(prefix, items, lo, hi, (), True)
    return _Arr(prefix, items, lo, hi, tuple(contains))


def _make_obj(props, patterns, additional, required, lo, hi, names=ANY, some=()) -> _Node:
    if some:
        lo = max(lo, 1)  # the member `some` asks for
        if any(key is NOTHING or value is NOTHING for key, value in some):
            return NOTHING
    if hi is not None and (lo > hi or len(required) > hi):
        return NOTHING
    if names is NOTHING and (required or lo > 0):
        return NOTHING
    for r in required:
        for k, v in props:
            if k == r and v is NOTHING:
                return NOTHING
    return _Obj(props, patterns, additional, required, lo, hi, names, some)
