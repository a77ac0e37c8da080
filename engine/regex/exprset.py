"""Regular expressions over bytes, matched by Brzozowski derivatives.

The derivative of a language L by a byte c is `{ s | cs ∈ L }`; a regular
expression's derivative is again a regular expression, so an expression is a DFA
state and its derivatives are the transitions (docs/design/engine.md,
"Lexemes and rows"). The state is accepting when the expression is nullable
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

import threading
from typing import Iterable

from ..limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits
from . import charset
from .analysis import _Analysis
from .nodes import AND as _AND
from .nodes import BYTES as _BYTES
from .nodes import CONCAT as _CONCAT
from .nodes import EPS as _EPS
from .nodes import EXCL as _EXCL
from .nodes import EXCL_MAX_LENGTH as _EXCL_MAX_LENGTH
from .nodes import EXCL_MAX_WORDS as _EXCL_MAX_WORDS
from .nodes import FULL as _FULL
from .nodes import NOT as _NOT
from .nodes import NOTHING as _NOTHING
from .nodes import OR as _OR
from .nodes import REPEAT as _REPEAT
from .nodes import bits as _bits
from .nodes import range_mask as _range_mask
from .parser import _Parser
from .printer import to_str
from .store import NO_LEN as _NO_LEN
from .term import Term
from .term import build as _build_term

# The branches of a complement whose sequences `_covers_one_of` reads: the shortcut is
# only sufficient, so past this the search of states decides, as before it.
_COVER_BRANCHES = 32
# Intersections kept by their members (`ExprSet.and_`); past this many the memo starts
# over, as the store's other memos do.
_MAX_MEETS = 200_000


def _repetitions(words: int, lo: int, hi: int, most: int) -> int:
    """words**lo + ... + words**hi, the sequences of lo to hi words out of `words`, or
    most + 1 where that is above most."""
    if words == 0:
        return int(lo == 0)  # only the empty sequence
    total = 0
    power = words**lo if lo < 64 else most + 1
    for _ in range(lo, hi + 1):
        total += power
        if total > most:
            return most + 1
        power *= words
    return total


# An exclusion from a finite body is spelled out as an alternation of what is left only
# where the body has at most this many words.
_EXCL_SPELLED_OUT = 64


class ExprSet(_Analysis):
    """Hash-consed regular expressions over bytes with memoized derivatives."""

    NOTHING = 0  # ∅, the empty language
    EPSILON = 1  # ε, the empty string

    # One set per Limits and thread shared by every lexer in the process (see `shared`).
    _shared: "dict[tuple[Limits, int], ExprSet]" = {}
    # A shared set is replaced once it holds this share of max_regex_nodes, so a new
    # grammar always has most of its node budget and memory stays bounded.
    SHARED_ROLLOVER_FRACTION = 0.05

    @classmethod
    def shared(cls, limits: Limits = DEFAULT_LIMITS) -> "ExprSet":
        """A process-wide set for `limits`. Grammars repeat lexemes (JSON strings,
        numbers, formats), so parses, derivatives, byte classes and emptiness checks
        computed for one grammar are cache hits for the next. Like recognizers, it is
        meant for one thread: a grammar compiled on another thread (the completion
        engine's compile executor) works in that thread's own set, never in the one the
        mask thread is extending."""
        key = (limits, threading.get_ident())
        es = cls._shared.get(key)
        if es is None or len(es) > limits.max_regex_nodes * cls.SHARED_ROLLOVER_FRACTION:
            es = cls(limits)
            cls._shared[key] = es
        return es

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
        max_count, nullable, min_len = self._max_count, self._nullable, self._min_len
        byte_nodes = self._byte_nodes
        max_nodes = self.limits.max_regex_nodes
        concat, repeat = _CONCAT, _REPEAT
        r = 1
        # Once a link is new, so is every link before it (a node names only older
        # ones): their lookups are skipped. A merge may find an old node again.
        made = False
        for b in reversed(data):
            h = byte_nodes[b]
            if h < 0:
                h = byte_nodes[b] = self._bytes(1 << b)
            if r == 1:
                r = h
                continue
            key = (concat, h, r)
            i = None if made else ids_get(key)
            if i is None:
                head = args[r][0] if kind[r] == concat else r
                if head == h or (kind[head] == repeat and args[head][0] == h):
                    before = len(kind)
                    i = self._concat2(h, r)
                    made = i >= before
                else:
                    # _new's work for a byte head (height 0, no & or ~) and a tail r.
                    i = len(kind)
                    if i >= max_nodes:
                        raise LimitExceeded("max_regex_nodes", max_nodes, "too many distinct regular expressions")
                    kind.append(concat)
                    args.append((h, r))
                    nullable.append(False)
                    height.append(height[r] or 1)
                    has_bool.append(has_bool[r])
                    max_count.append(max_count[r])
                    length = min_len[r] + 1
                    min_len.append(length if length < _NO_LEN else _NO_LEN)
                    ids[key] = i
                    made = True
            r = i
        if len(self._literals) < self.limits.max_regex_nodes:
            self._literals[data] = r
        return r

    def char_class(self, ranges: Iterable[tuple[int, int]], negate: bool = False) -> int:
        """Code point ranges as UTF-8: an alternation of byte-range sequences."""
        norm = charset.normalize(ranges)
        if negate:
            norm = charset.complement(norm)
        key = norm
        r = self._class_cache.get(key)
        if r is not None:
            return r
        # Sequences sharing a tail become one sequence with a merged first byte
        # set, built from the end so tails are shared nodes.
        branches = []
        for seq in charset.utf8_sequences(norm):
            tail = 1
            for lo, hi in reversed(seq):
                tail = self._concat2(self._bytes(_range_mask(lo, hi)), tail)
            branches.append(tail)
        r = self.alt(*branches)
        self._class_cache[key] = r
        if self._kind[r] in (_OR, _CONCAT):
            # Printed as the class (its sequences may share a lead byte: é|É is \xc3[\x89\xa9]).
            self._class_of.setdefault(r, key)
        if r != self.NOTHING:
            # UTF-8 is a prefix code: `is_prefix_code` need not walk the derivatives of a
            # class of letters of every script, hundreds of them, to find that out.
            self._prefix_codes.setdefault(r, True)
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
        if len(rest) >= 2:
            absorbed = self._absorbed_runs(rest, items)
            if absorbed:
                items.difference_update(absorbed)
                if len(items) == 1:
                    return items.pop()
        nullable = self._nullable
        if 1 in items and any(nullable[x] for x in items if x != 1):
            items.discard(1)
        for x in items:
            if kind[x] == _NOT and args[x][0] in items:
                return self.ALL
        if len(items) == 1:
            return items.pop()
        factored = self._factored_heads(items)
        if factored is not None:
            return self.alt(*factored)
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

    def _factored_heads(self, items: set[int]) -> list[int] | None:
        """The members, those that share a head taken together (h·X | h·Y is h·(X|Y)),
        or None where no two share one. An alternation of words (an enumeration in a
        pattern) becomes a trie of them, and an unanchored one (`.*w1.* | .*w2.* | …`,
        as patterns are translated) one `.*` before that trie: a derivative by a byte
        is then the one member headed by it, not a new alternation of the tails of
        every word the byte may start or continue. Unanchored, the words start again at
        every position, so each lexer state a mask walk met was such a rebuild, over
        hundreds of words."""
        kind, args = self._kind, self._args
        by_head: dict[int, list[int]] = {}
        shared = False
        for x in items:
            if kind[x] == _CONCAT:
                h = args[x][0]
                same = by_head.get(h)
                if same is None:
                    by_head[h] = [x]
                else:
                    same.append(x)
                    shared = True
        if not shared:
            return None
        out = [x for x in items if not (kind[x] == _CONCAT and len(by_head.get(args[x][0], ())) >= 2)]
        for h, same in by_head.items():
            if len(same) >= 2:
                out.append(self._concat2(h, self.alt(*[args[x][1] for x in same])))
        return out

    def _absorbed_runs(self, members: list[int], items: set[int]) -> list[int]:
        """Members of an alternation that another one holds, among runs `X{lo,hi}·T`
        where T takes X in front of itself (T = Y*·T' with X ⊆ Y): then X{k}·T ⊆ X{j}·T
        for k ≥ j, so of runs of one X and T only the one of least `lo` counts, and none
        beside T itself. An unanchored run (`.*X{162}.*`) has a derivative of one run
        per position it may have started at; these keep it to two members."""
        kind, args = self._kind, self._args
        least: dict[tuple[int, int], tuple[int, int]] = {}
        absorbed: list[int] = []
        for e in members:
            if kind[e] != _CONCAT:
                continue
            head, tail = args[e]
            if kind[head] != _REPEAT:
                continue
            x, lo, _ = args[head]
            key = (x, tail)
            seen = least.get(key)
            if seen is None and tail not in items:
                least[key] = (lo, e)
                continue
            if not self._takes_in_front(tail, x):
                least[key] = (lo, e) if seen is None or lo < seen[0] else seen
                continue
            if seen is None or tail in items:
                absorbed.append(e)  # T itself is a member, and holds every run before it
            elif lo < seen[0]:
                absorbed.append(seen[1])
                least[key] = (lo, e)
            else:
                absorbed.append(e)
        return absorbed

    def _takes_in_front(self, tail: int, x: int) -> bool:
        """X·T ⊆ T, seen in T's shape: T = Y*·T' (or Y*) with X ⊆ Y."""
        kind, args = self._kind, self._args
        head = args[tail][0] if kind[tail] == _CONCAT else tail
        if kind[head] != _REPEAT:
            return False
        y, lo, hi = args[head]
        return lo == 0 and hi is None and self._subset(x, y)

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
        key_items = frozenset(items)
        known = self._meets.get(key_items)
        if known is not None:
            return known
        made = self._and_of(items)
        if len(self._meets) >= _MAX_MEETS:
            self._meets.clear()
        self._meets[key_items] = made
        return made

    def _and_of(self, items: set[int]) -> int:
        """`and_` of flattened members, none of them ∅, ε or everything."""
        kind, args = self._kind, self._args
        nullable = self._nullable
        if len(items) == 2:
            met = self._meet_counts(*items)
            if met is not None:
                return met
        excluded = self._excluded_words(items)
        if excluded is not None:
            kept, words = excluded
            return self._exclude(self.and_(*kept), words)
        if len(items) > 1:
            before = len(items)
            self._drop_covering_stars(items)
            if len(items) == 1:
                return items.pop()
            if before > 2 and len(items) == 2:
                # Two counts left once a star went: the form a parse of the printed
                # intersection gives, so it must be the same node.
                met = self._meet_counts(*items)
                if met is not None:
                    return met
            factored = self._factor_common_head(items)
            if factored is not None:
                return factored
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
            if kind[x] == _NOT and self._covers_one_of(args[x][0], items):
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

    def _meet_counts(self, x: int, y: int) -> int | None:
        """`A{l1,h1} & B{l2,h2}` or `A{l1,h1} & ~B{l2,h2}` as one repetition, when one of
        A and B holds the other and the larger is a code of whole words
        (`is_prefix_code`): a sequence of its words splits one way only, so both sides
        count the same words. A `maxLength` on a pattern that has come to its `.*`,
        `S* & C{0,k}`, is `S{0,k}`, and a string that fails a `minLength`,
        `S* & ~C{20,}`, is `S{0,19}`: a repetition whose derivatives need no
        intersection, and whose counts narrow like a plain `maxLength`
        (`repeat_window`). None for other intersections, and for a complement whose
        counts leave two ranges."""
        kind, args, has_bool = self._kind, self._args, self._has_bool
        if kind[x] != _REPEAT:
            x, y = y, x
        if kind[x] != _REPEAT:
            return None
        negated = kind[y] == _NOT
        other = args[y][0] if negated else y
        if kind[other] != _REPEAT:
            return None
        a, l1, h1 = args[x]
        b, l2, h2 = args[other]
        if has_bool[a] or has_bool[b]:
            return None
        if negated:
            if not (self.is_prefix_code(b) and self._subset(a, b)):
                return None
            # The counts of x outside [l2, h2], when they are one range.
            body = a
            if h2 is None:
                lo, hi = l1, l2 - 1 if h1 is None else min(h1, l2 - 1)
            elif l2 <= l1:
                lo, hi = max(l1, h2 + 1), h1
            else:
                return None
        else:
            if self.is_prefix_code(b) and self._subset(a, b):
                body = a
            elif self.is_prefix_code(a) and self._subset(b, a):
                body = b
            else:
                return None
            lo = max(l1, l2)
            hi = h1 if h2 is None else h2 if h1 is None else min(h1, h2)
        if hi is not None and hi < lo:
            return 0
        return self.repeat(body, lo, hi)

    def _covers_one_of(self, outer: int, items: set[int]) -> bool:
        """Whether `outer` holds every word of some member of `items`, told by its shape:
        the member itself, or a branch of `outer` that is the member's sequence between
        nullable factors (`D*·S*` holds `S*`). Only sufficient, and cheap enough for every
        intersection with a complement. The derivatives of a pattern's complement
        (`S* & ~(S*·D+·S*)`, a key no pattern matches) are of this kind once the pattern
        has matched, and are then ∅ here instead of after a search of their states."""
        if outer in items:
            return True
        kind, args, nullable = self._kind, self._args, self._nullable
        branches = args[outer] if kind[outer] == _OR else (outer,)
        sequences = None
        for k, branch in enumerate(branches):
            if branch in items:
                return True
            if kind[branch] != _CONCAT or k >= _COVER_BRANCHES:
                continue
            factors = self._factors(branch)
            if sequences is None:
                sequences = [self._factors(m) for m in items if kind[m] != _NOT]
            for seq in sequences:
                n = len(seq)
                for at in range(len(factors) - n + 1):
                    if (
                        factors[at : at + n] == seq
                        and all(nullable[f] for f in factors[:at])
                        and all(nullable[f] for f in factors[at + n :])
                    ):
                        return True
        return False

    def _factors(self, expr: int) -> list[int]:
        """The factors of a sequence in order (the expression alone if it is none)."""
        kind, args = self._kind, self._args
        out = []
        while kind[expr] == _CONCAT:
            head, expr = args[expr]
            out.append(head)
        out.append(expr)
        return out

    def _drop_covering_stars(self, items: set[int]) -> None:
        """Drops from an intersection each `C*` (or `C+`) that another member lies
        inside because that member reads only bytes that are words of C on their own: a
        pattern or format ANDed with the JSON string characters (`[a-z0-9.@-]+ &
        (char)*`) is the pattern alone. Kept, the `&` hid the pattern's counts from
        clamping and made each of its derivatives an emptiness check in the mask walk."""
        kind, args, nullable = self._kind, self._args, self._nullable
        for x in list(items):
            if kind[x] != _REPEAT:
                continue
            body, lo, hi = args[x]
            if hi is not None or lo > 1:
                continue
            singles = self._single_bytes(body)
            if not singles:
                continue
            for y in items:
                if y == x or self._has_bool[y] or (lo == 1 and nullable[y]):
                    continue
                alphabet = self._alphabet(y)
                if alphabet is not None and alphabet & ~singles == 0:
                    items.discard(x)
                    break

    def _factor_common_head(self, items: set[int]) -> int | None:
        """`P·A & ~(P·B | M)` as `P·(A & ~B)` when P, the head every positive member
        starts with, has all its words of one length (and no & or ~) and every member
        of a negation either starts with P too or cannot start a word of P (M). A
        lexer meets this in the middle of a multibyte character: the derivative of
        `(char)* & ~K` by a lead byte is `[\x80-\xbf]{2}·(char)* & ~([\x80-\xbf]{2}·K')`,
        one intersection node per partial character and count, each checked for
        emptiness in the mask walk; factored, the partial characters share one. None
        when the members do not have that shape."""
        kind, args = self._kind, self._args
        head = -1
        positives: list[int] = []
        negated: list[int] = []
        for x in items:
            k = kind[x]
            if k == _CONCAT:
                h, t = args[x]
                if head < 0:
                    head = h
                elif h != head:
                    return None
                positives.append(t)
            elif k == _NOT:
                negated.append(args[x][0])
            else:
                return None
        if head < 0 or self._has_bool[head]:
            return None
        least = self._min_len[head]
        if least < 1 or self.max_length(head) != least:
            return None
        first = self.first_bytes(head)
        kept: list[int] = []
        for y in negated:
            tails: list[int] = []
            for m in args[y] if kind[y] == _OR else (y,):
                if kind[m] == _CONCAT and args[m][0] == head:
                    tails.append(args[m][1])
                elif not self.first_bytes(m) & first:
                    # No word of P·A starts with a byte m's non-empty words start with,
                    # and P·A has no empty word: excluding m excludes nothing.
                    continue
                else:
                    return None
            kept.append(self.not_(self.alt(*tails)) if tails else self.ALL)
        return self._concat2(head, self.and_(*positives, *kept))

    def _single_bytes(self, expr: int) -> int:
        """The bytes that are words of `expr` by themselves, as far as its top level
        shows (a byte set, or the byte sets of an alternation)."""
        kind, args = self._kind, self._args
        if kind[expr] == _BYTES:
            return args[expr][0]
        if kind[expr] == _OR:
            m = 0
            for x in args[expr]:
                if kind[x] == _BYTES:
                    m |= args[x][0]
            return m
        return 0

    def _alphabet(self, expr: int) -> int | None:
        """Every byte `expr` can read, as a byte set (an over-estimate: bytes of
        branches that lead nowhere count too); None under & or ~."""
        return None if self._has_bool[expr] else self._byte_bounds(expr)[1]

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
        if expr == self.ALL:
            # ~∅ leaves ~W, which a plain complement says.
            return self.not_(self.alt(*map(self.literal, words)))
        own = self._finite_words(expr) if self._few_words(expr, _EXCL_SPELLED_OUT) else None
        if own is not None:
            # A body of few words leaves fewer, which an alternation of literals says. A
            # body of many (`label(\.[a-z]{2})?`, a key pattern beside its listed key)
            # stays an exclusion: every derivative of an alternation of hundreds of
            # literals was an alternation of hundreds, where the body's is one node.
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

    def _few_words(self, expr: int, most: int) -> bool:
        """Whether `expr` surely matches at most `most` strings, from a bound on their
        number (byte sets, sequences, alternations and bounded repeats; & and ~ count as
        many)."""
        return self._word_count_bound(expr, most) <= most

    def _word_count_bound(self, expr: int, most: int) -> int:
        """An upper bound on the strings `expr` matches, or most + 1 where it is above most."""
        kind, args = self._kind, self._args
        k = kind[expr]
        if k == _NOTHING:
            return 0
        if k == _EPS:
            return 1
        if k == _BYTES:
            return min(bin(args[expr][0]).count("1"), most + 1)
        if k == _CONCAT:
            n = 1
            x = expr
            while kind[x] == _CONCAT:
                h, x = args[x]
                n *= self._word_count_bound(h, most)
                if n > most:
                    return most + 1  # no factor is ∅: a sequence with one is ∅ itself
            return min(n * self._word_count_bound(x, most), most + 1)
        if k == _OR:
            n = 0
            for m in args[expr]:
                n += self._word_count_bound(m, most)
                if n > most:
                    return most + 1
            return n
        if k == _REPEAT:
            inner, lo, hi = args[expr]
            if hi is None:
                return most + 1
            return _repetitions(self._word_count_bound(inner, most), lo, hi, most)
        return most + 1

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
            acc = None
            if once is not None and self._too_many_repeat_words(once, lo, hi):
                once = None
            if hi is not None and once is not None:
                found: set[bytes] = set()
                run: set[bytes] = {b""}
                for n in range(hi + 1):
                    if n >= lo:
                        found.update(run)
                        if len(found) > _EXCL_MAX_WORDS:
                            break
                    if n == hi:
                        acc = found
                        break
                    following = self._product(run, once)
                    if following is None:
                        break
                    if following == run and n >= lo:
                        acc = found  # ε in the body: every later round is this one again
                        break
                    run = following
        else:
            acc = None
        r = None if acc is None else tuple(sorted(acc))
        memo[expr] = r
        return r

    @staticmethod
    def _too_many_repeat_words(once: tuple[bytes, ...], lo: int, hi: int | None) -> bool:
        """Whether `(once){lo,hi}` surely spells more than _EXCL_MAX_WORDS words, told by
        arithmetic where the words of `once` are non-empty and of one length (so every
        sequence of them spells another word): a key pattern's `[a-z0-9_-]{0,250}` is
        refused at once, where the sets of its words were built up to the bound for every
        count left."""
        if hi is None or not once or len({len(w) for w in once}) != 1 or not once[0]:
            return False
        return _repetitions(len(once), lo, hi, _EXCL_MAX_WORDS) > _EXCL_MAX_WORDS

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

    def build(self, term: Term) -> int:
        """The expression of a regex term (`regex.term`): built from its parts, with
        no text to parse but the front end's own `src` leaves."""
        r = self._built.get(term)
        if r is None:
            r = self._built[term] = _build_term(self, term)
        return r

    # Printing --------------------------------------------------------------------------
    def to_str(self, expr: int, max_chars: int = 2000) -> str:
        """A readable regex-like rendering (bytes >= 0x80 as \\xNN), cut at max_chars."""
        return to_str(self, expr, max_chars)
