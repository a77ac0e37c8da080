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
sampling draws one in proportion to its weight. Sampling weighs every cover; greedy
decoding weighs only what proves the best one (bounds from the sparse head, full-vocabulary
normalisers for the splits that survive them: `_greedy_search`, docs/design/cpc.md).

The baselines live here too, for evaluation: `naive` (prompt as typed), `heal1` (back
off one token) and `align` (back off every token touching the partial word, then let
each generated token agree byte-wise with the typed text — Athiwaratkun et al. 2024).
"""

from __future__ import annotations

import re
import time
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
    # log P(left) + log P(token | left), or up to a constant shared by every cover of the
    # search when it is not `normalised` (the prompt row's normaliser, see `_greedy_search`)
    logprob: float


@dataclass
class Split:
    split: int
    left: list[int]
    left_logprob: float  # log P(left | prompt), up to the search's constant (see Cover)
    candidates: np.ndarray  # token ids
    candidate_logprobs: np.ndarray  # log P(candidate | prompt, left)


@dataclass
class CoverSearch:
    splits: list[Split] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    typed: bytes = b""
    forward_positions: int = 0
    # whether weights are log-probabilities; False: up to a constant shared by every cover
    # (a greedy search that read the prompt's row from the sparse head, see `_greedy_search`)
    normalised: bool = True
    stats: "SearchStats" = field(default_factory=lambda: SearchStats())

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


SPARSE_ROW_LIMIT = 4096  # ids up to which the prompt's row comes from the sparse head, not the full one
# candidates up to which a split is bounded with the sparse head before its full row (a
# bound that fails costs its sparse row on top of the full one, so only cheap ones are tried)
BOUND_ROW_LIMIT = 1024


@dataclass
class SearchStats:
    """What a cover search cost (`midword bench cpc` prints these)."""

    splits: int = 0  # splits of the typed text whose left part the tokenizer spells canonically
    scored: int = 0  # splits whose covers were weighed exactly
    bounded: int = 0  # splits run through the model and then dropped by a sparse-head bound
    pruned: int = 0  # splits dropped by the prompt's row alone, never run through the model
    empty: int = 0  # splits with no candidate (no token, or none the grammar allows, spells the rest)
    model_calls: int = 0  # calls into the model
    full_rows: int = 0  # full-vocabulary normalisers computed (a cached row counts too)
    sparse_rows: int = 0  # rows whose logits came from the sparse head only
    normaliser_ms: float = 0.0  # time in full-vocabulary rows
    model_ms: float = 0.0  # time in every model call, those rows included

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


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

    `exhaustive=True` weighs every split with normalised log-probabilities (sampling needs
    them all), `batch` splits per token-tree pass. Greedy decoding needs only the best
    cover, and weighs as little as proves it (`_greedy_search`)."""
    context = stable[-CONTEXT_TOKENS:]
    result = CoverSearch(context=context, typed=typed)
    splits: list[tuple[int, list[int]]] = []
    for i in range(len(typed) + 1):
        left = _left_tokens(tokenizer, context, typed[:i])
        if left is not None:
            splits.append((i, left))
    result.stats.splits = len(splits)
    if not exhaustive:
        return _greedy_search(model, tokenizer, prompt, splits, candidates_for, result, cancelled)
    pending: list[tuple[int, list[int], np.ndarray]] = []
    for i, left in splits:
        cands = np.asarray(candidates_for(typed[i:]), dtype=np.int64)
        if cands.size:
            pending.append((i, left, cands))
        else:
            result.stats.empty += 1
    if not pending:
        return result
    timer = _Timer(model, result.stats)
    first = timer.full_row(prompt)
    # heaviest first left token first, as the greedy search visits them (ties between
    # covers go to the split visited first)
    pending.sort(key=lambda item: float(first[item[1][0]]) if item[1] else float(np.max(first[item[2]])), reverse=True)
    positions: set[tuple[int, ...]] = set()
    for k in range(0, len(pending), batch):
        if cancelled is not None and cancelled():
            break  # the caller answers with what it has (the best cover so far, or none)
        group = pending[k : k + batch]
        with_left = [g for g in group if g[1]]
        scores = iter(timer.branches(prompt, [g[1] for g in with_left])) if with_left else iter(())
        for i, left, cands in group:
            if left:
                score = next(scores)
                sp = Split(i, left, float(np.sum(score.token_logprobs)), cands, score.next_logprobs[cands])
                positions.update(tuple(left[:n]) for n in range(1, len(left) + 1))
            else:
                sp = Split(i, left, 0.0, cands, first[cands])
            result.splits.append(sp)
            result.stats.scored += 1
    result.forward_positions = len(positions) + 1
    return result


def _greedy_search(model, tokenizer, prompt, splits, candidates_for, result: CoverSearch, cancelled) -> CoverSearch:
    """The best cover, weighing as few splits as prove it.

    Every cover's first token (its first left token, or its candidate at split 0) is
    drawn from the prompt's row, so that row's normaliser is the same for all covers and
    the argmax does not need it: the row's logits come from the sparse head at the ids
    the splits need, and covers are weighed up to that one shared constant.

    A split's covers weigh at most its first left token's weight (the row above), so
    splits are visited heaviest bound first and the search stops at the first bound that
    cannot beat the best canonical cover found. A split that passes is run through the
    model with the sparse head at its candidates: the normaliser after its left part is at
    least the log-sum of the candidates' exp-logits, which bounds every cover of the split
    again (the log-probabilities of its later left tokens are at most 0); only a split that
    passes that bound too gets the full-vocabulary normaliser (one row per left token), and
    its covers are then weighed exactly. Pruning drops only splits that cannot beat (or
    only tie) a cover already found, so the best cover is the one `exhaustive` finds."""
    stats = result.stats
    timer = _Timer(model, stats)
    typed = result.typed
    # A split's candidates are looked up when it is visited (a pruned one never needs
    # them), except split 0's: its bound is its best candidate.
    pending: list[tuple[int, list[int], np.ndarray | None]] = []
    for i, left in splits:
        cands = None if left else np.asarray(candidates_for(typed[i:]), dtype=np.int64)
        if cands is not None and not cands.size:
            stats.empty += 1
            continue
        pending.append((i, left, cands))
    if not pending:
        return result
    vocab = int(getattr(model, "vocab_size", 0) or tokenizer.vocab_size)
    need = np.unique(
        np.concatenate(
            [cands for _, _, cands in pending if cands is not None]
            + [np.asarray([left[0] for _, left, _ in pending if left], dtype=np.int64)]
        )
    )
    if need.size <= SPARSE_ROW_LIMIT:
        first = np.full(vocab, -np.inf)
        first[need] = timer.sparse_row(prompt, need)
        result.normalised = not timer.sparse
    else:
        first = timer.full_row(prompt)

    def bound(item) -> float:
        _, left, cands = item
        return float(first[left[0]]) if left else float(np.max(first[cands]))

    order = sorted(pending, key=bound, reverse=True)
    best = -np.inf
    positions: set[tuple[int, ...]] = set()
    for k, item in enumerate(order):
        if cancelled is not None and cancelled():
            break  # the caller answers with what it has (the best cover so far, or none)
        if bound(item) <= best:
            stats.pruned += len(order) - k  # every remaining split is bounded by a cover we already have
            break
        i, left, cands = item
        if cands is not None:
            sp = Split(i, left, 0.0, cands, first[cands])
        else:
            cands = np.asarray(candidates_for(typed[i:]), dtype=np.int64)
            if not cands.size:
                stats.empty += 1
                continue
            seq = list(prompt) + left
            positions.update(tuple(left[:n]) for n in range(1, len(left) + 1))
            if cands.size <= BOUND_ROW_LIMIT:
                logits = timer.sparse_row(seq, cands).astype(np.float64)
                top = float(logits.max())
                if float(first[left[0]]) + top - (top + np.log(np.sum(np.exp(logits - top)))) <= best:
                    stats.bounded += 1
                    continue
            row = timer.full_row(seq)
            left_lp = float(first[left[0]])
            if len(left) > 1:
                left_lp += float(np.sum(timer.later_left(prompt, left), dtype=np.float64))
            sp = Split(i, left, left_lp, cands, row[cands])
        result.splits.append(sp)
        stats.scored += 1
        covers = CoverSearch([sp], result.context, result.typed).best_covers(tokenizer)
        if covers:
            best = max(best, covers[0].logprob)
    result.forward_positions = len(positions) + 1
    return result


class _Timer:
    """The model calls a cover search makes, timed and counted into its stats. A model
    without a sparse head (a remote scorer, a test double) gives normalised rows, and
    one without `logprobs` scores a left part as a branch."""

    def __init__(self, model, stats: SearchStats):
        self.model = model
        self.stats = stats

    def _call(self, f, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            self.stats.model_calls += 1
            self.stats.model_ms += (time.perf_counter() - t0) * 1e3

    def full_row(self, tokens: list[int]) -> np.ndarray:
        t0 = time.perf_counter()
        row = self._call(self.model.next_logprobs, tokens)
        self.stats.full_rows += 1
        self.stats.normaliser_ms += (time.perf_counter() - t0) * 1e3
        return row

    @property
    def sparse(self) -> bool:
        """Whether rows at a few ids come from a sparse head (unnormalised logits)."""
        return hasattr(self.model, "next_logits")

    def sparse_row(self, tokens: list[int], ids: np.ndarray) -> np.ndarray:
        if not self.sparse:
            return self.full_row(tokens)[ids]
        self.stats.sparse_rows += 1
        return np.asarray(self._call(self.model.next_logits, tokens, allowed=ids))

    def later_left(self, prompt: list[int], left: list[int]) -> np.ndarray:
        """log P(left[j] | prompt + left[:j]) for j >= 1 (full-vocabulary rows)."""
        t0 = time.perf_counter()
        logprobs = getattr(self.model, "logprobs", None)
        if logprobs is not None and prompt:
            out = np.asarray(self._call(logprobs, list(prompt) + left, start=len(prompt) + 1))
        else:
            out = np.asarray(self._call(self.model.score_branches, prompt, [left])[0].token_logprobs[1:])
        self.stats.full_rows += len(left) - 1
        self.stats.normaliser_ms += (time.perf_counter() - t0) * 1e3
        return out

    def branches(self, prompt: list[int], branches: list[list[int]]):
        t0 = time.perf_counter()
        out = self._call(self.model.score_branches, prompt, branches)
        self.stats.full_rows += sum(len(b) for b in branches)
        self.stats.normaliser_ms += (time.perf_counter() - t0) * 1e3
        return out
