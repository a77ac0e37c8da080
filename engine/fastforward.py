"""Fast-forward: bytes the grammar forces, and their canonical tokens (docs/design/fast-forward.md).

Forced bytes are those every continuation must start with: while EOS is not allowed
and exactly one byte is, that byte is forced. They are read off the lexer state's
structure (its regexes' first bytes, a literal's tail), not off filled table rows:
`forced_bytes_by_rows` is the row-by-row definition the tests compare it with.

Turning them into tokens naively distorts the model (forcing `order` when the text
will be `orderId` yields the rare pair `order` `Id`). So the forced bytes are
tokenized with a few preceding bytes for context, and then trailing tokens are
dropped while some vocabulary token that spans the end of the forced bytes is
allowed by the grammar: those bytes may be tokenized differently once the model
continues. Dropped bytes stay forced by the grammar, so nothing is lost.
"""

from __future__ import annotations

import numpy as np

from .lexer import DEAD, NO_ACCEPT, UNKNOWN
from .mask import MaskWalker
from .recognizer import NO_ROW, Recognizer
from .regex import ExprSet
from .trie import TokenTrie

MAX_FORCED_BYTES = 4096  # bound on one fast-forward, against grammars that force forever
HEAL_TOKENS = 4  # how many trailing forced tokens token healing may take back
CONTEXT_TOKENS = 4  # recent tokens re-tokenized with the forced bytes
MANY = -1  # _allowed, _live_bytes: at least two bytes, which ones not known


def surely_unforced(rec: Recognizer, state: tuple[int, int]) -> bool:
    """True when nothing can be forced at `state` because its lexer state is already known
    to go on with two or more bytes (inside a string or a number, say): then the parser
    row does not matter. Most positions are such, and the recognizer states themselves
    rarely repeat (a row per position), so this is asked before any per-state cache.
    Reads only a cache that grows, so it needs no lock; False means "not known"."""
    live = rec.caches.live_bytes.get(state[0])
    # Two live bytes of the lexeme itself: whether or not it may also end here, at least
    # two bytes are allowed (see `_allowed`).
    return live is not None and (live == MANY or live & (live - 1) != 0)


def forced_bytes(
    rec: Recognizer, state: tuple[int, int], limit: int = MAX_FORCED_BYTES
) -> tuple[bytes, tuple[int, int]]:
    """(forced bytes, state after them) from `state`; cached per recognizer state."""
    if surely_unforced(rec, state):
        return b"", state
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
    """Forced bytes from the structure of the lexer state, not from its table rows: a
    state's live bytes are its regexes' first bytes (exact for regexes without & and ~,
    which is nearly all), and inside a literal the forced run is read off the literal's
    tail at once. No table row is filled, and no derivative computed, past the last
    forced byte (filling the row there, a string body's say, cost more than the rest)."""
    out = bytearray()
    while len(out) < limit:
        allowed = _allowed(rec, state)
        if allowed <= 0 or allowed & (allowed - 1) or rec.is_accepting(state):
            break
        run = _literal_run(rec, state, limit - len(out))
        if run is not None:
            out += run[0]
            state = run[1]
            continue
        b = allowed.bit_length() - 1
        out.append(b)
        after = rec.step(state, b)
        assert after is not None  # b is the one byte the state allows
        state = after
    return bytes(out), state


def _allowed(rec: Recognizer, state: tuple[int, int]) -> int:
    """The bytes `state` allows (bit b for byte b), exactly as `allowed_byte_mask`, or
    MANY when two are known to be allowed but not which."""
    lexstate, row = state
    live = _live_bytes(rec, lexstate)
    if live == MANY or rec.lexer.accept[lexstate] == NO_ACCEPT:
        return live
    row2 = rec.end_lexeme(lexstate, row)
    if row2 == NO_ROW:
        return live
    # Where the lexeme goes on, it goes on (as in `step`); elsewhere the next lexeme may
    # start: the union of the two states' live bytes.
    restart = _live_bytes(rec, int(rec.row_lexstate[row2]))
    return MANY if restart == MANY else live | restart


def _live_bytes(rec: Recognizer, lexstate: int) -> int:
    """The bytes some lexeme of the lexer state goes on with (bit b for byte b), or MANY;
    cached per lexer state (its live bytes never change)."""
    cache = rec.caches.live_bytes
    live = cache.get(lexstate)
    if live is None:
        live = cache[lexstate] = _live_bytes_of(rec, lexstate)
    return live


def _live_bytes_of(rec: Recognizer, lexstate: int) -> int:
    lexer = rec.lexer
    exprs = lexer.exprs
    marker = lexer.start_marker
    sure = 0
    exact = True
    for i, e in lexer.pairs_of(lexstate):
        if i == marker:
            continue
        if exprs.emptiness_is_trivial(e):
            # Without & and ~ only ∅ is empty, so every first byte has a live derivative.
            sure |= exprs.first_bytes(e)
        else:
            exact = False
    if exact:
        return sure
    if sure & (sure - 1):
        return MANY
    # A regex with & or ~ (a key other than the listed ones): its first bytes are only an
    # upper bound. The row's known entries may already tell two live bytes (a count
    # state of a long string is walked as its clamped twin, whose row the walk filled:
    # both allow the same bytes); else the row is filled, as the row-by-row way does.
    if np.count_nonzero(lexer.table[rec.caches.walk_twins.get(lexstate, lexstate)] > DEAD) >= 2:
        return MANY
    if (lexer.table[lexstate] == UNKNOWN).any():
        lexer.fill_row(lexstate)
    return _bits(lexer.table[lexstate] != DEAD)


def _bits(flags: np.ndarray) -> int:
    return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")


def _literal_run(rec: Recognizer, state: tuple[int, int], budget: int) -> tuple[bytes, tuple[int, int]] | None:
    """Inside one literal-headed lexeme that cannot end yet (`"name_of_the_person"` after
    `"n`), the bytes up to where it could end or branch, and the state after them;
    the same as stepping them one at a time, without making the states in between.
    None where the state is not such a lexeme. The run depends on the lexer state
    alone, so it is kept per lexer state: the same key in the next object, the next
    array item, meets it again with another parser row."""
    lexstate, row = state
    runs = rec.caches.literal_runs
    if lexstate in runs:
        run = runs[lexstate]
    else:
        run = runs[lexstate] = _literal_run_of(rec, lexstate, MAX_FORCED_BYTES)
    if run is None:
        return None
    if len(run[0]) > budget:
        # Cut short by the caller's limit: the state at the cut is not the one kept.
        run = _literal_run_of(rec, lexstate, budget)
        if run is None:
            return None
    return run[0], (run[1], row)


def _literal_run_of(rec: Recognizer, lexstate: int, budget: int) -> tuple[bytes, int] | None:
    """`_literal_run` for a lexer state: (the run, the lexer state after it), or None."""
    lexer = rec.lexer
    if lexer.accept[lexstate] != NO_ACCEPT:
        return None
    lexeme = expr = -1
    for i, e in lexer.pairs_of(lexstate):
        if i != lexer.start_marker:
            if lexeme >= 0:
                return None  # two lexemes: stepped a byte at a time
            lexeme, expr = i, e
    if budget <= 0:
        return None
    literal = lexer.literal_of(lexeme)
    if literal is not None:
        # A literal lexeme (a key, a keyword) read part way: its expression is a
        # derivative of the literal, so it matches the literal's last bytes alone, and
        # the run is all of them, whatever the part read. The state after it is the
        # lexeme's own, kept per lexeme: `"ten`, `"tend` and `"tende` end in the same.
        left = lexer.exprs.min_length(expr)
        if 0 < left <= min(budget, len(literal)):
            ends = rec.caches.literal_ends
            end = ends.get(lexeme)
            if end is None:
                end = ends[lexeme] = lexer.intern_state(((lexeme, ExprSet.EPSILON),))
            return literal[-left:], end
    return _chain_run(rec, lexeme, expr, budget)


def _chain_run(rec: Recognizer, lexeme: int, expr: int, budget: int) -> tuple[bytes, int] | None:
    """`_literal_run_of` for one lexeme's expression read off its chain: the way for any
    literal-headed regex, and the definition the literal shortcut is tested against."""
    lexer = rec.lexer
    out = bytearray()
    # The links of the literal's chain, read off at once; the run stops before a byte
    # set of two or more bytes or an empty tail, and after a tail that may end.
    _, byte_sets, codes = lexer.exprs.byte_chain_codes(expr, (), budget)
    for byte_set, code in zip(byte_sets, codes, strict=True):
        if byte_set & (byte_set - 1) or code < 2:
            break  # a set of two or more bytes, or an empty tail
        out.append(byte_set.bit_length() - 1)
        expr = code >> 1
        if code & 1:
            break  # the lexeme may end here: what comes next is the parser's to say
    if not out:
        return None
    # The pairs `Lexer.step` would make: the one lexeme, marker dropped.
    return bytes(out), lexer.intern_state(((lexeme, expr),))


def nothing_forced(rec: Recognizer, state: tuple[int, int], walker: MaskWalker | None = None) -> bool:
    """True where it is already known, without a call into the lexer or parser, that no
    byte is forced at `state`: the mask `walker` last computed is the state's and allows
    two first bytes, its lexer state goes on with two or more bytes (a string body, a
    number: most positions), or the state's forced bytes are cached and empty. False
    means "not known", never "something is forced". Asked before any other work at
    every fast-forward call, since nearly every position forces nothing."""
    if (walker is not None and walker.two_bytes_allowed(state)) or surely_unforced(rec, state):
        return True
    got = rec.caches.forced_bytes.get((state, MAX_FORCED_BYTES))
    return got is not None and not got[0]


def no_forced_tokens(rec: Recognizer, state: tuple[int, int], walker: MaskWalker | None = None) -> bool:
    """True where it is already known, without a call into the lexer or parser, that
    `forced_tokens` answers no tokens: as `nothing_forced`, or the mask `walker` last
    computed is the state's and two of its tokens differ within the first HEAL_TOKENS + 1
    bytes. Then at most HEAL_TOKENS bytes are forced, and both tokens spell all of them
    and more, so token healing takes every forced byte back: after a key's closing
    quote, `":` spans it. False means "not known"."""
    return (walker is not None and walker.tokens_part_within(state, HEAL_TOKENS + 1)) or nothing_forced(rec, state)


def forced_bytes_by_rows(rec: Recognizer, state: tuple[int, int], limit: int = MAX_FORCED_BYTES) -> bytes:
    """The forced bytes the plain way, a filled table row per byte: the definition the
    structural `_forced_bytes` is tested against."""
    out = bytearray()
    while len(out) < limit and not rec.is_accepting(state):
        allowed = rec.allowed_byte_mask(state)
        if not allowed or allowed & (allowed - 1):
            break
        b = allowed.bit_length() - 1
        out.append(b)
        after = rec.step(state, b)
        assert after is not None
        state = after
    return bytes(out)


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
    if forced is None and no_forced_tokens(rec, state, walker):
        return []
    got = rec.caches.forced_bytes.get((state, MAX_FORCED_BYTES))
    if got is None:
        got = forced_bytes(rec, state)
    own, end_state = got
    if forced is None:
        forced = own
    if not forced:
        return []
    if forced != own:
        stepped = rec.step_bytes(state, forced)
        if stepped is None:
            raise ValueError(f"the grammar rejects the forced bytes {forced[:40]!r}")
        end_state = stepped
    cache = rec.caches.forced_tokens
    # The tokenizer object itself (not its id) keys the entry, so it cannot be confused
    # with a later tokenizer at the same address.
    heal_from = None
    if len(forced) <= HEAL_TOKENS:
        # At most HEAL_TOKENS tokens spell the forced bytes, so token healing may take all
        # of them back; where it does (a `"` that `",` may span), the answer is no tokens
        # whatever came before, and needs no tokenizer.
        heal_key = (tokenizer, trie.fingerprint, state, forced)
        heal_from = rec.caches.heal_points.get(heal_key)
        if heal_from is None:
            heal_from = _heal_point(trie, walker, rec, end_state, forced, 0)
            if len(rec.caches.heal_points) > 100_000:
                rec.caches.heal_points.clear()
            rec.caches.heal_points[heal_key] = heal_from
        if heal_from == 0:
            return []
    recent = tuple(recent_tokens[-CONTEXT_TOKENS:])
    key = (tokenizer, trie.fingerprint, state, forced, recent)
    hit = cache.get(key)
    if hit is None:
        hit = _forced_tokens(tokenizer, trie, walker, rec, state, list(recent), forced, end_state, heal_from)
        if len(cache) > 100_000:
            cache.clear()
        cache[key] = hit
    return list(hit)


def _forced_tokens(
    tokenizer,
    trie: TokenTrie,
    walker: MaskWalker,
    rec: Recognizer,
    state,
    recent_tokens: list[int],
    forced: bytes,
    end_state,
    heal_from: int | None = None,
) -> tuple[int, ...]:
    """`heal_from`: the first index where a token may span the end of the forced bytes,
    when already known from index 0 on."""
    recent = tuple(recent_tokens[-CONTEXT_TOKENS:])
    # The same text after the same tokens recurs in other states (the same key at
    # another depth, the next array item): the tokenizer is asked once.
    tokenized = rec.caches.tokenized
    key = (tokenizer, recent, forced)
    tokens = tokenized.get(key)
    if tokens is None:
        tokens = _tokenize_in_context(tokenizer, forced, list(recent))
        if len(tokenized) > 100_000:
            tokenized.clear()
        tokenized[key] = tokens
    if not tokens:
        return ()
    token_bytes = tokenizer.token_bytes
    tail = tokens[-HEAL_TOKENS:]
    max_length = sum(len(token_bytes(t)) for t in tail)
    start = max(0, len(forced) - max_length)
    if heal_from is None or start > 0:
        heal_from = _heal_point(trie, walker, rec, end_state, forced, start)
    kept: list[int] = []
    length = 0
    for t in tokens:
        n = len(token_bytes(t))
        if length + n > heal_from:
            break
        kept.append(t)
        length += n
    return tuple(kept)


def _heal_point(trie: TokenTrie, walker: MaskWalker, rec: Recognizer, end_state, forced: bytes, start: int) -> int:
    """The first index from `start` on where some token spelling `forced[idx:]` and then
    more is allowed (the model may tokenize across the end there), or len(forced).
    In one compiled call where the walker has packed arrays (`MaskWalker.heal_point`),
    an index whose walk needs Python decided here; else index by index here."""
    while True:
        got = walker.heal_point(trie, end_state, forced, start)
        if got is None:
            break
        idx, in_python = got
        if not in_python:
            return idx
        if _extension_allowed(trie, walker, rec, end_state, trie.node_for(forced[idx:])):
            return idx
        start = idx + 1
    for idx, node in trie.extendable_suffixes(forced, start):
        if _extension_allowed(trie, walker, rec, end_state, node):
            return idx
    return len(forced)


def _extension_allowed(trie: TokenTrie, walker: MaskWalker, rec: Recognizer, end_state, node: int) -> bool:
    """Whether some token strictly below trie node `node` is allowed from `end_state`,
    the state after the bytes that spell `node`."""
    allowed = _allowed(rec, end_state)
    if allowed != MANY:
        # A token one byte longer than the node, whose byte the state allows, settles it
        # without a walk (`"` inside an object: `",` or `":` is a token); a few children
        # are looked at, the walk decides the rest.
        child = node + 1
        stop = node + int(trie.subtree_size[node])
        for _ in range(8):
            if child >= stop:
                break
            if trie.tok_end[child] > trie.tok_start[child] and (allowed >> int(trie.node_byte[child])) & 1:
                return True
            child += int(trie.subtree_size[child])
    return walker.any_extension(end_state, node)


def _tokenize_in_context(tokenizer, forced: bytes, recent: list[int]) -> list[int]:
    """Tokens of `forced` as the tokenizer would split them after the recent tokens.

    When the last recent token would merge with the forced bytes (the boundary moves),
    no prefix of forced tokens can be canonical without taking back a generated token,
    so the context is dropped and the plain tokenization is used."""
    if recent:
        encode_after = getattr(tokenizer, "encode_after", None)
        tokens = encode_after(recent, forced) if encode_after is not None else None
        if tokens is not None:
            return tokens
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
