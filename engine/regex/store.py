"""The node storage of an `ExprSet`: the parallel per-node arrays, the caches, and the
constructors the derivative and analysis code builds with. `_Derivatives` and
`_Analysis` extend it, and `ExprSet` extends them with the constructors declared here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np

from ..limits import DEFAULT_LIMITS, LimitExceeded, Limits, check_compile_budget
from .nodes import AND as _AND
from .nodes import CONCAT as _CONCAT
from .nodes import EPS as _EPS
from .nodes import EXCL as _EXCL
from .nodes import MAX_HEIGHT
from .nodes import NOT as _NOT
from .nodes import NOTHING as _NOTHING
from .nodes import OR as _OR
from .nodes import REPEAT as _REPEAT

# The least length recorded for ∅ (no string at all): above any trie depth, and kept as
# the cap of every least length so that sums stay small.
NO_LEN = 1 << 30


class _Store:
    def __init__(self, limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        # Parallel per-node arrays.
        self._kind: list[int] = []
        self._args: list[tuple] = []
        self._nullable: list[bool] = []
        self._height: list[int] = []
        # Contains & or ~ (other than ~∅): only then can a non-∅ node be empty.
        self._has_bool: list[bool] = []
        # The largest finite repeat count in the node, lower or upper, times the least
        # length of what it repeats (at least 1): the bytes that many repetitions take at
        # least. `clamped` leaves a node whose count is within its depth alone without
        # looking inside.
        self._max_count: list[int] = []
        # The least length of the node's strings (for ∅, larger than any depth).
        self._min_len: list[int] = []
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
        # depth (or depth and a vocabulary's key) -> expression -> its clamped form: see
        # `clamped`.
        self._clamped: dict[int | tuple, dict[int, int]] = {}
        # (vocabulary's key, group) -> the most whole repetitions of the group one token
        # of the vocabulary holds, or None: see `RepeatBounds`.
        self._most_repeats: dict[tuple, int | None] = {}
        self._parsed: dict[tuple, int] = {}
        # Whole regex terms built by `build`, as `_parsed` keeps texts: the same schema
        # compiled again (or its enum in another schema) builds its lexemes at a lookup.
        self._built: dict[tuple, int] = {}
        # Parenthesized groups by (text, flags, extended): see _Parser._group_key.
        self._groups: dict[tuple, int] = {}
        self._literals: dict[bytes, int] = {}
        # Intersections already made, by their members: derivatives of an `&` meet the
        # same members again from many states (a key between overlapping patterns), and
        # simplifying them (covered complements, common heads) is most of their cost.
        self._meets: dict[frozenset[int], int] = {}
        # The words of each finite expression, sorted, or None: see `_finite_words`.
        self._words_of: dict[int, tuple[bytes, ...] | None] = {}
        # The bytes each expression without & or ~ can read, or None: see `_alphabet`.
        self._byte_bounds_memo: dict[int, tuple[int, int]] = {}
        # Bounds on the shortest completion inside each expression: see `completion_bound`.
        self._completion: dict[int, int | None] = {}
        # (body, head, characters) -> see `fewest_repeats`.
        self._fewest: dict[tuple[int, int, int], int | None] = {}
        # (body, head, characters) -> see `within_repeats`.
        self._within: dict[tuple[int, int, int], bool] = {}
        # Expression -> itself with unbounded repeats: see `_repeats_unbounded`.
        self._unbounded: dict[int, int] = {}
        # An intersection -> (pattern, bytes) when it is a length limit a walk of that
        # many bytes cannot see, or None: see `window_parts`.
        self._windows: dict[int, tuple[int, int] | None] = {}
        # Expression -> the least reach of those it holds: see `window_reach`.
        self._reach: dict[int, int | None] = {}
        # Expression -> itself without those length limits: see `without_windows`.
        self._unwindowed: dict[int, int] = {}
        # Expression -> whether it and its derivatives hold no window: see
        # `_windowless_for_good`.
        self._windowless: dict[int, bool] = {}
        # Expression -> whether it is a prefix code: see `is_prefix_code`.
        self._prefix_codes: dict[int, bool] = {}
        # Prefix code -> the automaton of its repeats, or None: see `character_rows`.
        self._character_rows: dict[int, list[list[int]] | None] = {}
        # (expression, characters) -> whether it is a sequence of those characters.
        self._made_of_memo: dict[tuple[int, int], bool] = {}
        # The node of each single byte, once made (literal() reads it per byte).
        self._byte_nodes: list[int] = [-1] * 256
        self._class_cache: dict[tuple, int] = {}
        # Multibyte classes by node, so to_str can print them as code point classes.
        self._class_of: dict[int, tuple] = {}
        self._subset_cache: dict[tuple[int, int], bool] = {}
        self._prefix_cache: dict[tuple[int, int], bool] = {}
        # complement_joins: expression -> (partner, join, words the join leaves out).
        self._join_parts: dict[int, tuple[tuple[int, int, tuple[bytes, ...]], ...]] = {}
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
        check_compile_budget()
        # Everything that can fail (a RecursionError deep in a caller included) comes
        # before the first append: the parallel arrays of a shared set stay aligned.
        counts, lens = self._max_count, self._min_len
        if kind == _CONCAT:
            count = max(counts[args[0]], counts[args[1]])
            least = min(lens[args[0]] + lens[args[1]], NO_LEN)
        elif kind == _OR:
            count = max([counts[x] for x in args])
            least = min([lens[x] for x in args])
        elif kind == _AND:
            count = max([counts[x] for x in args])
            least = max([lens[x] for x in args])
        elif kind == _REPEAT:
            inner = lens[args[0]]
            count = max(counts[args[0]], max(args[1], args[2] or 0) * max(1, min(inner, NO_LEN)))
            least = min(inner * args[1], NO_LEN)
        elif kind == _EXCL:
            count = counts[args[0]]
            least = lens[args[0]]
        elif kind == _NOT:
            count = counts[args[0]]
            least = 0
        elif kind == _NOTHING:
            count, least = 0, NO_LEN
        else:
            count, least = 0, 0 if kind == _EPS else 1
        self._kind.append(kind)
        self._args.append(args)
        self._nullable.append(nullable)
        self._height.append(height)
        self._has_bool.append(has_bool)
        counts.append(count)
        lens.append(least)
        if key:
            self._ids[key] = i
        return i

    def __len__(self) -> int:
        return len(self._kind)

    def kind_name(self, expr: int) -> str:
        return ("nothing", "epsilon", "bytes", "concat", "or", "and", "not", "repeat", "exclude")[self._kind[expr]]

    if TYPE_CHECKING:
        # Constructors and questions defined further down the hierarchy (`ExprSet`,
        # `_Analysis`) that the derivative and analysis code uses: declared for the type
        # checker only, so nothing here can shadow the real ones.
        def alt(self, *exprs: int) -> int: ...
        def concat(self, *exprs: int) -> int: ...
        def and_(self, *exprs: int) -> int: ...
        def not_(self, expr: int) -> int: ...
        def repeat(self, expr: int, lo: int, hi: int | None) -> int: ...
        def _concat2(self, a: int, b: int) -> int: ...
        def _exclude_sorted(self, expr: int, words: tuple[bytes, ...]) -> int: ...
        def _exclude(self, expr: int, words: Iterable[bytes]) -> int: ...
        def _few_words(self, expr: int, most: int) -> bool: ...
        def _single_bytes(self, expr: int) -> int: ...
        def _alphabet(self, expr: int) -> int | None: ...
        def _finite_words(self, expr: int) -> tuple[bytes, ...] | None: ...
        def is_empty(self, expr: int, bound: int | None = None) -> bool: ...
        def to_str(self, expr: int, max_chars: int = 2000) -> str: ...
