"""Character prefix conditioning: complete from the middle of a word.

A prompt that ends mid-token (`userNa|`) puts the model where its training data never
was: `userName` is one token, so the model has hardly ever seen `user` `Na` followed by
anything. So the prompt backs off its unstable tail — the bytes whose tokenization could
still change with what follows (`Tokenizer.tokenize_partial`) — and generation must
re-spell those typed bytes before it continues.

Which tokens should re-spell them? Every way of covering the typed text `L` is a
*cover*: a split point i, the canonical tokens of `L[:i]` (the left part), and a first
free token whose bytes start with `L[i:]` (found in the token trie). A cover is weighed
by the model's own probability P(left tokens) · P(first token | left), computed with
batched forward passes that share the stable prompt's KV cache; covers whose tokens are
not the canonical tokenization of their own text are dropped (a re-encode check), since
the model was trained on canonical text only. Greedy decoding takes the best cover;
sampling draws one in proportion to its weight.

The baselines live here too, for evaluation: `naive` (prompt as typed), `heal1` (back
off one token) and `align` (back off every token touching the partial word, then let
each generated token agree byte-wise with the typed text — Athiwaratkun et al. 2024).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

CONTEXT_TOKENS = 8  # stable tokens re-encoded with the left part to check canonicity
MAX_CANONICAL_CHECKS = 64  # candidates re-encoded per split before giving up on it
_WORD_TAIL = re.compile(rb"[A-Za-z0-9_]*\Z")


def _word_tail(text: bytes) -> bytes:
    """The identifier characters at the end of `text` (possibly none)."""
    match = _WORD_TAIL.search(text)
    return match.group(0) if match is not None else b""


@dataclass
class Backoff:
    """The prompt split at the cursor: `stable` tokens go to the model, `typed` bytes
    (typed by the user, before the cursor) must be re-spelled by the completion."""

    stable: list[int]
    typed: bytes


def backoff(tokenizer, prefix: bytes, mode: str) -> Backoff:
    if mode == "naive":
        return Backoff(tokenizer.encode(prefix), b"")
    if mode == "heal1":
        tokens = tokenizer.encode(prefix)
        if not tokens:
            return Backoff([], b"")
        return Backoff(tokens[:-1], tokenizer.token_bytes(tokens[-1]))
    if mode == "align":
        tokens = tokenizer.encode(prefix)
        word_start = len(prefix) - len(_word_tail(prefix))
        end = len(tokenizer.decode(tokens))
        # pop every token that touches the partial word (at least one)
        while tokens:
            end -= len(tokenizer.token_bytes(tokens[-1]))
            tokens.pop()
            if end <= word_start:
                break
        return Backoff(tokens, prefix[end:])
    if mode in ("cpc", "exact"):
        stable, leftover = tokenizer.tokenize_partial(prefix)
        return Backoff(list(stable), leftover)
    raise ValueError(f"unknown completion mode {mode!r} (expected naive, heal1, align or cpc)")


@dataclass
class Cover:
    split: int  # bytes of the typed text covered by `left`
    left: list[int]  # canonical tokens of typed[:split]
    token: int  # first token spanning (or ending at) the end of the typed text
    logprob: float  # log P(left) + log P(token | left)


@dataclass
class Split:
    split: int
    left: list[int]
    left_logprob: float
    candidates: np.ndarray  # token ids
    candidate_logprobs: np.ndarray  # log P(candidate | prompt, left)


@dataclass
class CoverSearch:
    splits: list[Split] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    typed: bytes = b""
    forward_positions: int = 0

    @property
    def candidates(self) -> int:
        return sum(int(s.candidates.size) for s in self.splits)

    def best_covers(self, tokenizer, canonical_only: bool = True) -> list[Cover]:
        """The best canonical cover of each split, best first."""
        covers = []
        for sp in self.splits:
            order = np.argsort(-sp.candidate_logprobs)
            for k in order[:MAX_CANONICAL_CHECKS]:
                t = int(sp.candidates[k])
                if canonical_only and not is_canonical(tokenizer, self.context, sp.left, t, self.typed[: sp.split]):
                    continue
                covers.append(Cover(sp.split, sp.left, t, sp.left_logprob + float(sp.candidate_logprobs[k])))
                break
        covers.sort(key=lambda c: -c.logprob)
        return covers

    def sample(self, tokenizer, temperature: float, rng: np.random.Generator, tries: int = 64) -> Cover | None:
        """A cover drawn from P(cover)^(1/T) restricted to canonical covers (rejection sampling)."""
        if not self.splits:
            return None
        flat_lp = np.concatenate([(sp.left_logprob + sp.candidate_logprobs) / temperature for sp in self.splits])
        owner = np.concatenate([np.full(sp.candidates.size, j) for j, sp in enumerate(self.splits)])
        index = np.concatenate([np.arange(sp.candidates.size) for sp in self.splits])
        w = np.exp(flat_lp - flat_lp.max())
        w /= w.sum()
        for _ in range(tries):
            k = int(rng.choice(w.size, p=w))
            sp = self.splits[owner[k]]
            t = int(sp.candidates[index[k]])
            if is_canonical(tokenizer, self.context, sp.left, t, self.typed[: sp.split]):
                return Cover(sp.split, sp.left, t, float(flat_lp[k] * temperature))
        best = self.best_covers(tokenizer)
        return best[0] if best else None

    def pick(self, tokenizer, temperature: float, rng: np.random.Generator) -> Cover | None:
        """The greedy cover (temperature 0) or a sampled one (needs an exhaustive search)."""
        if temperature <= 0:
            best = self.best_covers(tokenizer)
            return best[0] if best else None
        return self.sample(tokenizer, temperature, rng)


def _left_tokens(tokenizer, context: list[int], left_text: bytes) -> list[int] | None:
    """Canonical tokens of `left_text` after `context`, or None if they merge with it."""
    if not left_text:
        return []
    ctx = tokenizer.decode(context)
    tokens = tokenizer.encode(ctx + left_text)
    covered = 0
    for k, t in enumerate(tokens):
        if covered == len(ctx):
            rest = tokens[k:]
            return rest if tokenizer.decode(rest) == left_text else None
        if covered > len(ctx):
            return None
        covered += len(tokenizer.token_bytes(t))
    return None


def is_canonical(tokenizer, context: list[int], left: list[int], token: int, left_text: bytes) -> bool:
    """Whether `left + [token]` is how the tokenizer itself splits that text after `context`."""
    text = left_text + tokenizer.token_bytes(token)
    return _left_tokens(tokenizer, context, text) == left + [token]


def search_covers(
    model,
    tokenizer,
    prompt: list[int],
    stable: list[int],
    typed: bytes,
    candidates_for,
    *,
    exhaustive: bool = False,
    batch: int = 2,
    cancelled=None,
) -> CoverSearch:
    """Weighs the splits of `typed` (see module doc).

    `prompt` is what the model sees before the typed text (BOS + stable tokens);
    `candidates_for(rest)` gives the token ids allowed to follow the left part: tokens whose
    bytes start with `rest` and suit the grammar past the cursor (all allowed tokens when
    `rest` is empty). `cancelled()` is polled between model calls.

    Greedy decoding needs only the best cover, so splits are scored best-first: the
    probability of a split's first left token (one distribution at the prompt, shared by
    all splits) bounds every cover of that split, and splits whose bound is below the best
    canonical cover found so far are never run through the model. `exhaustive=True`
    scores every split (for sampling, which needs them all)."""
    context = stable[-CONTEXT_TOKENS:]
    result = CoverSearch(context=context, typed=typed)
    pending: list[tuple[int, list[int], np.ndarray]] = []
    for i in range(len(typed) + 1):
        left = _left_tokens(tokenizer, context, typed[:i])
        if left is None:
            continue
        cands = np.asarray(candidates_for(typed[i:]), dtype=np.int64)
        if cands.size:
            pending.append((i, left, cands))
    if not pending:
        return result
    first = model.next_logprobs(prompt)  # log P(. | prompt): exact for split 0, a bound for the rest
    positions: set[tuple[int, ...]] = set()

    def bound(item) -> float:
        _, left, cands = item
        return float(first[left[0]]) if left else float(np.max(first[cands]))

    order = sorted(pending, key=bound, reverse=True)
    best = -np.inf
    k = 0
    while k < len(order):
        if cancelled is not None and cancelled():
            break  # the caller answers with what it has (the best cover so far, or none)
        if not exhaustive and bound(order[k]) <= best:
            break  # every remaining split is bounded by a cover we already have
        group: list[tuple[int, list[int], np.ndarray]] = []
        while k < len(order) and len(group) < batch and (exhaustive or bound(order[k]) > best):
            group.append(order[k])
            k += 1
        with_left = [g for g in group if g[1]]
        scores = iter(model.score_branches(prompt, [g[1] for g in with_left])) if with_left else iter(())
        for i, left, cands in group:
            if left:
                score = next(scores)
                sp = Split(i, left, float(np.sum(score.token_logprobs)), cands, score.next_logprobs[cands])
                positions.update(tuple(left[:n]) for n in range(1, len(left) + 1))
            else:
                sp = Split(i, left, 0.0, cands, first[cands])
            result.splits.append(sp)
            if not exhaustive:
                covers = CoverSearch([sp], context, typed).best_covers(tokenizer)
                if covers:
                    best = max(best, covers[0].logprob)
    result.forward_positions = len(positions) + 1
    return result
