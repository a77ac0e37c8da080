"""Byte classes and derivatives: the partition of the 256 bytes an expression cannot
tell apart, and the derivative by one byte, computed once per class and memoized.
A layer of `ExprSet` over its node storage."""

from __future__ import annotations

import numpy as np

from .nodes import AND as _AND
from .nodes import BYTES as _BYTES
from .nodes import CONCAT as _CONCAT
from .nodes import EPS as _EPS
from .nodes import EXCL as _EXCL
from .nodes import FULL as _FULL
from .nodes import NOT as _NOT
from .nodes import OR as _OR
from .nodes import class_map as _class_map
from .nodes import refine_byte_sets
from .nodes import split_class_map as _split_class_map
from .store import _Store

# A shadow's guard wider than this many bytes is a character set rather than the first
# bytes of a few keys: see `byte_classes`.
_WIDE_GUARD = 16


class _Derivatives(_Store):
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
            if guard.bit_count() > _WIDE_GUARD:
                # A guard of whole character sets (a key other than those a pattern
                # matches, `C* & ~P`) would give each of its bytes a class, and a
                # derivative, of its own: the classes of the members are fewer.
                own = self._classes_by_masks(expr)
                if len(set(own)) < len(set(cm)):
                    cm = own
            self._classmap[expr] = cm
            return cm
        cm = self._classes_by_masks(expr)
        self._classmap[expr] = cm
        return cm

    def _classes_by_masks(self, expr: int) -> bytes:
        """The class map refining the byte sets that can decide a first byte."""
        masks = self._masks(expr)
        cm = self._classmap_by_masks.get(masks)
        if cm is None:
            cm = _class_map(refine_byte_sets(masks))
            self._classmap_by_masks[masks] = cm
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

    def byte_chain_codes(self, expr: int, stop, most: int | None = None) -> tuple[list[int], list[int], list[int]]:
        """The links along `expr`'s chain of byte heads (`byte_head` of each tail in
        turn), their byte sets, and each link's tail encoded as the derivative rows hold
        it (2 * tail + nullable; the tail 0 where it is empty), as three lists: down to a
        tail that is ∅, in `stop`, or without a byte head (which ends the chain but is not
        a link), and at most `most` links."""
        links, byte_sets, codes, _ = self.byte_chains_codes((expr,), stop, most)
        return links, byte_sets, codes

    def disjoint_heads(self, expr: int) -> list[tuple[int, int]] | None:
        """(byte set, tail) per branch of an alternation whose branches each begin with
        a byte set, pairwise disjoint, and whose tails have no & or ~ (a trie of words):
        the derivative by a byte is the tail of the branch whose set holds it. None for
        any other expression."""
        kind, args, has_bool = self._kind, self._args, self._has_bool
        if kind[expr] != _OR:
            return None
        heads = []
        seen = 0
        for branch in args[expr]:
            k = kind[branch]
            if k == _CONCAT:
                h, tail = args[branch]
                if kind[h] != _BYTES or has_bool[tail]:
                    return None
                byte_set = args[h][0]
            elif k == _BYTES:
                byte_set, tail = args[branch][0], 1
            else:
                return None
            if seen & byte_set:
                return None
            seen |= byte_set
            heads.append((byte_set, tail))
        return heads

    def byte_chains_codes(
        self, exprs, stop, most: int | None = None, branch_ends: list[int] | None = None
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """`byte_chain_codes` of each of `exprs` not in `stop`, in one pass and one set of
        lists, each chain also stopping at a link of an earlier one (keys that end alike
        share their tails): (links, byte sets, codes, the expressions of `exprs` without a
        byte head). The rows of a new object's keys are made from these, hundreds of keys
        and thousands of links in its first masks. Each chain's first bytes, its head's
        byte set, are kept on the way, since the state's live list asks for them next.
        `branch_ends`, where given, gets the alternations chains end at (a word trie's
        branch after a shared prefix)."""
        kind, args, has_bool, nullable = self._kind, self._args, self._has_bool, self._nullable
        firsts = self._first_bytes
        links: list[int] = []
        byte_sets: list[int] = []
        codes: list[int] = []
        others: list[int] = []
        linked: set[int] = set()
        for start in exprs:
            if start in stop or start in linked:
                continue
            e, n = start, 0
            while True:
                k = kind[e]
                if k == _CONCAT:
                    h, tail = args[e]
                    if kind[h] != _BYTES:
                        break
                    byte_set = args[h][0]
                elif k == _BYTES:
                    byte_set, tail = args[e][0], 1
                else:
                    if branch_ends is not None and n and k == _OR:
                        branch_ends.append(e)
                    break
                if has_bool[tail] and self.is_empty(tail):
                    tail = 0
                links.append(e)
                byte_sets.append(byte_set)
                codes.append(2 * tail + nullable[tail])
                linked.add(e)
                n += 1
                if not tail or tail in stop or tail in linked or n == most:
                    break
                e = tail
            if n:
                firsts[start] = byte_sets[-n]
            else:
                others.append(start)
        return links, byte_sets, codes, others

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
        known = self._shadows.get(expr, -1)
        if not isinstance(known, int):  # a pair or None: worked out before
            return known
        got: tuple[int, int] | None = None
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
            if isinstance(sh, int):  # -1: not worked out yet
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
            return self.alt(*[derivative(m, b) for m, f in zip(a, firsts, strict=False) if f & bit])
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
