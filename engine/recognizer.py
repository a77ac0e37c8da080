"""The recognizer: a grammar as a byte-level transition function.

A recognizer state is `(lexer state, Earley row id)`. Reading a byte either extends
the current lexeme (one lexer table lookup) or, when the byte cannot extend it and the
lexer accepts, ends the lexeme: the parser scans it (a cached child row) and the byte
starts the next lexeme in the lexer state the new row allows. This is the pure
`(state, byte) -> state or reject` function the trie walk drives (STYLE.md: the
walker knows nothing of grammars).

Everything the walk needs is also kept in flat arrays, so the numba walk in
`mask.py` can run it without Python: the lexer table, what each lexer state accepts,
the start lexer state of each row, and an open-addressing hash table of parser
steps `(row, lexeme set) -> child row`. Misses go back to Python, which fills the
entry and resumes the walk.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ._arrays import filled
from ._jit import njit
from .grammar import Grammar
from .lexer import DEAD, IGNORE_ONLY, NO_ACCEPT, UNKNOWN, Lexer
from .limits import DEFAULT_LIMITS, Limits
from .parser import EarleyParser

if TYPE_CHECKING:
    from .mask import _WalkSpace
    from .trie import TokenTrie

LEXSET_BITS = 24  # a step key is (row << LEXSET_BITS) | lexeme set id
NO_ROW = -1  # a parser step that scans nothing
STEP_EMPTY = -1  # free slot in the step table
SCAN_IN_PYTHON = -2  # a compiled scan's answer where Python must build the row

_uids = itertools.count()
_MAX_ACCEPTING_KEPT = 100_000


# Fields of Recognizer.start_fill.
START_COUNT, START_POOL_USED = 0, 1


def lexeme_set_hash(lexemes) -> int:
    """A hash of an ascending list of lexeme ids; the mask walk computes the same one."""
    h = 0
    for lx in lexemes:
        h = (h * 31 + lx + 1) & ((1 << 40) - 1)  # stays well inside int64 in compiled code
    return h


def step_slot(row: int, lexset: int, bits: int) -> int:
    # Small multipliers keep the product inside int64, so numba and Python agree bit for bit.
    return (row * 1000003 + lexset * 7919) & ((1 << bits) - 1)


def rehash_steps_py(old_keys, old_vals, keys, vals, bits):
    """Enters every step of the old table into the empty `keys`/`vals`; returns the count."""
    size_mask = (1 << bits) - 1
    lexset_mask = (1 << LEXSET_BITS) - 1
    count = 0
    for i in range(old_keys.shape[0]):
        key = old_keys[i]
        if key == STEP_EMPTY:
            continue
        slot = ((key >> LEXSET_BITS) * 1000003 + (key & lexset_mask) * 7919) & size_mask
        while keys[slot] != STEP_EMPTY:
            slot = (slot + 1) & size_mask
        keys[slot] = key
        vals[slot] = old_vals[i]
        count += 1
    return count


rehash_steps_jit = njit(rehash_steps_py)


def rehash_starts_py(old_keys, old_val, old_ptr, old_len, keys, val, ptr, length):
    """Enters every start state of the old start table into the empty one (keys -1),
    by the hash each entry keeps, so no lexeme set is hashed again: a set holds every
    key of an object, and a large object's hundreds of sets, hashed again one by one
    in Python, paused the mask that filled the table. Returns the count."""
    size_mask = keys.shape[0] - 1
    count = 0
    for i in range(old_keys.shape[0]):
        h = old_keys[i]
        if h == -1:
            continue
        slot = h & size_mask
        while keys[slot] != -1:
            slot = (slot + 1) & size_mask
        keys[slot] = h
        val[slot] = old_val[i]
        ptr[slot] = old_ptr[i]
        length[slot] = old_len[i]
        count += 1
    return count


rehash_starts_jit = njit(rehash_starts_py)
_rehash_loaded = False


def _load_rehashes() -> None:
    """One call on empty tables: loads the compiled rehashes from numba's cache when the
    first recognizer of a process is made, rather than in the mask that first grows a
    table (a pause of milliseconds in the middle of a generation)."""
    global _rehash_loaded
    empty_keys = np.zeros(0, dtype=np.int64)
    empty_vals = np.zeros(0, dtype=np.int32)
    rehash_steps_jit(empty_keys, empty_vals, empty_keys, empty_vals, 0)
    rehash_starts_jit(empty_keys, empty_keys, empty_keys, empty_keys, empty_keys, empty_keys, empty_keys, empty_keys)
    _rehash_loaded = True


@dataclass
class RecognizerCaches:
    """What the modules above the recognizer remember per recognizer (fast-forward, the
    mask walk, the slicer), in one typed place it owns: the entries go with the
    recognizer, and each is declared here instead of set on it from outside. Every
    entry depends only on the recognizer's tables, which only grow, so none goes stale."""

    # fastforward.forced_bytes: (state, limit) -> (forced bytes, state after them).
    forced_bytes: dict[tuple, tuple[bytes, tuple[int, int]]] = field(default_factory=dict)
    # fastforward._live_bytes: lexer state -> its live bytes as an int, or -1 for two or more.
    live_bytes: dict[int, int] = field(default_factory=dict)
    # fastforward._literal_run: lexer state -> (the bytes a literal-headed lexeme goes on
    # with before it may end or branch, the lexer state after them), or None.
    literal_runs: dict[int, tuple[bytes, int] | None] = field(default_factory=dict)
    # fastforward._literal_run_of: literal lexeme -> the lexer state once it is read whole.
    literal_ends: dict[int, int] = field(default_factory=dict)
    # mask.MaskWalker._representative: lexer state -> the state a walk stands it for,
    # which has the same live and dead bytes (fastforward reads that state's filled row).
    walk_twins: dict[int, int] = field(default_factory=dict)
    # fastforward.forced_tokens: (tokenizer, trie fingerprint, state, forced, recent) -> tokens.
    forced_tokens: dict[tuple, tuple[int, ...]] = field(default_factory=dict)
    # fastforward: (tokenizer, trie fingerprint, state, forced) -> where token healing
    # may begin, for forced bytes short enough that it may take them all back.
    heal_points: dict[tuple, int] = field(default_factory=dict)
    # fastforward: (tokenizer, recent tokens, forced bytes) -> their tokens in that context.
    tokenized: dict[tuple, list[int]] = field(default_factory=dict)
    # mask._WalkSpace.of: id(trie) -> (that trie, the walk space of this recognizer and it).
    walk_spaces: dict[int, tuple[TokenTrie, _WalkSpace]] = field(default_factory=dict)
    # slicer.applicable_slices: (slice regexes, lexer state) -> the slices it allows wholesale.
    slices: dict[tuple, tuple[bool, ...]] = field(default_factory=dict)
    # mask.MaskWalker: a walker of this recognizer whose packed arrays build a missing
    # parser step in compiled code (`step_child`), which `scan_missing` asks first. Weak:
    # the walker belongs to a matcher and goes with it.
    scanner: weakref.ref | None = None


class Recognizer:
    _cache: "OrderedDict[tuple[tuple, Limits], Recognizer]" = OrderedDict()
    _cache_lock = threading.Lock()
    CACHE_SIZE = 64

    def __init__(self, grammar: Grammar, limits: Limits = DEFAULT_LIMITS):
        self.grammar = grammar
        self.limits = limits
        # Names this recognizer in process-wide caches; unlike id(), never reused.
        self.uid = next(_uids)
        # is_accepting by state: asked before every mask (whether EOS may come), and
        # the answer never changes.
        self._accepting: dict[tuple[int, int], bool] = {}
        # Live bytes of a lexer state's full table row, as an int (bit b for byte b): a
        # full row never changes, and fast-forward asks each state of a forced run.
        self._live_byte_masks: dict[int, int] = {}
        self.caches = RecognizerCaches()
        self.lexer = Lexer(grammar, limits=limits)
        self.parser = EarleyParser(grammar, limits)
        self.row_lexstate = filled(64, UNKNOWN, dtype=np.int32)
        self.step_bits = 10
        if not _rehash_loaded:
            _load_rehashes()
        self.step_keys = filled(1 << self.step_bits, STEP_EMPTY, dtype=np.int64)
        self.step_vals = filled(1 << self.step_bits, NO_ROW, dtype=np.int32)
        self.step_fill = np.zeros(1, dtype=np.int64)  # entries in the step table
        self._start_states: dict[tuple[bytes, bool], int] = {}
        # For compiled callers that scan rows themselves (the mask walk): each lexeme
        # set's lexemes (flat, in id order), and the start lexer state of every lexeme
        # set a row has expected so far, by a hash of the set (see `start_state_of`).
        self.lexset_ptr = np.zeros(65, dtype=np.int64)
        self.lexset_lex = np.zeros(256, dtype=np.int64)
        # How many lexeme sets are mirrored, in an array that compiled callers read: as a
        # number in the tuple of scan_arrays, each new set made a new tuple, and the walk
        # packed again.
        self.lexsets_count = np.zeros(1, dtype=np.int64)
        # Made again only when one of its arrays is replaced.
        self._scan_arrays: tuple | None = None
        self.start_keys = filled(64, -1, dtype=np.int64)
        self.start_val = np.zeros(64, dtype=np.int64)
        self.start_ptr = np.zeros(64, dtype=np.int64)
        self.start_len = np.zeros(64, dtype=np.int64)
        self.start_pool = np.zeros(256, dtype=np.int64)
        # Entries in the start table and in its pool: the mask walk adds start states too.
        self.start_fill = np.zeros(2, dtype=np.int64)
        # One mask walk or step at a time per recognizer: they fill shared tables, and
        # the compiled walk runs without the GIL.
        self.lock = threading.RLock()
        self._register_row(self.parser.root)

    # A shared recognizer only grows: every Earley row, lexer state and step ever met
    # stays in its tables. A server using one grammar for days would grow without end
    # (and reach max_lexer_states), so past these a new matcher gets a fresh one;
    # matchers holding the old one keep it until they are done.
    MAX_SHARED_BYTES = 256 << 20
    MAX_SHARED_LEXER_STATES_FRACTION = 0.5

    def footprint_bytes(self) -> int:
        """Bytes held in the tables that grow with use: the parser's item pool and row
        index, the lexer table and the step table (the rest is small beside them)."""
        parser = self.parser
        return (
            parser.adv_sym.nbytes
            + parser.adv_pos.nbytes
            + parser.adv_origin.nbytes
            + parser.row_start.nbytes
            + parser.row_end.nbytes
            + parser.ks_ctx.nbytes
            + self.lexer.table.nbytes
            + self.step_keys.nbytes
            + self.step_vals.nbytes
            + self.row_lexstate.nbytes
        )

    def worn_out(self) -> bool:
        """Whether new matchers should get a fresh recognizer instead of this one."""
        return (
            len(self.lexer.states) > self.limits.max_lexer_states * self.MAX_SHARED_LEXER_STATES_FRACTION
            or self.footprint_bytes() > self.MAX_SHARED_BYTES
        )

    @classmethod
    def for_grammar(cls, grammar: Grammar, limits: Limits = DEFAULT_LIMITS) -> "Recognizer":
        """A shared recognizer per grammar content: compiled once, its tables warm for every matcher."""
        key = (grammar.content_key(), limits)
        with cls._cache_lock:
            rec = cls._cache.get(key)
            if rec is not None and not rec.worn_out():
                cls._cache.move_to_end(key)
                return rec
        rec = cls(grammar, limits)
        with cls._cache_lock:
            cls._cache[key] = rec
            while len(cls._cache) > cls.CACHE_SIZE:
                cls._cache.popitem(last=False)
        return rec

    @classmethod
    def release(cls, grammar: Grammar, limits: Limits = DEFAULT_LIMITS) -> bool:
        """Drop the shared recognizer of `grammar`'s content from the cache, for a
        caller done with the grammar. Matchers that hold it keep it; the memory goes
        with the last of them, at a moment the caller chooses, where eviction would
        free it while making the next grammar's matcher (a large recognizer takes
        about 0.2 ms to free). Whether one was cached."""
        with cls._cache_lock:
            return cls._cache.pop((grammar.content_key(), limits), None) is not None

    # Rows and parser steps -------------------------------------------------------
    def _reserve_row_lexstate(self, row: int) -> bool:
        if row < self.row_lexstate.shape[0]:
            return False
        grow = max(row + 1, 2 * self.row_lexstate.shape[0])
        lex = filled(grow, UNKNOWN, dtype=np.int32)
        lex[: self.row_lexstate.shape[0]] = self.row_lexstate
        self.row_lexstate = lex
        return True

    def make_room_for_step(self) -> bool:
        """Grows what a compiled scan (mask.scan_in_walk) needs room in for one more step
        and finds full: the parser's per-row arrays, the rows' start states, the cache of
        start states by lexeme set, the step table. True when something grew; then the compiled scan may build the step,
        where Python would take several times as long. False: Python must build it."""
        grew = self.parser.reserve_row()
        grew = self._reserve_row_lexstate(self.parser.rows_built) or grew
        # A new row's lexeme set may need its start state entered (at most every lexeme,
        # and %ignore): a full cache sent such rows to Python each time it filled up.
        grew = self._reserve_start(self.lexer.num_lexemes + 1) or grew
        if 2 * (self.step_count + 1) > self.step_keys.shape[0]:
            self._grow_steps()
            grew = True
        return grew

    def _register_row(self, row: int) -> None:
        self._reserve_row_lexstate(row)
        if self.row_lexstate[row] == UNKNOWN:
            allowed = self.parser.allowed_array(row)
            # %ignore only between lexemes, as in llguidance: never after the last one
            # (the model should end, not pad), nor before the first unless asked for.
            with_ignore = bool(allowed.shape[0]) and (row != self.parser.root or self.grammar.allow_initial_skip)
            # Rows are many and their lexeme sets few: look the start state up by the
            # set's bytes before building a frozenset for the lexer.
            key = (allowed.tobytes(), with_ignore)
            lexstate = self._start_states.get(key)
            if lexstate is None:
                lexstate = self.lexer.initial_state(frozenset(allowed.tolist()), with_ignore)
                self._start_states[key] = lexstate
                if with_ignore == bool(allowed.shape[0]):  # what every row but the root gets
                    self._remember_start(allowed, lexstate)
            self.row_lexstate[row] = lexstate

    @property
    def step_count(self) -> int:
        return int(self.step_fill[0])

    def _remember_start(self, allowed: np.ndarray, lexstate: int) -> None:
        if self._find_start(allowed) >= 0:
            return  # the mask walk made it and entered it already
        n = allowed.shape[0]
        self._reserve_start(n)
        fill = self.start_fill
        used = int(fill[START_POOL_USED])
        self.start_pool[used : used + n] = allowed
        fill[START_POOL_USED] = used + n
        self._insert_start(allowed, used, lexstate)

    def _reserve_start(self, lexemes: int) -> bool:
        """Room in the start-state cache for one more lexeme set of `lexemes` lexemes, as
        the compiled scan checks it; True when an array grew."""
        fill = self.start_fill
        grew = False
        if 2 * (fill[START_COUNT] + 1) > self.start_keys.shape[0]:
            self._scan_arrays = None
            size = 2 * self.start_keys.shape[0]
            old = (self.start_keys, self.start_val, self.start_ptr, self.start_len)
            self.start_keys = filled(size, -1, dtype=np.int64)
            self.start_val = np.zeros(size, dtype=np.int64)
            self.start_ptr = np.zeros(size, dtype=np.int64)
            self.start_len = np.zeros(size, dtype=np.int64)
            fill[START_COUNT] = rehash_starts_jit(*old, self.start_keys, self.start_val, self.start_ptr, self.start_len)
            grew = True
        used = int(fill[START_POOL_USED])
        if used + lexemes > self.start_pool.shape[0]:
            grown = np.zeros(max(2 * self.start_pool.shape[0], used + lexemes), dtype=np.int64)
            grown[:used] = self.start_pool[:used]
            self.start_pool = grown
            self._scan_arrays = None
            grew = True
        return grew

    def _find_start(self, allowed: np.ndarray) -> int:
        """The start state entered for this lexeme set, or -1."""
        h = lexeme_set_hash(allowed.tolist())
        size_mask = self.start_keys.shape[0] - 1
        slot = h & size_mask
        n = allowed.shape[0]
        while self.start_keys[slot] != -1:
            if self.start_keys[slot] == h and self.start_len[slot] == n:
                ptr = int(self.start_ptr[slot])
                if (self.start_pool[ptr : ptr + n] == allowed).all():
                    return int(self.start_val[slot])
            slot = (slot + 1) & size_mask
        return -1

    def _insert_start(self, allowed: np.ndarray, ptr: int, lexstate: int) -> None:
        h = lexeme_set_hash(allowed.tolist())
        size_mask = self.start_keys.shape[0] - 1
        slot = h & size_mask
        while self.start_keys[slot] != -1:
            slot = (slot + 1) & size_mask
        self.start_keys[slot] = h
        self.start_val[slot] = lexstate
        self.start_ptr[slot] = ptr
        self.start_len[slot] = allowed.shape[0]
        self.start_fill[START_COUNT] += 1

    def sync_lexsets(self) -> None:
        """Mirrors lexeme sets the lexer made since the last call into the flat arrays."""
        lexsets = self.lexer.lexsets
        k = int(self.lexsets_count[0])
        if k == len(lexsets):
            return
        ptr = self.lexset_ptr
        if len(lexsets) + 1 > ptr.shape[0]:
            grown = np.zeros(2 * (len(lexsets) + 1), dtype=np.int64)
            grown[: k + 1] = ptr[: k + 1]
            self.lexset_ptr = ptr = grown
            self._scan_arrays = None
        singles = lexsets.singles
        if k < singles:
            # The one-lexeme sets, lexeme i's at id i, at once: a grammar may have
            # thousands of lexemes (an object's keys).
            if singles > self.lexset_lex.shape[0]:
                grown = np.zeros(2 * singles, dtype=np.int64)
                grown[:k] = self.lexset_lex[:k]
                self.lexset_lex = grown
                self._scan_arrays = None
            ptr[k + 1 : singles + 1] = np.arange(k + 1, singles + 1)
            self.lexset_lex[k:singles] = np.arange(k, singles)
            k = singles
        for i in range(k, len(lexsets)):
            members = sorted(lexsets[i])
            start = int(ptr[i])
            end = start + len(members)
            if end > self.lexset_lex.shape[0]:
                grown = np.zeros(max(end, 2 * self.lexset_lex.shape[0]), dtype=np.int64)
                grown[:start] = self.lexset_lex[:start]
                self.lexset_lex = grown
                self._scan_arrays = None
            self.lexset_lex[start:end] = members
            ptr[i + 1] = end
        self.lexsets_count[0] = len(lexsets)

    def scan_arrays(self) -> tuple:
        """The recognizer's part of what mask.scan_in_walk needs, valid until an array is
        replaced or lexeme sets are added."""
        self.sync_lexsets()
        arrays = self._scan_arrays
        if arrays is None:
            arrays = self._scan_arrays = (
                self.step_fill,
                self.lexset_ptr,
                self.lexset_lex,
                self.lexsets_count,
                self.start_keys,
                self.start_val,
                self.start_ptr,
                self.start_len,
                self.start_pool,
                self.start_fill,
            )
        return arrays

    def scan(self, row: int, lexset: int) -> int:
        """Child row after scanning lexeme set `lexset` in `row` (NO_ROW if nothing scans); fills the step table."""
        key = (row << LEXSET_BITS) | lexset
        bits = self.step_bits
        slot = step_slot(row, lexset, bits)
        keys = self.step_keys
        while keys[slot] != STEP_EMPTY:
            if keys[slot] == key:
                return int(self.step_vals[slot])
            slot = (slot + 1) & ((1 << bits) - 1)
        return self.scan_missing(row, lexset)

    def scan_missing(self, row: int, lexset: int) -> int:
        """`scan` for a step the caller found missing from the step table: built in
        compiled code as the mask walk builds it, where a walker of this recognizer is
        alive and nothing needs Python, else here."""
        if lexset >= (1 << LEXSET_BITS):
            raise OverflowError("too many distinct lexeme sets")
        scanner = self.caches.scanner
        walker = scanner() if scanner is not None else None
        if walker is not None:
            child = walker.step_child(row, lexset)
            if child == SCAN_IN_PYTHON and self.make_room_for_step():
                child = walker.step_child(row, lexset)
            if child != SCAN_IN_PYTHON:
                return child
        return self.scan_in_python(row, lexset)

    def scan_in_python(self, row: int, lexset: int) -> int:
        """`scan_missing` built here: where the compiled scan has said it cannot."""
        if lexset >= (1 << LEXSET_BITS):
            raise OverflowError("too many distinct lexeme sets")
        key = (row << LEXSET_BITS) | lexset
        child = self.parser.scan(row, lexset, self.lexer.lexsets[lexset])
        if child >= 0:
            self._register_row(child)
        self._insert_step(key, child)
        return child

    def _grow_steps(self) -> None:
        old_keys, old_vals = self.step_keys, self.step_vals
        self.step_bits += 1
        self.step_keys = filled(1 << self.step_bits, STEP_EMPTY, dtype=np.int64)
        self.step_vals = filled(1 << self.step_bits, NO_ROW, dtype=np.int32)
        # Compiled: re-entering a million steps one by one in Python took seconds.
        self.step_fill[0] = rehash_steps_jit(old_keys, old_vals, self.step_keys, self.step_vals, self.step_bits)

    def _insert_step(self, key: int, child: int) -> None:
        if 2 * (self.step_count + 1) > self.step_keys.shape[0]:
            self._grow_steps()
        bits = self.step_bits
        slot = step_slot(key >> LEXSET_BITS, key & ((1 << LEXSET_BITS) - 1), bits)
        while self.step_keys[slot] != STEP_EMPTY:
            slot = (slot + 1) & ((1 << bits) - 1)
        self.step_keys[slot] = key
        self.step_vals[slot] = child
        self.step_fill[0] += 1

    # The transition function -------------------------------------------------------
    def initial(self) -> tuple[int, int]:
        root = self.parser.root
        return (int(self.row_lexstate[root]), root)

    def end_lexeme(self, lexstate: int, row: int) -> int:
        """Row after ending the lexeme in `lexstate` (the same row for %ignore), or NO_ROW."""
        acc = int(self.lexer.accept[lexstate])
        if acc == NO_ACCEPT:
            return NO_ROW
        if acc == IGNORE_ONLY:
            return row
        return self.scan(row, acc)

    def step(self, state: tuple[int, int], byte: int) -> tuple[int, int] | None:
        lexstate, row = state
        t = self.lexer.step(lexstate, byte)
        if t != DEAD:
            return (t, row)
        row2 = self.end_lexeme(lexstate, row)
        if row2 == NO_ROW:
            return None
        t = self.lexer.step(int(self.row_lexstate[row2]), byte)
        if t == DEAD:
            return None
        return (t, row2)

    def step_bytes(self, state: tuple[int, int] | None, data: bytes) -> tuple[int, int] | None:
        for b in data:
            if state is None:
                return None
            state = self.step(state, b)
        return state

    def is_accepting(self, state: tuple[int, int]) -> bool:
        known = self._accepting.get(state)
        if known is not None:
            return known
        lexstate, row = state
        if lexstate == int(self.row_lexstate[row]) and self.parser.is_accepting(row):
            # No byte of a lexeme read yet (or only %ignore restarted it).
            answer = True
        else:
            row2 = self.end_lexeme(lexstate, row)
            answer = row2 != NO_ROW and self.parser.is_accepting(row2)
        if len(self._accepting) >= _MAX_ACCEPTING_KEPT:
            self._accepting.clear()
        self._accepting[(int(lexstate), int(row))] = answer
        return answer

    def _full_row(self, lexstate: int) -> np.ndarray:
        row = self.lexer.table[lexstate]
        if row.min() == UNKNOWN:
            self.lexer.fill_row(lexstate)
            row = self.lexer.table[lexstate]
        return row

    def allowed_bytes(self, state: tuple[int, int]) -> np.ndarray:
        """bool[256]: the bytes `step` accepts from `state`, computed a table row at a time."""
        lexstate, row = state
        trans = self._full_row(lexstate)
        live = trans != DEAD
        row2 = self.end_lexeme(lexstate, row)
        if row2 != NO_ROW:
            restart = self._full_row(int(self.row_lexstate[row2]))
            live |= (trans == DEAD) & (restart != DEAD)
        return live

    def allowed_byte_mask(self, state: tuple[int, int]) -> int:
        """`allowed_bytes` as an int (bit b for byte b): a forced byte is a mask with one
        bit, told without arrays."""
        lexstate, row = state
        mask = self._live_byte_mask(lexstate)
        row2 = self.end_lexeme(lexstate, row)
        if row2 != NO_ROW:
            # Where the lexeme goes on, it goes on (as in `step`); elsewhere the next
            # lexeme may start: the union of the two rows' live bytes.
            mask |= self._live_byte_mask(int(self.row_lexstate[row2]))
        return mask

    def _live_byte_mask(self, lexstate: int) -> int:
        mask = self._live_byte_masks.get(lexstate)
        if mask is None:
            live = self._full_row(lexstate) != DEAD
            mask = int.from_bytes(np.packbits(live, bitorder="little").tobytes(), "little")
            self._live_byte_masks[lexstate] = mask
        return mask

    def next_bytes(self, state: tuple[int, int]) -> list[int]:
        return np.flatnonzero(self.allowed_bytes(state)).tolist()

    def expected(self, state: tuple[int, int]) -> str:
        """Human-readable description of what may come next (for error messages)."""
        lexstate, row = state
        if lexstate != int(self.row_lexstate[row]):
            return "continuation of " + self.lexer.describe_state(lexstate)
        names = self.parser.expected_names(row)
        return "one of " + ", ".join(names[:12]) + (" ..." if len(names) > 12 else "") if names else "end of input"


def grammar_accepts(grammar: Grammar, data: bytes) -> bool:
    """Whether `data` is a complete sentence of `grammar` (lexer + parser, no tokenizer)."""
    rec = Recognizer.for_grammar(grammar)
    state = rec.initial()
    for b in data:
        after = rec.step(state, b)
        if after is None:
            return False
        state = after
    return rec.is_accepting(state)
