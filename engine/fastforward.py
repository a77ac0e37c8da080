"""Fast-forward: bytes the grammar forces, and their canonical tokens (docs/design/fast-forward.md).

Forced bytes are those every continuation must start with: while EOS is not allowed
and exactly one byte is, that byte is forced.

Turning them into tokens naively distorts the model (forcing `order` when the text
will be `orderId` yields the rare pair `order` `Id`). So the forced bytes are
tokenized with a few preceding bytes for context, and then trailing tokens are
dropped while some vocabulary token that spans the end of the forced bytes is
allowed by the grammar: those bytes may be tokenized differently once the model
continues. Dropped bytes stay forced by the grammar, so nothing is lost.
"""

from __future__ import annotations

import numpy as np

from .lexer import DEAD
from .mask import MaskWalker
from .recognizer import NO_ROW, Recognizer
from .trie import TokenTrie

MAX_FORCED_BYTES = 4096  # bound on one fast-forward, against grammars that force forever
HEAL_TOKENS = 4  # how many trailing forced tokens token healing may take back
CONTEXT_TOKENS = 4  # recent tokens re-tokenized with the forced bytes


def forced_bytes(
    rec: Recognizer, state: tuple[int, int], limit: int = MAX_FORCED_BYTES
) -> tuple[bytes, tuple[int, int]]:
    """(forced bytes, state after them) from `state`; cached per recognizer state."""
    cache = rec.caches.forced_bytes
    key = (state, limit)
    hit = cache.get(key)
    if hit is None:
        hit = _forced_bytes(rec, state, limit)
        if len(cache) > 100_000:
            cache.clear()
        cache[key] = hit
    return hit


def _forced_bytes(rec: Recognizer, state: tuple[int, int], limit: int) -> tuple[bytes, tuple[int, int]]:
    if _surely_unforced(rec, state):
        return b"", state
    out = bytearray()
    while len(out) < limit and not rec.is_accepting(state):
        allowed = rec.allowed_byte_mask(state)
        if not allowed or allowed & (allowed - 1):
            break
        b = allowed.bit_length() - 1
        out.append(b)
        after = rec.step(state, b)
        assert after is not None  # b is the one byte the state allows
        state = after
    return bytes(out), state


def _surely_unforced(rec: Recognizer, state) -> bool:
    """Whether two bytes are already known to be allowed: then nothing is forced, and
    no derivative needs computing. After a mask at `state` the lexer rows involved are
    filled, so this settles almost every state."""
    lexstate, row = state
    # A count state of a long string (`C{0,6000}"`) is walked as its clamped twin, whose
    # row the walk filled: both allow the same bytes and end the same lexemes.
    lexstate = rec.caches.walk_twins.get(lexstate, lexstate)
    branching = rec.caches.branching_lexstates
    live = _live_unless_branching(rec, branching, lexstate)
    if live is None:
        return True
    row2 = rec.end_lexeme(lexstate, row)
    if row2 == NO_ROW:
        return False
    # When the next lexeme can start with two bytes, the one byte this lexeme may go on
    # with cannot be both of them.
    restart_live = _live_unless_branching(rec, branching, int(rec.row_lexstate[row2]))
    if restart_live is None:
        return True
    live |= (rec.lexer.table[lexstate] == DEAD) & restart_live
    return int(np.count_nonzero(live)) >= 2


def _live_unless_branching(rec: Recognizer, branching: set, lexstate: int):
    """None when the lexer state has two live bytes, else its row's live bytes. Table
    entries are only ever filled in, so a state seen with two live bytes keeps them: it
    is remembered in `branching` instead of scanned again."""
    if lexstate in branching:
        return None
    live = rec.lexer.table[lexstate] > DEAD
    if np.count_nonzero(live) >= 2:
        branching.add(lexstate)
        return None
    return live


def forced_tokens(
    tokenizer,
    trie: TokenTrie,
    walker: MaskWalker,
    rec: Recognizer,
    state,
    recent_tokens: list[int],
    forced: bytes | None = None,
) -> list[int]:
    """Canonical fast-forward tokens from `state`, given the tokens generated so far;
    cached per state and recent tokens (the only context the result depends on)."""
    if forced is None:
        forced, _ = forced_bytes(rec, state)
    if not forced:
        return []
    recent = tuple(recent_tokens[-CONTEXT_TOKENS:])
    cache = rec.caches.forced_tokens
    # The tokenizer object itself (not its id) keys the entry, so it cannot be confused
    # with a later tokenizer at the same address.
    key = (tokenizer, trie.fingerprint, state, forced, recent)
    hit = cache.get(key)
    if hit is None:
        hit = _forced_tokens(tokenizer, trie, walker, rec, state, list(recent), forced)
        if len(cache) > 100_000:
            cache.clear()
        cache[key] = hit
    return list(hit)


def _forced_tokens(
    tokenizer, trie: TokenTrie, walker: MaskWalker, rec: Recognizer, state, recent_tokens: list[int], forced: bytes
) -> tuple[int, ...]:
    tokens = _tokenize_in_context(tokenizer, forced, recent_tokens[-CONTEXT_TOKENS:])
    if not tokens:
        return ()
    token_bytes = tokenizer.token_bytes
    tail = tokens[-HEAL_TOKENS:]
    max_length = sum(len(token_bytes(t)) for t in tail)
    end_state = rec.step_bytes(state, forced)
    keep_upto = len(forced)
    for idx in range(max(0, len(forced) - max_length), len(forced)):
        node = trie.node_for(forced[idx:])
        if node < 0 or trie.subtree_size[node] <= 1:
            continue
        # A token spelling forced[idx:] and then more: allowed iff some token below
        # `node` survives the walk from the state after all forced bytes.
        if walker.any_extension(end_state, node):
            keep_upto = idx
            break
    kept: list[int] = []
    length = 0
    for t in tokens:
        n = len(token_bytes(t))
        if length + n > keep_upto:
            break
        kept.append(t)
        length += n
    return tuple(kept)


def _tokenize_in_context(tokenizer, forced: bytes, recent: list[int]) -> list[int]:
    """Tokens of `forced` as the tokenizer would split them after the recent tokens.

    When the last recent token would merge with the forced bytes (the boundary moves),
    no prefix of forced tokens can be canonical without taking back a generated token,
    so the context is dropped and the plain tokenization is used."""
    if recent:
        context = tokenizer.decode(recent)
        tokens = tokenizer.encode(context + forced)
        covered = 0
        for k, t in enumerate(tokens):
            if covered == len(context):
                return tokens[k:]
            if covered > len(context):
                break
            covered += len(tokenizer.token_bytes(t))
    return tokenizer.encode(forced)
