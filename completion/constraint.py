"""The decoding constraint as a state machine: typed characters to re-spell, then a grammar.

A completion starts with the characters already typed before the cursor that the
prompt backed off (the unstable tail, see cpc.py). Until they are spelled out, a token
is allowed only if its bytes agree with them: a prefix of what remains to be spelled,
or spelling all of it and continuing. Whatever a token adds past the typed text (and
every later token) must keep the grammar's language: JSON matching the schema, code
with balanced brackets. Text the grammar forces comes back from `forced`.

The machine is pure: `allowed(state)`, `advance(state, token)` and `forced(state)`
take and return immutable `DecodeState`s and never call a model, so the same object
drives midword's own decoding loop and can run as a logits processor inside a serving
engine (`LogitsProcessor` below) where the model loop belongs to someone else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from midword.engine import Grammar, TokenAutomaton, mask_to_ids, mask_words, trie_for

RECENT = 8  # tokens kept as context for canonical fast-forward


class ConstraintError(ValueError):
    """A token the constraint does not allow, or a grammar that rejects the text before the cursor."""


@dataclass(frozen=True)
class DecodeState:
    typed: bytes  # typed bytes not yet re-spelled
    grammar: tuple[int, int] | None  # recognizer state after the text so far; None: no grammar
    recent: tuple[int, ...] = ()  # last tokens generated past the typed text (fast-forward context)
    done: bool = False  # EOS consumed


class Constraint:
    def __init__(self, tokenizer, grammar: Grammar | None = None):
        self.tokenizer = tokenizer
        # The grammar's transitions, masks and forced tokens; each call holds the lock of
        # the recognizer it shares with every other user of the grammar.
        self.automaton = TokenAutomaton(tokenizer, grammar) if grammar is not None else None
        self.trie = self.automaton.trie if self.automaton is not None else trie_for(tokenizer)
        self.eos = frozenset(tokenizer.eos_token_ids)
        self.excluded = frozenset(tokenizer.special_token_ids)
        self._words = mask_words(tokenizer.vocab_size)
        self._all_tokens: np.ndarray | None = None

    # States ---------------------------------------------------------------------------
    def initial(self, typed: bytes = b"", grammar_prefix: bytes = b"") -> DecodeState:
        """The state at the cursor: `typed` still to re-spell; the grammar has read `grammar_prefix`."""
        g = None
        if self.automaton is not None:
            g = self.automaton.step_bytes(self.automaton.initial(), grammar_prefix)
            if g is None:
                raise ConstraintError("the grammar rejects the text before the cursor")
        return DecodeState(typed=typed, grammar=g)

    def is_accepting(self, state: DecodeState) -> bool:
        if state.typed:
            return False
        if state.grammar is None:
            return True
        assert self.automaton is not None  # a grammar state comes from the automaton
        return self.automaton.is_accepting(state.grammar)

    # The three calls ---------------------------------------------------------------------
    def allowed(self, state: DecodeState) -> np.ndarray:
        """uint32 bitmask of the tokens that may come next; may be read-only (shared with
        the mask cache): copy it to change it."""
        if state.done:
            return np.zeros(self._words, dtype=np.uint32)
        if state.typed:
            mask = self._respell_mask(state)
        elif state.grammar is None:
            mask = self._unconstrained().copy()
        else:
            # Where the grammar forces text, its first canonical token alone, as in
            # llguidance: a serving engine's sampler (LogitsProcessor, the vLLM plugin)
            # never fast-forwards, and must not split forced text (`S` `ELECT`).
            assert self.automaton is not None  # a grammar state comes from the automaton
            mask = self.automaton.mask(state.grammar, state.recent)
        if self.eos and self.is_accepting(state):
            if not mask.flags.writeable:
                mask = mask.copy()  # the walker's mask is shared with its cache
            for t in self.eos:
                mask[t >> 5] |= np.uint32(1 << (t & 31))
        return mask

    def advance(self, state: DecodeState, token: int) -> DecodeState:
        token = int(token)
        if state.done:
            raise ConstraintError("token after end of sequence")
        if token in self.eos:
            if not self.is_accepting(state):
                raise ConstraintError("end of sequence before the typed text is spelled or the grammar accepts")
            return replace(state, done=True)
        if token in self.excluded:
            raise ConstraintError(f"special token {token} is not allowed")
        data = self.tokenizer.token_bytes(token)
        typed = state.typed
        if typed:
            if typed.startswith(data):
                return replace(state, typed=typed[len(data) :])
            if not data.startswith(typed):
                raise ConstraintError(f"token {data!r} disagrees with the typed text {typed!r}")
            extra = data[len(typed) :]
            grammar = self._step(state.grammar, extra, data)
            # The token straddles the cursor: as context it breaks canonical ff, so start afresh.
            return DecodeState(typed=b"", grammar=grammar, recent=())
        grammar = self._step(state.grammar, data, data)
        return DecodeState(typed=b"", grammar=grammar, recent=(state.recent + (token,))[-RECENT:])

    def forced(self, state: DecodeState) -> list[int]:
        """Tokens the grammar forces here, canonically tokenized (empty while re-spelling)."""
        if state.done or state.typed or state.grammar is None:
            return []
        assert self.automaton is not None  # a grammar state comes from the automaton
        return self.automaton.forced_tokens(state.grammar, list(state.recent))

    # Helpers --------------------------------------------------------------------------------
    def _step(self, grammar, data: bytes, token_bytes: bytes):
        if grammar is None:
            return None
        assert self.automaton is not None  # a grammar state comes from the automaton
        nxt = self.automaton.step_bytes(grammar, data)
        if nxt is None:
            raise ConstraintError(f"token {token_bytes!r} is not allowed by the grammar")
        return nxt

    def _unconstrained(self) -> np.ndarray:
        if self._all_tokens is None:
            mask = np.zeros(self._words, dtype=np.uint32)
            ids = self.trie.node_tokens.astype(np.int64)
            np.bitwise_or.at(mask, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
            self._all_tokens = mask
        return self._all_tokens

    def _respell_mask(self, state: DecodeState) -> np.ndarray:
        typed = state.typed
        mask = np.zeros(self._words, dtype=np.uint32)
        # tokens that spell part (or all) of the typed text
        for _, t in self.trie.tokens_prefix_of(typed):
            mask[t >> 5] |= np.uint32(1 << (t & 31))
        node = self.trie.node_for(typed)
        if node >= 0:
            # tokens that spell all of it and go on: the rest must suit the grammar
            if state.grammar is None:
                below = self.trie.tokens_with_prefix(typed)
                for t in below:
                    mask[t >> 5] |= np.uint32(1 << (t & 31))
            else:
                assert self.automaton is not None  # a grammar state comes from the automaton
                mask |= self.automaton.subtree_mask(state.grammar, node)
        return mask

    def candidates_after(self, grammar_state, rest: bytes) -> np.ndarray:
        """Token ids whose bytes start with `rest` and whose extension past it suits the grammar."""
        node = self.trie.node_for(rest) if rest else 0
        if node < 0:
            return np.zeros(0, dtype=np.int64)
        if not rest:
            st = DecodeState(typed=b"", grammar=grammar_state)
            mask = self.allowed(st).copy()
            for t in self.eos:
                mask[t >> 5] &= ~np.uint32(1 << (t & 31))
            return mask_to_ids(mask, self.tokenizer.vocab_size)
        if grammar_state is None:
            return np.asarray(sorted(self.trie.tokens_with_prefix(rest)), dtype=np.int64)
        assert self.automaton is not None  # a grammar state comes from the automaton
        mask = self.automaton.subtree_mask(grammar_state, node)
        for t in self.trie.tokens_at(node):
            mask[t >> 5] |= np.uint32(1 << (t & 31))
        return mask_to_ids(mask, self.tokenizer.vocab_size)


class LogitsProcessor:
    """The constraint as a logits processor for a model loop that is not midword's.

    Called with the token ids generated so far (after the prompt) and the logits for the
    next position; disallowed logits become -inf. States are cached by generated-token
    history, so beams and rollbacks cost nothing extra."""

    def __init__(self, constraint: Constraint, initial: DecodeState):
        self.constraint = constraint
        self._states: dict[tuple[int, ...], DecodeState] = {(): initial}

    def state_for(self, generated) -> DecodeState:
        key = tuple(int(t) for t in generated)
        state = self._states.get(key)
        if state is None:
            state = self.constraint.advance(self.state_for(key[:-1]), key[-1])
            self._states[key] = state
        return state

    def __call__(self, generated, logits: np.ndarray) -> np.ndarray:
        mask = self.constraint.allowed(self.state_for(generated))
        n = logits.shape[-1]
        bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[:n].astype(bool)
        if bits.shape[0] < n:
            bits = np.concatenate([bits, np.zeros(n - bits.shape[0], dtype=bool)])
        out = np.array(logits, dtype=np.float32, copy=True)
        out[..., ~bits] = -np.inf
        return out
