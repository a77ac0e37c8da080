"""The decoding loop: model steps under the constraint, fast-forward, and stop rules.

Each step asks the constraint which tokens may come next (typed characters still to
re-spell, then the grammar), asks the model for logits of only those tokens when they
are few (a sparse LM head: Gemma's 262k-row head is most of a CPU step), and picks one.
Text the grammar forces is appended in one go as canonical fast-forward tokens; the
model reads them on its next call, as a short prefill that reuses the KV cache.
EOS is allowed only where the grammar accepts.

Draft tokens from the document (prompt lookup): code repeats itself, so before a model
step the last tokens of the sequence are looked up earlier in it (the prompt holds the
document) and the tokens that followed there are run through the model together with the
step's own token, in one forward of up to `draft + 1` positions (on a memory-bound CPU
about the price of one). The draft only fills the KV cache ahead: every token is still
picked by the loop below from its own step's logits under the constraint's mask, and a
step whose sequence is already cached costs only its head. Where a pick differs from the
draft, the next step's sequence diverges from the cache and the model drops the rest, so
the output is that of plain decoding.

Stop rules: end of line in single-line mode (LF, CR or CRLF: the file's own), text that already follows the cursor (never
re-type the suffix), max tokens, a time budget, or a cancel callback polled every step.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from midword.engine.matcher import mask_to_ids

from .constraint import Constraint, DecodeState
from .multiline import LINE_BREAK, Block, block_end, trim_block

SPARSE_HEAD_LIMIT = 4096  # allowed tokens up to which only their logits are computed
# Two line breaks in a row, whichever the file uses (CRLF counts as one break; a CR at
# the end may still become CRLF, and is one break either way).
_BLANK_LINE = re.compile(rb"(\r\n|\r(?!\n)|\n)(\r\n|\r|\n)")
DRAFT_TOKENS = 0  # draft tokens verified with a model step; off until a run of positions costs about one step
DRAFT_MIN_MATCH = 2  # tokens of the sequence's end that must recur before a draft is taken
DRAFT_MAX_MATCH = 8  # the longest end match looked for (the longest match's continuation wins)


@dataclass
class StopRules:
    max_tokens: int = 48
    single_line: bool = True
    suffix_line: str = ""  # the rest of the cursor's line after the cursor, stripped
    time_budget_s: float = 2.0
    cancelled: Callable[[], bool] | None = None
    on_text: Callable[[bytes], object] | None = None  # called with the bytes inserted so far, after every step
    block: Block | None = None  # complete a block, ending by indentation


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)
    inserted: bytes = b""  # bytes generated past the cursor
    stop_reason: str = ""
    forced_tokens: int = 0
    forward_passes: int = 0
    mask_ms: float = 0.0
    model_ms: float = 0.0
    drafted: int = 0  # draft tokens run through the model ahead of their steps
    draft_accepted: int = 0  # of those, tokens the decoding then took


def choose(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    return int(rng.choice(p.size, p=p))


def generate(
    model,
    constraint: Constraint,
    prompt: list[int],
    state: DecodeState,
    rules: StopRules,
    *,
    temperature: float = 0.0,
    rng: np.random.Generator | None = None,
    initial_tokens: Sequence[int] = (),
    typed_len: int | None = None,
    started: float | None = None,
    draft: int = DRAFT_TOKENS,
) -> Generation:
    """Generates after `prompt + initial_tokens` from constraint state `state`; the first
    `typed_len` bytes of the tokens (default: what `state` still has to re-spell) re-spell
    text before the cursor. `draft`: up to that many prompt-lookup draft tokens ride along
    with a model step (0: none; the output is the same either way)."""
    rng = rng or np.random.default_rng()
    started = time.perf_counter() if started is None else started
    gen = Generation(tokens=list(initial_tokens))
    tokenizer = constraint.tokenizer
    vocab = tokenizer.vocab_size
    typed_total = len(state.typed) if typed_len is None else typed_len
    # bytes of initial tokens past the typed text
    gen.inserted = _past_typed(tokenizer, gen.tokens, typed_total)
    drafter = _Drafter(model, prompt, draft)
    while True:
        if rules.on_text is not None:
            rules.on_text(gen.inserted)
        reason = _stop_reason(gen, rules, started)
        if reason:
            gen.stop_reason = reason
            break
        t0 = time.perf_counter()
        forced = constraint.forced(state)
        if forced:
            for t in forced:
                state = constraint.advance(state, t)
                gen.tokens.append(t)
                gen.forced_tokens += 1
            gen.inserted = _past_typed(tokenizer, gen.tokens, typed_total)
            gen.mask_ms += (time.perf_counter() - t0) * 1e3
            continue
        mask = constraint.allowed(state)
        ids = mask_to_ids(mask, vocab)
        gen.mask_ms += (time.perf_counter() - t0) * 1e3
        if ids.size == 0:
            gen.stop_reason = "grammar"
            break
        t0 = time.perf_counter()
        if ids.size > 1:
            drafter.before_step(gen)
        if ids.size == 1:
            pick = int(ids[0])
        elif ids.size <= SPARSE_HEAD_LIMIT:
            logits = model.next_logits(prompt + gen.tokens, allowed=ids)
            gen.forward_passes += 1
            pick = int(ids[choose(logits, temperature, rng)])
        else:
            logits = model.next_logits(prompt + gen.tokens)
            gen.forward_passes += 1
            restricted = logits[ids]
            pick = int(ids[choose(restricted, temperature, rng)])
        gen.model_ms += (time.perf_counter() - t0) * 1e3
        if pick in constraint.eos:
            gen.stop_reason = "eos"
            break
        state = constraint.advance(state, pick)
        gen.tokens.append(pick)
        gen.inserted = _past_typed(tokenizer, gen.tokens, typed_total)
    drafter.settle(gen)
    gen.inserted = _trim(gen.inserted, rules, gen)
    return gen


def draft_tokens(
    seq: np.ndarray, k: int, min_match: int = DRAFT_MIN_MATCH, max_match: int = DRAFT_MAX_MATCH
) -> np.ndarray:
    """Prompt lookup: the up to `k` tokens that followed the latest earlier occurrence of
    the longest end of `seq` (at least `min_match`, at most `max_match` tokens) that
    recurs in it; empty when none does."""
    n = seq.size
    if k <= 0 or n < min_match + 1:
        return seq[:0]
    # Candidate ends: earlier positions holding the last token, each with a continuation.
    ends = np.flatnonzero(seq[: n - 1] == seq[n - 1])
    match = np.ones(ends.size, dtype=np.int64)
    alive = np.ones(ends.size, dtype=bool)
    for j in range(1, max_match):
        ok = alive & (ends >= j)
        ok[ok] = seq[ends[ok] - j] == seq[n - 1 - j]
        alive = ok
        if not alive.any():
            break
        match += alive
    best = int(match.max()) if match.size else 0
    if best < min_match:
        return seq[:0]
    # Among the longest matches the latest one: the nearest code is likeliest to recur.
    end = int(ends[np.flatnonzero(match == best)[-1]])
    return seq[end + 1 : end + 1 + k]


class _Drafter:
    """Runs draft tokens through the model with a step that needs a forward pass, and
    counts how many of them the decoding took."""

    def __init__(self, model, prompt: list[int], k: int):
        self.model = model
        self.prompt = prompt
        self.k = int(k)
        # Drafts need a model that prefills ahead and tells what it holds.
        self.on = self.k > 0 and hasattr(model, "is_cached") and hasattr(model, "prefill")
        self.limit = int(getattr(model, "max_context", 0) or 0)
        self.pending: tuple[int, np.ndarray] | None = None

    def before_step(self, gen: Generation) -> None:
        # Beside other jobs, a step batched with theirs costs less than drafts run alone.
        if not self.on or getattr(self.model, "batching", False):
            return
        seq = self.prompt + gen.tokens
        if self.model.is_cached(seq):
            return
        self.settle(gen)
        arr = np.asarray(seq, dtype=np.int64)
        guess = draft_tokens(arr, self.k)
        if self.limit:
            guess = guess[: max(0, self.limit - arr.size)]
        if guess.size == 0:
            return
        self.model.prefill(seq + guess.tolist())
        gen.drafted += int(guess.size)
        self.pending = (len(gen.tokens), guess)

    def settle(self, gen: Generation) -> None:
        """Count the pending draft's tokens that the decoding took (its longest prefix
        equal to the tokens generated at its positions)."""
        if self.pending is None:
            return
        at, guess = self.pending
        taken = gen.tokens[at : at + guess.size]
        same = 0
        while same < len(taken) and taken[same] == int(guess[same]):
            same += 1
        gen.draft_accepted += same
        self.pending = None


def _past_typed(tokenizer, tokens: list[int], typed_len: int) -> bytes:
    return tokenizer.decode(tokens)[typed_len:]


def _stop_reason(gen: Generation, rules: StopRules, started: float) -> str:
    text = gen.inserted
    if rules.single_line and (b"\n" in text or b"\r" in text):
        return "newline"
    if rules.suffix_line and _suffix_at(text, rules.suffix_line.encode("utf-8")) >= 0:
        return "suffix"
    if rules.block is not None:
        if block_end(text, rules.block) >= 0:
            return "block_end"
    elif not rules.single_line and _BLANK_LINE.search(text):
        return "blank_line"
    if len(gen.tokens) >= rules.max_tokens:
        return "max_tokens"
    if time.perf_counter() - started > rules.time_budget_s:
        return "time"
    if rules.cancelled is not None and rules.cancelled():
        return "cancelled"
    return ""


_OPEN = {ord("("): ord(")"), ord("["): ord("]"), ord("{"): ord("}")}


def _suffix_at(text: bytes, suffix: bytes) -> int:
    """Where the generated text starts re-typing the suffix, or -1. The suffix only counts
    where the text before it has no unclosed bracket, so `f(x)` inside `(...)` is kept."""
    start = 0
    while True:
        p = text.find(suffix, start)
        if p < 0:
            return -1
        depth = 0
        for b in text[:p]:
            if b in _OPEN:
                depth += 1
            elif b in (0x29, 0x5D, 0x7D):
                depth -= 1
        if depth <= 0:
            return p
        start = p + 1


def _trim(text: bytes, rules: StopRules, gen: Generation) -> bytes:
    if rules.block is not None:
        text = trim_block(text, rules.block, cut_off=gen.stop_reason in ("max_tokens", "time"))
    elif rules.single_line:
        m = LINE_BREAK.search(text)
        if m is not None:
            text = text[: m.start()]
    else:
        m = _BLANK_LINE.search(text)
        if m is not None:  # keep the line break that ends the last line
            text = text[: m.start(2)]
    if rules.suffix_line:
        p = _suffix_at(text, rules.suffix_line.encode("utf-8"))
        if p >= 0:
            text = text[:p]
    return text
