"""The slicer: skip walking the parts of the trie that a lexeme allows wholesale.

Large masks come from unconstrained contexts — inside a JSON string, a comment — where
the trie walk visits almost every node. A slice is a regex such as
`[^"\\\\\\x00-\\x1F\\x7F]{1,10}` (docs/design/engine.md, "Slices").
Each token belongs to exactly one slice: the first, in order, whose regex it fully
matches, or the implicit remainder. Every slice has its own trie and its own
precomputed mask.

When computing a mask, a slice whose language is contained in the prefix language of
a lexeme still live in the lexer state (`S ⊆ P(R)`, checked with the regex engine's
under-approximation) is allowed whole: every token in it keeps that lexeme alive. Its
mask is OR-ed in and its trie is not walked. The other slices' tries are walked as usual,
so sliced and unsliced masks are identical by construction (and a test checks it).

Slice data depends only on the tokenizer and the slice regexes, so it is cached on disk;
which slices apply depends only on the lexer state, so that is cached per recognizer.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from dataclasses import dataclass

import numpy as np

from .recognizer import Recognizer
from .regex import ExprSet, LazyDFA
from .trie import TRIE_FORMAT_VERSION, TokenTrie, _cache_path, mask_words, save_arrays

# llguidance's JSON slices, which also serve code: whitespace runs, then string-body
# text of growing length limits (a maxLength of at least 10 or 30 can still use them).
# Unlike llguidance's, the text slices leave out U+2028 and U+2029: a pattern's `.` does
# not match them (ECMA-262 line terminators), so while the slices held them none fitted
# inside a pattern such as `^file:.+\.kml$`, and every first visit there walked the whole
# trie. The few tokens holding them are walked with the rest.
DEFAULT_SLICES = (
    r"[\x20\x0A\x0D\x09]+",
    r'[^"\\\x00-\x1F\x7F\u2028\u2029]{1,10}',
    r'[^"\\\x00-\x1F\x7F\u2028\u2029]{1,30}',
    r'[^"\\\x00-\x1F\x7F\u2028\u2029]+',
)


def full_dfa_table(regex: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(table with -1 for dead, accepting, initial) of a regex's complete DFA."""
    exprs = ExprSet()
    dfa = LazyDFA(exprs, exprs.parse(regex))
    todo = [dfa.initial]
    seen = {0, dfa.initial}
    while todo:
        s = todo.pop()
        for b in range(256):
            t = dfa.step(s, b)
            if t not in seen:
                seen.add(t)
                todo.append(t)
    n = dfa.n_states
    table = dfa.table[:n].copy()
    table[table == 0] = -1  # LazyDFA's dead state 0 becomes "skip the subtree"
    return table, dfa.accepting[:n].copy(), dfa.initial


@dataclass
class SlicedTrie:
    regexes: tuple[str, ...]
    tries: list[TokenTrie]  # one per regex, then the remainder
    masks: list[np.ndarray]  # one per regex

    def __post_init__(self):
        # All slice tries laid end to end, so one compiled call walks every slice that
        # needs walking; trie k spans forest nodes [roots[k], roots[k + 1]).
        self.forest, self.roots = concat_tries(self.tries)
        self._masks_of: dict[tuple[bool, ...], np.ndarray] = {}

    def ranges_to_walk(self, applicable: tuple[bool, ...]) -> np.ndarray:
        rows = [
            [self.roots[k] + 1, self.roots[k + 1]]
            for k in range(len(self.tries))
            if not (k < len(applicable) and applicable[k]) and self.roots[k + 1] > self.roots[k] + 1
        ]
        return np.array(rows, dtype=np.int64).reshape(-1, 2)

    def mask_of(self, applicable: tuple[bool, ...]) -> np.ndarray:
        """A fresh copy of the union of the applicable slices' masks."""
        base = self._masks_of.get(applicable)
        if base is None:
            base = (
                np.zeros_like(self.masks[0])
                if self.masks
                else np.zeros(mask_words(self.tries[0].vocab_size), np.uint32)
            )
            for k, on in enumerate(applicable):
                if on:
                    base |= self.masks[k]
            self._masks_of[applicable] = base
        return base.copy()

    @classmethod
    def build(cls, full: TokenTrie, token_bytes: list[bytes], regexes=DEFAULT_SLICES) -> "SlicedTrie":
        regexes = tuple(regexes)
        claimed = np.zeros(mask_words(full.vocab_size), dtype=np.uint32)
        tries, masks = [], []
        for rx in regexes:
            table, accepting, initial = full_dfa_table(rx)
            matching, _ = full.walk_table(table, initial, accepting)
            mine = matching & ~claimed
            claimed |= mine
            ids = _ids(mine, full.vocab_size)
            tries.append(TokenTrie.build(token_bytes, fingerprint=f"{full.fingerprint}:slice:{rx}", only=ids))
            masks.append(mine)
        all_tokens = full.node_tokens
        rest = np.setdiff1d(all_tokens, _ids(claimed, full.vocab_size)).tolist()
        tries.append(TokenTrie.build(token_bytes, fingerprint=f"{full.fingerprint}:slice:rest", only=rest))
        return cls(regexes, tries, masks)

    @classmethod
    def for_tokenizer(cls, tokenizer, full: TokenTrie, regexes=DEFAULT_SLICES, cache_dir=None) -> "SlicedTrie":
        regexes = tuple(regexes)
        key = hashlib.sha256((full.fingerprint + "\0" + "\0".join(regexes)).encode()).hexdigest()
        path = _cache_path(cache_dir, key, "slices")
        if path is not None and path.exists():
            try:
                with np.load(path) as z:
                    if int(z["version"]) == TRIE_FORMAT_VERSION:
                        tries = [
                            TokenTrie.from_arrays(z, f"{key}:{k}", prefix=f"t{k}_") for k in range(len(regexes) + 1)
                        ]
                        masks = [z[f"m{k}"] for k in range(len(regexes))]
                        return cls(regexes, tries, masks)
            except (OSError, ValueError, KeyError):
                pass  # rebuilt below
        sliced = cls.build(full, tokenizer.all_token_bytes(), regexes)
        if path is not None:
            arrays = {}
            for k, t in enumerate(sliced.tries):
                arrays.update(t.arrays(prefix=f"t{k}_"))
            for k, m in enumerate(sliced.masks):
                arrays[f"m{k}"] = m
            try:
                save_arrays(path, arrays)
            except OSError:
                pass
        return sliced

    def slice_sizes(self) -> list[int]:
        return [len(t.node_tokens) for t in self.tries]


def concat_tries(tries: list[TokenTrie]) -> tuple[TokenTrie, np.ndarray]:
    """One trie-shaped array set holding several tries end to end (each keeps its root)."""
    roots = np.zeros(len(tries) + 1, dtype=np.int64)
    for k, t in enumerate(tries):
        roots[k + 1] = roots[k] + t.num_nodes
    token_offsets = np.cumsum([0] + [len(t.node_tokens) for t in tries])
    forest = TokenTrie(
        node_byte=np.concatenate([t.node_byte for t in tries]),
        node_depth=np.concatenate([t.node_depth for t in tries]),
        subtree_size=np.concatenate([t.subtree_size for t in tries]),
        tok_start=np.concatenate([t.tok_start + off for t, off in zip(tries, token_offsets, strict=False)]).astype(
            np.int32
        ),
        tok_end=np.concatenate([t.tok_end + off for t, off in zip(tries, token_offsets, strict=False)]).astype(
            np.int32
        ),
        node_tokens=np.concatenate([t.node_tokens for t in tries]),
        token_node=np.full(tries[0].vocab_size, -1, dtype=np.int32),
        vocab_size=tries[0].vocab_size,
        fingerprint="forest:" + ",".join(t.fingerprint[:16] for t in tries),
    )
    return forest, roots


def _ids(mask: np.ndarray, vocab_size: int) -> list[int]:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits).tolist()


# Per regex set and slice regexes, each expression's answer (which slices it allows
# wholesale): lexer states of every grammar hold the same few string and number regexes
# beside their keys, and a state's answer is the union of its expressions'.
_answers_by_expr: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_MAX_ANSWERS = 100_000


def applicable_slices(rec: Recognizer, sliced: SlicedTrie, lexstate: int) -> tuple[bool, ...]:
    """Which slices the lexer state allows wholesale; cached on the recognizer, and per
    expression across grammars."""
    cache = rec.caches.slices
    key = (sliced.regexes, lexstate)
    hit = cache.get(key)
    if hit is not None:
        return hit
    lexer = rec.lexer
    exprs = lexer.exprs
    by_regexes = _answers_by_expr.get(exprs)
    if by_regexes is None:
        by_regexes = _answers_by_expr[exprs] = {}
    # (each slice's expression and first bytes, bitmask -> tuple, expression -> bitmask)
    known: tuple[tuple[tuple[int, int, int, int], ...], dict[int, tuple[bool, ...]], dict[int, int]] | None
    known = by_regexes.get(sliced.regexes)
    if known is None:
        # Each slice with the bytes its words begin with (exactly): a regex whose first
        # bytes miss one of them cannot have the slice among its prefixes.
        parsed = []
        for rx in sliced.regexes:
            s = exprs.parse(rx)
            parsed.append((s, sum(1 << b for b in np.flatnonzero(exprs.next_bytes(s)).tolist())))
        # Each slice with the slices its language holds: a lexeme that allows the
        # larger whole allows them too, unasked (`{1,10}` and `{1,30}` inside `+`).
        # Kept largest first, with each slice's bit.
        held = sorted(
            (
                (k, s, starts, sum(1 << j for j, (t, _) in enumerate(parsed) if _repeat_within(exprs, t, s)))
                for k, (s, starts) in enumerate(parsed)
            ),
            key=lambda slice_: -slice_[3].bit_count(),
        )
        # An answer is a bitmask (bit k: slice k), so a state's is an OR of ints; the
        # tuples callers get are made once per bitmask.
        known = (tuple(held), {}, {})
        by_regexes[sliced.regexes] = known
    slices, as_tuples, answers = known
    marker = lexer.start_marker
    bits = 0
    live = [e for i, e in lexer.states[lexstate] if i != marker]
    for e in live:
        bits |= _allowed_by(exprs, slices, answers, e)
    if bits != (1 << len(slices)) - 1 and len(live) >= 2:
        # Two lexemes may hold a slice together that neither holds alone.
        for joined in exprs.complement_joins(live):
            bits |= _allowed_by(exprs, slices, answers, joined)
    result = as_tuples.get(bits)
    if result is None:
        result = as_tuples[bits] = tuple(bool(bits >> k & 1) for k in range(len(slices)))
    cache[key] = result
    return result


def _repeat_within(exprs: ExprSet, inner: int, outer: int) -> bool:
    """inner ⊆ outer read from the shapes, for slices `X{lo,hi}` of one X: a search over
    derivatives would walk every count of the bounded ones, in the first mask of each
    new expression set."""
    if inner == outer:
        return True
    within, around = exprs.repeat_bounds(inner), exprs.repeat_bounds(outer)
    if within is None or around is None:
        return False
    x, lo, hi = within
    y, lo_out, hi_out = around
    return x == y and lo_out <= lo and (hi_out is None or (hi is not None and hi <= hi_out))


def _allowed_by(exprs: ExprSet, slices, answers: dict[int, int], e: int) -> int:
    """The slices (bit k: slice k) among the prefixes of expression `e`, kept in `answers`."""
    allowed = answers.get(e)
    if allowed is None:
        first = exprs.first_bytes(e)
        allowed = 0
        for k, s, starts, held in slices:
            if not allowed >> k & 1 and not starts & ~first and exprs.prefix_contains(s, e):
                allowed |= held
        if len(answers) >= _MAX_ANSWERS:
            answers.clear()
        answers[e] = allowed
    return allowed


def default_slices_enabled() -> bool:
    return os.environ.get("MIDWORD_NO_SLICER", "") in ("", "0")
