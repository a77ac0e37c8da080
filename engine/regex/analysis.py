"""What an expression denotes, decided by looking at it: nullability, length bounds,
clamped counts, emptiness (by exploring its derivatives under a state bound) and
containment. A layer of `ExprSet` over its derivatives."""

from __future__ import annotations

import numpy as np

from ..limits import BUDGET_ERRORS, LimitExceeded, check_compile_budget
from .derivatives import _Derivatives
from .nodes import AND as _AND
from .nodes import BYTES as _BYTES
from .nodes import CONCAT as _CONCAT
from .nodes import EPS as _EPS
from .nodes import EXCL as _EXCL
from .nodes import FULL as _FULL
from .nodes import NOT as _NOT
from .nodes import NOTHING as _NOTHING
from .nodes import OR as _OR
from .nodes import REPEAT as _REPEAT
from .nodes import SUBSET_STATES as _SUBSET_STATES
from .store import NO_LEN as _NO_LEN

# Pairs of derivatives a slice's search in a lexeme visits before it gives up (the
# slice is then walked token by token, as before the search): it runs at a mask, on
# lexemes whose shape alone does not settle it.
_PREFIX_PAIRS = 256


class _Analysis(_Derivatives):
    # Properties ------------------------------------------------------------------------
    def nullable(self, expr: int) -> bool:
        return self._nullable[expr]

    def min_length(self, expr: int) -> int:
        """The length of the shortest string `expr` matches (NO_LEN past it, for ∅)."""
        return self._min_len[expr]

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

    def clamped(self, expr: int, depth: int, bounds: "RepeatBounds | None" = None) -> int:
        """`expr` with every repeat count above `depth // m` clamped, m being the least
        length of what it repeats (at least 1): an upper bound made unbounded, a lower
        bound made depth // m + 1. It matches the same strings of at most `depth` bytes,
        as each repetition takes m bytes at least: `(\\S+\\s+){0,99}` clamps at 64
        repetitions under a depth of 128, not 128. Without & and
        ~ it also has the same prefixes of at most `depth` bytes: every node then matches
        something, so a prefix of j <= depth repetitions goes on to a match under either
        bound. With & or ~ that fails (`a{0,300} & a{400,}` is empty, its clamped
        form is not), so such expressions come back as they are, with one exception
        (`_clamped_window`): a length limit on a pattern or format, `A & C{lo,hi}`
        where A reads only single-byte words of C, gives way to A while hi stays at
        least `depth` plus the longest shortest completion of A (`completion_bound`);
        a sequence or alternation around & or ~ is clamped in its other parts.

        A mask walk reads tokens of at most `depth` bytes: two lexer states whose
        expressions clamp alike allow the same tokens inside the lexeme and end it at the
        same trie nodes, so the count states of a long `maxLength` string share one walk.

        With `bounds` (a vocabulary's `RepeatBounds`) the argument holds for the strings
        inside that vocabulary's tokens instead of every string of `depth` bytes: a repeat
        count above the most whole repetitions any token holds is clamped too, so the
        counts of a word-count limit (`(\\S+\\s+){0,99}`) share one walk down to a
        handful of words left, not 64."""
        floor = depth if bounds is None else min(depth, bounds.floor)
        if self._max_count[expr] <= floor:
            return expr
        if self._has_bool[expr] and self._kind[expr] not in (_CONCAT, _OR, _AND):
            return expr
        key = depth if bounds is None else (depth, bounds.key, bounds.floor)
        memo = self._clamped.get(key)
        if memo is None:
            memo = self._clamped[key] = {}
        r = memo.get(expr)
        if r is not None:
            return r
        k, a = self._kind[expr], self._args[expr]
        if k in (_CONCAT, _OR):
            r = self._with_parts(expr, lambda part: self.clamped(part, depth, bounds))
        elif k == _AND:
            r = self._clamped_window(expr, depth, bounds)
        elif k == _REPEAT:
            inner, lo, hi = a
            # A repetition takes at least max(1, least length of inner) bytes, so a
            # string of at most `depth` bytes holds at most `most` of them.
            most = depth // max(1, self._min_len[inner])
            clamped_inner = self.clamped(inner, depth, bounds)
            if bounds is not None and max(lo, hi or 0) > bounds.floor:
                whole = bounds.most_repeats(self, clamped_inner)
                if whole is not None:
                    most = min(most, whole)
            r = self.repeat(clamped_inner, min(lo, most + 1), None if hi is None or hi > most else hi)
        else:
            r = expr
        memo[expr] = r
        return r

    def _with_parts(self, expr: int, change) -> int:
        """A sequence or an alternation rebuilt from `change` of each of its parts (the
        heads and last tail of a sequence, the branches of an alternation)."""
        if self._kind[expr] == _OR:
            return self.alt(*[change(m) for m in self._args[expr]])
        # Iterative along the chain: long literals are long chains.
        heads = []
        x = expr
        while self._kind[x] == _CONCAT:
            h, x = self._args[x]
            heads.append(change(h))
        r = change(x)
        for h in reversed(heads):
            r = self._concat2(h, r)
        return r

    def _clamped_window(self, expr: int, depth: int, bounds: "RepeatBounds | None") -> int:
        """`A & C{lo,hi}` clamped to A's clamped form when the window cannot tell a walk of
        at most `depth` bytes from A alone (`window_parts`); otherwise `expr` itself."""
        parts = self.window_parts(expr)
        if parts is None or parts[1] < depth:
            return expr
        return self.clamped(parts[0], depth, bounds)

    def window_parts(self, expr: int) -> tuple[int, int] | None:
        """(A, m) when `expr` is a length limit on A, `A & C{lo,hi}` or, in the middle of
        a character, `A & Q·C{0,hi}`, that no walk of at most m bytes can tell from A
        alone: after such a walk both take the empty word alike and are empty alike.
        None for other expressions.

        `A & C{lo,hi}` (A without & or ~, reading only bytes that are words of C on
        their own, so a word of A has as many characters of C as bytes; or made of
        words of C when lo is 0) when lo is at most A's least length, with m =
        hi - `completion_bound(A)`. After w (at most m bytes): A's derivative takes the
        empty word iff the limit's does too (|w| < hi, and |w| >= lo when w is a word
        of A), and when A's derivative is not empty its shortest word fits in the
        hi - |w| bytes left. A `maxLength` on a format or an unbounded pattern is such a
        limit, and each count left was a lexer state of its own in the mask walk.

        `A & Q·C{0,hi}`, Q the rest of a character or an escape, when every word of A
        is a word of `Q·C*` (`within_repeats`), with the same m: after w, A's
        derivative goes on inside the window's, whose count left is at least the
        completion bound."""
        if self._kind[expr] != _AND:
            return None
        got = self._windows.get(expr, -1)
        if got != -1:
            return got  # type: ignore[return-value]
        got = None
        for body, heads, chars, lo, hi in self._limits_of(expr):
            if hi is None or lo > self._min_len[body] or (heads and lo > 0):
                continue
            tail = self.completion_bound(body)
            if tail is None or hi - tail < 0:
                continue
            if heads:
                if not self.within_repeats(body, self.concat(*heads), chars):
                    continue
            else:
                singles = self._single_bytes(chars)
                alphabet = self._alphabet(body)
                if alphabet is None:
                    continue
                if alphabet & ~singles and (lo > 0 or not self._made_of(body, chars)):
                    # Multibyte characters: a word of A has at most as many characters
                    # as bytes, which bounds the upper limit only.
                    continue
            got = (body, hi - tail)
            break
        if got is None:
            got = self._complement_window(expr)
        self._windows[expr] = got
        return got

    def _complement_window(self, expr: int) -> tuple[int, int] | None:
        """(Y* & ~C*, hi) for `Y* & ~C{0,hi}`: the keys other than those a length-limited
        key pattern matches (`^[/][/.\\w-]{0,254}$` beside `additionalProperties`), every
        count left a lexer state of its own. Y a prefix code (the characters of a JSON
        string) holding every word of C and some word y outside it, C not nullable,
        hi at least _REPEAT_WINDOW_FROM. After w of at most hi bytes both take the empty
        word alike (w has at most hi words of C), and both are empty alike: where Y*
        goes on after w, it goes on with the rest of w's last word of Y and then y,
        which is no sequence of words of C (Y's words split one way only), so neither
        complement leaves that out. None for other intersections."""
        members = self._args[expr]
        if len(members) != 2:
            return None
        kind, args, has_bool = self._kind, self._args, self._has_bool
        for complement, body in (members, members[::-1]):
            if kind[complement] != _NOT or kind[body] != _REPEAT or has_bool[body]:
                continue
            limit = args[complement][0]
            window = self.repeat_window(limit)  # C{0,hi} as a length limit: (C*, hi)
            letter, body_lo, body_hi = args[body]
            if window is None or body_lo != 0 or body_hi is not None:
                continue
            chars = args[limit][0]
            if self.is_prefix_code(letter) and self._subset(chars, letter) and not self._subset(letter, chars):
                return self.and_(body, self.not_(window[0])), window[1]
        return None

    def _limits_of(self, expr: int) -> list[tuple[int, list[int], int, int, int | None]]:
        """The readings of an intersection of two members without & or ~ as a limit on
        one of them, `B & Q·C{lo,hi}` (Q a sequence, maybe empty, before the repeat):
        (B, the parts of Q, C, lo, hi) for each member that ends in a repeat."""
        members = self._args[expr]
        kind, args, has_bool = self._kind, self._args, self._has_bool
        if len(members) != 2 or has_bool[members[0]] or has_bool[members[1]]:
            return []
        found = []
        for window, body in (members, members[::-1]):
            heads: list[int] = []
            x = window
            while kind[x] == _CONCAT:
                h, x = args[x]
                heads.append(h)
            if kind[x] == _REPEAT:
                chars, lo, hi = args[x]
                found.append((body, heads, chars, lo, hi))
        return found

    # A bounded repetition gives way to its star only where its counts are many: with a
    # few, the star's own derivatives cost the walk what the count states would.
    _REPEAT_WINDOW_FROM = 16

    def repeat_window(self, expr: int) -> tuple[int, int] | None:
        """(C*, hi) for `C{0,hi}` (C without & or ~, not nullable, hi at least
        _REPEAT_WINDOW_FROM), a length limit with nothing under it: a `maxLength` string
        without a pattern, or what a limit on a pattern of whole characters becomes
        (`ExprSet.and_`). No walk of at most hi bytes tells it from C*: a word of C* of
        at most hi bytes is a sequence of at most hi words of C, and a prefix of one is
        a prefix of a sequence of at most hi of them, since each word of C takes a byte
        at least. None for other expressions."""
        if self._kind[expr] != _REPEAT:
            return None
        body, lo, hi = self._args[expr]
        if lo != 0 or hi is None or hi < self._REPEAT_WINDOW_FROM:
            return None
        if self._has_bool[body] or self._nullable[body]:
            return None
        return self.repeat(body, 0, None), hi

    def count_window(self, expr: int) -> tuple[int, int, int, int] | None:
        """(twin, C, hi, T) for a length limit the mask walk can count exactly: `W·T` (or
        `W`, T = ε) where W is `C{0,hi}` as `repeat_window` reads it, or `A & C{0,hi}`
        as `window_parts` reads it with A made of words of C (`_made_of`); C a prefix code
        (the characters of a JSON string), T holding no window, and no word of T
        starting like one of C. `twin` is `without_windows(expr)`, `A·T` (A = C* for the
        repeat). A walk from the twin that counts the words of C it reads (one more each
        time a sequence of them is complete: C's own derivatives tell where) has after w
        the exact state `(A_w & C{0,hi-|w|})·T`; it agrees with the twin until hi words
        are read, and then allows only T, where A_w takes the empty word. None for other
        expressions."""
        kind = self._kind[expr]
        if kind == _CONCAT:
            head, tail = self._args[expr]
        else:
            head, tail = expr, 1
        if self._has_bool[tail] or self.window_reach(tail) is not None:
            return None
        body = chars = hi = None
        if self._kind[head] == _REPEAT:
            window = self.repeat_window(head)
            if window is not None:
                body, hi = window
                chars = self._args[head][0]
        elif self.window_parts(head) is not None:
            for b, heads, c, lo, h in self._limits_of(head):
                if not heads and lo == 0 and h is not None and self._made_of(b, c):
                    body, chars, hi = b, c, h
                    break
        if body is None or chars is None or hi is None:
            return None
        if self.first_bytes(chars) & self.first_bytes(tail) or not self.is_prefix_code(chars):
            return None
        twin = self._concat2(body, tail)
        # The twin's states must hold no window, now or after any derivative: a counted
        # walk reads `Lexer.counted` of them as exits, of windowed states as entries.
        if twin != self.without_windows(expr) or not self._windowless_for_good(twin):
            return None
        return twin, chars, hi, tail

    # Fewer counts than this are left to the lexer states of each count.
    _COUNT_BOUNDS_FROM = 4

    def count_bounds(self, expr: int) -> tuple[int, int, int | None, int] | None:
        """(C, lo, hi, after) for a repetition the mask walk can count exactly: `C{lo,hi}·T`
        with C a prefix code (no & or ~, not nullable), so that C's words split one way
        only and C's own automaton (`character_rows`) tells where each ends.

        Until lo words of C are read nothing else may come, not even T: a byte is allowed
        exactly where C's automaton goes on. Where hi is bounded, T takes no empty word
        and starts unlike any word of C, the walk counts on up to hi: between two words
        a byte that starts none starts T, and after hi words only T is left; then
        `after` is T. Otherwise, with lo at least _COUNT_BOUNDS_FROM, it counts the floor
        only and `after` is `C{0,hi-lo}·T`, hi None. A `minLength` or a short
        `maxLength` string is such a repetition, each count a lexer state of its own
        otherwise. None for other expressions."""
        kind = self._kind[expr]
        if kind == _CONCAT:
            head, tail = self._args[expr]
        else:
            head, tail = expr, 1
        if self._kind[head] != _REPEAT:
            return None
        chars, lo, hi = self._args[head]
        if self._has_bool[chars] or self._nullable[chars]:
            return None
        ceiling = (
            hi is not None
            and hi >= self._COUNT_BOUNDS_FROM
            and not self._nullable[tail]
            and not self._has_bool[tail]
            and not self.first_bytes(chars) & self.first_bytes(tail)
        )
        if not ceiling and lo < self._COUNT_BOUNDS_FROM:
            return None
        if not self.is_prefix_code(chars):
            return None
        if ceiling:
            return chars, lo, hi, tail
        rest = self._concat2(self.repeat(chars, 0, None if hi is None else hi - lo), tail)
        return chars, lo, None, rest

    def _windowless_for_good(self, expr: int) -> bool:
        """Whether neither `expr` nor any of its derivatives holds a window: no & or ~,
        and every bounded repetition below _REPEAT_WINDOW_FROM (a derivative only lowers
        a count, and `R{1,20}` becomes the window `R{0,19}`)."""
        if self._has_bool[expr]:
            return False
        known = self._windowless
        got = known.get(expr)
        if got is not None:
            return got
        seen = set()
        todo = [expr]
        while todo:
            x = todo.pop()
            if x in seen or known.get(x):
                continue
            seen.add(x)
            kind, args = self._kind[x], self._args[x]
            if kind == _REPEAT:
                if args[2] is not None and args[2] >= self._REPEAT_WINDOW_FROM:
                    known[expr] = False
                    return False
                todo.append(args[0])
            elif kind == _CONCAT or kind == _OR:
                todo.extend(args)
        # Every part of a windowless expression is one too: the next twin (the same
        # pattern, one character on) shares most of them.
        for x in seen:
            known[x] = True
        return True

    # The most states `character_rows` gives a code: a JSON string character has a few
    # dozen prefixes.
    _CHARACTER_STATES = 64

    def character_rows(self, chars: int) -> list[list[int]] | None:
        """The automaton of `C*` for a prefix code C, as rows of 256 next rows (-1: the
        byte starts no word of C there, or goes on with none) with row 0 its start, where
        a word of C has just been read. None past _CHARACTER_STATES states. Kept
        per code: every grammar with a length limit beside a pattern asks for a JSON
        string character's. The rows are shared: read them, never change them."""
        memo = self._character_rows
        if chars in memo:
            return memo[chars]
        rows = memo[chars] = self._character_rows_of(chars)
        return rows

    def _character_rows_of(self, chars: int) -> list[list[int]] | None:
        loop = self.repeat(chars, 0, None)
        index = {loop: 0}
        order = [loop]
        rows: list[list[int]] = []
        while len(rows) < len(order):
            x = order[len(rows)]
            classes = self.byte_classes(x)
            targets: dict[int, int] = {}
            for rep in set(classes):
                d = self.derivative(x, rep)
                if d == 0:
                    continue
                if d not in index:
                    if len(order) >= self._CHARACTER_STATES:
                        return None
                    index[d] = len(order)
                    order.append(d)
                targets[rep] = index[d]
            rows.append([targets.get(classes[b], -1) for b in range(256)])
        return rows

    def _may_hold_window(self, expr: int) -> bool:
        """False when `expr` surely holds no limit `without_windows` takes off: no & or
        ~, and no count as high as _REPEAT_WINDOW_FROM."""
        return self._has_bool[expr] or self._max_count[expr] >= self._REPEAT_WINDOW_FROM

    def window_reach(self, expr: int) -> int | None:
        """The least m of the length limits `without_windows` takes off `expr`, None when
        it takes none: a walk of at most m bytes cannot tell the two apart."""
        if not self._may_hold_window(expr):
            return None
        memo = self._reach
        if expr in memo:
            return memo[expr]
        k, a = self._kind[expr], self._args[expr]
        r: int | None = None
        if k == _AND:
            parts = self.window_parts(expr)
            r = None if parts is None else parts[1]
        elif k == _REPEAT:
            parts = self.repeat_window(expr)
            r = None if parts is None else parts[1]
        elif k == _OR:
            for m in a:
                got = self.window_reach(m)
                if got is not None and (r is None or got < r):
                    r = got
        elif k == _CONCAT:
            # Along the chain, as sequences are right-nested and may be long.
            x = expr
            while self._kind[x] == _CONCAT and self._may_hold_window(x):
                h, x = self._args[x]
                got = self.window_reach(h)
                if got is not None and (r is None or got < r):
                    r = got
            got = self.window_reach(x)
            if got is not None and (r is None or got < r):
                r = got
        memo[expr] = r
        return r

    def without_windows(self, expr: int) -> int:
        """`expr` with each length limit `window_parts` finds in the parts of its
        sequences and alternations taken off, and nothing else changed: every count
        left of a limit on one pattern gives the pattern's own expression (a repetition
        `repeat_window` finds, its star)."""
        if not self._may_hold_window(expr):
            return expr
        memo = self._unwindowed
        r = memo.get(expr)
        if r is not None:
            return r
        k = self._kind[expr]
        if k in (_CONCAT, _OR):
            r = self._with_parts(expr, self.without_windows)
        elif k == _AND:
            parts = self.window_parts(expr)
            r = expr if parts is None else parts[0]
        elif k == _REPEAT:
            parts = self.repeat_window(expr)
            r = expr if parts is None else parts[0]
        else:
            r = expr
        memo[expr] = r
        return r

    def _pair_steps(self, x: int, q: int, chars: int) -> list[tuple[int, int, int]]:
        """The steps of the pair searches of `within_repeats` and `fewest_repeats` from
        (x, q), x a derivative of the body and q one of the window's unfinished
        repetition (ε when it is finished): (x's derivative, q's derivative or ∅, 1 when
        the byte starts a repetition else 0), one per byte class where x goes on."""
        # From a finished repetition the next byte starts one more.
        side, step = (chars, 1) if q == 1 else (q, 0)
        _, reps = self.combined_classes(frozenset((self.byte_classes(x), self.byte_classes(side))))
        derivative = self.derivative
        out = []
        for rep in reps:
            x2 = derivative(x, rep)
            if x2 != 0:
                out.append((x2, derivative(side, rep), step))
        return out

    def within_repeats(self, body: int, head: int, chars: int) -> bool:
        """Whether every word of `body` is a word of `head·chars*`, by a search over pairs
        of derivatives as in `fewest_repeats`; False when unsure (an ambiguous window
        side, or more than _FEWEST_REPEATS_STATES pairs). None of them has & or ~."""
        key = (body, head, chars)
        memo = self._within
        got = memo.get(key)
        if got is not None:
            return got
        if self._splits_after_head(body, head, chars):
            memo[key] = True
            return True
        # The same question of `body` with its repeat counts unbounded first: a larger
        # language, so a yes holds for `body` too, and its derivatives carry no counts.
        # A word-count limit (`(\S+\s+){0,49}\S+`) made a pair per count left.
        relaxed = self._repeats_unbounded(body)
        if relaxed != body and self.within_repeats(relaxed, head, chars):
            memo[key] = True
            return True
        nullable = self._nullable
        got = True
        seen = {(body, head)}
        stack = [(body, head)]
        while stack:
            x, q = stack.pop()
            if q != 1 and nullable[q]:
                got = False  # the window's word may end here or go on: unsure
                break
            if nullable[x] and q != 1:
                got = False  # a word of body ends inside a repetition
                break
            for x2, q2, _ in self._pair_steps(x, q, chars):
                if q2 == 0:
                    got = False  # body goes on where the window cannot
                    break
                pair = (x2, q2)
                if pair in seen or memo.get((x2, q2, chars)):
                    continue
                if len(seen) >= self._FEWEST_REPEATS_STATES:
                    got = False
                    break
                check_compile_budget()
                seen.add(pair)
                stack.append(pair)
            if not got:
                break
        if got:
            # Every pair met holds too: a later search that reaches one stops there.
            for x, q in seen:
                memo[(x, q, chars)] = True
        else:
            memo[key] = False
        return got

    def _splits_after_head(self, body: int, head: int, chars: int) -> bool:
        """`within_repeats` read from the shapes: each member of `body` a sequence whose
        first factors, as long as every word of `head` (all of one length), lie in
        `head`, and whose rest is made of words of `chars` (`_made_of`). A pattern's
        derivative in the middle of a character is the rest of that character, then
        the pattern's rest: the search over pairs walked the whole pattern for it.
        False when unsure."""
        length = self.max_length(head)
        if length is None or length != self._min_len[head]:
            return False
        kind, args = self._kind, self._args
        for member in args[body] if kind[body] == _OR else (body,):
            factors: list[int] = []
            spelled = 0
            rest = member
            while spelled < length and kind[rest] == _CONCAT:
                factor, rest = args[rest]
                size = self.max_length(factor)
                if size is None or size != self._min_len[factor]:
                    return False
                factors.append(factor)
                spelled += size
            if spelled != length or not self._subset(self.concat(*factors), head):
                return False
            if not self._made_of(rest, chars):
                return False
        return True

    # Repeat counts up to this stay in `_repeats_unbounded`: a character's own
    # structure (three continuation bytes, four hex digits of an escape) keeps its shape.
    _COUNTS_KEPT = 8

    def _repeats_unbounded(self, expr: int) -> int:
        """`expr` (no & or ~) with the upper bound of each repeat above _COUNTS_KEPT
        dropped: its words and more, and the same least length."""
        if self._max_count[expr] <= self._COUNTS_KEPT:
            return expr
        memo = self._unbounded
        r = memo.get(expr)
        if r is not None:
            return r
        kind = self._kind[expr]
        if kind in (_CONCAT, _OR):
            r = self._with_parts(expr, self._repeats_unbounded)
        elif kind == _REPEAT:
            inner, lo, hi = self._args[expr]
            if hi is not None and hi <= self._COUNTS_KEPT:
                r = self.repeat(self._repeats_unbounded(inner), lo, hi)
            else:
                r = self.repeat(self._repeats_unbounded(inner), lo, None)
        else:
            r = expr
        memo[expr] = r
        return r

    # The longest piece `_made_of` checks against one character (a UTF-8 sequence is at
    # most 4 bytes, a JSON escape of a surrogate pair 12).
    _CHARACTER_BYTES = 12

    # The most derivatives `is_prefix_code` explores: a JSON string character has a few
    # dozen (UTF-8 sequences, escapes, surrogate pairs).
    _PREFIX_CODE_STATES = 256

    def is_prefix_code(self, expr: int) -> bool:
        """Whether `expr` (no & or ~) is a finite set of non-empty words none of which is
        a proper prefix of another, as the characters of a JSON string are: a sequence
        of its words then splits into them one way only. Explores the derivatives, none
        of which may both take the empty word and go on. False when unsure."""
        memo = self._prefix_codes
        got = memo.get(expr)
        if got is not None:
            return got
        got = False
        longest = self.max_length(expr)
        if not self._has_bool[expr] and not self._nullable[expr] and longest is not None:
            got = longest <= self._CHARACTER_BYTES
            seen = {expr}
            todo = [expr]
            while todo and got:
                state = todo.pop()
                for rep in set(self.byte_classes(state)):
                    d = self.derivative(state, rep)
                    if d == 0 or d in seen:
                        continue
                    if (self._nullable[d] and self.first_bytes(d)) or len(seen) >= self._PREFIX_CODE_STATES:
                        got = False
                        break
                    seen.add(d)
                    todo.append(d)
        memo[expr] = got
        return got

    def _plain_inclusion(self, y: int, x: int, bound: int, prefixes: bool = False) -> bool | None:
        """Y ⊆ X for expressions without & or ~: a search over pairs of their
        derivatives, byte class by byte class, for a word of Y that X lacks. It builds
        no intersection or complement, as the search of `Y & ~X` does. With `prefixes`,
        Y ⊆ P(X) instead: the word of Y missing is one that starts no word of X, so only
        an empty derivative of X fails. None when the pairs pass `bound`, or when an
        expression has & or ~."""
        if self._has_bool[y] or self._has_bool[x]:
            return None
        if x == 0:
            return y == 0
        seen = {(y, x)}
        todo = [(y, x)]
        while todo:
            a, b = todo.pop()
            if not prefixes and self._nullable[a] and not self._nullable[b]:
                return False
            if a == b:
                continue
            first = self.first_bytes(a)
            for ra, rb in set(zip(self.byte_classes(a), self.byte_classes(b), strict=True)):
                if not (first >> ra) & 1:
                    continue
                da = self.derivative(a, ra)
                if da == 0:
                    continue
                db = self.derivative(b, rb)
                if db == 0:
                    # Without & or ~ only ∅ is empty: da has a word, and db has none.
                    return False
                if (da, db) not in seen:
                    if len(seen) >= bound:
                        return None
                    seen.add((da, db))
                    todo.append((da, db))
        return True

    def _made_of(self, expr: int, chars: int) -> bool:
        """Whether every word of `expr` (no & or ~) is a sequence of words of `chars`:
        true when each piece of at most _CHARACTER_BYTES bytes its structure splits
        into lies inside `chars`, so a
        pattern made of whole JSON string characters, `(\\S+\\s+){0,11}`, is found
        inside `(char)*`. False when unsure."""
        key = (expr, chars)
        memo = self._made_of_memo
        got = memo.get(key)
        if got is not None:
            return got
        kind, args = self._kind, self._args
        k = kind[expr]
        longest = self.max_length(expr)
        if k in (_NOTHING, _EPS):
            got = True
        elif self._has_bool[expr]:
            got = False
        elif k == _BYTES:
            got = args[expr][0] & ~self._single_bytes(chars) == 0
        elif (
            longest is not None
            and 0 < self._min_len[expr]
            and longest <= self._CHARACTER_BYTES
            # piece ⊆ chars by the search over pairs of derivatives, never the search of
            # `piece & ~chars`, whose word-set exclusions took milliseconds in a mask
            # (neither has & or ~: `_limits_of` reads no window with them).
            and self._subset(expr, chars)
        ):
            got = True
        elif k == _CONCAT:
            # along the chain, as sequences are right-nested and may be long
            got = True
            x = expr
            while kind[x] == _CONCAT and got:
                h, x = args[x]
                got = self._made_of(h, chars)
            got = got and self._made_of(x, chars)
        elif k == _OR:
            got = all(self._made_of(m, chars) for m in args[expr])
        elif k == _REPEAT:
            got = self._made_of(args[expr][0], chars)
        else:
            got = False
        memo[key] = got
        return got

    def completion_bound(self, expr: int) -> int | None:
        """An upper bound on the shortest word that completes any prefix of a word of
        `expr` (any of its non-empty derivatives): read off the structure, no derivative
        taken. None under & or ~."""
        memo = self._completion
        if expr in memo:
            return memo[expr]
        kind, args, least = self._kind, self._args, self._min_len
        stack = [expr]
        while stack:
            x = stack[-1]
            if x in memo:
                stack.pop()
                continue
            k = kind[x]
            if k in (_AND, _NOT, _EXCL):
                memo[x] = None
                stack.pop()
                continue
            if k == _BYTES:
                memo[x] = 1
                stack.pop()
                continue
            if k not in (_CONCAT, _OR, _REPEAT):
                memo[x] = 0
                stack.pop()
                continue
            parts = args[x] if k in (_OR, _CONCAT) else (args[x][0],)
            pending = [c for c in parts if c not in memo]
            if pending:
                stack.extend(pending)
                continue
            found = [memo[c] for c in parts]
            r: int | None
            got = [g for g in found if g is not None]
            if len(got) < len(found):
                r = None
            elif k == _CONCAT:
                # inside the head: finish it, then the tail's least; inside the tail: its own
                r = max(got[0] + least[parts[1]], got[1])
            elif k == _OR:
                r = max(got)
            else:
                # inside one repetition: finish it, then the repetitions still owed
                r = got[0] + max(0, args[x][1] - 1) * least[parts[0]]
            memo[x] = r
            stack.pop()
        return memo[expr]

    def most_chained(self, expr: int, strings, max_steps: int, search=None) -> int | None:
        """The most non-empty matches of `expr` that follow one another inside one of
        `strings` (anywhere in it), or None when that takes more than `max_steps`
        steps or `expr` has more than CHAIN_STATES derivatives. `expr` has no & or ~.
        `strings` is a `PackedStrings` (or an iterable of bytes): strings in sorted order
        share the work of their common prefix.

        The walk itself is `chain_search_py` (`search`, compiled by the caller for mask
        walks) over a table of `expr`'s derivatives that grows as the walk meets them:
        the walk returns for each (derivative, byte class) it lacks, and Python fills
        that class's entries; a plain-Python walk over dicts cost milliseconds per group
        inside the first mask of a field."""
        packed = strings if isinstance(strings, PackedStrings) else PackedStrings(strings)
        if packed.count == 0:
            return 0
        search = chain_search_py if search is None else search
        cap = CHAIN_STATES
        table = np.full((cap, 256), CHAIN_UNKNOWN, dtype=np.int32)
        nullable = np.zeros(cap, dtype=np.uint8)
        actives = np.full((packed.longest + 1, cap), -1, dtype=np.int32)
        ends = np.zeros(packed.longest + 1, dtype=np.int32)
        walk = np.zeros(CHAIN_WALK_FIELDS, dtype=np.int64)
        walk[CHAIN_AT_STRING] = 0
        walk[CHAIN_AT_BYTE] = -1
        ids = [expr]
        index = {expr: 0}
        nullable[0] = self._nullable[expr]
        while True:
            code = search(
                packed.buf, packed.starts, packed.lcp, table, nullable, actives, ends, len(ids), walk, max_steps
            )
            if code == CHAIN_DONE:
                return int(walk[CHAIN_BEST])
            if code == CHAIN_GAVE_UP:
                return None
            state, byte = int(walk[CHAIN_NEED_STATE]), int(walk[CHAIN_NEED_BYTE])
            e = ids[state]
            cm = self.byte_classes(e)
            rep = cm[byte]
            d = self.derivative(e, rep)
            if d == 0:
                target = CHAIN_DEAD
            else:
                got = index.get(d)
                if got is None:
                    if len(ids) == cap:
                        return None
                    got = index[d] = len(ids)
                    ids.append(d)
                    nullable[got] = self._nullable[d]
                target = got
            table[state, np.frombuffer(cm, dtype=np.uint8) == rep] = target

    # Emptiness -------------------------------------------------------------------------
    def emptiness_known(self, expr: int) -> bool | None:
        """Whether `expr` is empty where that is already known (trivially, or decided or
        noted before), without a search; None where it is not."""
        if expr == 0:
            return True
        if not self._has_bool[expr]:
            return False
        return self._empty.get(expr)

    def note_not_empty(self, expr: int) -> None:
        """Records that `expr` has a string, as its maker knows for sure (a pattern's
        shortest string within a length limit): `is_empty` then answers without the
        search, which for a pattern beside a length limit is an analysis of its own."""
        if self._has_bool[expr]:
            self._empty.setdefault(expr, False)

    def is_empty(self, expr: int, bound: int | None = None) -> bool:
        """Is the language empty? Trivial without & and ~; otherwise explores the
        derivative graph (raises LimitExceeded past `bound` states, by default
        limits.max_lexer_states)."""
        return self._is_empty(expr, self.limits.max_lexer_states if bound is None else bound)

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
        if kind == _AND:
            fits = self._window_fits(expr)
            if fits is not None:
                empty[expr] = not fits
                return not fits
            if self._a_conjunct_word_fits(expr):
                empty[expr] = False
                return False
            if self._window_too_short(expr):
                empty[expr] = True
                return True
            if self._needs_a_byte_another_lacks(expr):
                empty[expr] = True
                return True
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
                check_compile_budget()
                if len(seen) == _COVER_CHECK_STATES and kind == _AND and self._complement_covers(expr):
                    # Every derivative of an empty language is empty too.
                    for x in seen:
                        empty[x] = True
                    return True
                if len(seen) > bound:
                    raise LimitExceeded(
                        "max_lexer_states", bound, f"deciding whether {self.to_str(expr, 200)} is empty"
                    )
                stack.append(y)
        # Every state reachable from expr is non-accepting: all of them are empty.
        for x in seen:
            empty[x] = True
        return True

    def _complement_covers(self, expr: int) -> bool:
        """Whether intersection `expr` is empty because a plain branch of a complemented
        member holds a plain member: X & ~(B | ...) with X ⊆ B. A lookahead's complement
        that came to take in the string's whole alphabet (`~(C* | ...)` beside a pattern
        of those characters) is such: the search of its states walks every one of them
        before it can say so. Only sufficient (False: not known)."""
        kind, args, has_bool = self._kind, self._args, self._has_bool
        plain = [m for m in args[expr] if not has_bool[m]]
        if not plain:
            return False
        for m in args[expr]:
            if kind[m] != _NOT:
                continue
            inner = args[m][0]
            for branch in args[inner] if kind[inner] == _OR else (inner,):
                if not has_bool[branch] and any(self._subset(p, branch) for p in plain):
                    return True
        return False

    # The longest candidate word `_a_conjunct_word_fits` tries: each byte of it is a
    # derivative of the whole intersection.
    _WITNESS_BYTES = 64

    def _a_conjunct_word_fits(self, expr: int) -> bool:
        """Whether the shortest word of one of `expr`'s plain conjuncts (no & or ~) is a
        word of the whole intersection. A `oneOf` of unanchored patterns makes each
        branch `P_i & ~P_j & ...`, "contains NEW and none of the others", whose search
        walks thousands of states before it meets `NEW` itself; the pattern's own
        shortest word most often fits, and trying it costs a derivative per byte.
        False means "not known": the search decides."""
        need = self._min_len[expr]
        for conjunct in self._args[expr]:
            if self._has_bool[conjunct]:
                continue
            word = self._shortest_word(conjunct, self._WITNESS_BYTES)
            if word is None:
                continue
            if self._word_fits(expr, word):
                return True
            if len(word) < need <= self._PADDED_WITNESS_BYTES:
                # Too short for a length limit beside it (a minLength beside a pattern,
                # each count left a state of its own, each searched): the same word
                # lengthened where the conjunct may repeat more often fits as a rule.
                padded = self._lengthened_word(conjunct, need - len(word), self._PADDED_WITNESS_BYTES)
                if padded is not None and self._word_fits(expr, padded):
                    return True
        return False

    # The longest lengthened word `_a_conjunct_word_fits` tries.
    _PADDED_WITNESS_BYTES = 256

    def _word_fits(self, expr: int, word: bytes) -> bool:
        """Whether intersection `expr` matches `word`: each conjunct on its own, whose
        derivatives the intersection's other states share (a length limit's counts
        left, beside one pattern), where the intersection's own are new for each."""
        for conjunct in self._args[expr]:
            x = conjunct
            for byte in word:
                x = self.derivative(x, byte)
                if x == 0:
                    return False
            if not self._nullable[x]:
                return False
        return True

    def _shortest_word(self, expr: int, budget: int) -> bytes | None:
        """A shortest word of `expr` (which has no & or ~), or None past `budget` bytes;
        each byte the smallest of its set."""
        return self._lengthened_word(expr, 0, budget)

    def _lengthened_word(self, expr: int, extra: int, budget: int) -> bytes | None:
        """`_shortest_word`, save that its leftmost repeats that may repeat more do so
        until it is at least `extra` bytes longer; None where they cannot, or past
        `budget` bytes."""
        out = bytearray()
        left = self._spell_into(expr, extra, budget, out)
        return bytes(out) if left is not None and left <= 0 else None

    def _spell_into(self, expr: int, extra: int, budget: int, out: bytearray) -> int | None:
        """Appends `_lengthened_word`'s word of `expr` to `out`; returns the bytes still
        wanted, or None past `budget` bytes in `out` or for an expression with & or ~."""
        kind, args = self._kind[expr], self._args[expr]
        if kind == _EPS:
            return extra
        if kind == _BYTES:
            if len(out) >= budget:
                return None
            out.append((args[0] & -args[0]).bit_length() - 1)
            return extra
        if kind == _CONCAT:
            x = expr
            while self._kind[x] == _CONCAT:
                h, x = self._args[x]
                left = self._spell_into(h, extra, budget, out)
                if left is None:
                    return None
                extra = left
            return self._spell_into(x, extra, budget, out)
        if kind == _OR:
            member = min(args, key=lambda m: self._min_len[m])
            return self._spell_into(member, extra, budget, out)
        if kind == _REPEAT:
            body, lo, hi = args
            grows = extra > 0 and (hi is None or hi > lo)
            if lo == 0 and not grows:
                return extra
            word = self._shortest_word(body, budget - len(out))
            if word is None:
                return None
            times = lo
            if grows and word:
                more = -(-extra // len(word))
                times += more if hi is None else min(more, hi - lo)
            if len(out) + len(word) * times > budget:
                return None
            out += word * times
            return extra - len(word) * (times - lo)
        return None

    def _window_fits(self, expr: int) -> bool | None:
        """Whether `B & Q·C{0,n}` (B and Q without & or ~) has a word, decided by
        `fewest_repeats(B, Q, C) <= n`; None for other shapes or when that gives up.
        This is a length limit on a pattern or format, in the middle of the lexeme: each
        count left is a node of its own, and exploring its derivatives made a new
        product per byte, where the fewest repetitions do not depend on n and are
        shared by every count."""
        for body, heads, chars, lo, hi in self._limits_of(expr):
            if lo != 0 or hi is None:
                continue
            if not heads and self._min_len[body] <= hi and self._made_of(body, chars):
                # B's shortest word is a sequence of words of C, each a byte at least, so
                # of at most hi of them: the limit keeps it. No search, and a string's
                # first mask need not wait for one.
                return True
            if self._shortest_word_in_window(body, heads, chars, hi):
                return True
            fewest = self.fewest_repeats(body, self.concat(*heads), chars)
            if fewest is None:
                continue
            return fewest <= hi
        return None

    def _needs_a_byte_another_lacks(self, expr: int) -> bool:
        """Whether a member of intersection `expr` has in every word a byte that another
        member never reads: then no word is in both. A URI has the `:` after its scheme,
        which no hostname has; the search over pairs of derivatives (a `oneOf` of the two
        formats, each beside a `maxLength`) walked the length counts of one against the
        other's states. Only sufficient (False: not known)."""
        needed, alphabet = self._byte_bounds(expr)
        return needed & ~alphabet != 0

    def _byte_bounds(self, expr: int) -> tuple[int, int]:
        """(bytes every word of `expr` holds, bytes some word may read): an under- and an
        over-estimate. A sequence needs what its factors need, an alternation what all
        its branches need, an intersection what any of its members needs; it reads what
        every member reads, a complement anything."""
        memo = self._byte_bounds_memo
        got = memo.get(expr)
        if got is not None:
            return got
        kind, args = self._kind, self._args
        k = kind[expr]
        if k == _BYTES:
            mask = args[expr][0]
            got = (mask if mask & (mask - 1) == 0 else 0, mask)
        elif k == _CONCAT:
            # Along the chain: sequences are right-nested and a literal's is long.
            needed = reads = 0
            x = expr
            while kind[x] == _CONCAT:
                h, x = args[x]
                n, r = self._byte_bounds(h)
                needed, reads = needed | n, reads | r
            n, r = self._byte_bounds(x)
            got = (needed | n, reads | r)
        elif k in (_OR, _AND):
            bounds = [self._byte_bounds(m) for m in args[expr]]
            needed, reads = bounds[0]
            for n, r in bounds[1:]:
                if k == _OR:
                    needed, reads = needed & n, reads | r
                else:
                    needed, reads = needed | n, reads & r
            got = (needed, reads)
        elif k == _REPEAT:
            n, r = self._byte_bounds(args[expr][0])
            got = (n if args[expr][1] >= 1 else 0, r)
        elif k == _EXCL:
            got = self._byte_bounds(args[expr][0])
        elif k == _NOT:
            got = (0, _FULL)
        else:
            got = (0, 0)
        memo[expr] = got
        return got

    def _window_too_short(self, expr: int) -> bool:
        """Whether `B & Q·C{lo,hi}` (B and Q without & or ~) is surely empty because
        every word of B that the window's side could take holds more than hi
        repetitions of C (`fewest_repeats`), whatever lo. An unanchored pattern that
        asks for ten digits in a string of ten characters, after one other character:
        the search walked every count of the product for it."""
        for body, heads, chars, _, hi in self._limits_of(expr):
            if hi is None:
                continue
            fewest = self.fewest_repeats(body, self.concat(*heads), chars)
            if fewest is not None and fewest > hi:
                return True
        return False

    def _shortest_word_in_window(self, body: int, heads: list[int], chars: int, hi: int) -> bool:
        """Whether B's shortest word is a word of `Q·C{0,hi}`: a word of Q·C* at most hi
        bytes long is one, as its repetitions of C, the empty ones left out, take a
        byte each. A yes costs a derivative of one plain expression per byte, shared
        by every count left (a length limit beside an email pattern: each position
        in the string is a count of its own), where `fewest_repeats` searches pairs.
        False means "not known"."""
        word = self._shortest_word(body, min(hi, self._WITNESS_BYTES))
        if word is None:
            return False
        x = self.concat(*heads, self.repeat(chars, 0, None))
        for byte in word:
            x = self.derivative(x, byte)
            if x == 0:
                return False
        return self._nullable[x]

    # States `fewest_repeats` explores before it gives up.
    _FEWEST_REPEATS_STATES = 4096

    def fewest_repeats(self, body: int, head: int, chars: int) -> int | None:
        """The fewest whole repetitions of `chars` in a word of `body` that is also a word
        of `head·chars*` (so `body & head·chars{0,n}` is empty exactly when n is below
        it): a shortest-path search over pairs of derivatives, one of `body` and one of
        the window's unfinished repetition, in which starting a repetition costs 1.
        NO_LEN when there is no such word; None (unsure) when the window's side is
        ambiguous (a repetition both ends and goes on, or `head` is nullable but not
        ε) or the search meets more than _FEWEST_REPEATS_STATES pairs. All three take
        no & or ~."""
        key = (body, head, chars)
        memo = self._fewest
        if key in memo:
            return memo[key]
        nullable = self._nullable
        got: int | None = _NO_LEN
        # 0-1 breadth first: a pair reached at no cost goes to the front.
        best = {(body, head): 0}
        frontier: list[tuple[int, int]] = [(body, head)]
        later: list[tuple[int, int]] = []
        cost = 0
        while frontier or later:
            if not frontier:
                frontier, later = later, []
                cost += 1
            x, q = frontier.pop()
            if best[(x, q)] != cost:
                continue  # reached again at a lower cost
            if q == 1 and nullable[x]:
                got = cost
                break
            if q != 1 and nullable[q]:
                got = None  # the window's word may end here or go on: not one count
                break
            for x2, q2, step in self._pair_steps(x, q, chars):
                if q2 == 0:
                    continue
                pair = (x2, q2)
                seen = best.get(pair)
                if seen is not None and seen <= cost + step:
                    continue
                if seen is None and len(best) >= self._FEWEST_REPEATS_STATES:
                    got = None
                    frontier = later = []
                    break
                if seen is None:
                    check_compile_budget()
                best[pair] = cost + step
                (later if step else frontier).append(pair)
        memo[key] = got
        return got

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
        except BUDGET_ERRORS:
            raise
        except LimitExceeded:
            return False

    def repeat_bounds(self, expr: int) -> tuple[int, int, int | None] | None:
        """(X, lo, hi) when `expr` is `X{lo,hi}` (a plain X is not), else None."""
        return self._args[expr] if self._kind[expr] == _REPEAT else None

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
        elif not (self._has_bool[y] or self._has_bool[x]):
            r = self._plain_inclusion(y, x, _SUBSET_STATES) is True
        else:
            try:
                r = self._is_empty(self.and_(y, self.not_(x)), _SUBSET_STATES)
            except BUDGET_ERRORS:
                raise
            except LimitExceeded:
                r = False
        self._subset_cache[key] = r
        return r

    def prefix_contains(self, s: int, lang: int) -> bool:
        """S ⊆ P(L) where P(L) = { w | ∃q. wq ∈ L } (docs/design/engine.md,
        "Slices"). An under-approximation: False when unsure."""
        key = (s, lang)
        r = self._prefix_cache.get(key)
        if r is None:
            # The reading of the expressions' shapes first; where it is unsure, a bounded
            # search over pairs of derivatives (a string with one character the slice
            # does not hold, `(\n)*·[^\n]·C*·"`, is beyond the shapes). Only for an
            # endless S in an endless L: a bounded L cannot hold an endless S, and the
            # shapes settle a bounded S's counts; the slicer asks for the bounded slices
            # inside an endless one no more once that one is held.
            r = self._prefix_contains(s, lang) or (
                self.max_length(s) is None
                and self.max_length(lang) is None
                and self._plain_inclusion(s, lang, _PREFIX_PAIRS, prefixes=True) is True
            )
            self._prefix_cache[key] = r
        return r

    def _prefix_contains(self, s: int, lang: int) -> bool:
        kind, args = self._kind, self._args
        if s == 0:
            return True
        if lang == 0:
            return False
        if kind[lang] == _OR:
            # P(A|B) = P(A) ∪ P(B); containment in one branch is enough.
            if any(self._prefix_contains(s, x) for x in args[lang]):
                return True
        if kind[s] == _OR:
            return all(self._prefix_contains(x, lang) for x in args[s])
        if s == 1:
            return self._surely_nonempty(lang)
        # S = Y{m',n'} (a plain Y is Y{1,1}).
        if kind[s] == _REPEAT:
            y, _, n_s = args[s]
        else:
            y, n_s = s, 1
        # L = H·T with T non-empty, so P(H) ⊆ P(L).
        if kind[lang] == _CONCAT:
            head, tail = args[lang]
            if not self._surely_nonempty(tail):
                return False
            # A pattern string that is partly matched (`(rest of a match)·C* | C*·match`,
            # then the closing quote) has an alternation or a sequence for H: asked of
            # H whole, that would need the slice's words to be each one H-word. P(H) is
            # the union of its branches' (or its own head's), and one of them may hold
            # them all.
            if kind[head] in (_OR, _CONCAT) and self._prefix_contains(s, head):
                return True
            # ε ∈ H, so P(T) ⊆ P(H·T).
            if self._nullable[head] and self._prefix_contains(s, tail):
                return True
        else:
            head = lang
        excluded_from = self._finitely_excluded_from(head)
        if excluded_from is not None and self._prefix_contains_unboundedly(s, excluded_from):
            # H = R minus finitely many words, and every word of S goes on in R in
            # infinitely many ways: some of them are not excluded. (A JSON key other than
            # the listed ones, `([ascii]*·C*·") \ {listed keys}`.)
            return True
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
            if (n_l is not None and n_l <= longest_excluded) or not self._has_a_nonempty_word(x):
                return False
        if not self._surely_nonempty(x):
            return False
        if n_l is not None and (n_s is None or n_s > n_l):
            return False
        return self._subset(y, x)

    def complement_joins(self, exprs) -> list[int]:
        """Expressions whose strings the union of `exprs` holds though no one of them
        may: A·T for each pair `(A & ~B)·T`, `B·T` among them, since (A & ~B) ∪ B ⊇ A.
        The keys a pattern matches beside the other keys (`additionalProperties` next
        to `patternProperties`): apart, each leaves out some keys; together, none."""
        kind, args, has_bool = self._kind, self._args, self._has_bool
        # Only an expression with & or ~ can hold a complement (a key state's literal
        # keys, most of its lexemes, have none), and a partner is any of them.
        bools = [e for e in exprs if has_bool[e]]
        if not bools:
            return []
        present = set(exprs)
        # Beside listed keys both lexemes leave those out (`R \ W`, an exclusion): a
        # partner is matched by what it excludes from, and the join leaves out every
        # word either leaves out, so it still holds only strings of the union.
        excluding = {args[e][0]: args[e][1] for e in bools if kind[e] == _EXCL}
        joins = []
        for e in bools:
            for core, joined, excluded in self._join_parts_of(e):
                partner = excluding.get(core)
                if partner is None:
                    if core not in present:
                        continue
                    partner = ()
                joins.append(self._exclude(joined, excluded + partner) if excluded or partner else joined)
        return joins

    def _join_parts_of(self, expr: int) -> tuple[tuple[int, int, tuple[bytes, ...]], ...]:
        """`complement_joins`' reading of one expression, kept (a lexer state per key
        prefix asks for the same few): per complemented B of `((A & ~B) \\ W)·T`, the
        partner's expression `B·T`, the join `A·T` and the words it leaves out, W·T."""
        got = self._join_parts.get(expr)
        if got is not None:
            return got
        kind, args = self._kind, self._args
        parts: list[tuple[int, int, tuple[bytes, ...]]] = []
        excluded: tuple[bytes, ...] = ()
        e = expr
        if kind[e] == _EXCL:
            e, excluded = args[e]
        head, tail = args[e] if kind[e] == _CONCAT else (e, 1)
        if kind[head] == _EXCL:
            # ((A & ~B) \ W)·T leaves out W·T, words while T is (else no join).
            head, inner = args[head]
            tail_words = self._finite_words(tail) if self._few_words(tail, 1) else None
            if tail_words is None:
                self._join_parts[expr] = ()
                return ()
            excluded = excluded + tuple(w + t for w in inner for t in tail_words)
        if kind[head] == _AND:
            for m in args[head]:
                if kind[m] == _NOT:
                    rest = [x for x in args[head] if x != m]
                    parts.append((self._concat2(args[m][0], tail), self._concat2(self.and_(*rest), tail), excluded))
        got = self._join_parts[expr] = tuple(parts)
        return got

    def _finitely_excluded_from(self, lang: int) -> int | None:
        """R where `lang` is R minus a finite set of words (R \\ W, or R & ~E with E of
        bounded length), else None."""
        kind, args = self._kind, self._args
        if kind[lang] == _EXCL:
            return args[lang][0]
        if kind[lang] != _AND:
            return None
        kept = [m for m in args[lang] if kind[m] != _NOT]
        if len(kept) != 1:
            return None
        for m in args[lang]:
            if kind[m] == _NOT and self.max_length(args[m][0]) is None:
                return None
        return kept[0]

    def _prefix_contains_unboundedly(self, s: int, lang: int) -> bool:
        """S ⊆ P(L), and every word of S has infinitely many completions in L. An
        under-approximation: the case of L = H·X{m,}·T with ε ∈ H, X with a non-empty
        word, T not empty and S = Y{m',n'} with Y ⊆ X: a word of S is a string of X's,
        completed by more of them and a word of T."""
        kind, args = self._kind, self._args
        if kind[lang] == _OR:
            return any(self._prefix_contains_unboundedly(s, x) for x in args[lang])
        if kind[lang] == _CONCAT:
            head, tail = args[lang]
            if self._nullable[head] and self._prefix_contains_unboundedly(s, tail):
                return True
            if not self._surely_nonempty(tail):
                return False
            if kind[head] == _OR:
                # (A|B)·T = A·T ∪ B·T, and one of them may hold it: an unanchored pattern
                # of alternatives (`Normal|Fighting`) is one `C*·w·C*` per word, each
                # then followed by the key's closing quote.
                return any(self._prefix_contains_unboundedly(s, self._concat2(x, tail)) for x in args[head])
        else:
            head = lang
        if kind[head] != _REPEAT or args[head][2] is not None:
            return False
        x = args[head][0]
        y = args[s][0] if kind[s] == _REPEAT else s
        return self._has_a_nonempty_word(x) and self._subset(y, x)

    def _has_a_nonempty_word(self, x: int) -> bool:
        """Whether X surely has a non-empty word (False when unsure)."""
        try:
            return bool(self.next_bytes(x).any())
        except BUDGET_ERRORS:
            raise
        except LimitExceeded:
            return False


# The derivative states an emptiness search of an intersection walks before it asks
# whether a complemented member holds a plain one (`_complement_covers`): most searches
# end sooner, at a state that accepts, and pay nothing for the check.
_COVER_CHECK_STATES = 8

# most_chained's derivative table: entries not worked out yet, and derivatives that are ∅.
CHAIN_UNKNOWN = -1
CHAIN_DEAD = -2
# The most derivatives of one group most_chained tables before it gives up.
CHAIN_STATES = 128
# chain_search_py's answers, and the fields of its `walk` array (where it stands, so a
# call after a return to Python goes on from there).
CHAIN_DONE, CHAIN_NEED, CHAIN_GAVE_UP = 0, 1, 2
CHAIN_AT_STRING, CHAIN_AT_BYTE, CHAIN_BEST, CHAIN_STEPS, CHAIN_NEED_STATE, CHAIN_NEED_BYTE = range(6)
CHAIN_WALK_FIELDS = 6


class PackedStrings:
    """Byte strings sorted and laid end to end for chain_search_py: `buf` holds them,
    string k is `buf[starts[k]:starts[k + 1]]`, and `lcp[k]` is how many leading bytes
    it shares with string k - 1."""

    def __init__(self, strings):
        ordered = sorted(set(strings))
        self.count = len(ordered)
        self.buf = np.frombuffer(b"".join(ordered), dtype=np.uint8).copy()
        lengths = np.fromiter((len(x) for x in ordered), dtype=np.int64, count=len(ordered))
        self.starts = np.zeros(len(ordered) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.starts[1:])
        self.lcp = np.zeros(len(ordered), dtype=np.int64)
        for k in range(1, len(ordered)):
            a, b = ordered[k - 1], ordered[k]
            n = min(len(a), len(b))
            p = 0
            while p < n and a[p] == b[p]:
                p += 1
            self.lcp[k] = p
        self.longest = int(lengths.max()) if len(ordered) else 0


def chain_search_py(buf, starts, lcp, table, nullable, actives, ends, n_states, walk, max_steps):
    """The longest chain of whole matches inside the strings `buf`/`starts`/`lcp` (a
    PackedStrings), over the derivative table `table` (state 0 is the group itself;
    CHAIN_DEAD for ∅). Per byte position of the current string, `actives[i, s]` is the
    most whole matches before the partial match in derivative s (-1: none) and
    `ends[i]` the longest chain ending at byte i; a chain may start at any byte, where
    it continues the chain ending there. A string re-uses the rows of the prefix it
    shares with the one before. Returns CHAIN_DONE (the answer in walk[CHAIN_BEST]),
    CHAIN_NEED when an entry of `table` is CHAIN_UNKNOWN (its state and byte in
    `walk`; call again once it is filled) or CHAIN_GAVE_UP past `max_steps` steps."""
    n = starts.shape[0] - 1
    k = walk[CHAIN_AT_STRING]
    resume = walk[CHAIN_AT_BYTE]
    best = walk[CHAIN_BEST]
    steps = walk[CHAIN_STEPS]
    while k < n:
        base = starts[k]
        length = starts[k + 1] - base
        i = resume if resume >= 0 else lcp[k]
        resume = -1
        while i < length:
            b = buf[base + i]
            start = ends[i]
            for s in range(n_states):
                actives[i + 1, s] = -1
            ended = 0
            for s in range(n_states):
                done = actives[i, s]
                if s == 0 and done < start:
                    done = start
                if done < 0:
                    continue
                steps += 1
                d = table[s, b]
                if d == CHAIN_UNKNOWN:
                    walk[CHAIN_AT_STRING] = k
                    walk[CHAIN_AT_BYTE] = i
                    walk[CHAIN_BEST] = best
                    walk[CHAIN_STEPS] = steps
                    walk[CHAIN_NEED_STATE] = s
                    walk[CHAIN_NEED_BYTE] = b
                    return CHAIN_NEED
                if d == CHAIN_DEAD:
                    continue
                if actives[i + 1, d] < done:
                    actives[i + 1, d] = done
                if nullable[d] and done + 1 > ended:
                    ended = done + 1
            if steps > max_steps:
                return CHAIN_GAVE_UP
            ends[i + 1] = ended
            if ended > best:
                best = ended
            i += 1
        k += 1
    walk[CHAIN_AT_STRING] = k
    walk[CHAIN_BEST] = best
    walk[CHAIN_STEPS] = steps
    return CHAIN_DONE


class RepeatBounds:
    """How many whole repetitions of a group fit inside one token of a vocabulary: what
    `_Analysis.clamped` may clamp repeat counts at for that vocabulary's mask walks.

    `floor` repetitions always count as possible; for more, the tokens at least
    `(floor + 1) * m` bytes long (m the group's least length) are searched for the longest
    chain of whole matches (`_Analysis.most_chained`): a shorter token holds `floor` at
    most. `long_strings(n)` gives the distinct strings of the vocabulary's tokens of at
    least n bytes (longest first), or None when there are too many to search; groups
    whose least length is 1 are left to the length bound, as for them nearly every long
    token (a run of spaces) is a long chain. Answers are kept per group in its ExprSet.
    `search` is `chain_search_py` or its compiled twin (the mask walker passes that)."""

    # Counts up to this many repetitions are never clamped through a vocabulary search.
    FLOOR = 12
    # Derivative lookups one group's search may take before it gives up.
    MAX_STEPS = 200_000

    def __init__(self, key, long_strings, search=None):
        self.key = key
        self.floor = self.FLOOR
        self._long_strings = long_strings
        self._search = search
        # least length -> those strings packed for the search (None: too many)
        self._packed: dict[int, PackedStrings | None] = {}

    def _packed_strings(self, min_len: int) -> "PackedStrings | None":
        if min_len not in self._packed:
            strings = self._long_strings(min_len)
            self._packed[min_len] = None if strings is None else PackedStrings(strings)
        return self._packed[min_len]

    def most_repeats(self, exprs: "_Analysis", inner: int) -> int | None:
        """The most whole repetitions of `inner` (no & or ~) one token can hold, at
        least `floor`; None when not worked out (the length bound then applies). Kept in
        `exprs`, whose node ids these are."""
        memo = exprs._most_repeats
        key = (self.key, self.floor, inner)
        if key in memo:
            return memo[key]
        got: int | None = None
        least = exprs._min_len[inner]
        if 2 <= least < (1 << 20):
            strings = self._packed_strings((self.floor + 1) * least)
            if strings is not None:
                found = exprs.most_chained(inner, strings, self.MAX_STEPS, self._search)
                if found is not None:
                    got = max(self.floor, found)
        memo[key] = got
        return got
