"""The Matcher: the one object callers use to constrain a model with a grammar.

It tracks the tokens consumed so far and answers, at each step, which tokens keep the
output inside the grammar (`compute_mask`), which tokens the grammar forces
(`compute_ff_tokens`) and whether the output may end here (`is_accepting`).

A thin facade in llguidance's manner: the work is in the recognizer (lexer + Earley
parser), the mask walk and fast-forward. A token the grammar does not allow is
refused with a `MatcherError` and leaves the state unchanged; an internal failure
(a limit exceeded, a bug) turns the matcher into a sticky error state whose message
every later call repeats, so a server never crashes on one bad grammar.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import numpy as np

from . import fastforward
from .grammar import Grammar
from .limits import DEFAULT_LIMITS, Limits
from .mask import MaskWalker, reference_mask
from .recognizer import Recognizer
from .slicer import SlicedTrie, default_slices_enabled
from .trie import TokenTrie, mask_words


class MatcherError(ValueError):
    """A token or byte the grammar does not allow, or a matcher in the error state."""


_tries: "weakref.WeakKeyDictionary[object, TokenTrie]" = weakref.WeakKeyDictionary()


_sliced: "weakref.WeakKeyDictionary[object, SlicedTrie]" = weakref.WeakKeyDictionary()


def trie_for(tokenizer) -> TokenTrie:
    """The tokenizer's trie, built (or loaded from disk) once per tokenizer object."""
    trie = _tries.get(tokenizer)
    if trie is None:
        trie = TokenTrie.for_tokenizer(tokenizer)
        _tries[tokenizer] = trie
    return trie


def sliced_trie_for(tokenizer) -> SlicedTrie:
    """The tokenizer's slice tries for the default slices, once per tokenizer object."""
    sliced = _sliced.get(tokenizer)
    if sliced is None:
        sliced = SlicedTrie.for_tokenizer(tokenizer, trie_for(tokenizer))
        _sliced[tokenizer] = sliced
    return sliced


class TokenAutomaton:
    """A grammar over a tokenizer's vocabulary as a pure transition system: states are
    hashable recognizer states, handed in and out, and nothing of a history is kept.
    What a caller with its own notion of state builds on (the decoding constraint of
    midword.completion); `Matcher` is this plus one current state and its history.

    Each call holds the recognizer's lock: a recognizer is shared by every user of its
    grammar's content (matchers, constraints, threads), and its tables grow as it is
    used. Masks cover the grammar's tokens only; whether EOS may come is `is_accepting`."""

    def __init__(
        self,
        tokenizer,
        grammar: Grammar,
        *,
        limits: Limits = DEFAULT_LIMITS,
        trie: TokenTrie | None = None,
        use_jit: bool = True,
        slicer: bool | None = None,
    ):
        self.tokenizer = tokenizer
        self.grammar = grammar
        self.trie = trie if trie is not None else trie_for(tokenizer)
        self.rec = Recognizer.for_grammar(grammar, limits)
        if slicer is None:
            slicer = default_slices_enabled()
        sliced = None
        if slicer:
            sliced = sliced_trie_for(tokenizer) if trie is None else SlicedTrie.build(trie, tokenizer.all_token_bytes())
        self.walker = MaskWalker(self.trie, self.rec, use_jit=use_jit, sliced=sliced)
        self.lock = self.rec.lock
        self._singletons: dict[int, np.ndarray] = {}  # token -> the read-only mask allowing it alone

    def initial(self) -> tuple[int, int]:
        return self.rec.initial()

    def step_bytes(self, state: tuple[int, int] | None, data: bytes) -> tuple[int, int] | None:
        """The state after `data`, or None where the grammar rejects a byte of it."""
        with self.lock:
            return self.rec.step_bytes(state, data)

    def is_accepting(self, state: tuple[int, int]) -> bool:
        with self.lock:
            return self.rec.is_accepting(state)

    def mask(self, state: tuple[int, int], recent_tokens: Sequence[int] | None = None) -> np.ndarray:
        """uint32 bitmask of the tokens the grammar allows next; read-only (shared with
        the mask cache): copy it to change it.

        With `recent_tokens` (the tokens generated before `state`), where the grammar
        forces text that starts with a whole canonical token, that token alone is
        allowed, as llguidance does: a sampler that does not fast-forward (a serving
        engine's) then writes forced text as the tokenizer would, never as a split of it
        (`S` `ELECT`). Without, every token the grammar allows."""
        with self.lock:
            mask = self.walker.mask(state)
            if recent_tokens is not None:
                # After the walk: the lexer rows the forced-byte check reads are filled.
                token = self.first_forced_token(state, recent_tokens)
                if token is not None:
                    mask = self._only(token)
            return mask

    def first_forced_token(self, state: tuple[int, int], recent_tokens: Sequence[int]) -> int | None:
        """The first canonical token of the text forced at `state`, or None (nothing is
        forced, or token healing leaves no whole token of it)."""
        with self.lock:
            if fastforward.no_forced_tokens(self.rec, state, self.walker):
                return None
            forced = fastforward.forced_bytes(self.rec, state)[0]
            if not forced:
                return None
            tokens = fastforward.forced_tokens(
                self.tokenizer, self.trie, self.walker, self.rec, state, list(recent_tokens), forced
            )
            return tokens[0] if tokens else None

    def _only(self, token: int) -> np.ndarray:
        mask = self._singletons.get(token)
        if mask is None:
            mask = np.zeros(mask_words(self.tokenizer.vocab_size), dtype=np.uint32)
            mask[token >> 5] = np.uint32(1 << (token & 31))
            mask.flags.writeable = False
            self._singletons[token] = mask
        return mask

    def subtree_mask(self, state: tuple[int, int], node: int) -> np.ndarray:
        """The tokens below trie node `node` whose bytes past the node the grammar allows
        from `state` (a fresh array)."""
        with self.lock:
            return self.walker.subtree_mask(state, node)

    def forced_bytes(self, state: tuple[int, int]) -> bytes:
        """Bytes every continuation from `state` starts with."""
        with self.lock:
            return fastforward.forced_bytes(self.rec, state)[0]

    def forced_tokens(self, state: tuple[int, int], recent_tokens: list[int]) -> list[int]:
        """The forced bytes as canonical tokens after `recent_tokens` (token healing at the end)."""
        with self.lock:
            return fastforward.forced_tokens(self.tokenizer, self.trie, self.walker, self.rec, state, recent_tokens)

    def expected(self, state: tuple[int, int]) -> str:
        """What may come next, for error messages."""
        with self.lock:
            return self.rec.expected(state)


class Matcher:
    def __init__(
        self,
        tokenizer,
        grammar: Grammar,
        *,
        limits: Limits = DEFAULT_LIMITS,
        trie: TokenTrie | None = None,
        use_jit: bool = True,
        slicer: bool | None = None,
        canonical_forced: bool = False,
    ):
        self.tokenizer = tokenizer
        self.grammar = grammar
        # True: where the grammar forces text, masks allow only its first canonical token
        # (TokenAutomaton.mask), as llguidance's do; for callers that sample from the mask
        # without asking for forced tokens. Off by default: a caller that fast-forwards
        # never samples there, and the check costs every mask a forced-byte lookup.
        self.canonical_forced = canonical_forced
        self.automaton = TokenAutomaton(tokenizer, grammar, limits=limits, trie=trie, use_jit=use_jit, slicer=slicer)
        self.trie = self.automaton.trie
        self.rec = self.automaton.rec
        self.walker = self.automaton.walker
        self.eos_token_ids = sorted(tokenizer.eos_token_ids)
        self._excluded = frozenset(tokenizer.special_token_ids)
        self.reset()

    # State --------------------------------------------------------------------------
    def reset(self) -> None:
        self._state = self.rec.initial()
        self._history: list[tuple] = []  # state before each consumed step
        self.tokens: list[int] = []
        self._stopped = False
        self._error: str | None = None

    @property
    def error(self) -> str | None:
        return self._error

    def is_error(self) -> bool:
        return self._error is not None

    def is_stopped(self) -> bool:
        """True after EOS was consumed."""
        return self._stopped

    def _check(self) -> None:
        if self._error is not None:
            raise MatcherError(f"matcher is in the error state: {self._error}")

    def _guard(self, fn, *args):
        self._check()
        try:
            with self.rec.lock:
                return fn(*args)
        except MatcherError:
            raise
        except Exception as err:  # any internal failure becomes a sticky, explained error
            self._error = f"{type(err).__name__}: {err}"
            raise MatcherError(self._error) from err

    # Queries ------------------------------------------------------------------------
    def is_accepting(self) -> bool:
        self._check()
        return self._stopped or self._guard(self.rec.is_accepting, self._state)

    def compute_mask(self) -> np.ndarray:
        """uint32 bitmask over the vocabulary: bit t set iff token t may come next.
        EOS tokens are allowed iff the grammar accepts here. The array may be read-only
        (shared with the mask cache): copy it to change it."""
        return self._guard(self._compute_mask)

    def _compute_mask(self) -> np.ndarray:
        if self._stopped:
            return np.zeros(mask_words(self.tokenizer.vocab_size), dtype=np.uint32)
        if self.canonical_forced:
            mask = self.automaton.mask(self._state, self._recent_tokens())
        else:
            mask = self.walker.mask(self._state)  # what automaton.mask does, less a call and a lock
        if self.eos_token_ids and self.rec.is_accepting(self._state):
            mask = mask.copy()  # the walker's mask is shared (read-only)
            for t in self.eos_token_ids:
                mask[t >> 5] |= np.uint32(1 << (t & 31))
        return mask

    def allowed_tokens(self) -> np.ndarray:
        return mask_to_ids(self.compute_mask(), self.tokenizer.vocab_size)

    def reference_mask(self, tokens=None) -> np.ndarray:
        """The mask by definition (every token's bytes through the recognizer); for tests."""
        self._check()
        mask = reference_mask(self.rec, self._state, self.tokenizer.all_token_bytes(), self._excluded, tokens)
        if self.canonical_forced:
            forced = self.automaton.first_forced_token(self._state, self._recent_tokens())
            if forced is not None:
                only = np.zeros_like(mask)
                only[forced >> 5] = mask[forced >> 5] & np.uint32(1 << (forced & 31))
                mask = only
        if self.rec.is_accepting(self._state):
            for t in self.eos_token_ids:
                if tokens is None or t in tokens:
                    mask[t >> 5] |= np.uint32(1 << (t & 31))
        return mask

    def compute_ff_bytes(self) -> bytes:
        """Bytes every valid continuation starts with."""
        if self._stopped:
            return b""
        if self._error is None and fastforward.nothing_forced(self.rec, self._state, self.walker):
            return b""
        return self._guard(lambda: fastforward.forced_bytes(self.rec, self._state)[0])

    def compute_ff_tokens(self) -> list[int]:
        """Forced tokens, canonically tokenized (token healing at the end)."""
        if self._stopped or (self.walker.last_parted is self._state and self._error is None):
            return []
        if self._error is None and fastforward.no_forced_tokens(self.rec, self._state, self.walker):
            # The common case, answered without the lock (the mask and the caches are read,
            # never written, here).
            return []
        return self._guard(
            lambda: fastforward.forced_tokens(
                self.tokenizer, self.trie, self.walker, self.rec, self._state, self._recent_tokens()
            )
        )

    def _recent_tokens(self) -> list[int]:
        # Raw bytes consumed with consume_bytes (-1) break the token context.
        recent = self.tokens[-fastforward.CONTEXT_TOKENS :]
        while -1 in recent:
            recent = recent[recent.index(-1) + 1 :]
        return recent

    def expected(self) -> str:
        return self.rec.expected(self._state)

    # Consuming ------------------------------------------------------------------------
    def consume_token(self, token: int) -> None:
        self._guard(self._consume_token, token)

    def consume_tokens(self, tokens) -> None:
        for t in tokens:
            self.consume_token(t)

    def _consume_token(self, token: int) -> None:
        token = int(token)
        if self._stopped:
            raise MatcherError(f"token {token} after end of sequence")
        if not (0 <= token < self.tokenizer.vocab_size):
            raise MatcherError(f"token id {token} is outside the vocabulary (size {self.tokenizer.vocab_size})")
        if token in self.eos_token_ids:
            if not self.rec.is_accepting(self._state):
                raise MatcherError(
                    f"end of sequence (token {token}) not allowed: the grammar expects {self.expected()}"
                )
            self._history.append(self._state)
            self.tokens.append(token)
            self._stopped = True
            return
        if token in self._excluded:
            raise MatcherError(f"special token {token} is not allowed by the grammar")
        data = self.tokenizer.token_bytes(token)
        new = self._advance(data, f"token {token} ({data!r})")
        self._history.append(self._state)
        self.tokens.append(token)
        self._state = new

    def consume_bytes(self, data: bytes) -> None:
        """Consumes raw bytes; counts as one step for `rollback`."""
        self._guard(self._consume_bytes, bytes(data))

    def _consume_bytes(self, data: bytes) -> None:
        if self._stopped:
            raise MatcherError("bytes after end of sequence")
        new = self._advance(data, repr(data))
        self._history.append(self._state)
        self.tokens.append(-1)
        self._state = new

    def _advance(self, data: bytes, what: str):
        state = self._state
        for i, b in enumerate(data):
            nxt = self.rec.step(state, b)
            if nxt is None:
                raise MatcherError(
                    f"{what} not allowed: byte {i} ({bytes([b])!r}) is rejected; the grammar expects {self.rec.expected(state)}"
                )
            state = nxt
        return state

    def rollback(self, n: int) -> None:
        """Undoes the last `n` consumed tokens (or consume_bytes calls)."""
        self._check()
        if n < 0 or n > len(self._history):
            raise MatcherError(f"cannot roll back {n} steps: only {len(self._history)} consumed")
        if n == 0:
            return
        self._state = self._history[-n]
        del self._history[-n:]
        del self.tokens[-n:]
        self._stopped = False


def mask_to_ids(mask: np.ndarray, vocab_size: int) -> np.ndarray:
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab_size]
    return np.flatnonzero(bits)
