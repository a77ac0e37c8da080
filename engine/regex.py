"""Regular expressions over bytes, matched by Brzozowski derivatives.

The derivative of a language L by a byte c is `{ s | cs ∈ L }`; a regular
expression's derivative is again a regular expression, so an expression is a DFA
state and its derivatives are the transitions (seeds/what_makes_it_fast.md,
"Lexer construction"). The state is accepting when the expression is nullable
(matches the empty string). Nothing is compiled up front: `LazyDFA` computes a
transition the first time it is needed and keeps it in a flat table.

Every expression lives in one `ExprSet` and is hash-consed to a small int, so
equal expressions are equal ints, derivatives can be memoized in a dict, and the
DFA stays small because the smart constructors normalise as they build
(flattened, sorted, deduplicated alternations and intersections, ∅ and ε laws,
`(R*)* = R*`, `~~R = R`, ...). Bounded repeats stay symbolic:
`d(R{m,n}) = d(R)·R{m-1,n-1}`, so `{1,10000}` costs one node, not ten thousand.

Alongside the usual operators there are intersection `&` and complement `~`
(w.r.t. all byte strings). With them an expression may denote the empty language
without being ∅ syntactically; `is_empty` decides that by exploring the derivative
graph under a state bound.

Matching is over UTF-8 bytes: character classes compile to alternations of byte
sequences that are valid UTF-8 only (the standard split of a code point range
into ranges whose encodings share a shape), so invalid UTF-8 never matches `.`
or a class. Matching is whole-string, like `re.fullmatch`.

To keep derivative work small, each expression knows the partition of the 256
bytes into classes that it cannot tell apart (the refinement of the byte sets at
its first positions); a derivative is computed once per class.
"""

from __future__ import annotations

import re as _re
import unicodedata
from typing import Iterable

import numpy as np

from .limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits

__all__ = ["ExprSet", "LazyDFA", "refine_byte_sets", "utf8_sequences"]

# Node kinds.
_NOTHING, _EPS, _BYTES, _CONCAT, _OR, _AND, _NOT, _REPEAT, _EXCL = range(9)

_FULL = (1 << 256) - 1
_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)

# The derivative, emptiness and printing code recurses along the expression's
# height; keeping it bounded keeps Python's stack safe whatever a grammar builds.
MAX_HEIGHT = 300
# Parenthesis / `~` nesting accepted by the parser (well inside MAX_HEIGHT).
MAX_NESTING = 64
# The largest repetition count Python's `re` accepts (MAXREPEAT - 1).
MAX_REPEAT_COUNT = 4294967294
# A class with at most this many non-ASCII code points is case-folded with
# str.lower/upper under the `i` flag; bigger ones only fold ASCII letters.
_FOLD_SMALL = 512
# States explored when checking `Y ⊆ X` for prefix_contains; the answer may be
# "unsure" (False), so it gets a smaller budget than the lexer.
_SUBSET_STATES = 10_000
# `R & ~W` becomes one exclusion node when W spells at most this many words; a bigger
# finite set (a class repeated, say) stays an intersection, which is only slower.
_EXCL_MAX_WORDS = 4096
_EXCL_MAX_LENGTH = 1024


def _popcount(x: int) -> int:
    return bin(x).count("1")


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _range_mask(lo: int, hi: int) -> int:
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


# --------------------------------------------------------------------------------------
# Code point ranges -> UTF-8 byte-range sequences
# --------------------------------------------------------------------------------------


def refine_byte_sets(byte_sets: Iterable[int]) -> list[int]:
    """The partition of all 256 bytes (bitmasks) in which two bytes share a block
    exactly when every one of `byte_sets` holds both or neither."""
    blocks = [_FULL]
    for byte_set in byte_sets:
        split = []
        for block in blocks:
            inside = block & byte_set
            if inside and inside != block:
                split.append(inside)
                split.append(block ^ inside)
            else:
                split.append(block)
        blocks = split
    return blocks


def _split_class_map(cm: bytes, singles: int) -> bytes:
    """The class map `cm` with each byte of `singles` (a bitmask) in a class of its own.
    A class whose smallest byte left gets the smallest byte that stayed."""
    out = bytearray(cm)
    orphaned = False
    for b in _bits(singles):
        out[b] = b
        orphaned = orphaned or cm[b] == b
    if orphaned:
        moved: dict[int, int] = {}
        for x in range(256):
            rep = cm[x]
            if (singles >> rep) & 1 and not (singles >> x) & 1:
                out[x] = moved.setdefault(rep, x)
    return bytes(out)


def _class_map(blocks: list[int]) -> bytes:
    """256 bytes mapping each byte to the smallest byte of its block (a partition of
    all bytes, as bitmasks). Every new key set of a schema makes a new partition: mostly
    one wide block (the bytes no key starts with) and a few single bytes, so the map
    starts filled with the wide block's byte and only the others are set one by one."""
    wide = max(blocks, key=int.bit_count)
    cm = bytearray(((wide & -wide).bit_length() - 1,)) * 256
    for block in blocks:
        if block == wide:
            continue
        rep = (block & -block).bit_length() - 1
        while block:
            low = block & -block
            cm[low.bit_length() - 1] = rep
            block ^= low
    return bytes(cm)


def _normalize_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged code point ranges with the surrogate block cut out."""
    items = []
    for lo, hi in ranges:
        if not (0 <= lo <= hi <= _MAX_CODE_POINT):
            raise GrammarError(f"invalid code point range {lo:#x}-{hi:#x} (must be within 0..0x10FFFF, lo <= hi)")
        if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
            if lo < _SURROGATES[0]:
                items.append((lo, _SURROGATES[0] - 1))
            if hi > _SURROGATES[1]:
                items.append((_SURROGATES[1] + 1, hi))
        else:
            items.append((lo, hi))
    items.sort()
    out: list[tuple[int, int]] = []
    for lo, hi in items:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _negate_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX_CODE_POINT:
        out.append((nxt, _MAX_CODE_POINT))
    return _normalize_ranges(out)


def _utf8_split(lo: int, hi: int, out: list) -> None:
    # lo and hi have encodings of the same length here. Split until, at each
    # continuation position, either the higher positions agree or the piece
    # covers that position's full 0x80-0xBF block: then the piece's encodings
    # are exactly the product of per-position byte ranges.
    while True:
        n = len(chr(lo).encode("utf-8"))
        for i in range(1, n):
            m = (1 << (6 * i)) - 1
            if (lo & ~m) != (hi & ~m):
                if lo & m:
                    _utf8_split(lo, lo | m, out)
                    lo = (lo | m) + 1
                    break
                if (hi & m) != m:
                    _utf8_split(hi & ~m, hi, out)
                    hi = (hi & ~m) - 1
                    break
        else:
            a = chr(lo).encode("utf-8")
            b = chr(hi).encode("utf-8")
            out.append(tuple(zip(a, b)))
            return


def utf8_sequences(ranges: Iterable[tuple[int, int]]) -> list[tuple[tuple[int, int], ...]]:
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of `ranges`."""
    out: list = []
    for lo, hi in _normalize_ranges(ranges):
        for a, b in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, _MAX_CODE_POINT)):
            l, h = max(lo, a), min(hi, b)
            if l <= h:
                _utf8_split(l, h, out)
    return out


def _case_fold(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adds the other case of every member: ASCII letters always, other characters
    through str.lower/upper when the set is small (a huge class like `[^a]` is
    already closed under case in practice, and enumerating it would be slow)."""
    out = list(ranges)
    non_ascii = 0
    for lo, hi in ranges:
        for a, b, shift in ((65, 90, 32), (97, 122, -32)):
            l, h = max(lo, a), min(hi, b)
            if l <= h:
                out.append((l + shift, h + shift))
        if hi >= 0x80:
            non_ascii += hi - max(lo, 0x80) + 1
    if non_ascii <= _FOLD_SMALL:
        for lo, hi in ranges:
            for cp in range(max(lo, 0x80), hi + 1):
                ch = chr(cp)
                for v in (ch.lower(), ch.upper()):
                    if len(v) == 1 and v != ch:
                        out.append((ord(v), ord(v)))
    return _normalize_ranges(out)


# --------------------------------------------------------------------------------------
# The expression set
# --------------------------------------------------------------------------------------


class ExprSet:
    """Hash-consed regular expressions over bytes with memoized derivatives."""

    NOTHING = 0  # ∅, the empty language
    EPSILON = 1  # ε, the empty string

    # One set per Limits shared by every lexer in the process (see `shared`).
    _shared: "dict[Limits, ExprSet]" = {}
    # A shared set is replaced once it holds this share of max_regex_nodes, so a new
    # grammar always has most of its node budget and memory stays bounded.
    SHARED_ROLLOVER_FRACTION = 0.05

    @classmethod
    def shared(cls, limits: Limits = DEFAULT_LIMITS) -> "ExprSet":
        """A process-wide set for `limits`. Grammars repeat lexemes (JSON strings,
        numbers, formats), so parses, derivatives, byte classes and emptiness checks
        computed for one grammar are cache hits for the next. Like recognizers, it is
        meant for the one thread that computes masks."""
        es = cls._shared.get(limits)
        if es is None or len(es) > limits.max_regex_nodes * cls.SHARED_ROLLOVER_FRACTION:
            es = cls(limits)
            cls._shared[limits] = es
        return es

    def __init__(self, limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        # Parallel per-node arrays.
        self._kind: list[int] = []
        self._args: list[tuple] = []
        self._nullable: list[bool] = []
        self._height: list[int] = []
        # Contains & or ~ (other than ~∅): only then can a non-∅ node be empty.
        self._has_bool: list[bool] = []
        # The largest finite repeat count in the node, lower or upper: `clamped` leaves a
        # node whose count is within its depth alone without looking inside.
        self._max_count: list[int] = []
        self._ids: dict[tuple, int] = {}

        self._deriv: dict[int, int] = {}
        self._first_masks: dict[int, tuple[int, ...]] = {}
        self._masks_interned: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._classmap_by_masks: dict[tuple[int, ...], bytes] = {}
        self._combined: dict[frozenset, tuple[np.ndarray, tuple[int, ...]]] = {}
        self._first_bytes: dict[int, int] = {}
        self._or_firsts: dict[int, tuple[int, ...]] = {}
        self._classmap: dict[int, bytes] = {}
        self._empty: dict[int, bool] = {}
        self._next: dict[int, np.ndarray] = {}
        self._maxlen: dict[int, int | None] = {}
        # depth -> expression -> its clamped form: see `clamped`.
        self._clamped: dict[int, dict[int, int]] = {}
        self._parsed: dict[tuple, int] = {}
        # Parenthesized groups by (text, flags, extended): see _Parser._group_key.
        self._groups: dict[tuple, int] = {}
        self._literals: dict[bytes, int] = {}
        # The words of each finite expression, sorted, or None: see `_finite_words`.
        self._words_of: dict[int, tuple[bytes, ...] | None] = {}
        # The node of each single byte, once made (literal() reads it per byte).
        self._byte_nodes: list[int] = [-1] * 256
        self._class_cache: dict[tuple, int] = {}
        # Multibyte classes by node, so to_str can print them as code point classes.
        self._class_of: dict[int, tuple] = {}
        self._subset_cache: dict[tuple[int, int], bool] = {}
        self._prefix_cache: dict[tuple[int, int], bool] = {}
        # (guard bytes, shadow) per expression with & and ~, or None: see `shadow`.
        self._shadows: dict[int, tuple[int, int] | None] = {}
        # (shadow's class map, guard) -> that map with each guard byte a class of its own:
        # key states whose remaining keys start with the same bytes share one.
        self._split_maps: dict[tuple[bytes, int], bytes] = {}

        self._new(_NOTHING, (), (), False, 0, False)
        self._new(_EPS, (), (), True, 0, False)
        # All byte strings; ~∅. It is non-empty, hence has_bool False.
        self.ALL = self._new(_NOT, (_NOT, 0), (0,), True, 1, False)

    # Node storage ----------------------------------------------------------------------
    def _new(self, kind: int, key: tuple, args: tuple, nullable: bool, height: int, has_bool: bool) -> int:
        if height > MAX_HEIGHT:
            raise LimitExceeded("max_regex_height", MAX_HEIGHT, "regular expression nested too deeply")
        i = len(self._kind)
        if i >= self.limits.max_regex_nodes:
            raise LimitExceeded("max_regex_nodes", self.limits.max_regex_nodes, "too many distinct regular expressions")
        self._kind.append(kind)
        self._args.append(args)
        self._nullable.append(nullable)
        self._height.append(height)
        self._has_bool.append(has_bool)
        counts = self._max_count
        if kind == _CONCAT:
            count = max(counts[args[0]], counts[args[1]])
        elif kind == _OR or kind == _AND:
            count = max([counts[x] for x in args])
        elif kind == _REPEAT:
            count = max(counts[args[0]], args[1], args[2] or 0)
        elif kind == _NOT or kind == _EXCL:
            count = counts[args[0]]
        else:
            count = 0
        counts.append(count)
        if key:
            self._ids[key] = i
        return i

    def __len__(self) -> int:
        return len(self._kind)

    def kind_name(self, expr: int) -> str:
        return ("nothing", "epsilon", "bytes", "concat", "or", "and", "not", "repeat", "exclude")[self._kind[expr]]

    # Smart constructors ----------------------------------------------------------------
    def _bytes(self, mask: int) -> int:
        if mask == 0:
            return 0
        key = (_BYTES, mask)
        i = self._ids.get(key)
        if i is None:
            i = self._new(_BYTES, key, (mask,), False, 0, False)
        return i

    def byte_set(self, allowed: Iterable[int]) -> int:
        """A set of single bytes."""
        mask = 0
        for b in allowed:
            if not (0 <= b <= 255):
                raise ValueError(f"byte value {b} out of range 0..255")
            mask |= 1 << b
        return self._bytes(mask)

    def literal(self, data: bytes) -> int:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"literal() takes bytes, got {type(data).__name__}")
        data = bytes(data)
        r = self._literals.get(data)
        if r is not None:
            return r
        # Grammars repeat literals (keys, enum values, punctuation) and their tails, so
        # look each link up first. A new link is made here directly unless it repeats
        # the byte after it (`aa` is a{2}: _concat2's merge): a chain built from the end
        # has only byte sets and their repeats at its heads. Every schema's keys come
        # through here, in its time to first mask: node storage is appended inline.
        ids, kind, args, height, has_bool = self._ids, self._kind, self._args, self._height, self._has_bool
        ids_get = ids.get
        max_count = self._max_count
        byte_nodes = self._byte_nodes
        max_nodes = self.limits.max_regex_nodes
        concat, repeat = _CONCAT, _REPEAT
        r = 1
        for b in reversed(data):
            h = byte_nodes[b]
            if h < 0:
                h = byte_nodes[b] = self._bytes(1 << b)
            if r == 1:
                r = h
                continue
            key = (concat, h, r)
            i = ids_get(key)
            if i is None:
                head = args[r][0] if kind[r] == concat else r
                if head == h or (kind[head] == repeat and args[head][0] == h):
                    i = self._concat2(h, r)
                else:
                    # _new's work for a byte head (height 0, no & or ~) and a tail r.
                    i = len(kind)
                    if i >= max_nodes:
                        raise LimitExceeded("max_regex_nodes", max_nodes, "too many distinct regular expressions")
                    kind.append(concat)
                    args.append((h, r))
                    self._nullable.append(False)
                    height.append(height[r] or 1)
                    has_bool.append(has_bool[r])
                    max_count.append(max_count[r])
                    ids[key] = i
            r = i
        if len(self._literals) < self.limits.max_regex_nodes:
            self._literals[data] = r
        return r

    def char_class(self, ranges: Iterable[tuple[int, int]], negate: bool = False) -> int:
        """Code point ranges as UTF-8: an alternation of byte-range sequences."""
        norm = _normalize_ranges(ranges)
        if negate:
            norm = _negate_ranges(norm)
        key = tuple(norm)
        r = self._class_cache.get(key)
        if r is not None:
            return r
        # Sequences sharing a tail become one sequence with a merged first byte
        # set, built from the end so tails are shared nodes.
        branches = []
        for seq in utf8_sequences(norm):
            tail = 1
            for lo, hi in reversed(seq):
                tail = self._concat2(self._bytes(_range_mask(lo, hi)), tail)
            branches.append(tail)
        r = self.alt(*branches)
        self._class_cache[key] = r
        if self._kind[r] == _OR:
            self._class_of.setdefault(r, key)
        return r

    def concat(self, *exprs: int) -> int:
        r = 1
        for e in reversed(exprs):
            r = self._concat2(e, r)
        return r

    def _concat2(self, a: int, b: int) -> int:
        if a == 0 or b == 0:
            return 0
        if a == 1:
            return b
        if b == 1:
            return a
        kind = self._kind
        if kind[a] == _CONCAT:
            # Keep concatenations right-nested: head is never a concatenation.
            items = []
            while kind[a] == _CONCAT:
                h, a = self._args[a]
                items.append(h)
            items.append(a)
            r = b
            for x in reversed(items):
                r = self._concat2(x, r)
            return r
        key = (_CONCAT, a, b)
        i = self._ids.get(key)
        if i is None:
            # R{a,b}·R{c,d} = R{a+c,b+d}: keeps `a?a?a?...` and `xx*` one node, and
            # spares the derivative of `a?`*n from being an n-way alternation.
            b_head, b_tail = self._args[b] if kind[b] == _CONCAT else (b, 1)
            ra, la, ha = self._repeat_view(a)
            rb, lb, hb = self._repeat_view(b_head)
            if ra == rb:
                merged = self.repeat(ra, la + lb, None if ha is None or hb is None else ha + hb)
                return self._concat2(merged, b_tail)
            i = self._new(
                _CONCAT,
                key,
                (a, b),
                self._nullable[a] and self._nullable[b],
                max(self._height[a] + 1, self._height[b]),
                self._has_bool[a] or self._has_bool[b],
            )
        return i

    def _repeat_view(self, x: int) -> tuple[int, int, int | None]:
        """x as R{lo,hi}: a repeat node, R|ε as R{0,1}, anything else as x{1,1}."""
        k = self._kind[x]
        if k == _REPEAT:
            return self._args[x]
        if k == _OR and self._args[x][0] == 1:
            rest = self._args[x][1:]
            r = rest[0] if len(rest) == 1 else self._ids.get((_OR, rest))
            if r is not None:
                return r, 0, 1
        return x, 1, 1

    def alt(self, *exprs: int) -> int:
        kind, args = self._kind, self._args
        items: set[int] = set()
        for e in exprs:
            if kind[e] == _OR:
                items.update(args[e])
            else:
                items.add(e)
        items.discard(0)
        if len(items) <= 1:
            return items.pop() if items else 0
        if self.ALL in items:
            return self.ALL
        # Byte sets with the same continuation merge into one byte set.
        groups: dict[int, int] = {}
        n_grouped = 0
        rest = []
        for e in items:
            k = kind[e]
            if k == _BYTES:
                groups[1] = groups.get(1, 0) | args[e][0]
                n_grouped += 1
            elif k == _CONCAT and kind[args[e][0]] == _BYTES:
                h, t = args[e]
                groups[t] = groups.get(t, 0) | args[h][0]
                n_grouped += 1
            else:
                rest.append(e)
        if n_grouped > len(groups):
            for t, m in groups.items():
                rest.append(self._concat2(self._bytes(m), t))
            items = set(rest)
            if len(items) == 1:
                return items.pop()
            if self.ALL in items:
                return self.ALL
        nullable = self._nullable
        if 1 in items and any(nullable[x] for x in items if x != 1):
            items.discard(1)
        for x in items:
            if kind[x] == _NOT and args[x][0] in items:
                return self.ALL
        if len(items) == 1:
            return items.pop()
        members = tuple(sorted(items))
        key = (_OR, members)
        i = self._ids.get(key)
        if i is None:
            i = self._new(
                _OR,
                key,
                members,
                any(nullable[x] for x in members),
                1 + max(self._height[x] for x in members),
                any(self._has_bool[x] for x in members),
            )
        return i

    def and_(self, *exprs: int) -> int:
        kind, args = self._kind, self._args
        items: set[int] = set()
        for e in exprs:
            if kind[e] == _AND:
                items.update(args[e])
            else:
                items.add(e)
        if 0 in items:
            return 0
        items.discard(self.ALL)
        if not items:
            return self.ALL
        nullable = self._nullable
        if 1 in items:
            return 1 if all(nullable[x] for x in items) else 0
        excluded = self._excluded_words(items)
        if excluded is not None:
            kept, words = excluded
            return self._exclude(self.and_(*kept), words)
        byte_sets = [x for x in items if kind[x] == _BYTES]
        if len(byte_sets) > 1:
            m = _FULL
            for x in byte_sets:
                m &= args[x][0]
                items.discard(x)
            if m == 0:
                return 0
            items.add(self._bytes(m))
        for x in items:
            if kind[x] == _NOT and args[x][0] in items:
                return 0
        if len(items) == 1:
            return items.pop()
        members = tuple(sorted(items))
        key = (_AND, members)
        i = self._ids.get(key)
        if i is None:
            i = self._new(
                _AND,
                key,
                members,
                all(nullable[x] for x in members),
                1 + max(self._height[x] for x in members),
                True,
            )
        return i

    def _excluded_words(self, items: set[int]) -> tuple[list[int], set[bytes]] | None:
        """The members of an intersection that are not finite exclusions, and the words
        those exclude; None when there are no such exclusions or nothing else to
        exclude them from (`~W` alone stays a complement)."""
        kind, args = self._kind, self._args
        kept: list[int] = []
        words: set[bytes] | None = None
        for x in items:
            k = kind[x]
            if k == _EXCL:
                kept.append(args[x][0])
                words = set(args[x][1]) if words is None else words.union(args[x][1])
                continue
            if k == _NOT:
                w = self._finite_words(args[x][0])
                if w is not None:
                    words = set(w) if words is None else words.union(w)
                    continue
            kept.append(x)
        if words is None or not kept:
            return None
        return kept, words

    def _exclude(self, expr: int, words: Iterable[bytes]) -> int:
        """`expr & ~(w1|w2|...)` as one node: a JSON object's keys other than its listed
        ones. Its derivative by a byte is the exclusion of the words that go on with
        that byte from the body's derivative, one new node, where `&` and `~` of an
        alternation built four (and the alternation's own classes) in Python."""
        return self._exclude_sorted(expr, tuple(sorted(set(words))))

    def _exclude_sorted(self, expr: int, words: tuple[bytes, ...]) -> int:
        """`_exclude` for words already sorted and distinct (a derivative's are)."""
        if expr == 0:
            return 0
        if self._kind[expr] == _EXCL:
            inner, more = self._args[expr]
            return self._exclude(inner, words + more)
        if not words:
            return expr
        own = self._finite_words(expr)
        if own is not None or expr == self.ALL:
            # A finite body leaves a finite set, and ~∅ leaves ~W: plain expressions say
            # either, so an exclusion node is never the second spelling of one.
            if own is None:
                return self.not_(self.alt(*map(self.literal, words)))
            return self.alt(*map(self.literal, sorted(set(own).difference(words))))
        key = (_EXCL, expr, words)
        i = self._ids.get(key)
        if i is None:
            i = self._new(
                _EXCL,
                key,
                (expr, words),
                self._nullable[expr] and words[0] != b"",
                self._height[expr] + 1,
                True,
            )
        return i

    def _finite_words(self, expr: int) -> tuple[bytes, ...] | None:
        """Every string `expr` matches, sorted, when they are few and short (at most
        _EXCL_MAX_WORDS of at most _EXCL_MAX_LENGTH bytes, built from byte sets,
        sequences, alternations and bounded repeats); None otherwise."""
        memo = self._words_of
        if expr in memo:
            return memo[expr]
        kind, args = self._kind, self._args
        k = kind[expr]
        acc: set[bytes] | None
        longest = self.max_length(expr)
        if k in (_AND, _NOT, _EXCL) or longest is None or longest > _EXCL_MAX_LENGTH:
            acc = None
        elif k == _NOTHING:
            acc = set()
        elif k == _EPS:
            acc = {b""}
        elif k == _BYTES:
            acc = {bytes((c,)) for c in _bits(args[expr][0])}
        elif k == _CONCAT:
            # A literal is a long chain of single bytes: spell it out as one word before
            # forming any products.
            prefix = bytearray()
            words: set[bytes] | None = None
            x: int | None = expr
            failed = False
            while x is not None:
                h, x = args[x] if kind[x] == _CONCAT else (x, None)
                part = self._finite_words(h)
                if part is not None and words is None and len(part) == 1:
                    prefix += part[0]
                    continue
                words = self._product({bytes(prefix)} if words is None else words, part)
                if words is None:
                    failed = True
                    break
            acc = None if failed else {bytes(prefix)} if words is None else words
        elif k == _OR:
            acc = set()
            for m in args[expr]:
                w = self._finite_words(m)
                if w is None or len(acc) + len(w) > _EXCL_MAX_WORDS:
                    acc = None
                    break
                acc.update(w)
        elif k == _REPEAT:
            inner, lo, hi = args[expr]
            once = None if hi is None else self._finite_words(inner)
            acc = set() if once is not None else None
            run: set[bytes] = {b""}
            for n in range(hi + 1 if acc is not None else 0):
                if n >= lo:
                    acc.update(run)
                    if len(acc) > _EXCL_MAX_WORDS:
                        acc = None
                        break
                if n == hi:
                    break
                following = self._product(run, once)
                if following is None:
                    acc = None
                    break
                if following == run and n >= lo:
                    break  # ε in the body: every later round is this one again
                run = following
        else:
            acc = None
        r = None if acc is None else tuple(sorted(acc))
        memo[expr] = r
        return r

    @staticmethod
    def _product(left: set[bytes], right: tuple[bytes, ...] | None) -> set[bytes] | None:
        if right is None or len(left) * len(right) > _EXCL_MAX_WORDS:
            return None
        return {a + b for a in left for b in right}

    def not_(self, expr: int) -> int:
        """Complement with respect to all byte strings."""
        if self._kind[expr] == _NOT:
            return self._args[expr][0]
        key = (_NOT, expr)
        i = self._ids.get(key)
        if i is None:
            i = self._new(_NOT, key, (expr,), not self._nullable[expr], self._height[expr] + 1, True)
        return i

    def star(self, expr: int) -> int:
        return self.repeat(expr, 0, None)

    def repeat(self, expr: int, lo: int, hi: int | None) -> int:
        """`expr{lo,hi}`; hi=None means unbounded."""
        if lo < 0 or (hi is not None and hi < lo):
            raise GrammarError(f"invalid repetition bounds {{{lo},{'' if hi is None else hi}}}")
        if hi == 0 or expr == 1:
            return 1
        if expr == 0:
            return 1 if lo == 0 else 0
        if self._nullable[expr]:
            # Missing repetitions can be ε, so the lower bound says nothing, and
            # an ε branch of the body says nothing either: (R|ε){0,n} = R{0,n}.
            lo = 0
            if self._kind[expr] == _OR and 1 in self._args[expr]:
                expr = self.alt(*[m for m in self._args[expr] if m != 1])
        if hi == 1:
            # R? is kept as R|ε: one spelling for both, and no repeat node.
            return expr if lo == 1 or self._nullable[expr] else self.alt(expr, 1)
        if expr == self.ALL:
            return self.ALL
        kind = self._kind[expr]
        if kind == _REPEAT:
            inner, lo2, hi2 = self._args[expr]
            if lo2 == 0 and lo == 0:
                # R{0,a}{0,b} = R{0,a·b}: a count up to a·b splits into b chunks of at most a.
                return self.repeat(inner, 0, None if hi is None or hi2 is None else hi * hi2)
        elif kind == _BYTES and self._args[expr][0] == _FULL and lo == 0 and hi is None:
            return self.ALL
        key = (_REPEAT, expr, lo, hi)
        i = self._ids.get(key)
        if i is None:
            i = self._new(_REPEAT, key, (expr, lo, hi), lo == 0, self._height[expr] + 1, self._has_bool[expr])
        return i

    # Properties ------------------------------------------------------------------------
    def nullable(self, expr: int) -> bool:
        return self._nullable[expr]

    def emptiness_is_trivial(self, expr: int) -> bool:
        """Whether is_empty answers at once: without & and ~ only ∅ is empty."""
        return not self._has_bool[expr]

    def max_length(self, expr: int) -> int | None:
        """An over-estimate of the longest match in bytes; None when unbounded."""
        memo = self._maxlen
        if expr in memo:
            return memo[expr]
        k = self._kind[expr]
        a = self._args[expr]
        r: int | None
        if k <= _EPS:
            r = 0
        elif k == _BYTES:
            r = 1
        elif k == _CONCAT:
            # Walk the chain: long literals are long chains.
            r = 0
            x = expr
            while r is not None:
                if self._kind[x] != _CONCAT:
                    v = self.max_length(x)
                    r = None if v is None else r + v
                    break
                h, x = self._args[x]
                v = self.max_length(h)
                r = None if v is None else r + v
        elif k == _OR:
            r = 0
            for m in a:
                v = self.max_length(m)
                if v is None:
                    r = None
                    break
                r = max(r, v)
        elif k == _AND:
            bounded = [v for v in (self.max_length(m) for m in a) if v is not None]
            r = min(bounded) if bounded else None
        elif k == _NOT:
            r = None
        elif k == _EXCL:
            r = self.max_length(a[0])
        else:
            inner, _lo, hi = a
            v = self.max_length(inner)
            if v == 0:
                r = 0
            elif v is None or hi is None:
                r = None
            else:
                r = v * hi
        memo[expr] = r
        return r

    def has_count_above(self, pairs, depth: int) -> bool:
        """Whether an expression of the (lexeme, expression) pairs repeats something a
        fixed number of times above `depth` (what `clamped` would change)."""
        counts = self._max_count
        for _, e in pairs:
            if counts[e] > depth:
                return True
        return False

    def clamped(self, expr: int, depth: int) -> int:
        """`expr` with every repeat count above `depth` clamped: an upper bound made
        unbounded, a lower bound made depth+1. It matches the same strings of at most
        `depth` bytes, as each repetition of a repeat takes a byte at least. Without & and
        ~ it also has the same prefixes of at most `depth` bytes: every node then matches
        something, so a prefix of j <= depth repetitions goes on to a match under either
        bound. With & or ~ that fails (`a{0,300} & a{400,}` is empty, its clamped
        form is not), so such expressions come back as they are.

        A mask walk reads tokens of at most `depth` bytes: two lexer states whose
        expressions clamp alike allow the same tokens inside the lexeme and end it at the
        same trie nodes, so the count states of a long `maxLength` string share one walk."""
        if self._max_count[expr] <= depth or self._has_bool[expr]:
            return expr
        memo = self._clamped.get(depth)
        if memo is None:
            memo = self._clamped[depth] = {}
        r = memo.get(expr)
        if r is not None:
            return r
        k, a = self._kind[expr], self._args[expr]
        if k == _CONCAT:
            # Iterative along the chain: long literals are long chains.
            heads = []
            x = expr
            while self._kind[x] == _CONCAT:
                h, x = self._args[x]
                heads.append(self.clamped(h, depth))
            r = self.clamped(x, depth)
            for h in reversed(heads):
                r = self._concat2(h, r)
        elif k == _OR:
            r = self.alt(*[self.clamped(m, depth) for m in a])
        elif k == _REPEAT:
            inner, lo, hi = a
            r = self.repeat(self.clamped(inner, depth), min(lo, depth + 1),
                            None if hi is None or hi > depth else hi)
        else:
            r = expr
        memo[expr] = r
        return r

    # Byte classes ----------------------------------------------------------------------
    def _masks(self, expr: int) -> tuple[int, ...]:
        """Byte sets that can decide the first byte of a match, sorted: a tuple of ints
        is one shared, compact key that the garbage collector stops tracking."""
        r = self._first_masks.get(expr)
        if r is not None:
            return r
        k = self._kind[expr]
        a = self._args[expr]
        if k <= _EPS:
            r = ()
        elif k == _BYTES:
            r = a
        elif k == _CONCAT:
            acc: set = set()
            x = expr
            while self._kind[x] == _CONCAT:
                h, x = self._args[x]
                acc.update(self._masks(h))
                if not self._nullable[h]:
                    break
            else:
                acc.update(self._masks(x))
            r = tuple(sorted(acc))
        elif k in (_OR, _AND):
            acc = set()
            for m in a:
                acc.update(self._masks(m))
            r = tuple(sorted(acc))
        elif k == _EXCL:
            # Each byte a word starts with is a class of its own: its derivative keeps
            # those words, which no other byte does.
            acc = set(self._masks(a[0]))
            acc.update(1 << w[0] for w in a[1] if w)
            r = tuple(sorted(acc))
        else:  # _NOT, _REPEAT
            r = self._masks(a[0])
        r = self._masks_interned.setdefault(r, r)
        self._first_masks[expr] = r
        return r

    def byte_classes(self, expr: int) -> bytes:
        """256 bytes mapping each byte to the smallest byte of its class: bytes in one
        class have the same derivative."""
        cm = self._classmap.get(expr)
        if cm is not None:
            return cm
        shadow = self.shadow(expr)
        if shadow is not None:
            # Outside the guard the derivatives are the shadow's, so its classes hold
            # there, and each guard byte (a remaining key's first byte) is its own class:
            # no union of first byte sets to refine for every new key state.
            guard, plain = shadow
            key = (self.byte_classes(plain), guard)
            cm = self._split_maps.get(key)
            if cm is None:
                cm = self._split_maps[key] = _split_class_map(key[0], guard)
            self._classmap[expr] = cm
            return cm
        masks = self._masks(expr)
        cm = self._classmap_by_masks.get(masks)
        if cm is None:
            cm = _class_map(refine_byte_sets(masks))
            self._classmap_by_masks[masks] = cm
        self._classmap[expr] = cm
        return cm

    def byte_head(self, expr: int) -> tuple[int, int] | None:
        """(byte set as a bitmask, rest) when every match of `expr` is one byte from the
        set followed by a match of `rest` (a byte set, or a sequence headed by one: the
        middle of a literal or a keyword). Then the derivative by a byte is `rest` or ∅
        by set membership alone. None for other expressions."""
        k = self._kind[expr]
        if k == _BYTES:
            return self._args[expr][0], 1
        if k == _CONCAT:
            h, t = self._args[expr]
            if self._kind[h] == _BYTES:
                return self._args[h][0], t
        return None

    def first_bytes(self, expr: int) -> int:
        """A bitmask (bit b for byte b) of the bytes whose derivative may be non-empty:
        a superset, so a byte outside it surely kills the expression."""
        r = self._first_bytes.get(expr)
        if r is not None:
            return r
        k = self._kind[expr]
        a = self._args[expr]
        if k <= _EPS:
            r = 0
        elif k == _BYTES:
            r = a[0]
        elif k == _CONCAT:
            r = 0
            x = expr
            while self._kind[x] == _CONCAT:
                h, x = self._args[x]
                r |= self.first_bytes(h)
                if not self._nullable[h]:
                    break
            else:
                r |= self.first_bytes(x)
        elif k == _OR:
            r = 0
            for m in a:
                r |= self.first_bytes(m)
        elif k == _AND:
            # d(A & B) = d(A) & d(B) is ∅ where either is: the string body of a key other
            # than the listed ones starts with what the body starts with, not with every
            # byte as the ~(listed keys) part alone would.
            r = _FULL
            for m in a:
                r &= self.first_bytes(m)
        elif k == _NOT:
            r = _FULL  # d(~R) = ~d(R) is non-empty for almost every byte
        else:  # _REPEAT, and _EXCL whose words only take strings away
            r = self.first_bytes(a[0])
        self._first_bytes[expr] = r
        return r

    def combined_classes(self, maps: frozenset) -> tuple[np.ndarray, tuple[int, ...]]:
        """The common refinement of several `byte_classes` maps: (class id per byte,
        the smallest byte of each class), cached because lexer states made of the same
        regex shapes share their maps."""
        hit = self._combined.get(maps)
        if hit is None:
            combined = np.zeros(256, dtype=np.int64)
            for cm in maps:
                arr = np.frombuffer(cm, dtype=np.uint8).astype(np.int64)
                # Renumber after each refinement so the combined ids stay small.
                _, combined = np.unique(combined * 256 + arr, return_inverse=True)
            _, first = np.unique(combined, return_index=True)
            hit = (combined, tuple(first.tolist()))
            self._combined[maps] = hit
        return hit

    def _class_reps(self, expr: int) -> list[int]:
        cm = self.byte_classes(expr)
        return sorted(set(cm))

    # Derivatives -----------------------------------------------------------------------
    def shadow(self, expr: int) -> tuple[int, int] | None:
        """(guard, shadow): an expression without the excluded part of `expr`'s leading
        intersection, and a byte set outside which both have the same derivative; None
        when there is no such part. `(C* & ~K)·"` (a JSON key other than the listed ones
        K, mid-key) shadows `C*·"`, the plain string, at every byte no remaining key
        starts with: a new key state then shares most of its derivatives with the
        string state, which the lexer computed long before."""
        if not self._has_bool[expr]:
            return None  # nothing excluded: no & or ~ anywhere in it
        got = self._shadows.get(expr, -1)
        if got != -1:
            return got
        got = None
        kind, args = self._kind, self._args
        k = kind[expr]
        if k == _CONCAT and kind[args[expr][0]] in (_AND, _EXCL):
            head, tail = args[expr]
            inner = self.shadow(head)
            # d(H·T) = d(H)·T | d(T) if H is nullable: the shadow of the head must agree
            # with the head on nullability, which `shadow` of an intersection ensures.
            if inner is not None:
                got = (inner[0], self._concat2(inner[1], tail))
        elif k == _EXCL:
            inner, words = args[expr]
            # A byte no word starts with leaves no word to exclude. Where ε is one of
            # the words the body alone would accept more, so there is no shadow.
            if self._nullable[inner] == self._nullable[expr]:
                guard = 0
                for w in words:
                    if w:
                        guard |= 1 << w[0]
                got = (guard, inner)
        elif k == _AND:
            guard = 0
            kept = []
            for m in args[expr]:
                if kind[m] == _NOT:
                    # d(~R, b) = ~∅, every string, where R cannot start with b.
                    guard |= self.first_bytes(args[m][0])
                else:
                    kept.append(m)
            if len(kept) < len(args[expr]):
                rest = self.and_(*kept)
                # ~R is nullable unless R holds ε: dropping a non-nullable ~R (a typed
                # key equal to a listed one) would make the shadow accept where `expr` does not.
                if self._nullable[rest] == self._nullable[expr]:
                    got = (guard, rest)
        self._shadows[expr] = got
        return got

    def derivative(self, expr: int, byte: int) -> int:
        key = (expr << 8) | byte
        r = self._deriv.get(key)
        if r is not None:
            return r
        if self._has_bool[expr]:
            sh = self._shadows.get(expr, -1)
            if sh == -1:
                sh = self.shadow(expr)
            if sh is not None and not (sh[0] >> byte) & 1:
                r = self._deriv[key] = self.derivative(sh[1], byte)
                return r
        if self._kind[expr] == _CONCAT:
            h, t = self._args[expr]
            if self._kind[h] == _BYTES:
                # The middle of a literal (or of any byte-headed sequence): the answer is
                # the tail or ∅, without working out the byte classes first.
                r = t if (self._args[h][0] >> byte) & 1 else 0
                self._deriv[key] = r
                return r
        rep = self.byte_classes(expr)[byte]
        if rep != byte:
            rkey = (expr << 8) | rep
            r = self._deriv.get(rkey)
            if r is None:
                r = self._derive(expr, rep)
                self._deriv[rkey] = r
        else:
            r = self._derive(expr, byte)
        self._deriv[key] = r
        return r

    def live_derivative(self, expr: int, byte: int) -> int:
        """The derivative, or NOTHING when it denotes the empty language: the question a
        lexer asks per live lexeme and byte, with the memoized answer found inline."""
        d = self._deriv.get((expr << 8) | byte)
        if d is None:
            d = self.derivative(expr, byte)
        if d and self._has_bool[d] and self.is_empty(d):
            return 0
        return d

    def _derive(self, expr: int, b: int) -> int:
        k = self._kind[expr]
        a = self._args[expr]
        if k <= _EPS:
            return 0
        if k == _BYTES:
            return 1 if (a[0] >> b) & 1 else 0
        if k == _CONCAT:
            # d(R·S) = d(R)·S | d(S) when R is nullable; walk the chain instead of recursing.
            parts = []
            x = expr
            while self._kind[x] == _CONCAT:
                h, t = self._args[x]
                dh = self.derivative(h, b)
                if dh != 0:
                    parts.append(self._concat2(dh, t))
                if not self._nullable[h]:
                    break
                x = t
            else:
                parts.append(self.derivative(x, b))
            return self.alt(*parts)
        if k == _OR:
            # Wide alternations (an object's listed keys, enum values) mostly have members
            # that cannot start with b; their derivative is ∅ for sure, so skip them.
            firsts = self._or_firsts.get(expr)
            if firsts is None:
                first_bytes = self.first_bytes
                firsts = tuple(first_bytes(m) for m in a)
                self._or_firsts[expr] = firsts
            bit = 1 << b
            derivative = self.derivative
            return self.alt(*[derivative(m, b) for m, f in zip(a, firsts) if f & bit])
        if k == _AND:
            if not (self.first_bytes(expr) >> b) & 1:
                return 0
            ds = []
            for m in a:
                d = self.derivative(m, b)
                if d == 0:
                    return 0
                ds.append(d)
            return self.and_(*ds)
        if k == _NOT:
            if not (self.first_bytes(a[0]) >> b) & 1:
                # d(R) = ∅, so d(~R) is every string: a byte no excluded key starts with
                # (a letter past all of them, a UTF-8 lead byte) needs no derivative of R.
                return self.ALL
            return self.not_(self.derivative(a[0], b))
        if k == _EXCL:
            # b⁻¹(R \ W) = b⁻¹R \ b⁻¹W, and the words are sorted, so those that go on
            # with b stay sorted once it is cut off.
            d = self.derivative(a[0], b)
            if d == 0:
                return 0
            return self._exclude_sorted(d, tuple([w[1:] for w in a[1] if w and w[0] == b]))
        inner, lo, hi = a
        d = self.derivative(inner, b)
        if d == 0:
            return 0
        return self._concat2(d, self.repeat(inner, max(lo - 1, 0), None if hi is None else hi - 1))

    # Emptiness -------------------------------------------------------------------------
    def is_empty(self, expr: int) -> bool:
        """Is the language empty? Trivial without & and ~; otherwise explores the
        derivative graph (raises LimitExceeded past limits.max_lexer_states)."""
        return self._is_empty(expr, self.limits.max_lexer_states)

    def _is_empty(self, expr: int, bound: int) -> bool:
        if expr == 0:
            return True
        if not self._has_bool[expr]:
            return False
        known = self._empty.get(expr)
        if known is not None:
            return known
        nullable, has_bool, empty = self._nullable, self._has_bool, self._empty
        if nullable[expr]:
            empty[expr] = False
            return False
        kind = self._kind[expr]
        if kind in (_CONCAT, _OR, _REPEAT):
            # Only & and ~ need the derivative graph. Around them the language is empty
            # exactly when a factor of a sequence, every branch of an alternation, or a
            # repeat's body (lower bound > 0 here, as expr is not nullable) is, so decide
            # the smaller parts: a lexer's `"(C* & ~E)"` then costs one nullable check
            # instead of a derivative per byte class of the whole sequence.
            args = self._args
            if kind == _CONCAT:
                r = False
                x = expr
                # Iterate along the right-nested chain: it can be far longer than the
                # expression's height, which bounds the recursion through the heads.
                while kind == _CONCAT:
                    h, x = args[x]
                    if self._is_empty(h, bound):
                        r = True
                        break
                    if not has_bool[x]:
                        break
                    kind = self._kind[x]
                else:
                    r = self._is_empty(x, bound)
            elif kind == _OR:
                r = all(self._is_empty(m, bound) for m in args[expr])
            else:
                r = self._is_empty(args[expr][0], bound)
            empty[expr] = r
            return r
        if kind == _EXCL:
            inner = self._args[expr][0]
            if not has_bool[inner] and self.max_length(inner) is None:
                # Without & and ~ an unbounded length means infinitely many strings,
                # and finitely many words cannot take them all.
                empty[expr] = False
                return False
        seen = {expr}
        stack = [expr]
        while stack:
            x = stack.pop()
            if nullable[x]:
                empty[expr] = False
                return False
            for rep in self._class_reps(x):
                y = self.derivative(x, rep)
                if y == 0 or y in seen:
                    continue
                k = empty.get(y)
                if k is True:
                    continue
                if k is False or not has_bool[y] or nullable[y]:
                    empty[expr] = False
                    return False
                seen.add(y)
                if len(seen) > bound:
                    raise LimitExceeded(
                        "max_lexer_states", bound, f"deciding whether {self.to_str(expr, 200)} is empty"
                    )
                stack.append(y)
        # Every state reachable from expr is non-accepting: all of them are empty.
        for x in seen:
            empty[x] = True
        return True

    def next_bytes(self, expr: int) -> np.ndarray:
        """bool[256]: the bytes whose derivative is non-empty (read-only array)."""
        r = self._next.get(expr)
        if r is not None:
            return r
        out = np.zeros(256, dtype=bool)
        cm = np.frombuffer(self.byte_classes(expr), dtype=np.uint8)
        for rep in self._class_reps(expr):
            d = self.derivative(expr, rep)
            if d != 0 and not self.is_empty(d):
                out |= cm == rep
        out.flags.writeable = False
        self._next[expr] = out
        return out

    # Containment -----------------------------------------------------------------------
    def _surely_nonempty(self, expr: int, bound: int = _SUBSET_STATES) -> bool:
        try:
            return not self._is_empty(expr, bound)
        except LimitExceeded:
            return False

    def _subset(self, y: int, x: int) -> bool:
        """Y ⊆ X, or False when the check runs out of budget."""
        if y == x or y == 0:
            return True
        key = (y, x)
        r = self._subset_cache.get(key)
        if r is not None:
            return r
        ky, kx = self._kind[y], self._kind[x]
        if ky == _BYTES and kx == _BYTES:
            r = (self._args[y][0] & ~self._args[x][0]) == 0
        elif kx == _OR and y in self._args[x]:
            r = True
        else:
            try:
                r = self._is_empty(self.and_(y, self.not_(x)), _SUBSET_STATES)
            except LimitExceeded:
                r = False
        self._subset_cache[key] = r
        return r

    def prefix_contains(self, s: int, l: int) -> bool:
        """S ⊆ P(L) where P(L) = { w | ∃q. wq ∈ L } (seeds/what_makes_it_fast.md,
        "Checking regex containment"). An under-approximation: False when unsure."""
        key = (s, l)
        r = self._prefix_cache.get(key)
        if r is None:
            r = self._prefix_contains(s, l)
            self._prefix_cache[key] = r
        return r

    def _prefix_contains(self, s: int, l: int) -> bool:
        kind, args = self._kind, self._args
        if s == 0:
            return True
        if l == 0:
            return False
        if kind[l] == _OR:
            # P(A|B) = P(A) ∪ P(B); containment in one branch is enough.
            if any(self._prefix_contains(s, x) for x in args[l]):
                return True
        if kind[s] == _OR:
            return all(self._prefix_contains(x, l) for x in args[s])
        if s == 1:
            return self._surely_nonempty(l)
        # S = Y{m',n'} (a plain Y is Y{1,1}).
        if kind[s] == _REPEAT:
            y, _, n_s = args[s]
        else:
            y, n_s = s, 1
        # L = H·T with T non-empty, so P(H) ⊆ P(L).
        if kind[l] == _CONCAT:
            head, tail = args[l]
            if not self._surely_nonempty(tail):
                return False
            # A pattern string that is partly matched (`(rest of a match)·C* | C*·match`,
            # then the closing quote) has an alternation or a sequence for H: asked of
            # H whole, that would need the slice's words to be each one H-word. P(H) is
            # the union of its branches' (or its own head's), and one of them may hold
            # them all.
            if kind[head] in (_OR, _CONCAT) and self._prefix_contains(s, head):
                return True
        else:
            head = l
        # The longest excluded string, -1 when nothing is excluded.
        longest_excluded = -1
        if kind[head] == _EXCL:
            head, words = args[head]
            longest_excluded = max(len(w) for w in words)
        if kind[head] == _AND:
            pos = []
            for m in args[head]:
                if kind[m] != _NOT:
                    pos.append(m)
                    continue
                v = self.max_length(args[m][0])
                if v is None:
                    return False
                longest_excluded = max(longest_excluded, v)
            if len(pos) != 1:
                return False
            head = pos[0]
        if kind[head] == _REPEAT:
            x, _, n_l = args[head]
        else:
            x, n_l = head, 1
        if longest_excluded >= 0:
            # P(X{m,n} & ~E) = P(X{m,n}) when n > max|E| and X has a non-empty word.
            if n_l is not None and n_l <= longest_excluded:
                return False
            try:
                if not self.next_bytes(x).any():
                    return False
            except LimitExceeded:
                return False
        if not self._surely_nonempty(x):
            return False
        if n_l is not None and (n_s is None or n_s > n_l):
            return False
        return self._subset(y, x)

    # Parsing ---------------------------------------------------------------------------
    def parse(self, pattern: str, flags: str = "", *, extended: bool = False) -> int:
        """Compile a pattern in Python `re` syntax (without backreferences,
        lookaround, conditionals or anchors); `extended` adds `&` and `~`."""
        key = (pattern, flags, extended)
        r = self._parsed.get(key)
        if r is None:
            r = _Parser(self, pattern, flags, extended).parse()
            self._parsed[key] = r
        return r

    def parse_excluding(self, quote: str, body: str, words: Iterable[bytes]) -> str:
        """The extended pattern `Q(?:(?:body)&~(?:w1|w2|...))Q`, Q being the character
        `quote` and each word escaped: strings of `body` other than `words`, between
        quotes (a JSON object's keys other than its listed ones). Its expression is
        built from the parts and remembered as that pattern's parse, so `parse` of the
        text is a lookup: parsing it back cost a new schema about a tenth of its time
        to first mask. The parts are combined as the parser combines them, into the
        very same (hash-consed) expression. A ValueError for what has no such pattern:
        a quote that does not stand for itself, a word that is not UTF-8, or no words
        (`(?:)` would be the empty string)."""
        words = list(words)
        if not words:
            raise ValueError("parse_excluding needs at least one word")
        for w in words:
            try:
                w.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"word {w!r} is not UTF-8: no pattern spells it") from None
        quoted = self.literal(quote.encode("utf-8"))
        if len(quote) != 1 or self.parse(quote, extended=True) != quoted:
            raise ValueError(f"quote {quote!r} is not one character that stands for itself in a pattern")
        pattern = quote + "(?:(?:" + body + ")&~(?:" + "|".join(map(regex_escape_bytes, words)) + "))" + quote
        key = (pattern, "", True)
        if key not in self._parsed:
            # What the parser makes of it: the group `(?:body)` (a group cache hit after
            # the first schema) less the words, which `and_` would find in `~(?:w1|...)`,
            # here known without building their alternation; then the sequence quote,
            # group, quote.
            inside = self._exclude(self.parse("(?:" + body + ")", extended=True), words)
            self._parsed[key] = self.concat(quoted, self.alt(inside), quoted)
        return pattern

    # Printing --------------------------------------------------------------------------
    def to_str(self, expr: int, max_chars: int = 2000) -> str:
        """A readable regex-like rendering (bytes >= 0x80 as \\xNN), cut at max_chars."""
        out: list[str] = []
        budget = [max_chars]

        class _Full(Exception):
            pass

        def emit(s: str) -> None:
            out.append(s)
            budget[0] -= len(s)
            if budget[0] < 0:
                raise _Full

        def lit_run(a: tuple) -> bool:
            inner, lo, hi = a
            m = self._args[inner][0] if self._kind[inner] == _BYTES else 0
            return lo == hi and lo <= 3 and m & (m - 1) == 0 and m != 0

        # Precedence: 0 alternation, 1 intersection, 2 concatenation, 3 postfix/prefix, 4 atom.
        def go(e: int, prec: float) -> None:
            k = self._kind[e]
            a = self._args[e]
            if k == _NOTHING:
                emit("∅")
            elif k == _EPS:
                emit("ε" if prec < 4 else "()")
            elif k == _BYTES:
                emit(_render_byte_set(a[0]))
            elif e in self._class_of:
                emit(_render_class(self._class_of[e]))
            elif k == _CONCAT:
                wrap = prec > 2
                emit("(" if wrap else "")
                # 2.5: concatenation items, where a spelled-out run needs no parentheses
                go(a[0], 2.5)
                x = a[1]
                while self._kind[x] == _CONCAT:
                    go(self._args[x][0], 2.5)
                    x = self._args[x][1]
                go(x, 2.5)
                emit(")" if wrap else "")
            elif k == _OR and a[0] == 1:
                # R|ε, printed as the optional it came from
                wrap = prec > 3
                emit("(" if wrap else "")
                rest = self._repeat_view(e)[0]
                if len(a) == 2:
                    go(a[1], 4)
                elif rest in self._class_of:
                    emit(_render_class(self._class_of[rest]))
                else:
                    emit("(")
                    for j, m in enumerate(a[1:]):
                        if j:
                            emit("|")
                        go(m, 1)
                    emit(")")
                emit("?")
                emit(")" if wrap else "")
            elif k in (_OR, _AND):
                my = 0 if k == _OR else 1
                wrap = prec > my
                emit("(" if wrap else "")
                for j, m in enumerate(a):
                    if j:
                        emit("|" if k == _OR else "&")
                    go(m, my + 1)
                emit(")" if wrap else "")
            elif k == _NOT:
                wrap = prec > 3
                emit("(~" if wrap else "~")
                go(a[0], 3)
                emit(")" if wrap else "")
            elif k == _EXCL:
                # The intersection it stands for: R&~(w1|w2|...).
                wrap = prec > 1
                emit("(" if wrap else "")
                go(a[0], 2)
                emit("&~(")
                for j, w in enumerate(a[1]):
                    emit(("|" if j else "") + ("".join(_render_byte(c, False) for c in w) if w else "()"))
                emit(")")
                emit(")" if wrap else "")
            elif lit_run(a):
                # short runs of one byte (merged by concat) read better spelled out
                wrap = prec > 2.5
                emit("(" if wrap else "")
                emit(_render_byte_set(self._args[a[0]][0]) * a[1])
                emit(")" if wrap else "")
            else:
                inner, lo, hi = a
                wrap = prec > 3
                emit("(" if wrap else "")
                go(inner, 4)
                if (lo, hi) == (0, None):
                    emit("*")
                elif (lo, hi) == (1, None):
                    emit("+")
                elif (lo, hi) == (0, 1):
                    emit("?")
                elif lo == hi:
                    emit(f"{{{lo}}}")
                else:
                    emit(f"{{{lo},{'' if hi is None else hi}}}")
                emit(")" if wrap else "")

        try:
            go(expr, 0)
        except _Full:
            return "".join(out)[:max_chars] + "…"
        return "".join(out)


_PRINTABLE_SAFE = set(range(0x20, 0x7F)) - set(b"\\[]^-.|&~()*+?{}$#")


def _render_cp(cp: int) -> str:
    if cp < 0x80:
        return _render_byte(cp, True)
    ch = chr(cp)
    if ch.isprintable() and not ch.isspace():
        return ch
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _render_class(ranges: tuple) -> str:
    """Code point ranges as a class, negated when that is shorter."""
    ranges = list(ranges)
    neg = _negate_ranges(ranges)
    if not neg:
        return "(?s:.)"
    if neg == [(10, 10)]:
        return "."
    negate = len(neg) < len(ranges)
    body = "".join(
        _render_cp(lo) if lo == hi else _render_cp(lo) + ("" if hi == lo + 1 else "-") + _render_cp(hi)
        for lo, hi in (neg if negate else ranges)
    )
    return "[" + ("^" if negate else "") + body + "]"


def _render_byte(b: int, in_class: bool) -> str:
    if b in _PRINTABLE_SAFE:
        return chr(b)
    if 0x20 < b < 0x7F and (not in_class or chr(b) in "\\]^-"):
        return "\\" + chr(b)
    if in_class and 0x20 <= b < 0x7F:
        return chr(b)
    return f"\\x{b:02x}"


def _render_byte_set(mask: int) -> str:
    if mask & (mask - 1) == 0:
        return _render_byte(mask.bit_length() - 1, False)
    neg = _popcount(mask) > 128
    m = (_FULL ^ mask) if neg else mask
    parts = []
    b = 0
    while b < 256:
        if (m >> b) & 1:
            e = b
            while e + 1 < 256 and (m >> (e + 1)) & 1:
                e += 1
            if e == b:
                parts.append(_render_byte(b, True))
            elif e == b + 1:
                parts.append(_render_byte(b, True) + _render_byte(e, True))
            else:
                parts.append(_render_byte(b, True) + "-" + _render_byte(e, True))
            b = e + 1
        else:
            b += 1
    return "[" + ("^" if neg else "") + "".join(parts) + "]"


# --------------------------------------------------------------------------------------
# Pattern parser
# --------------------------------------------------------------------------------------

_F_I, _F_S, _F_X = 1, 2, 4
_FLAG_BITS = {"i": _F_I, "s": _F_S, "x": _F_X, "m": 0, "u": 0, "a": 0}
_DIGIT = [(0x30, 0x39)]
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE = [(0x09, 0x0D), (0x20, 0x20)]
_CLASS_ESCAPES = {"d": (_DIGIT, False), "D": (_DIGIT, True), "w": (_WORD, False), "W": (_WORD, True),
                  "s": (_SPACE, False), "S": (_SPACE, True)}
_CHAR_ESCAPES = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
_ANCHOR_ESCAPES = {"A": "anchor \\A", "Z": "anchor \\Z", "b": "word boundary \\b", "B": "word boundary \\B"}
def regex_escape_bytes(data: bytes) -> str:
    """A regex (midword syntax) matching exactly `data`.

    Printable ASCII is escaped when special, control characters become \\xNN.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # Not text: the lexer matches `Lexeme.literal` byte for byte; this string only names it.
        return "(?#bytes:" + data.hex() + ")"
    return text.translate(_ESCAPE_TABLE)


# What regex_escape_bytes writes for each ASCII character that is not a word character
# (everything else stands for itself); str.translate applies it without a Python loop.
_ESCAPE_TABLE = {
    o: ("\\" + chr(o) if 0x20 < o < 0x7F else f"\\x{o:02x}")
    for o in range(0x80)
    if not (chr(o).isalnum() or chr(o) == "_")
}


_QUANT_BRACE = _re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
_GLOBAL_FLAGS = _re.compile(r"\(\?([a-zA-Z]+)\)")
_SCOPED_FLAGS = _re.compile(r"([a-zA-Z]*)(?:-([a-zA-Z]*))?(:|\))")
_NAMED_CHAR = _re.compile(r"\{([^}]*)\}")
_HEX = set("0123456789abcdefABCDEF")
_OCT = set("01234567")
_VERBOSE_SPACE = set(" \t\n\r\f\v")
# What a scan for matching parentheses must step over: escapes, classes (a ']' first in a
# class is a member), and runs of anything else.
_GROUP_TOKENS = _re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|[()]|[^\\\[()]+", _re.S)
_SCOPED_X = _re.compile(r"\(\?[a-zA-Z]*-?[a-zA-Z]*x")


def _scan_groups(pattern: str) -> dict[int, int]:
    """Offset of each '(' -> offset just past its ')', by a scan that knows escapes and
    classes but not the grammar; {} when the scan gets lost (the parser then decides)."""
    ends: dict[int, int] = {}
    opened: list[int] = []
    pos = 0
    for m in _GROUP_TOKENS.finditer(pattern):
        if m.start() != pos:
            return {}
        pos = m.end()
        c = m.group()
        if c == "(":
            opened.append(m.start())
        elif c == ")":
            if not opened:
                return {}
            ends[opened.pop()] = pos
    return ends if pos == len(pattern) else {}


# A run of printable ASCII characters that are literal in every mode we take the fast
# path in (no `i` or `x` flag): parsed as one literal instead of one piece each.
_PLAIN_RUN = _re.compile(r"[!\"%',\-/0-9:;<=>@A-Z_`a-z]{2,}")
# A group's whole body as plain words between bars, up to its ')': an object's key list.
_PLAIN_ALTERNATION = _re.compile(r"[!\"%',\-/0-9:;<=>@A-Z_`a-z]+(?:\|[!\"%',\-/0-9:;<=>@A-Z_`a-z]+)*\)")


class _Parser:
    """Recursive descent over the pattern, building expressions directly.

    alt := inter ('|' inter)* ;  inter := seq ('&' seq)* (extended only) ;
    seq := piece* ;  piece := '~' piece (extended only) | atom quantifier?
    """

    def __init__(self, es: ExprSet, pattern: str, flags: str, extended: bool):
        if not isinstance(pattern, str):
            raise TypeError(f"regex pattern must be str, got {type(pattern).__name__}")
        self.es = es
        self.p = pattern
        self.n = len(pattern)
        self.pos = 0
        self.extended = extended
        self.names: set[str] = set()
        self._group_ends: dict[int, int] | None = None
        self.flags = 0
        for c in flags:
            if c not in _FLAG_BITS:
                raise GrammarError(f"unknown regex flag {c!r} in flags {flags!r} (expected letters from 'imsux')")
            self.flags |= _FLAG_BITS[c]

    def error(self, msg: str, pos: int | None = None) -> GrammarError:
        pos = self.pos if pos is None else pos
        shown = self.p if len(self.p) <= 200 else self.p[:200] + "…"
        return GrammarError(f"{msg} at offset {pos} in regex {shown!r}")

    def parse(self) -> int:
        flags = self.flags
        # Global inline flags `(?i)` are only allowed at the start, as in Python 3.11.
        while self.p.startswith("(?", self.pos):
            m = _GLOBAL_FLAGS.match(self.p, self.pos)
            if not m:
                break
            flags |= self._flag_letters(m.group(1), self.pos + 2)
            self.pos = m.end()
        r = self.alt(flags, 0)
        if self.pos < self.n:
            # Only an unmatched ')' stops the top level early.
            raise self.error("unbalanced parenthesis ')'")
        return r

    def _flag_letters(self, letters: str, at: int) -> int:
        out = 0
        for j, c in enumerate(letters):
            if c == "L":
                raise self.error("locale flag 'L' is not supported", at + j)
            if c not in _FLAG_BITS:
                raise self.error(f"unknown flag {c!r}", at + j)
            out |= _FLAG_BITS[c]
        return out

    # Whitespace, comments ---------------------------------------------------------
    def skip(self, flags: int) -> None:
        p, n = self.p, self.n
        while self.pos < n:
            c = p[self.pos]
            if flags & _F_X and c in _VERBOSE_SPACE:
                self.pos += 1
            elif flags & _F_X and c == "#":
                end = p.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            elif c == "(" and p.startswith("(?#", self.pos):
                end = p.find(")", self.pos)
                if end < 0:
                    raise self.error("missing ), unterminated comment", self.pos)
                self.pos = end + 1
            else:
                return

    # Grammar ----------------------------------------------------------------------
    def alt(self, flags: int, depth: int) -> int:
        branches = [self.inter(flags, depth)]
        while self.pos < self.n and self.p[self.pos] == "|":
            self.pos += 1
            branches.append(self.inter(flags, depth))
        return self.es.alt(*branches)

    def inter(self, flags: int, depth: int) -> int:
        first, count = self.seq(flags, depth)
        if not (self.extended and self.pos < self.n and self.p[self.pos] == "&"):
            return first
        if count == 0:
            raise self.error("missing left operand of '&'", self.pos)
        parts = [first]
        while self.pos < self.n and self.p[self.pos] == "&":
            amp = self.pos
            self.pos += 1
            part, count = self.seq(flags, depth)
            if count == 0:
                raise self.error("missing right operand of '&'", amp)
            parts.append(part)
        return self.es.and_(*parts)

    def seq(self, flags: int, depth: int) -> tuple[int, int]:
        items = []
        # Long alternations of names (object keys) are mostly plain text: take each run
        # of it at once. A run's last character stays behind when a quantifier follows.
        plain_runs = not flags & (_F_I | _F_X)
        p = self.p
        while True:
            self.skip(flags)
            if self.pos >= self.n:
                break
            c = p[self.pos]
            if c in "|)" or (c == "&" and self.extended):
                break
            if plain_runs:
                m = _PLAIN_RUN.match(p, self.pos)
                if m is not None:
                    end = m.end()
                    if end < self.n and p[end] in "*+?{":
                        end -= 1
                    if end - self.pos >= 2:
                        items.append(self.es.literal(p[self.pos:end].encode("ascii")))
                        self.pos = end
                        continue
            items.append(self.piece(flags, depth))
        return self.es.concat(*items), len(items)

    def _quantifier(self) -> tuple[int, int | None] | None:
        """Reads a quantifier at pos (advancing past it) or returns None."""
        if self.pos >= self.n:
            return None
        c = self.p[self.pos]
        if c == "*":
            self.pos += 1
            return 0, None
        if c == "+":
            self.pos += 1
            return 1, None
        if c == "?":
            self.pos += 1
            return 0, 1
        if c == "{":
            m = _QUANT_BRACE.match(self.p, self.pos)
            if not m or m.group(0) == "{}":
                return None  # a literal '{', as in Python
            lo_s, comma, hi_s = m.groups()
            lo = int(lo_s) if lo_s else 0
            hi = (int(hi_s) if hi_s else None) if comma else lo
            if lo > MAX_REPEAT_COUNT or (hi is not None and hi > MAX_REPEAT_COUNT):
                raise self.error("the repetition number is too large", self.pos)
            if hi is not None and hi < lo:
                raise self.error(f"min repeat greater than max repeat in {m.group(0)}", self.pos)
            self.pos = m.end()
            return lo, hi
        return None

    def _at_quantifier(self) -> bool:
        save = self.pos
        q = self._quantifier()
        self.pos = save
        return q is not None

    def piece(self, flags: int, depth: int) -> int:
        start = self.pos
        c = self.p[self.pos]
        if self.extended and c == "~":
            if depth >= MAX_NESTING:
                raise self.error(f"regex nested more than {MAX_NESTING} levels deep")
            self.pos += 1
            self.skip(flags)
            if self.pos >= self.n or self.p[self.pos] in "|)&":
                raise self.error("'~' needs an operand", start)
            return self.es.not_(self.piece(flags, depth + 1))
        if self._at_quantifier():
            raise self.error(f"nothing to repeat before {c!r}")
        atom = self.atom(flags, depth)
        self.skip(flags)
        q = self._quantifier()
        if q is None:
            return atom
        # Lazy and possessive spellings mean the same under whole-string matching.
        if self.pos < self.n and self.p[self.pos] in "?+":
            self.pos += 1
        self.skip(flags)
        if self._at_quantifier():
            raise self.error("multiple repeat", self.pos)
        return self.es.repeat(atom, q[0], q[1])

    def atom(self, flags: int, depth: int) -> int:
        p = self.p
        c = p[self.pos]
        if c == "(":
            return self.group(flags, depth)
        if c == "[":
            return self.char_class(flags)
        if c == ".":
            self.pos += 1
            return self.es.char_class([(0, _MAX_CODE_POINT)] if flags & _F_S else [(0, 9), (11, _MAX_CODE_POINT)])
        if c == "\\":
            kind, val = self.escape(in_class=False)
            if kind == "set":
                ranges, neg = val
                return self.es.char_class(ranges, negate=neg)
            return self.char(val, flags)
        if c in "^$":
            raise self.error(f"anchor {c!r} is not supported")
        self.pos += 1
        return self.char(self._check_cp(ord(c), self.pos - 1), flags)

    def _check_cp(self, cp: int, at: int) -> int:
        if _SURROGATES[0] <= cp <= _SURROGATES[1]:
            raise self.error(f"surrogate code point U+{cp:04X} cannot be matched in UTF-8", at)
        if cp > _MAX_CODE_POINT:
            raise self.error(f"code point {cp:#x} is above U+10FFFF", at)
        return cp

    def char(self, cp: int, flags: int) -> int:
        if flags & _F_I:
            folded = _case_fold([(cp, cp)])
            if folded != [(cp, cp)]:
                return self.es.char_class(folded)
        return self.es.literal(chr(cp).encode("utf-8"))

    def group(self, flags: int, depth: int) -> int:
        start = self.pos
        key = self._group_key(start, flags, depth)
        if key is not None:
            hit = self.es._groups.get(key)
            if hit is not None:
                self.pos = start + len(key[0])
                return hit
        r = self._group(flags, depth)
        # Stored only when the scan found the end the parse found, so a hit is always
        # the parse of exactly that text.
        if key is not None and self.pos == start + len(key[0]) and len(self.es._groups) < self.es.limits.max_regex_nodes:
            self.es._groups[key] = r
        return r

    def _group_key(self, start: int, flags: int, depth: int) -> tuple | None:
        """(group text, flags, extended) for the group at `start`, the key under which
        its parse is shared by every pattern of the process: JSON Schema patterns repeat
        whole groups (the string body beside each object's own key list, format parts).
        None where the parse could depend on more than the text: named groups (their
        names must be unique in the pattern), comments and verbose mode (a '#' hides
        parentheses from the scan), or nesting that could reach MAX_NESTING."""
        ends = self._group_ends
        if ends is None:
            ends = self._group_ends = _scan_groups(self.p) if self._groups_cacheable() else {}
        end = ends.get(start)
        if end is None or flags & _F_X:
            return None
        text = self.p[start:end]
        if depth + text.count("(") + text.count("~") >= MAX_NESTING:
            return None
        return text, flags, self.extended

    def _groups_cacheable(self) -> bool:
        p = self.p
        return "#" not in p and "(?P" not in p and not self.flags & _F_X and _SCOPED_X.search(p) is None

    def _group(self, flags: int, depth: int) -> int:
        p = self.p
        start = self.pos
        if depth >= MAX_NESTING:
            raise self.error(f"groups nested more than {MAX_NESTING} levels deep")
        self.pos += 1
        inner_flags = flags
        if p.startswith("?", self.pos):
            self.pos += 1
            c = p[self.pos] if self.pos < self.n else ""
            if c == ":":
                self.pos += 1
            elif c == "P":
                if p.startswith("P<", self.pos):
                    end = p.find(">", self.pos)
                    if end < 0:
                        raise self.error("missing >, unterminated name", self.pos + 2)
                    name = p[self.pos + 2 : end]
                    if not name.isidentifier():
                        raise self.error(f"bad character in group name {name!r}", self.pos + 2)
                    if name in self.names:
                        raise self.error(f"redefinition of group name {name!r}", self.pos + 2)
                    self.names.add(name)
                    self.pos = end + 1
                elif p.startswith("P=", self.pos):
                    raise self.error("backreferences (?P=name) are not supported", start)
                else:
                    raise self.error("unknown extension ?P", start)
            elif c in ("=", "!"):
                raise self.error(f"lookahead (?{c}...) is not supported", start)
            elif c == "<":
                if p.startswith("<=", self.pos) or p.startswith("<!", self.pos):
                    raise self.error(f"lookbehind (?{p[self.pos:self.pos + 2]}...) is not supported", start)
                raise self.error("unknown extension ?<", start)
            elif c == "(":
                raise self.error("conditional groups (?(...)...) are not supported", start)
            elif c == ">":
                raise self.error("atomic groups (?>...) are not supported", start)
            elif c == "#":
                raise self.error("comment group cannot be quantified", start)
            else:
                m = _SCOPED_FLAGS.match(p, self.pos)
                if not m or (m.group(2) is not None and not m.group(2)) or (not m.group(1) and m.group(2) is None):
                    if c.isascii() and c.isalpha() or c == "-":
                        raise self.error("missing -, : or ) after inline flags", start)
                    raise self.error(f"unknown extension ?{c}" if c else "unexpected end of pattern", start)
                on = self._flag_letters(m.group(1), m.start(1))
                off = self._flag_letters(m.group(2) or "", m.start(2) if m.group(2) else 0)
                if m.group(3) == ")":
                    if m.group(2) is not None:
                        raise self.error("flags can only be turned off in a scoped group (?-x:...)", start)
                    raise self.error("global flags not at the start of the expression", start)
                inner_flags = (flags | on) & ~off
                self.pos = m.end()
        if not inner_flags & (_F_I | _F_X):
            # Every schema with additional properties excludes its listed keys: a list of
            # words, each the literal its seq() would make, taken in one match.
            words = _PLAIN_ALTERNATION.match(p, self.pos)
            if words is not None:
                literal = self.es.literal
                r = self.es.alt(*[literal(w.encode("ascii")) for w in p[self.pos:words.end() - 1].split("|")])
                self.pos = words.end()
                return r
        r = self.alt(inner_flags, depth + 1)
        if self.pos >= self.n or p[self.pos] != ")":
            raise self.error("missing ), unterminated subpattern", start)
        self.pos += 1
        return r

    def escape(self, in_class: bool) -> tuple[str, object]:
        """Reads `\\...` at pos. Returns ("cp", code point) or ("set", (ranges, negated))."""
        p = self.p
        start = self.pos
        self.pos += 1
        if self.pos >= self.n:
            raise self.error("bad escape (end of pattern)", start)
        c = p[self.pos]
        self.pos += 1
        if c in _CLASS_ESCAPES:
            return "set", _CLASS_ESCAPES[c]
        if c in _CHAR_ESCAPES:
            return "cp", _CHAR_ESCAPES[c]
        if c == "b" and in_class:
            return "cp", 8
        if c in _ANCHOR_ESCAPES and not in_class:
            raise self.error(f"{_ANCHOR_ESCAPES[c]} is not supported", start)
        if c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            digits = p[self.pos : self.pos + width]
            if len(digits) != width or not set(digits) <= _HEX:
                raise self.error(f"incomplete escape \\{c}{digits}", start)
            self.pos += width
            return "cp", self._check_cp(int(digits, 16), start)
        if c == "N":
            m = _NAMED_CHAR.match(p, self.pos)
            if not m:
                raise self.error("missing {...} after \\N", start)
            try:
                cp = ord(unicodedata.lookup(m.group(1)))
            except KeyError:
                raise self.error(f"undefined character name {m.group(1)!r}", start) from None
            self.pos = m.end()
            return "cp", self._check_cp(cp, start)
        if c == "0":
            digits = c
            while len(digits) < 3 and self.pos < self.n and p[self.pos] in _OCT:
                digits += p[self.pos]
                self.pos += 1
            return "cp", int(digits, 8)
        if c.isdigit() and c.isascii():
            if c in _OCT:
                more = p[self.pos : self.pos + 2]
                if in_class:
                    k = 0
                    while k < 2 and k < len(more) and more[k] in _OCT:
                        k += 1
                    more = more[:k]
                if (in_class or (len(more) == 2 and set(more) <= _OCT)):
                    value = int(c + more, 8)
                    if value > 0o377:
                        raise self.error(f"octal escape value \\{c + more} outside of range 0-0o377", start)
                    self.pos += len(more)
                    return "cp", value
            if in_class:
                raise self.error(f"bad escape \\{c}", start)
            raise self.error(f"backreference \\{c} is not supported", start)
        if c.isascii() and c.isalpha():
            raise self.error(f"bad escape \\{c}", start)
        return "cp", self._check_cp(ord(c), start + 1)

    def char_class(self, flags: int) -> int:
        p = self.p
        start = self.pos
        self.pos += 1
        negate = False
        if self.pos < self.n and p[self.pos] == "^":
            negate = True
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.pos >= self.n:
                raise self.error("unterminated character set", start)
            c = p[self.pos]
            if c == "]" and not first:
                self.pos += 1
                break
            first = False
            item_pos = self.pos
            lo = self._class_item()
            if (
                self.pos + 1 < self.n
                and p[self.pos] == "-"
                and p[self.pos + 1] != "]"
            ):
                self.pos += 1
                hi = self._class_item()
                if lo[0] != "cp" or hi[0] != "cp":
                    raise self.error("bad character range (a class escape cannot be a range end)", item_pos)
                if hi[1] < lo[1]:
                    raise self.error(f"bad character range {chr(lo[1])!r}-{chr(hi[1])!r}", item_pos)
                ranges.append((lo[1], hi[1]))
            elif lo[0] == "cp":
                ranges.append((lo[1], lo[1]))
            else:
                set_ranges, neg = lo[1]
                ranges.extend(_negate_ranges(set_ranges) if neg else set_ranges)
        ranges = _normalize_ranges(ranges)
        if flags & _F_I:
            ranges = _case_fold(ranges)
        return self.es.char_class(ranges, negate=negate)

    def _class_item(self) -> tuple[str, object]:
        c = self.p[self.pos]
        if c == "\\":
            return self.escape(in_class=True)
        self.pos += 1
        return "cp", self._check_cp(ord(c), self.pos - 1)


# --------------------------------------------------------------------------------------
# Lazy DFA
# --------------------------------------------------------------------------------------


class LazyDFA:
    """DFA of one regex built lazily: table[state, byte] -> state; -1 = not yet
    computed; state 0 is dead (the empty language).

    `table` and `accepting` are reallocated when they grow: re-read the attributes
    after a `step` rather than keeping references across it.
    """

    def __init__(self, exprs: ExprSet, root: int):
        self.exprs = exprs
        self.root = root
        self._exprs: list[int] = [0]
        self._state_of: dict[int, int] = {0: 0}
        cap = 16
        self.table = np.full((cap, 256), -1, dtype=np.int32)
        self.table[0] = 0
        self.accepting = np.zeros(cap, dtype=bool)
        self._class_arrays: dict[bytes, np.ndarray] = {}
        self.initial = self._state(root)

    @property
    def n_states(self) -> int:
        return len(self._exprs)

    def state_expr(self, state: int) -> int:
        return self._exprs[state]

    def _state(self, expr: int) -> int:
        s = self._state_of.get(expr)
        if s is not None:
            return s
        es = self.exprs
        if es._has_bool[expr] and es.is_empty(expr):
            # Semantically empty: share the dead state so walks stop early.
            self._state_of[expr] = 0
            return 0
        s = len(self._exprs)
        limit = es.limits.max_lexer_states
        if s >= limit:
            raise LimitExceeded("max_lexer_states", limit, f"DFA of {es.to_str(self.root, 200)}")
        cap = self.table.shape[0]
        if s >= cap:
            table = np.full((cap * 2, 256), -1, dtype=np.int32)
            table[:cap] = self.table
            self.table = table
            accepting = np.zeros(cap * 2, dtype=bool)
            accepting[:cap] = self.accepting
            self.accepting = accepting
        self._exprs.append(expr)
        self._state_of[expr] = s
        self.accepting[s] = es._nullable[expr]
        return s

    def step(self, state: int, byte: int) -> int:
        t = int(self.table[state, byte])
        if t >= 0:
            return t
        es = self.exprs
        expr = self._exprs[state]
        t = self._state(es.derivative(expr, byte))
        # Every byte of the class has the same derivative: fill them all at once.
        cm = es.byte_classes(expr)
        arr = self._class_arrays.get(cm)
        if arr is None:
            arr = np.frombuffer(cm, dtype=np.uint8)
            self._class_arrays[cm] = arr
        self.table[state, arr == cm[byte]] = t
        return t

    def matches(self, data: bytes) -> bool:
        s = self.initial
        table = self.table
        for b in data:
            t = table[s, b]
            if t < 0:
                t = self.step(s, b)
                table = self.table
            if t == 0:
                return False
            s = t
        return bool(self.accepting[s])
