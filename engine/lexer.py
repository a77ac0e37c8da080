"""The lexer: sets of lexeme derivatives, with every transition cached in a flat table.

A lexer state is the set `{(lexeme i, regex R_i)}` of lexemes still possible after the
bytes read since the lexeme began, where `R_i` is the derivative of lexeme i's regex
by those bytes (docs/design/engine.md, "Lexemes and rows"). States are
hash-consed to ints and transitions live in `table[state, byte]`, so walking the
token trie is almost always one array lookup; the derivative engine runs only on a
miss (-1 in the table). A state's first miss computes one byte class; a second fills
the state's whole row (such states are met from many trie nodes), which halves the
derivatives computed against filling every row and keeps returns from the compiled
walk few. Bytes no live regex can start with go to DEAD on the first miss already (no
derivative needed), so a state whose other bytes are all dead, like the middle of a
literal, never misses twice. Regexes live in the process-wide `ExprSet.shared()`, so
lexemes that grammars have in common (strings, numbers, formats) are parsed and derived
once.

Most misses need no new derivative: the regexes' derivatives by the byte's class were
computed before, by this lexer or another over the same regex set, and what is left is
bookkeeping (collect the live pairs, find or add the target state). That part also
exists compiled, `lex_step_py` (compiled in mask.py), so the mask walk fills such an
entry where it stands instead of returning to Python. It reads the derivatives that
Python publishes in `DerivativeRows` (per expression and byte class, shared by every
lexer of the regex set) and the states mirrored in flat arrays, and it adds target
states itself; it leaves to Python whatever needs a derivative not computed yet, a
state that accepts several lexemes (their lexeme set), or a table to grow. For the walk, Python
then computes just the missing derivatives (`publish`), so no byte class the walk never
meets gets one, and the compiled step goes on; Python's own `step` (with the row and
class fills above) serves the other callers and what the compiled step cannot do.

Lexing is greedy with one byte of lookahead: a lexeme ends when the next byte cannot
extend any live lexeme and the current state accepts. Which lexemes may start is up
to the parser: `initial_state(allowed)` builds the start state from the lexemes the
current Earley row allows, plus the `%ignore` pseudo-lexeme (whitespace between
lexemes), which the parser never sees.
"""

from __future__ import annotations

import weakref

import numpy as np

from ._arrays import filled, grown
from ._jit import at, unpack_group
from .grammar import Grammar
from .limits import DEFAULT_LIMITS, LimitExceeded, Limits
from .regex import ExprSet, refine_byte_sets

DEAD = 0  # the empty state: no lexeme can continue
UNKNOWN = -1  # table entry not computed yet
NO_ACCEPT = -1  # lex_accept: the state accepts no lexeme
IGNORE_ONLY = -2  # lex_accept: only the %ignore pseudo-lexeme accepts here
SEVERAL_ACCEPTED = -3  # intern_pairs_py: the new state accepts several lexemes
# Lexer.narrow: a state with no narrower twin (or not looked at yet); else the twin's
# state << NARROW_SHIFT | the bytes a walk from it may read (Lexer.narrowing).
NO_NARROWING = -1
NARROW_SHIFT = 16
NARROW_BYTES_MASK = (1 << NARROW_SHIFT) - 1

# The rows a literal's chain makes at once (`DerivativeRows.make_rows`) for a state of
# more than _MANY_LEXEMES lexemes: an object's keys, whose first visit made every key's
# rows to the end. The state after `{` needs one row per key to step `"`, and after
# that the keys a token's bytes keep are few: a walk comes back for their rest. Other
# states make whole chains: a return to Python costs more than the rows.
_CHAIN_LINKS = 1
_MANY_LEXEMES = 64

# Lexer.counted: for a state with a length limit the walk counts (`count_entry`), its
# count left | the row of its characters' automaton in `char_next` << COUNT_ROW_SHIFT;
# for a state of a counted walk, the exact state once no character is left (the tail's,
# or DEAD); COUNT_UNKNOWN for others, or not worked out yet.
COUNT_UNKNOWN = -1
COUNT_ROW_SHIFT = 16
COUNT_LEFT_MASK = (1 << COUNT_ROW_SHIFT) - 1
# The rows of char_next, all codes together: the walk keeps a row in 13 bits.
COUNT_ROW_LIMIT = 1 << 13
# Lexer.floor: for a counted repetition `C{lo,hi}·T` the walk counts (`narrowing`), lo
# | the row of C's automaton << COUNT_ROW_SHIFT | hi << FLOOR_HI_SHIFT, hi NO_CEILING
# where the walk counts only up to lo; NO_FLOOR for other states.
NO_FLOOR = -1
FLOOR_HI_SHIFT = 32
FLOOR_ROW_MASK = (1 << (FLOOR_HI_SHIFT - COUNT_ROW_SHIFT)) - 1
NO_CEILING = COUNT_LEFT_MASK
# char_next's last column: 1 on each automaton's start row, where a character ends.
CHAR_START = 256

_ALL_BYTES = (1 << 256) - 1

# Fields of Lexer.core, the counters the compiled step shares with Python.
(
    CORE_STATES,
    CORE_COMPS,
    CORE_FUEL,
    CORE_FUEL_LIMIT,
    CORE_MAX_STATES,
    CORE_NUM_LEXEMES,
    CORE_START_MARKER,
    CORE_IGNORE,
    CORE_HASHED,
) = range(9)
# A state's hash over its (lexeme, expression) pairs, the same in Python and compiled:
# 40 bits, so a step of the mix stays inside int64.
STATE_HASH_SEED = 0x9E3779B1
_STATE_HASH_MASK = (1 << 40) - 1
# The compiled step also fills the byte's whole class for states of at most this many
# pairs. Measured over MaskBench (in-process A/B): 1 pair instead of 4 cost +11 % TBM avg;
# 16 gave -3.5 % avg and -7 % p90 against 4, and 64 less (-2 % avg) as wide states'
# compares cost more than the steps they spare.
_CLASS_FILL_MAX_PAIRS = 16


def hash_states_py(first, last, st_ptr, comp_lex, comp_expr, st_keys, st_vals):
    """Enters states first..last-1, whose pairs are in place, in the hash table (for
    lex_step_py, which enters the states Python added before it looks one up)."""
    size_mask = st_keys.shape[0] - 1
    for sid in range(first, last):
        h = STATE_HASH_SEED
        for k in range(st_ptr[sid], st_ptr[sid + 1]):
            h = ((h * 1000003) ^ (int(comp_lex[k]) * 1048583 + int(comp_expr[k]))) & _STATE_HASH_MASK
        slot = h & size_mask
        while st_vals[slot] >= 0:
            slot = (slot + 1) & size_mask
        st_keys[slot] = h
        st_vals[slot] = sid


# A table moves into a _TableSpace when it would grow past this size: below numpy's own
# huge-page threshold (4 MiB), whose first touch cost 6 ms in a mask.
_SPACE_FROM_BYTES = 2 << 20
# The fewest free rows a table in a _TableSpace keeps for the compiled step.
_SPACE_ROOM = 512


class _TableSpace:
    """Room for a large transition table that grows without moving.

    A doubling copy of a table of thousands of states (1 KiB each) took 15 ms inside
    the one mask that met it: a new map filled with UNKNOWN, then the old rows copied.
    From _SPACE_FROM_BYTES the table is instead a prefix view of a map sized for the state
    limit: memory the kernel backs only where it is touched, so growing fills just the
    new rows, a sixteenth of the table at a time."""

    def __init__(self, rows: int, width: int):
        import mmap

        self.region = mmap.mmap(-1, rows * width * 4)
        advise = getattr(self.region, "madvise", None)
        if advise is not None and hasattr(mmap, "MADV_NOHUGEPAGE"):
            advise(mmap.MADV_NOHUGEPAGE)
        self.full = np.frombuffer(self.region, dtype=np.int32).reshape(rows, width)

    def grown(self, table: np.ndarray, size: int) -> np.ndarray:
        """The table with `size` rows: the new rows UNKNOWN, the old ones where they are
        (`table` is this space's prefix) or copied in (the first time)."""
        size = min(size, self.full.shape[0])
        old = table.shape[0]
        if table.ctypes.data != self.full.ctypes.data:
            self.full[:old] = table
        self.full[old:size].fill(UNKNOWN)
        return self.full[:size]


# Rows one `make_rows` call makes down a word trie (a large enum), and how many levels
# of its branch nodes, before leaving the rest to the walk's returns: a walk inside the
# string goes about as deep as its longest tokens, and a trie made deeper than that is
# work a walk from the opening quote never uses.
_TRIE_ROWS = 4096
_TRIE_LEVELS = 4


class DerivativeRows:
    """The lexer's derivatives, as the compiled step reads them: for an expression `e`,
    `pool[base[e] + cmaps[cmap_of[e], byte]]` is its derivative by `byte` (NOTHING when
    empty), encoded `2 * d + nullable(d)`, or -1 when not computed yet. An expression
    gets a row (one entry per byte class, classes outside its first bytes already
    NOTHING) when a lexer state holding it is first stepped; entries are written as
    Python computes derivatives. One per regex set, shared by its lexers."""

    _by_exprs: "weakref.WeakKeyDictionary[ExprSet, DerivativeRows]" = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, exprs: ExprSet) -> "DerivativeRows":
        rows = cls._by_exprs.get(exprs)
        if rows is None:
            rows = cls._by_exprs[exprs] = cls(exprs)
        return rows

    def __init__(self, exprs: ExprSet):
        self.exprs = exprs
        self.base = filled(1024, -1, dtype=np.int64)
        self.cmap_of = np.zeros(1024, dtype=np.int32)
        self.cmaps = np.zeros((16, 256), dtype=np.uint8)
        self.pool = np.zeros(4096, dtype=np.int32)
        self.pool_used = 0
        # Counts replacements of the arrays above (growth), so that a lexer can tell
        # its step arrays still hold them without comparing each.
        self.generation = 0
        # Class maps (byte -> smallest byte of its class, from ExprSet.byte_classes), and
        # byte sets as ints -> (row of cmaps, class index per byte, smallest byte per class).
        self._cmap_index: dict[bytes | int, tuple[int, bytes, tuple[int, ...]]] = {}
        self._rows: dict[int, tuple[int, bytes]] = {}

    def __len__(self) -> int:
        """How many expressions have a row."""
        return len(self._rows)

    def __contains__(self, expr: int) -> bool:
        return expr in self._rows

    def row(self, expr: int, most_links: int | None = None) -> tuple[int, bytes]:
        """(base, class index per byte) of the expression's row, made if needed. The rows
        of a byte-headed expression's tails come with it, down to the end of the chain
        (the rest of a key or keyword): a walk that enters a literal steps through it, and
        each row it met missing would cost it a return to Python. `most_links` caps the
        chain made now (the rest is made when a walk reaches it)."""
        got = self._rows.get(expr)
        if got is None:
            self.make_rows((expr,), most_links)
            got = self._rows[expr]
        return got

    def make_rows(self, exprs, most_links: int | None = None) -> None:
        """The rows of `exprs` made where missing (as `row`), the chains of byte-headed
        ones with one pool write for them all: a lexer state's first look makes its
        lexemes' rows here, one per key in an object's key state, hundreds in a large
        object, and the keys' chains in the states after their first bytes."""
        budget = _TRIE_ROWS
        for _ in range(_TRIE_LEVELS + 1):
            if not exprs:
                break
            ends: list[int] = []
            links, byte_sets, codes, others = self.exprs.byte_chains_codes(exprs, self._rows, most_links, ends)
            tails: list[int] = []
            for e in others:
                tails += self._make_row(e)
            if links:
                self._enter_links(links, byte_sets, codes)
            # A chain may end where a word trie branches: that node is made too.
            tails += [t for t in ends if t not in self._rows and self.exprs.disjoint_heads(t) is not None]
            # The tails of a word trie's branches, level by level, until the trie is
            # made (or the budget spent: the walk makes the rest when it gets there).
            budget -= len(links) + len(others)
            exprs = [t for t in dict.fromkeys(tails) if t > 1 and t not in self._rows] if budget > 0 else []

    def _enter_links(self, links: list[int], byte_sets: list[int], codes: list[int]) -> None:
        """Rows for `byte_chains_codes`'s links: two entries each, NOTHING for the bytes
        outside its set and its tail's code for those inside (two classes, complete at
        once), with one growth check and one pool write for them all."""
        rows = self._rows
        values = [0] * (2 * len(links))
        values[1::2] = codes
        self._hold_expr(max(links))
        at = self._append_to_pool(values)
        cmap_of, bases = self.cmap_of, self.base
        index = self._cmap_index
        for e, byte_set in zip(links, byte_sets, strict=True):
            # `_classes_of`'s own lookup, inline: a call per link was a good part of a
            # chain's cost, and nearly every byte set has its classes already.
            info = index.get(byte_set)
            if info is None:
                info = self._classes_of(byte_set, None)
            cmap_of[e] = info[0]
            bases[e] = at
            rows[e] = (at, info[1])
            at += 2

    def _make_row(self, expr: int) -> list[int]:
        """Makes the row of `expr`, an expression without a byte head (see
        `make_rows`); returns the tails of its branches where it is a word trie's node
        (`disjoint_heads`), whose rows the walk will want next, else nothing."""
        self._hold_expr(expr)
        exprs = self.exprs
        cm = exprs.byte_classes(expr)
        at, classes, reps = self._classes_of(cm, cm)
        first = exprs.first_bytes(expr)
        # A class outside the first bytes is surely NOTHING (encoded 0); others unknown.
        values = [-((first >> rep) & 1) for rep in reps]
        heads = exprs.disjoint_heads(expr)
        if heads is not None:
            # Branches told apart by their first byte (a large enum's trie): a class's
            # derivative is the tail of the one branch it starts, known without a
            # derivative, so the walk goes on through the trie without a return.
            nullable = exprs.nullable
            for k, rep in enumerate(reps):
                if values[k]:
                    for byte_set, tail in heads:
                        if (byte_set >> rep) & 1:
                            values[k] = 2 * tail + nullable(tail)
                            break
            shadow = None
        else:
            shadow = exprs.shadow(expr)
        if shadow is not None and shadow[1] in self._rows:
            # Outside the guard the derivatives are the shadow's: a new key state takes
            # the string state's published entries instead of waiting for its own.
            guard, (shadow_base, shadow_classes) = shadow[0], self._rows[shadow[1]]
            pool = self.pool
            for k, rep in enumerate(reps):
                if values[k] and not (guard >> rep) & 1:
                    values[k] = int(pool[shadow_base + shadow_classes[rep]])
        base = self._append_to_pool(values)
        self.cmap_of[expr] = at
        self.base[expr] = base
        self._rows[expr] = (base, classes)
        return [tail for _, tail in heads] if heads is not None else []

    def _hold_expr(self, expr: int) -> None:
        """Grows `base` and `cmap_of` (doubling) to index expression `expr`."""
        if expr >= self.base.shape[0]:
            size = max(2 * self.base.shape[0], expr + 1)
            self.base = grown(self.base, size, -1)
            self.cmap_of = grown(self.cmap_of, size, 0)
            self.generation += 1

    def _append_to_pool(self, values: list[int]) -> int:
        """Writes `values` at the end of the pool (grown, doubling, if needed); returns
        where they start."""
        base = self.pool_used
        end = base + len(values)
        if end > self.pool.shape[0]:
            self.pool = grown(self.pool, max(2 * self.pool.shape[0], end), 0)
            self.generation += 1
        self.pool[base:end] = values
        self.pool_used = end
        return base

    def _classes_of(self, key, cm: bytes | None):
        """(row of cmaps, class index per byte, smallest byte per class) for a class map
        (`cm`, byte -> smallest byte of its class), or with `cm` None for the two classes
        of a byte set `key` (index 1 for its members)."""
        info = self._cmap_index.get(key)
        if info is None:
            if cm is None:
                classes = np.unpackbits(
                    np.frombuffer(key.to_bytes(32, "little"), dtype=np.uint8), bitorder="little"
                ).tobytes()
                reps: tuple[int, ...] = ()
            else:
                reps = tuple(sorted(set(cm)))
                index = bytearray(256)
                for k, rep in enumerate(reps):
                    index[rep] = k
                classes = cm.translate(index)
            at = len(self._cmap_index)
            if at >= self.cmaps.shape[0]:
                self.cmaps = grown(self.cmaps, 2 * self.cmaps.shape[0], 0)
                self.generation += 1
            self.cmaps[at] = np.frombuffer(classes, dtype=np.uint8)
            info = self._cmap_index[key] = (at, classes, reps)
        return info


# Index arrays of the bytes in a byte set, by set (the bytes no live regex starts with,
# a byte-headed row's blocks): few distinct sets recur across states and lexers.
_member_arrays: dict[int, np.ndarray] = {}
_MAX_MEMBER_ARRAYS = 10_000


def _members(byte_set: int) -> np.ndarray:
    """The bytes in a bitmask, as an index array (shared: few distinct sets recur)."""
    got = _member_arrays.get(byte_set)
    if got is None:
        bits = np.frombuffer(byte_set.to_bytes(32, "little"), dtype=np.uint8)
        got = np.flatnonzero(np.unpackbits(bits, bitorder="little"))
        got.flags.writeable = False  # shared by every lexer
        if len(_member_arrays) < _MAX_MEMBER_ARRAYS:
            _member_arrays[byte_set] = got
    return got


# Lexer.step_arrays, member by member (see _views.parse_spec): a tuple, or packed by
# address for the compiled walk.
STEP_ARRAYS_SPEC = "qqiiqqqi2Biq"


def intern_pairs_py(n, h, accepted, accepts_ignore, accept, table_rows, step_arrays):
    """The state whose `n` pairs were just written past the last state's (at
    core[CORE_COMPS]), with hash `h`: found in the mirrored states, or added as a new
    one whose `accept` entry is `accepted` (the lexeme set it accepts, or NO_ACCEPT);
    UNKNOWN, with nothing changed, when it accepts several lexemes (SEVERAL_ACCEPTED:
    their set is made in Python) or an array is full."""
    core, st_ptr, comp_lex, comp_expr, st_keys, st_vals, _, _, _, _, _ = unpack_group(step_arrays, STEP_ARRAYS_SPEC)
    out = core[CORE_COMPS]
    size_mask = st_keys.shape[0] - 1
    slot = h & size_mask
    while st_vals[slot] >= 0:
        if st_keys[slot] == h:
            sid = st_vals[slot]
            a = st_ptr[sid]
            if st_ptr[sid + 1] - a == n:
                same = True
                for k in range(n):
                    if comp_lex[a + k] != comp_lex[out + k] or comp_expr[a + k] != comp_expr[out + k]:
                        same = False
                        break
                if same:
                    return sid
        slot = (slot + 1) & size_mask
    target = core[CORE_STATES]
    if (
        accepted == SEVERAL_ACCEPTED
        or target >= table_rows
        or target >= core[CORE_MAX_STATES]
        or target + 2 > st_ptr.shape[0]
        or 2 * (target + 1) > st_keys.shape[0]
    ):
        return UNKNOWN
    st_ptr[target + 1] = out + n
    core[CORE_COMPS] = out + n
    core[CORE_STATES] = target + 1
    core[CORE_HASHED] = target + 1
    st_keys[slot] = h
    st_vals[slot] = target
    if accepted >= 0:
        accept[target] = accepted
    else:
        accept[target] = IGNORE_ONLY if accepts_ignore else NO_ACCEPT
    return target


# Lexer.start_codes: per lexeme, its expression, or one of these.
START_EMPTY = -1  # a lexeme that matches nothing: left out of start states
START_NULLABLE = -2  # matches the empty string: a start state holding it accepts it (Python)
START_UNDECIDED = -3  # emptiness not decided yet (a regex with & or ~): Python decides it in initial_state
# The derivative states a lexer's start may explore to decide a lexeme's emptiness up
# front (Lexer._start_codes); past them the lexer decides it when first needed.
EAGER_EMPTINESS_STATES = 64
# ... and the largest repeat count it may hold (see `ExprSet.has_count_above`).
EAGER_EMPTINESS_COUNT = 8


def start_state_py(allowed, n_allowed, with_ignore, accept, table_rows, step_arrays):
    """The lexer state at the start of a lexeme when the parser expects `allowed[:n_allowed]`
    (ascending), the same state `Lexer.initial_state` makes: found in the mirrored states
    or added; UNKNOWN, with nothing changed, when Python must make it. Compiled in
    mask.py for the walk, which meets most rows' lexeme sets there first."""
    core, st_ptr, comp_lex, comp_expr, st_keys, st_vals, _, _, _, _, start_codes = unpack_group(
        step_arrays, STEP_ARRAYS_SPEC
    )
    if core[CORE_HASHED] < core[CORE_STATES]:
        hash_states_py(core[CORE_HASHED], core[CORE_STATES], st_ptr, comp_lex, comp_expr, st_keys, st_vals)
        core[CORE_HASHED] = core[CORE_STATES]
    num_lexemes = core[CORE_NUM_LEXEMES]
    out = core[CORE_COMPS]
    if out + n_allowed + 2 > comp_lex.shape[0]:
        return UNKNOWN
    h = STATE_HASH_SEED
    n = 0
    for k in range(n_allowed):
        i = int(allowed[k])
        e = start_codes[i]
        if e == START_EMPTY:
            continue
        if e < 0:
            return UNKNOWN
        comp_lex[out + n] = i
        comp_expr[out + n] = e
        n += 1
        h = ((h * 1000003) ^ (i * 1048583 + int(e))) & _STATE_HASH_MASK
    accepts_ignore = False
    ignore_expr = start_codes[num_lexemes]
    if with_ignore and ignore_expr >= 0:
        i = int(core[CORE_IGNORE])
        comp_lex[out + n] = i
        comp_expr[out + n] = ignore_expr
        n += 1
        h = ((h * 1000003) ^ (i * 1048583 + int(ignore_expr))) & _STATE_HASH_MASK
        accepts_ignore = start_codes[num_lexemes + 1] == 1
    i = int(core[CORE_START_MARKER])
    comp_lex[out + n] = i
    comp_expr[out + n] = 1  # ExprSet.EPSILON
    n += 1
    h = ((h * 1000003) ^ (i * 1048583 + 1)) & _STATE_HASH_MASK
    # Typed as lex_step's call is (np.int64 counts and codes, an np.bool_ flag): a literal
    # argument, or one numba first types as a literal, compiles a version of its own.
    return intern_pairs_py(
        np.int64(n),
        np.int64(h),
        np.int64(NO_ACCEPT),
        np.bool_(accepts_ignore),
        accept,
        np.int64(table_rows),
        step_arrays,
    )


def lex_step_py(state, byte, table, accept, step_arrays):
    """table[state, byte] computed from the derivatives published in DerivativeRows, the
    target state found or added in the mirrored states, and entered in the table;
    UNKNOWN, with nothing changed, when Python must compute it (a derivative not
    published yet, a new state that accepts several lexemes, an array to grow, fuel spent).
    `step_arrays` is Lexer.step_arrays(), or those arrays packed. Compiled in mask.py
    for the walk."""
    core, st_ptr, comp_lex, comp_expr, st_keys, st_vals, der_base, cmap_of, cmaps, pool, _ = unpack_group(
        step_arrays, STEP_ARRAYS_SPEC
    )
    if core[CORE_FUEL] >= core[CORE_FUEL_LIMIT]:
        return UNKNOWN
    if core[CORE_HASHED] < core[CORE_STATES]:
        # States Python added (or all of them, after a rehash) are hashed here: in
        # compiled code, with no compiled function of its own for a process to load.
        hash_states_py(core[CORE_HASHED], core[CORE_STATES], st_ptr, comp_lex, comp_expr, st_keys, st_vals)
        core[CORE_HASHED] = core[CORE_STATES]
    start = st_ptr[state]
    end = st_ptr[state + 1]
    out = core[CORE_COMPS]
    if out + (end - start) > comp_lex.shape[0]:
        return UNKNOWN
    marker = core[CORE_START_MARKER]
    num_lexemes = core[CORE_NUM_LEXEMES]
    ignore = core[CORE_IGNORE]
    # The target's pairs are written past the last state's, where a new state's go.
    h = STATE_HASH_SEED
    n = 0
    accepted = NO_ACCEPT
    accepts_ignore = False
    for j in range(start, end):
        # int(): the plain twin must not do the hash in numpy's int32.
        i = int(comp_lex[at(j)])
        if i == marker:
            continue
        e = comp_expr[at(j)]
        if e >= der_base.shape[0]:
            return UNKNOWN
        base = der_base[at(e)]
        if base < 0:
            return UNKNOWN
        code = pool[at(base + cmaps[at(cmap_of[at(e)]), at(byte)])]
        if code < 0:
            return UNKNOWN
        d = int(code) >> 1
        if d == 0:
            continue
        comp_lex[at(out + n)] = i
        comp_expr[at(out + n)] = d
        n += 1
        h = ((h * 1000003) ^ (i * 1048583 + d)) & _STATE_HASH_MASK
        if code & 1:
            if i < num_lexemes:
                # One lexeme's set is the lexeme's own id (Lexer.lexset_id); a set of
                # several is made in Python.
                accepted = i if accepted == NO_ACCEPT else SEVERAL_ACCEPTED
            elif i == ignore:
                accepts_ignore = True
    target = intern_pairs_py(
        np.int64(n),
        np.int64(h),
        np.int64(accepted),
        np.bool_(accepts_ignore),
        accept,
        np.int64(table.shape[0]),
        step_arrays,
    )
    if target == UNKNOWN:
        return UNKNOWN
    core[CORE_FUEL] += 1
    table[at(state), at(byte)] = target
    if end - start <= _CLASS_FILL_MAX_PAIRS:
        # The bytes that fall in the same class as `byte` for every live regex have the
        # same target: fill them too, sparing the walk a step per byte (a state inside
        # a string is met with most of the 256). Wide states (every key of an object)
        # would cost more to compare than the steps they spare.
        for other in range(256):
            if table[at(state), at(other)] == UNKNOWN:
                same = True
                for j in range(start, end):
                    if comp_lex[at(j)] != marker:
                        r = at(cmap_of[at(comp_expr[at(j)])])
                        if cmaps[r, at(other)] != cmaps[r, at(byte)]:
                            same = False
                            break
                if same:
                    table[at(state), at(other)] = target
    return target


class LexemeSets:
    """The lexeme sets by id: ids below `singles` are the one-lexeme sets, lexeme i's
    id i, made on demand; the sets of several lexemes follow, in the order made."""

    def __init__(self, singles: int):
        self.singles = singles
        self._several: list[frozenset[int]] = []

    def __len__(self) -> int:
        return self.singles + len(self._several)

    def __getitem__(self, lid: int) -> frozenset[int]:
        if lid < 0:
            raise IndexError(f"lexeme set id {lid}")
        if lid < self.singles:
            return frozenset((lid,))
        return self._several[lid - self.singles]

    def append(self, lexemes: frozenset[int]) -> None:
        self._several.append(lexemes)


class Lexer:
    def __init__(self, grammar: Grammar, exprs: ExprSet | None = None, limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        self.exprs = exprs if exprs is not None else ExprSet.shared(limits)
        self.num_lexemes = len(grammar.lexemes)
        self._lexemes = grammar.lexemes
        self._lexeme_names: list[str] | None = None
        self.lexeme_expr: list[int] = []
        from .limits import GrammarError

        # Literals, most of a schema's lexemes, are what start states hold as they are:
        # only the regexes need the emptiness checks of _start_codes.
        codes: list[int] = []
        regex_lexemes: list[int] = []
        for lx in grammar.lexemes:
            try:
                if lx.literal is not None:
                    e = self.exprs.literal(lx.literal)
                    codes.append(e if lx.literal else START_NULLABLE)
                elif lx.expr is not None:
                    regex_lexemes.append(len(codes))
                    codes.append(START_UNDECIDED)
                    e = self.exprs.build(lx.expr)
                else:
                    regex_lexemes.append(len(codes))
                    codes.append(START_UNDECIDED)
                    flags = lx.flags.replace("E", "")
                    e = self.exprs.parse(lx.regex, flags, extended="E" in lx.flags)
            except GrammarError as err:
                raise GrammarError(f"in lexeme {lx.name}: {err}") from None
            self.lexeme_expr.append(e)
        # The %ignore pseudo-lexeme has index num_lexemes.
        self.ignore_index = self.num_lexemes
        if grammar.ignore:
            parts = [self.exprs.parse(rx) for rx in grammar.ignore]
            self.ignore_expr = self.exprs.alt(*parts)
        else:
            self.ignore_expr = ExprSet.NOTHING
        self.has_ignore = self.ignore_expr != ExprSet.NOTHING and not self.exprs.is_empty(self.ignore_expr)
        self.start_codes = self._start_codes(codes, regex_lexemes)
        # Start states carry this marker (dropped by the first byte), so "no byte of the
        # lexeme read yet" is never confused with a state that derivatives lead back to.
        self.start_marker = self.num_lexemes + 1

        self._state_index: dict[tuple[tuple[int, int], ...], int] = {}
        self._states: list[tuple[tuple[int, int], ...]] = []
        self.table = filled((64, 256), UNKNOWN, dtype=np.int32)
        self._space: _TableSpace | None = None
        self.accept = filled(64, NO_ACCEPT, dtype=np.int32)
        self.narrow = filled(64, NO_NARROWING, dtype=np.int64)
        self.counted = filled(64, COUNT_UNKNOWN, dtype=np.int64)
        self.floor = filled(64, NO_FLOOR, dtype=np.int64)
        # The automata of the character codes counted (`count_entry`), by code.
        self.char_next = np.zeros((1, CHAR_START + 1), dtype=np.int32)
        self._char_rows: dict[int, int | None] = {}
        # Exact states whose limit the walk may count, and those it may not.
        self._count_tails: dict[int, int] = {}
        self._count_checked: set[int] = set()
        # States whose narrowing (`narrowing`) was worked out.
        self._narrowed: set[int] = set()
        # Lexeme sets (the accepted lexemes of a state) hash-consed to ids for the parser;
        # a set of one lexeme is that lexeme's id (the compiled step makes such states).
        self._lexset_index: dict[frozenset[int], int] = {}
        self.lexsets = LexemeSets(self.num_lexemes)
        self._initial_cache: dict[tuple[frozenset[int], bool], int] = {}
        self._classes: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}
        self._live: dict[int, tuple[tuple[tuple[int, int, int, int, bytes], ...], int]] = {}
        self._missed: set[int] = set()
        self._dead: dict[int, np.ndarray] = {}
        # The states mirrored for the compiled step (lex_step_py): state s holds the
        # pairs comp_lex/comp_expr[st_ptr[s]:st_ptr[s + 1]], found by hash in an
        # open-addressing table (st_keys: hash, st_vals: state or -1).
        self.rows = DerivativeRows.of(self.exprs)
        self.core = np.zeros(9, dtype=np.int64)
        self.core[CORE_FUEL_LIMIT] = limits.lexer_fuel
        self.core[CORE_MAX_STATES] = limits.max_lexer_states
        self.core[CORE_NUM_LEXEMES] = self.num_lexemes
        self.core[CORE_START_MARKER] = self.start_marker
        self.core[CORE_IGNORE] = self.ignore_index
        self.st_ptr = np.zeros(65, dtype=np.int64)
        # Sized so that _reserve's room for the compiled step needs no growth at first.
        self.comp_lex = np.zeros(4096, dtype=np.int32)
        self.comp_expr = np.zeros(4096, dtype=np.int32)
        self.st_keys = np.zeros(256, dtype=np.int64)
        self.st_vals = filled(256, -1, dtype=np.int64)
        self._step_arrays: tuple | None = None
        # (Python's state count, pairs mirrored, rows generation) when step_arrays last
        # made room and checked its arrays: while all three stand, nothing was added or
        # replaced since, and the walk's every call skips that work.
        self._steady: tuple | None = None
        self._intern(())  # DEAD == 0
        self.table[DEAD, :] = DEAD

    @property
    def lexeme_names(self) -> list[str]:
        """Each lexeme's name, by index: for messages, made when first asked (a key's
        name is spelled from its literal only then)."""
        if self._lexeme_names is None:
            self._lexeme_names = [lx.name for lx in self._lexemes]
        return self._lexeme_names

    def literal_of(self, lexeme: int) -> bytes | None:
        """The text of a literal lexeme (a key, a keyword), None for the others."""
        return self._lexemes[lexeme].literal if lexeme < self.num_lexemes else None

    @property
    def states(self) -> list[tuple[tuple[int, int], ...]]:
        """Each state's (lexeme, expression) pairs, including those the compiled step added."""
        if self.core[CORE_STATES] > len(self._states):
            self._sync()
        return self._states

    @property
    def fuel_used(self) -> int:
        return int(self.core[CORE_FUEL])

    @fuel_used.setter
    def fuel_used(self, value: int) -> None:
        self.core[CORE_FUEL] = value

    def _use_fuel(self) -> None:
        core = self.core
        core[CORE_FUEL] += 1
        if core[CORE_FUEL] > self.limits.lexer_fuel:
            raise LimitExceeded("lexer_fuel", self.limits.lexer_fuel, "too many derivative computations")

    def _sync(self) -> None:
        """Takes in the states the compiled step added since Python last looked (it runs
        only after a flush, so Python has added none in between)."""
        states, index = self._states, self._state_index
        first, last = len(states), int(self.core[CORE_STATES])
        # One conversion for all the new states' pairs: they lie end to end.
        bounds = self.st_ptr[first : last + 1].tolist()
        lo = bounds[0]
        lex = self.comp_lex[lo : bounds[-1]].tolist()
        exprs = self.comp_expr[lo : bounds[-1]].tolist()
        for sid in range(first, last):
            a, b = bounds[sid - first] - lo, bounds[sid - first + 1] - lo
            pairs = tuple(zip(lex[a:b], exprs[a:b], strict=False))
            states.append(pairs)
            index[pairs] = sid

    def _start_codes(self, codes: list[int], regex_lexemes: list[int]) -> np.ndarray:
        """What start_state_py reads to make a start state as `initial_state` does: per
        lexeme its expression or a START_ code, then the %ignore expression (-1: none),
        then 1 when %ignore matches the empty string."""
        exprs = self.exprs
        codes = codes + [START_EMPTY, 0]
        for i in regex_lexemes:
            e = self.lexeme_expr[i]
            if exprs.emptiness_is_trivial(e):
                codes[i] = self._start_code(e, e == ExprSet.NOTHING)
                continue
            # With & or ~ (keys other than the listed ones) emptiness may take a search.
            # A short one nearly always settles it, and then the compiled walk makes the
            # start states that hold the lexeme: an undecided one sends each such state,
            # and the whole parser step that wanted it, to Python. Past the short search,
            # and for lexemes with counted repeats (a length limit beside a pattern, whose
            # check is an analysis of its own), it is left to initial_state, when a row
            # first expects the lexeme.
            known = exprs.emptiness_known(e)
            if known is not None:
                codes[i] = self._start_code(e, known)
                continue
            if exprs.has_count_above(((i, e),), EAGER_EMPTINESS_COUNT):
                continue
            try:
                empty = exprs.is_empty(e, bound=EAGER_EMPTINESS_STATES)
            except LimitExceeded as err:
                if err.limit != "max_lexer_states":
                    raise
                continue
            codes[i] = self._start_code(e, empty)
        if self.has_ignore:
            codes[self.num_lexemes] = self.ignore_expr
            codes[self.num_lexemes + 1] = int(exprs.nullable(self.ignore_expr))
        return np.array(codes, dtype=np.int64)

    def step_arrays(self) -> tuple:
        """What the compiled step reads and writes besides the table and accept array, in
        one tuple that stays the same object until one of its arrays is replaced. It may
        grow (replace) the table and accept array: read those after calling it."""
        rows = self.rows
        steady = self._steady
        if (
            steady is not None
            and steady[0] == len(self._states)
            and steady[1] == self.core[CORE_COMPS]
            and steady[2] == rows.generation
            and self._step_arrays is not None
        ):
            return self._step_arrays
        if self.core[CORE_STATES] < len(self._states):
            self._flush()
        else:
            self._reserve()
        arrays = self._step_arrays
        if (
            arrays is None
            or arrays[1] is not self.st_ptr
            or arrays[2] is not self.comp_lex
            or arrays[4] is not self.st_keys
            or arrays[6] is not rows.base
            or arrays[7] is not rows.cmap_of
            or arrays[8] is not rows.cmaps
            or arrays[9] is not rows.pool
        ):
            arrays = self._step_arrays = (
                self.core,
                self.st_ptr,
                self.comp_lex,
                self.comp_expr,
                self.st_keys,
                self.st_vals,
                rows.base,
                rows.cmap_of,
                rows.cmaps,
                rows.pool,
                self.start_codes,
            )
        self._steady = (len(self._states), int(self.core[CORE_COMPS]), rows.generation)
        return arrays

    def _reserve(self) -> None:
        """Keeps room in the arrays for states and pairs the compiled step may add: it
        gives up when one is full, and the Python step it leaves the byte to often adds
        nothing, which would leave it full for good."""
        core = self.core
        n, comps = int(core[CORE_STATES]), int(core[CORE_COMPS])
        # A table in a _TableSpace grows in place by the rows it fills, inside the mask
        # that needed them: small steps keep that fill short (a quarter of a large
        # schema's table was a slowest mask of its own).
        room = max(32, n // 4) if self._space is None else max(_SPACE_ROOM, n // 16)
        if n + room > self.table.shape[0]:
            self._grow_table(n + room)
        self._hold(n + room + 1, comps + max(2048, comps // 4))
        if 2 * (n + room) > self.st_keys.shape[0]:
            size = self.st_keys.shape[0]
            while 2 * (n + room) > size:
                size *= 4
            self.st_keys = np.zeros(size, dtype=np.int64)
            self.st_vals = filled(size, -1, dtype=np.int64)
            core[CORE_HASHED] = 0  # the compiled step enters them all again

    def _grow_table(self, need: int) -> None:
        """Grows the table (and `accept`) to at least `need` rows: doubling while small,
        by a sixteenth in place once it lives in a _TableSpace."""
        old = self.table.shape[0]
        if self._space is None and 2 * old * self.table.shape[1] * self.table.itemsize >= _SPACE_FROM_BYTES:
            self._space = _TableSpace(self.limits.max_lexer_states * 5 // 4 + 1024, self.table.shape[1])
        if self._space is not None:
            self.table = self._space.grown(self.table, max(need, old + old // 16))
        else:
            self.table = grown(self.table, max(need, 2 * old), UNKNOWN)
        self.accept = grown(self.accept, self.table.shape[0], NO_ACCEPT)
        self.narrow = grown(self.narrow, self.table.shape[0], NO_NARROWING)
        self.counted = grown(self.counted, self.table.shape[0], COUNT_UNKNOWN)
        self.floor = grown(self.floor, self.table.shape[0], NO_FLOOR)

    def _hold(self, states: int, pairs: int) -> None:
        """Grows st_ptr and the pair arrays (doubling) to hold this many states and pairs."""
        if states + 1 > self.st_ptr.shape[0]:
            self.st_ptr = grown(self.st_ptr, max(2 * self.st_ptr.shape[0], states + 1), 0)
        if pairs > self.comp_lex.shape[0]:
            size = max(2 * self.comp_lex.shape[0], pairs)
            self.comp_lex = grown(self.comp_lex, size, 0)
            self.comp_expr = grown(self.comp_expr, size, 0)

    # States ---------------------------------------------------------------------
    def _intern(self, pairs: tuple[tuple[int, int], ...]) -> int:
        if self.core[CORE_STATES] > len(self._states):
            self._sync()
        sid = self._state_index.get(pairs)
        if sid is not None:
            return sid
        sid = len(self._states)
        if sid >= self.limits.max_lexer_states:
            raise LimitExceeded("max_lexer_states", self.limits.max_lexer_states, "lexer DFA grew too large")
        self._states.append(pairs)
        self._state_index[pairs] = sid
        if sid >= self.table.shape[0]:
            self._grow_table(sid + 1)
        real = frozenset(i for i, e in pairs if i < self.num_lexemes and self.exprs.nullable(e))
        if real:
            self.accept[sid] = self.lexset_id(real)
        elif any(i == self.ignore_index and self.exprs.nullable(e) for i, e in pairs):
            self.accept[sid] = IGNORE_ONLY
        return sid

    def pairs_of(self, state: int) -> tuple[tuple[int, int], ...]:
        """`states[state]` without taking in every state the compiled step added since
        Python last looked (fast-forward asks for one state at a time)."""
        if state < len(self._states):
            return self._states[state]
        a, b = int(self.st_ptr[state]), int(self.st_ptr[state + 1])
        return tuple(zip(self.comp_lex[a:b].tolist(), self.comp_expr[a:b].tolist(), strict=True))

    def narrowing(self, state: int) -> int:
        """`narrow[state]`, worked out the first time: the state of the same lexemes
        without the length limits (`ExprSet.without_windows`) and the bytes a walk from
        it may read with the same tokens allowed and the same lexeme ends, or
        NO_NARROWING. Inside a string with `maxLength` over a pattern every count left
        is a state of its own, and the mask walk meets a new one per byte; where the
        tokens below a trie node are shorter than the count left, it goes on from the
        pattern's own state, which every count shares."""
        if state in self._narrowed:
            return int(self.narrow[state])
        exprs = self.exprs
        pairs = self.pairs_of(state)
        reach: int | None = None
        for _, e in pairs:
            r = exprs.window_reach(e)
            if r is not None and (reach is None or r < reach):
                reach = r
        if reach is not None and reach > 0:
            twin = self._intern(tuple([(i, exprs.without_windows(e)) for i, e in pairs]))
            if twin != state:
                self.narrow[state] = (twin << NARROW_SHIFT) | min(reach, NARROW_BYTES_MASK)
        elif len(pairs) == 1 and pairs[0][0] != self.start_marker:
            self._count_bounds(state, pairs[0])
        self._narrowed.add(state)
        return int(self.narrow[state])

    def _count_bounds(self, state: int, pair: tuple[int, int]) -> None:
        """Marks `state` in `floor` where its one lexeme is a repetition the walk counts
        (`ExprSet.count_bounds`, `C{lo,hi}·T`): `floor` holds lo, C's row in `char_next`
        and hi (NO_CEILING where only the floor is counted), and the narrowing is the
        state the walk goes on from once the count is done, with no bytes of reach: T's
        where the walk counts up to hi, else `C{0,hi-lo}·T`. A walk from it reads C's
        words, counting them: no lexer state per count."""
        lexeme, expr = pair
        found = self.exprs.count_bounds(expr)
        if found is None:
            return
        chars, lo, hi, after_expr = found
        row = self._character_row(chars)
        if row is None or lo >= NO_CEILING or (hi is not None and hi >= NO_CEILING):
            return
        after = self._intern(((lexeme, after_expr),))
        ceiling = NO_CEILING if hi is None else hi
        self.floor[state] = lo | (row << COUNT_ROW_SHIFT) | (ceiling << FLOOR_HI_SHIFT)
        self.narrow[state] = after << NARROW_SHIFT

    def count_entry(self, state: int) -> bool:
        """Whether the walk may count characters from `state`'s narrower twin
        (`narrowing`) where the tokens are too long for the twin's reach, marking `state`
        in `counted` the first time. So it may where `state` is one lexeme's length limit
        `ExprSet.count_window` reads, `(A & C{0,m})·T` or `C{0,m}·T`: from the twin
        `A·T`, counting the characters of C it reads, until m are read."""
        narrow = self.narrowing(state)
        if narrow == NO_NARROWING:
            return False
        if self.floor[state] != NO_FLOOR:
            return True
        if state not in self._count_checked:
            self._count_checked.add(state)
            pairs = self.pairs_of(state)
            found = self.exprs.count_window(pairs[0][1]) if len(pairs) == 1 else None
            if found is not None:
                # The twin `narrowing` made is `found`'s: both are `without_windows`.
                _, chars, hi, tail = found
                row = self._character_row(chars)
                if row is not None and hi < COUNT_LEFT_MASK:
                    self._count_tails[state] = tail
                    self.counted[state] = hi | (row << COUNT_ROW_SHIFT)
        return state in self._count_tails

    def _character_row(self, chars: int) -> int | None:
        """The start row in `char_next` of the automaton of `chars`, added if new."""
        if chars in self._char_rows:
            return self._char_rows[chars]
        rows = self.exprs.character_rows(chars)
        row = None
        if rows is not None and self.char_next.shape[0] + len(rows) <= COUNT_ROW_LIMIT:
            base = self.char_next.shape[0]
            table = np.array(rows, dtype=np.int32)
            table[table >= 0] += base
            starts = np.zeros((len(rows), 1), dtype=np.int32)
            starts[0] = 1
            self.char_next = np.concatenate([self.char_next, np.concatenate([table, starts], axis=1)])
            row = base
        self._char_rows[chars] = row
        return row

    def count_exit(self, state: int, entry: int) -> int:
        """The exact state a counted walk from `entry` goes on from at `state` (a state
        of the twin's, where the last character allowed has just been read): the tail's
        where the twin may read the tail's first byte there (A_w takes the empty word),
        else DEAD. Kept in `counted`: `state`'s regex ends with the tail."""
        got = int(self.counted[state])
        if got == COUNT_UNKNOWN:
            tail = self._count_tails[entry]
            ((lexeme, expr),) = self.pairs_of(state)
            exprs = self.exprs
            # `expr` is A_w·T: with T nullable, it takes the empty word iff A_w does; else
            # it may start with T's first bytes (none of them starts a character) iff so.
            if exprs.nullable(tail):
                ends = exprs.nullable(expr)
            else:
                ends = bool(exprs.first_bytes(expr) & exprs.first_bytes(tail))
            got = self._intern(((lexeme, tail),)) if ends else DEAD
            self.counted[state] = got
        return got

    def intern_state(self, pairs: tuple[tuple[int, int], ...]) -> int:
        """The state of these (lexeme, expression) pairs, made if new (a walk's
        representative state, MaskWalker._representative)."""
        return self._intern(pairs)

    def _flush(self) -> None:
        """Mirrors the states Python added since the last flush in the compiled step's
        arrays, all at once: a walk's return to Python adds one or two."""
        core = self.core
        first, last = int(core[CORE_STATES]), len(self._states)
        lex, exprs, ends = [], [], []
        end = int(core[CORE_COMPS])
        for pairs in self._states[first:last]:
            for i, e in pairs:
                lex.append(i)
                exprs.append(e)
            end += len(pairs)
            ends.append(end)
        at = int(core[CORE_COMPS])
        self._hold(last, end)
        self.comp_lex[at:end] = lex
        self.comp_expr[at:end] = exprs
        self.st_ptr[first + 1 : last + 1] = ends
        core[CORE_COMPS] = end
        core[CORE_STATES] = last
        self._reserve()

    def lexset_id(self, lexemes: frozenset[int]) -> int:
        if len(lexemes) == 1:
            (lexeme,) = lexemes
            return lexeme
        lid = self._lexset_index.get(lexemes)
        if lid is None:
            lid = len(self.lexsets)
            self.lexsets.append(lexemes)
            self._lexset_index[lexemes] = lid
        return lid

    def initial_state(self, allowed: frozenset[int], with_ignore: bool = True) -> int:
        """The state at the start of a lexeme when the parser allows `allowed`."""
        sid = self._initial_cache.get((allowed, with_ignore))
        if sid is None:
            if self.core[CORE_STATES] > len(self._states):
                self._sync()
            pairs = [(i, self.lexeme_expr[i]) for i in sorted(allowed) if not self._lexeme_empty(i)]
            if self.has_ignore and with_ignore:
                pairs.append((self.ignore_index, self.ignore_expr))
            pairs.append((self.start_marker, ExprSet.EPSILON))
            sid = self._intern(tuple(pairs))
            self._initial_cache[(allowed, with_ignore)] = sid
        return sid

    def _lexeme_empty(self, i: int) -> bool:
        code = int(self.start_codes[i])
        if code != START_UNDECIDED:
            return code == START_EMPTY
        e = self.lexeme_expr[i]
        empty = self.exprs.is_empty(e)  # raises LimitExceeded where undecidable in bounds
        self.start_codes[i] = self._start_code(e, empty)
        return empty

    def _start_code(self, e: int, empty: bool) -> int:
        return START_EMPTY if empty else START_NULLABLE if self.exprs.nullable(e) else e

    def step(self, state: int, byte: int) -> int:
        """table[state, byte], computing it with derivatives on a miss (for the byte's
        whole class: bytes no live regex tells apart share the transition)."""
        t = int(self.table[state, byte])
        if t != UNKNOWN:
            return t
        if self.core[CORE_STATES] > len(self._states):
            self._sync()
        if state in self._missed:
            # A second miss: the state is met with several bytes (in a trie walk, from
            # many nodes), so fill the row at once and spare the walk more returns.
            self.fill_row(state)
            return int(self.table[state, byte])
        # A first miss computes just this byte's class: most states are only ever
        # met with one (the middle of a keyword).
        self._missed.add(state)
        if self._fill_byte_headed(state):
            return int(self.table[state, byte])
        classes, reps = self._byte_classes(state)
        c = classes[byte]
        t = self._transition(state, reps[c])
        row = self.table[state]
        row[classes == c] = t
        # Bytes no live regex can start with lead to DEAD without a derivative. The walk
        # tries them all the time (sibling tokens), and each would be a second miss:
        # a return from the compiled walk and a whole row of derivatives.
        dead = self._dead.get(state)
        if dead is not None:
            row[dead] = DEAD
        return t

    def publish(self, state: int, byte: int) -> bool:
        """Computes and publishes the derivatives the compiled step lacks for `byte` from
        `state`, and nothing else: the walk's step does the rest, and only the classes
        it meets get derivatives. False when nothing was missing (the step gave up for
        another reason; `step` then does it all in Python)."""
        if self.core[CORE_STATES] > len(self._states):
            self._sync()
        known = self._live.get(state)
        progress = False
        if known is None:
            # The first look at a state makes the rows of its regexes: progress too, if
            # one was missing (else the step failed for another reason, and a return
            # to the walk would only fail again).
            rows_before = len(self.rows)
            live = self._live_of(state)[0]
            progress = len(self.rows) != rows_before
        else:
            live = known[0]
        live_derivative = self.exprs.live_derivative
        nullable = self.exprs.nullable
        pool = self.rows.pool
        rows = self.rows
        computed = False
        for _, e, first, base, classes in live:
            if (first >> byte) & 1:
                at = base + classes[byte]
                if pool[at] < 0:
                    if not computed:
                        self._use_fuel()
                        computed = progress = True
                    d = live_derivative(e, byte)
                    pool[at] = 2 * d + nullable(d)
                    if d and d not in rows:
                        # The walk steps the target state next, and a row missing
                        # there would cost it another return just to make it.
                        rows.row(d)
                        pool = rows.pool
        if not progress:
            # Every derivative is published, so the step gave up at the target: most
            # often a new state that accepts several lexemes, whose lexeme set is made
            # in Python. Adding that state here, pairs in the compiled step's order, lets
            # the step find it and fill the entry and its class, without the Python
            # step's class maps and table writes.
            pairs = []
            accepts = False
            for i, _, first, base, classes in live:
                if (first >> byte) & 1:
                    code = int(pool[base + classes[byte]])
                    if code >> 1:
                        pairs.append((i, code >> 1))
                        accepts = accepts or (bool(code & 1) and i < self.num_lexemes)
            if accepts:
                key = tuple(pairs)
                if key not in self._state_index:
                    self._use_fuel()
                    self._intern(key)
                    progress = True
        return progress

    def _fill_byte_headed(self, state: int) -> bool:
        """Fills the row of a state whose live regexes all begin with a byte set (inside
        literals, keys and keywords: a third of the states a walk meets), where a byte
        leads to the tails of the regexes whose set holds it. That needs neither
        derivatives nor byte classes, and the whole row costs about what one class costs
        the general way, so such a state never misses twice. False, with nothing
        changed, for other states."""
        byte_head = self.exprs.byte_head
        heads = []
        for i, e in self._states[state]:
            if i != self.start_marker:
                head = byte_head(e)
                if head is None:
                    return False
                heads.append((i, head[0], head[1]))
        is_empty = self.exprs.is_empty
        parts: list[tuple[int, tuple[tuple[int, int], ...]]]
        if len(heads) == 1:
            i, byte_set, tail = heads[0]
            parts = [(byte_set, ((i, tail),))]
        else:
            # Bytes that the same byte sets hold lead to the same target.
            blocks = refine_byte_sets(byte_set for _, byte_set, _ in heads)
            parts = [(block, tuple((i, tail) for i, byte_set, tail in heads if byte_set & block)) for block in blocks]
        targets = []
        for block, candidates in parts:
            # Same pairs, in the same order, as `_transition` would build.
            pairs = tuple(p for p in candidates if not is_empty(p[1]))
            if pairs:
                self._use_fuel()
                sid = self._state_index.get(pairs)
                targets.append((block, sid if sid is not None else self._intern(pairs)))
        # Interning may have grown (reallocated) the table: index it afresh.
        row = self.table[state]
        row[:] = DEAD
        for block, target in targets:
            row[_members(block)] = target
        return True

    def fill_row(self, state: int) -> None:
        """Computes every missing transition of `state`, one derivative per byte class."""
        if self.core[CORE_STATES] > len(self._states):
            self._sync()
        if self._fill_byte_headed(state):
            return
        classes, reps = self._byte_classes(state)
        known = self.table[state, list(reps)].tolist()
        targets = [t if t != UNKNOWN else self._transition(state, rep) for t, rep in zip(known, reps, strict=False)]
        # _transition may have grown (reallocated) the table: index it afresh.
        self.table[state] = np.array(targets, dtype=np.int32)[classes]

    def _live_of(self, state: int) -> tuple[tuple[tuple[int, int, int, int, bytes], ...], int]:
        """(live (lexeme, expr, first-byte mask, derivative row base, class per byte)
        tuples, union of the masks)."""
        got = self._live.get(state)
        if got is None:
            first_bytes = self.exprs.first_bytes
            row = self.rows.row
            # States often hold dozens of lexemes (every key of an object) of which a
            # byte keeps a few: first-byte masks skip the others without a derivative.
            pairs = self._states[state]
            # The missing rows of them all in one pass (`DerivativeRows.make_rows`).
            links = _CHAIN_LINKS if len(pairs) > _MANY_LEXEMES else None
            self.rows.make_rows([e for i, e in pairs if i != self.start_marker], links)
            live = tuple((i, e, first_bytes(e)) + row(e) for i, e in pairs if i != self.start_marker)
            starts = 0
            for _, _, first, _, _ in live:
                starts |= first
            got = (live, starts)
            self._live[state] = got
            if starts != _ALL_BYTES:
                self._dead[state] = _members(_ALL_BYTES ^ starts)
        return got

    def _transition(self, state: int, byte: int) -> int:
        self._use_fuel()
        known = self._live.get(state)
        live = known[0] if known is not None else self._live_of(state)[0]
        live_derivative = self.exprs.live_derivative
        nullable = self.exprs.nullable
        pool = self.rows.pool
        pairs = []
        for i, e, first, base, classes in live:
            if (first >> byte) & 1:
                d = live_derivative(e, byte)
                pool[base + classes[byte]] = 2 * d + nullable(d)  # published for the compiled step
                if d != ExprSet.NOTHING:
                    pairs.append((i, d))
        key = tuple(pairs)
        sid = self._state_index.get(key)
        return sid if sid is not None else self._intern(key)

    def _byte_classes(self, state: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """(class id per byte, smallest byte per class): bytes no live regex of the
        state tells apart share their transition."""
        cached = self._classes.get(state)
        if cached is not None:
            return cached
        maps = frozenset(self.exprs.byte_classes(e) for i, e in self._states[state] if i != self.start_marker)
        combined = self.exprs.combined_classes(maps)
        self._classes[state] = combined
        return combined

    # Introspection ----------------------------------------------------------------
    def accepted(self, state: int) -> int:
        return int(self.accept[state])

    def possible_lexemes(self, state: int) -> list[int]:
        return [i for i, _ in self.states[state] if i < self.num_lexemes]

    def can_extend(self, state: int) -> bool:
        """Whether some byte keeps the state alive (computed with derivatives, no table fill)."""
        return any(self.exprs.next_bytes(e).any() for i, e in self.states[state] if i != self.start_marker)

    def describe_state(self, state: int) -> str:
        names = [
            self.lexeme_names[i] if i < self.num_lexemes else "%ignore"
            for i, _ in self.states[state]
            if i != self.start_marker
        ]
        return "{" + ", ".join(names) + "}"
