"""`midword bench cpc`: how well each way of handling a half-typed word completes it.

A *case* is a cursor strictly inside an identifier or number (`self.userNa|me`) with
the document before it as the prompt and the original text after it as the truth.
Cases come from random cuts in real source files (`--corpus DIR`, by default the
Python standard library of this machine; `tokenize` finds NAME and NUMBER tokens, so
words in strings and comments are never cut) or from a HumanEval-infilling JSONL file
(`prompt` ends at the cursor, `canonical_solution` is the truth, `suffix` follows).
A corpus cut keeps the file's text from the start of a line at most `--context-chars`
before the cursor, and nothing after it: the user is writing the file top-down, and a
suffix would hand the model the rest of the word.

Every mode decodes greedily, one line, no grammar, with the same loop (`generate`); the
modes differ only in what they do with the typed word:

- `naive`, `heal1`, `align`, `cpc`: the product path, `CompletionEngine.complete`.
- `exact`, the yardstick: the conditional distribution of what comes after the typed
  bytes L, given that the output starts with L, computed from every token sequence
  that can spell L — canonical or not, no beam. The prompt is the stable part of
  `Tokenizer.tokenize_partial` (as for cpc). A *node* is a token sequence spelling
  L[:i]; the *first free token* T is the token that carries the output past the end
  of L: T strictly extends L[i:] (i < |L|), or, at a node spelling all of L, any
  non-special token. Each event (node, T) is disjoint from the others and weighs
  P(node) · P(T | node) exactly; their sum is P(output starts with L and goes on).
  Events are grouped by the text T adds past L, the heaviest group wins, and its
  heaviest event (node + T) is where greedy decoding continues. Every node is scored,
  in one token-tree pass, when there are at most `--exact-full-nodes` of them
  (Gemma's byte-fallback pieces double every character, so a 7-letter tail already has
  hundreds). Larger trees (long words, whitespace runs) are scored heaviest node first,
  in rounds, until the weight of the nodes left unscored is below the gap between the
  two best groups — then no unscored node can change the argmax, which is *certified*
  — or until `--exact-max-nodes`; the summary says how many cases needed that and how
  many were not certified.

Metrics, per mode (means over cases):

- `em_word`: the completed word — the typed part of the word at the cursor (the
  `[A-Za-z0-9_]` run before it) plus the same run at the start of the inserted text —
  equals the truth's word (typed part plus the run at the start of the truth).
- `em_line`: the inserted text up to its first newline equals the rest of the line
  (the truth up to its first newline; for JSONL, the canonical solution's first line,
  or all of it when it ends inside a line, where the engine stops at the suffix),
  trailing whitespace ignored.
- `logprob`: log P(the output continues the document with H), H = the truth's first 16
  bytes (cut back to a character boundary), under the mode's own distribution at
  temperature 1. With (stable, typed) the mode's backoff and X = typed + H, a mode is a
  distribution over *first-free-token events* as above (token sequences up to and
  including the token that passes the typed bytes); each event whose text agrees with
  X is weighed and the rest of X is scored along its own tokenization
  (`tokenizer.encode(X[end:])`) after it:
  logprob = log Σ_e Q(e) · P(encode(X[end_e:]) | prompt, e). Q per mode:
  naive: typed is empty, so the events are the first token T after the prompt as typed
  and Q = P(T | prompt) (the plain model; the spec's "truth tokens as continuing the
  prompt", with the first token summed over its spellings like every other mode);
  heal1 / align: every sequence that re-spells the backed-off bytes, weighed by the
  decoding loop's own distribution — at each step the model's probabilities restricted
  to the tokens that agree with the typed bytes and renormalised over them;
  cpc: the covers of `search_covers` (exhaustive, as for sampling) restricted to
  canonical ones, Q = P(cover) / Σ P(canonical covers) — the sampler's distribution;
  canonicity is checked for the heaviest `CANON_CHECKS` covers and for every cover
  that agrees with X; unchecked covers count as canonical in the sum (so the value is
  a lower bound);
  exact: Q = P(event) / P(output starts with the typed bytes and goes on).
  The trees behind this metric (naive, heal1, align; exact when its own tree was not
  scored whole) are scored heaviest node first until the unscored weight is below
  `EXPANSION_TOLERANCE` of the agreeing weight found (so the sum is within 0.1%), or
  up to the node cap. Only the `CONTINUATION_EVENTS` heaviest agreeing events get their
  continuation scored (the rest is tiny); a mode with no agreeing event scores -inf
  and is left out of the mean (counted in the notes).
- `latency_p50_ms`, `latency_p95_ms`: wall time of one completion. Before each one
  the model's KV cache is set to the prompt up to the start of the cursor's line, so
  every mode prefills its own current line, as after moving to a new line.
- `forwards`: transformer body calls per completion (`model.stats.forward_passes`:
  prefill chunks, token-tree passes and decode steps). A token tree is one call however
  many nodes it has, so `positions` (an extra key) counts the token positions run
  through the body (`model.stats.tokens_prefilled`): the size of the work.
"""

from __future__ import annotations

import argparse
import io
import json
import keyword
import math
import random
import re
import sys
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from midword.engine.limits import LimitExceeded

ALL_MODES = ("naive", "heal1", "align", "cpc", "exact")
TRUTH_BYTES = 16
DEFAULT_MAX_TOKENS = 24
DEFAULT_CONTEXT_CHARS = 2000
DEFAULT_TIME_BUDGET_S = 60.0  # generous: a loaded machine must not cut completions short
EXACT_FULL_NODES = 512  # cover trees up to this size are scored whole
EXACT_MAX_NODES = 1024  # larger ones are expanded best-first up to this many nodes
BEST_FIRST_ROUND = 64  # nodes scored per token-tree pass in best-first expansion
EXPANSION_TOLERANCE = 1e-3  # best-first stops when the unscored weight is below this share
CONTINUATION_EVENTS = 8  # agreeing events whose continuation is scored, heaviest first
CANON_CHECKS = 4096  # cpc covers re-encoded for the canonical normaliser, heaviest first
MAX_CORPUS_FILES = 200_000
MAX_SAMPLE_MISSES = 20_000  # consecutive draws without a new cut before the corpus is deemed spent
MAX_FILE_BYTES = 2_000_000
_TREE_NODES_PER_CALL = 4096  # the transformers backend's default token-tree limit
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}
_WORD_CHAR = re.compile(r"[A-Za-z0-9_]")
_WORD_HEAD = re.compile(r"[A-Za-z0-9_]*")
_WORD_TAIL = re.compile(r"[A-Za-z0-9_]*\Z")
_PLAIN_NUMBER = re.compile(r"[0-9][A-Za-z0-9_]*\Z")
_ASCII_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_REGEX_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z0-9_]{2,}(?![A-Za-z0-9_])")


class BenchError(ValueError):
    """Bad benchmark input: a missing corpus, an unreadable JSONL line, an unknown mode."""


# Cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str  # "file:line:col" (1-based line, 0-based column) or the JSONL task id
    prefix: str  # document text before the cursor (what the prompt is made from)
    suffix: str  # editor text after the cursor ("" for corpus cuts)
    truth: str  # the original text from the cursor on
    line_truth: str  # what the rest of the line should be

    @property
    def typed_word(self) -> str:
        return typed_word(self.prefix)

    @property
    def truth_word(self) -> str:
        return completed_word(self.prefix, self.truth)


def word_spans(text: str, python: bool = True) -> list[tuple[int, int]]:
    """(start, end) offsets of the identifiers and numbers a cursor may be put inside.

    Python source goes through `tokenize`: NAME tokens that are not keywords and NUMBER
    tokens that are one `[A-Za-z0-9_]` run (so `3.14` and `1e-5` are left out), ASCII,
    at least two characters. Other text (or Python that does not tokenize) falls back to
    plain word runs, comments and strings included, when `python` is false; Python that
    fails to tokenize (or has error tokens) gives no spans."""
    if not python:
        return [(m.start(), m.end()) for m in _REGEX_WORD.finditer(text)]
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    spans = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            s = tok.string
            if tok.type == tokenize.ERRORTOKEN and s.strip():
                return []  # not Python: its words may sit in what should have been a string
            if len(s) < 2:
                continue
            if tok.type == tokenize.NAME:
                if not _ASCII_NAME.match(s) or keyword.iskeyword(s):
                    continue
            elif tok.type == tokenize.NUMBER:
                if not _PLAIN_NUMBER.match(s):
                    continue
            else:
                continue
            row, col = tok.start
            start = starts[row - 1] + col
            end = start + len(s)
            if text[start:end] != s:
                continue  # a line ending tokenize reads differently (\r, form feed)
            if (start > 0 and _WORD_CHAR.match(text[start - 1])) or (end < len(text) and _WORD_CHAR.match(text[end])):
                continue  # not a whole word run, e.g. `1if`
            spans.append((start, end))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return []
    return spans


def cut_case(text: str, cut: int, name: str, context_chars: int = DEFAULT_CONTEXT_CHARS) -> Case:
    """The case for a cursor at `cut` in `text`: the prompt starts on a line boundary
    at most `context_chars` before the cursor (or mid-line when one line is longer)."""
    start = max(0, cut - context_chars)
    if start > 0:
        nl = text.find("\n", start, cut)
        if nl >= 0:
            start = nl + 1
    truth = text[cut:]
    return Case(name=name, prefix=text[start:cut], suffix="", truth=truth, line_truth=truth.split("\n", 1)[0])


def corpus_files(root: Path, pattern: str = "*.py") -> list[Path]:
    """Files under `root` matching `pattern`, sorted, skipping installed packages and caches."""
    if not root.is_dir():
        raise BenchError(f"--corpus {root}: not a directory")
    files = []
    for path in root.rglob(pattern):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS for part in rel.parts[:-1]) or not path.is_file():
            continue
        files.append(path)
        if len(files) > MAX_CORPUS_FILES:
            raise LimitExceeded("corpus_files", MAX_CORPUS_FILES, f"under {root}; pass a smaller --corpus")
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    if not files:
        raise BenchError(f"--corpus {root}: no files match {pattern!r}")
    return files


def _read_source(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def sample_corpus(root: Path, seed: int = 0, pattern: str = "*.py",
                  context_chars: int = DEFAULT_CONTEXT_CHARS) -> Iterator[Case]:
    """An endless deterministic stream of cuts (the first N are the same for every N).

    Each draw picks a file uniformly, then an identifier or number in it uniformly, then
    a cursor strictly inside it; a cut already drawn is drawn again. The stream ends
    when `MAX_SAMPLE_MISSES` draws in a row find nothing new."""
    files = corpus_files(root, pattern)
    rng = random.Random(seed)
    spans_of: dict[Path, tuple[str, list[tuple[int, int]]]] = {}
    seen: set[tuple[Path, int]] = set()
    misses = 0
    while misses < MAX_SAMPLE_MISSES:
        path = files[rng.randrange(len(files))]
        entry = spans_of.get(path)
        if entry is None:
            text = _read_source(path)
            entry = ("", []) if text is None else (text, word_spans(text, python=path.suffix in (".py", ".pyi")))
            if len(spans_of) > 512:
                spans_of.clear()  # a long run visits many files: keep memory flat
            spans_of[path] = entry
        text, spans = entry
        if not spans:
            misses += 1
            continue
        s, e = spans[rng.randrange(len(spans))]
        cut = rng.randrange(s + 1, e)
        if (path, cut) in seen:
            misses += 1
            continue
        seen.add((path, cut))
        misses = 0
        line = text.count("\n", 0, cut) + 1
        col = cut - (text.rfind("\n", 0, cut) + 1)
        yield cut_case(text, cut, f"{path.relative_to(root).as_posix()}:{line}:{col}", context_chars)


def read_jsonl(path: Path, context_chars: int = DEFAULT_CONTEXT_CHARS) -> Iterator[Case]:
    """Cases from a HumanEval-infilling JSONL file (prompt, canonical_solution, suffix)."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as err:
        raise BenchError(f"--jsonl {path}: {err.strerror or err}") from None
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as err:
                raise BenchError(f"{path}:{n}:{err.colno}: not JSON: {err.msg}") from None
            if not isinstance(item, dict):
                raise BenchError(f"{path}:{n}: expected a JSON object, got {type(item).__name__}")
            for key in ("prompt", "canonical_solution"):
                if not isinstance(item.get(key), str):
                    raise BenchError(f"{path}:{n}: missing string field {key!r}")
            suffix = item.get("suffix", "")
            if not isinstance(suffix, str):
                raise BenchError(f"{path}:{n}: field 'suffix' must be a string")
            prompt, middle = item["prompt"], item["canonical_solution"]
            start = max(0, len(prompt) - context_chars)
            if start > 0:
                nl = prompt.find("\n", start)
                if nl >= 0:
                    start = nl + 1
            yield Case(name=str(item.get("task_id", f"{path.name}:{n}")), prefix=prompt[start:], suffix=suffix,
                       truth=middle + suffix, line_truth=middle.split("\n", 1)[0])


# Metrics ----------------------------------------------------------------------------------


def typed_word(prefix: str) -> str:
    """The part of the word at the cursor that is already typed."""
    return _WORD_TAIL.search(prefix).group(0)


def completed_word(prefix: str, after: str) -> str:
    """The word at the cursor once `after` follows it."""
    return typed_word(prefix) + _WORD_HEAD.match(after).group(0)


def word_match(case: Case, inserted: str) -> bool:
    return completed_word(case.prefix, inserted) == case.truth_word


def line_match(case: Case, inserted: str) -> bool:
    return inserted.split("\n", 1)[0].rstrip() == case.line_truth.rstrip()


def truth_head(truth: str, n: int = TRUTH_BYTES) -> bytes:
    """The first `n` bytes of the truth, cut back to a character boundary."""
    data = truth.encode("utf-8")[:n]
    while data:
        try:
            data.decode("utf-8")
            return data
        except UnicodeDecodeError:
            data = data[:-1]
    return data


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _logsumexp(values) -> float:
    vals = [v for v in values if v != -math.inf]
    if not vals:
        return -math.inf
    top = max(vals)
    return top + math.log(sum(math.exp(v - top) for v in vals))


# Cover trees: every token sequence that spells the typed bytes ------------------------------


class _Vocab:
    """Per-tokenizer tables: the trie, the ids that may be a first free token, and ids
    grouped by their bytes (byte-fallback pieces duplicate single characters)."""

    _cache: dict = {}

    def __init__(self, tokenizer):
        import numpy as np

        from midword.completion.constraint import Constraint

        self.tokenizer = tokenizer
        self.constraint = Constraint(tokenizer, None)
        self.trie = self.constraint.trie
        free = np.zeros(tokenizer.vocab_size, dtype=bool)
        free[np.asarray(self.trie.node_tokens, dtype=np.int64)] = True
        for t in tokenizer.eos_token_ids:
            free[t] = False
        self.free_ids = np.flatnonzero(free).astype(np.int64)
        self.group_bytes: list[bytes] = []
        self.group_of_bytes: dict[bytes, int] = {}
        group = np.empty(self.free_ids.size, dtype=np.int64)
        for k, t in enumerate(self.free_ids.tolist()):
            b = tokenizer.token_bytes(t)
            g = self.group_of_bytes.get(b)
            if g is None:
                g = len(self.group_bytes)
                self.group_of_bytes[b] = g
                self.group_bytes.append(b)
            group[k] = g
        self.free_group = group  # group of free_ids[k]

    @classmethod
    def of(cls, tokenizer) -> "_Vocab":
        v = cls._cache.get(tokenizer)
        if v is None:
            v = cls._cache[tokenizer] = cls(tokenizer)
        return v


@dataclass
class CoverEvent:
    """A first free token after a node: `tokens` = node + [T], spelling `end` bytes."""

    tokens: tuple[int, ...]
    end: int
    logw: float


@dataclass
class CoverTree:
    typed: bytes
    weighting: str  # "global": P(event); "local": the constrained decoder's renormalised steps
    nodes: int = 0  # token sequences scored
    total_nodes: int = 0  # token sequences that spell a prefix of the typed bytes
    best_first: bool = False  # nodes were scored heaviest first (not all at once)
    complete: bool = True  # every node was scored
    stop: str = "complete"  # why expansion ended: complete, certified, tolerance or cap
    log_frontier: float = -math.inf  # log weight of the nodes left unscored
    log_total: float = -math.inf  # log Σ weights of the events found
    consistent: list[CoverEvent] = field(default_factory=list)  # events that agree with the target
    best: CoverEvent | None = None  # heaviest event of the heaviest group
    best_text: bytes = b""  # what the winning group adds past the typed bytes
    log_best: float = -math.inf  # the winning group's weight
    log_second: float = -math.inf

    @property
    def certified(self) -> bool:
        """Whether the winning group is the true argmax: every node was scored, or the
        weight of the unscored nodes is below the gap between the two best groups."""
        if self.complete:
            return True
        if self.best is None:
            return False
        ratio = math.exp(min(0.0, self.log_second - self.log_best))
        if ratio >= 1.0:
            return False
        return self.log_best + math.log1p(-ratio) > self.log_frontier


def count_tree_nodes(trie, typed: bytes, bound: int) -> int:
    """How many token sequences spell a prefix of `typed` (the empty one included),
    counting no further than `bound` + 1."""
    n = len(typed)
    ways = [0] * (n + 1)
    ways[0] = 1
    for i in range(n):
        if ways[i]:
            for length, _ in trie.tokens_prefix_of(typed[i:]):
                ways[i + length] = min(bound + 1, ways[i + length] + ways[i])
    return min(bound + 1, sum(ways))


def expand_covers(model, prompt: list[int], typed: bytes, *, weighting: str = "global", target: bytes | None = None,
                  want_best: bool = True, enumerate_all: bool = True, full_nodes: int = EXACT_FULL_NODES,
                  max_nodes: int = EXACT_MAX_NODES, tolerance: float = EXPANSION_TOLERANCE) -> CoverTree:
    """Scores the token sequences that spell prefixes of `typed` and the first free
    tokens after them (see the module docstring).

    `weighting="global"` weighs a node by P(node | prompt); `"local"` by the product of
    the re-spelling decoder's renormalised step probabilities. Events whose text agrees
    with `target` (which starts with `typed`) are kept in `consistent`; `want_best`
    finds the heaviest group of events by the text they add past `typed`.

    With `enumerate_all`, a tree of at most `full_nodes` nodes is scored whole, in one
    pass. Otherwise nodes are scored heaviest first, in rounds, until — with `want_best`
    — the weight of the nodes not yet scored is below the gap between the two best
    groups (the argmax is certified), or — without — it is below `tolerance` times the
    weight found (of the agreeing events when there is a target, of all events
    otherwise); or until `max_nodes` nodes are scored."""
    import heapq

    import numpy as np

    if weighting not in ("global", "local"):
        raise ValueError(f"weighting must be 'global' or 'local', not {weighting!r}")
    if target is not None and not target.startswith(typed):
        raise ValueError(f"target {target[:40]!r} does not start with the typed bytes {typed!r}")
    tok = model.tokenizer
    vocab = _Vocab.of(tok)
    trie = vocab.trie
    n = len(typed)
    tree = CoverTree(typed=typed, weighting=weighting)

    # Per position i < n: children (tokens that are a prefix of typed[i:]) then the
    # extensions (tokens that run past the end of typed). One `allowed` array per position.
    kids: list[list[tuple[int, int]]] = []
    ext: list[np.ndarray] = []
    allowed: list[np.ndarray] = []
    for i in range(n):
        rest = typed[i:]
        k = trie.tokens_prefix_of(rest)
        e = np.asarray([t for t in trie.tokens_with_prefix(rest) if len(tok.token_bytes(t)) > len(rest)],
                       dtype=np.int64)
        kids.append(k)
        ext.append(e)
        allowed.append(np.concatenate([np.asarray([t for _, t in k], dtype=np.int64), e]))
    # Agreeing events: per position, indices into ext[i] (into free_ids at n).
    agree: list[np.ndarray] = []
    if target is not None:
        for i in range(n):
            tail = target[i:]
            ok = [j for j, t in enumerate(ext[i].tolist())
                  if tail.startswith(tok.token_bytes(t)) or tok.token_bytes(t).startswith(tail)]
            agree.append(np.asarray(ok, dtype=np.int64))
        tail = target[n:]
        if not tail:
            agree.append(np.arange(vocab.free_ids.size))
        else:
            ids = {t for _, t in trie.tokens_prefix_of(tail)} | set(trie.tokens_with_prefix(tail))
            agree.append(np.flatnonzero(np.isin(vocab.free_ids, np.asarray(sorted(ids), dtype=np.int64))))

    acc = _Accumulators(vocab, ext)
    consistent_mass = [-math.inf]

    def absorb(node: tuple[int, ...], pos: int, logw: float, lp: np.ndarray, push) -> None:
        idx = len(acc.scored)
        acc.scored.append(node)
        if pos < n:
            mass = float(np.logaddexp.reduce(lp.astype(np.float64))) if weighting == "local" else 0.0
            for j, (length, t) in enumerate(kids[pos]):
                push(node + (t,), pos + length, logw + float(lp[j]) - mass)
            w = lp[len(kids[pos]):].astype(np.float64) + (logw - mass)
            acc.add_ext(pos, w, idx)
            picked = agree[pos].tolist() if target is not None else []
            ids = [int(ext[pos][j]) for j in picked]
            ends = [pos + len(tok.token_bytes(t)) for t in ids]
        else:
            w = lp[vocab.free_ids].astype(np.float64) + logw
            acc.add_free(w, idx, want_best)
            picked = agree[n].tolist() if target is not None else []
            ids = [int(vocab.free_ids[j]) for j in picked]
            ends = [n + len(tok.token_bytes(t)) for t in ids]
        for j, t, end in zip(picked, ids, ends):
            tree.consistent.append(CoverEvent(node + (t,), end, float(w[j])))
            consistent_mass[0] = float(np.logaddexp(consistent_mass[0], w[j]))

    def score(nodes: list[tuple[tuple[int, ...], int]]):
        branches = [list(node) for node, _ in nodes]
        masks = [allowed[pos] if pos < n else None for _, pos in nodes]
        out = model.score_branches(prompt, branches, masks)
        tree.nodes += len(nodes)
        return [s.next_logprobs for s in out]

    node_limit = getattr(model, "max_branch_nodes", _TREE_NODES_PER_CALL)
    tree.total_nodes = count_tree_nodes(trie, typed, max(full_nodes, max_nodes))
    if enumerate_all and tree.total_nodes <= full_nodes:
        # Every node, parents before children; weights flow down from the parents' scores.
        order: list[tuple[tuple[int, ...], int]] = [((), 0)]
        k = 0
        while k < len(order):
            node, pos = order[k]
            k += 1
            if pos < n:
                order.extend((node + (t,), pos + length) for length, t in kids[pos])
        lps = []
        for lo in range(0, len(order), node_limit):
            lps.extend(score(order[lo:lo + node_limit]))
        weight = {(): 0.0}

        def push_known(child, pos, logw):
            weight[child] = logw

        for (node, pos), lp in zip(order, lps):
            absorb(node, pos, weight[node], lp, push_known)
    else:
        tree.best_first = True
        heap: list[tuple[float, int, tuple[int, ...], int]] = [(-0.0, 0, (), 0)]
        counter = [1]

        def push_heap(child, pos, logw):
            heapq.heappush(heap, (-logw, counter[0], child, pos))
            counter[0] += 1

        log_tol = math.log(tolerance)
        while heap and tree.nodes < max_nodes:
            if tree.nodes:
                frontier = float(np.logaddexp.reduce(np.asarray([-h[0] for h in heap], dtype=np.float64)))
                if want_best:
                    # decoding needs the argmax only: stop once no unscored node can change it
                    if frontier < acc.log_total():
                        acc.pick_best(tree, tok)
                        tree.complete, tree.log_frontier = False, frontier
                        if tree.certified:
                            tree.stop = "certified"
                            break
                elif frontier <= (consistent_mass[0] if target is not None else acc.log_total()) + log_tol:
                    tree.stop = "tolerance"
                    break
            batch, size = [], 0
            while heap and tree.nodes + len(batch) < max_nodes:
                cost = max(1, len(heap[0][2]))
                if batch and (size + cost > node_limit or len(batch) >= BEST_FIRST_ROUND):
                    break
                neg, _, node, pos = heapq.heappop(heap)
                batch.append((node, pos, -neg))
                size += cost
            lps = score([(node, pos) for node, pos, _ in batch])
            for (node, pos, logw), lp in zip(batch, lps):
                absorb(node, pos, logw, lp, push_heap)
        tree.complete = not heap
        if tree.complete:
            tree.stop = "complete"
        elif tree.stop == "complete":
            tree.stop = "cap"
        tree.log_frontier = -math.inf if not heap else float(
            np.logaddexp.reduce(np.asarray([-h[0] for h in heap], dtype=np.float64)))
    tree.log_total = acc.log_total()
    if want_best:
        acc.pick_best(tree, tok)
    return tree


class _Accumulators:
    """Event weights summed over nodes: per extension token of each position, and per
    free token after the nodes that spell all the typed bytes; with the heaviest node
    behind each, for the argmax."""

    def __init__(self, vocab: _Vocab, ext):
        import numpy as np

        self.vocab = vocab
        self.ext = ext
        self.scored: list[tuple[int, ...]] = []
        self.acc_ext = [np.full(e.size, -np.inf) for e in ext]
        self.best_ext_w = [np.full(e.size, -np.inf) for e in ext]
        self.best_ext_node = [np.full(e.size, -1, dtype=np.int64) for e in ext]
        self.acc_free = np.full(vocab.free_ids.size, -np.inf)
        self.best_free_w = np.full(vocab.free_ids.size, -np.inf)
        self.best_free_node = np.full(vocab.free_ids.size, -1, dtype=np.int64)

    def add_ext(self, pos: int, w, idx: int) -> None:
        import numpy as np

        np.logaddexp(self.acc_ext[pos], w, out=self.acc_ext[pos])
        better = w > self.best_ext_w[pos]
        self.best_ext_w[pos][better] = w[better]
        self.best_ext_node[pos][better] = idx

    def add_free(self, w, idx: int, track_best: bool) -> None:
        import numpy as np

        np.logaddexp(self.acc_free, w, out=self.acc_free)
        if track_best:
            better = w > self.best_free_w
            self.best_free_w[better] = w[better]
            self.best_free_node[better] = idx

    def log_total(self) -> float:
        import numpy as np

        parts = [float(np.logaddexp.reduce(a)) for a in self.acc_ext if a.size]
        parts.append(float(np.logaddexp.reduce(self.acc_free)))
        return float(np.logaddexp.reduce(np.asarray(parts)))

    def pick_best(self, tree: CoverTree, tok) -> None:
        """Groups the events by the text they add past the typed bytes; the heaviest
        group wins, and its heaviest event is where decoding continues."""
        import numpy as np

        vocab = self.vocab
        n = len(tree.typed)
        extra_groups: dict[bytes, int] = {}
        ext_group = []
        base = len(vocab.group_bytes)
        for i, e in enumerate(self.ext):
            g = np.empty(e.size, dtype=np.int64)
            for j, t in enumerate(e.tolist()):
                past = tok.token_bytes(t)[n - i:]
                k = vocab.group_of_bytes.get(past)
                if k is None:
                    k = extra_groups.setdefault(past, base + len(extra_groups))
                g[j] = k
            ext_group.append(g)
        total = np.full(base + len(extra_groups), -np.inf)
        np.logaddexp.at(total, vocab.free_group, self.acc_free)
        for g, a in zip(ext_group, self.acc_ext):
            if a.size:
                np.logaddexp.at(total, g, a)
        if total.size == 0 or not np.isfinite(total).any():
            return
        top = int(np.argmax(total))
        tree.log_best = float(total[top])
        tree.log_second = float(np.partition(total, -2)[-2]) if total.size > 1 else -math.inf
        tree.best_text = vocab.group_bytes[top] if top < base else next(
            b for b, k in extra_groups.items() if k == top)
        best_w, best = -np.inf, None
        for k in np.flatnonzero(vocab.free_group == top).tolist():
            if self.best_free_node[k] >= 0 and self.best_free_w[k] > best_w:
                best_w = self.best_free_w[k]
                best = CoverEvent(self.scored[self.best_free_node[k]] + (int(vocab.free_ids[k]),),
                                  n + len(tree.best_text), float(best_w))
        for i, g in enumerate(ext_group):
            for j in np.flatnonzero(g == top).tolist():
                if self.best_ext_node[i][j] >= 0 and self.best_ext_w[i][j] > best_w:
                    best_w = self.best_ext_w[i][j]
                    t = int(self.ext[i][j])
                    best = CoverEvent(self.scored[self.best_ext_node[i][j]] + (t,),
                                      i + len(tok.token_bytes(t)), float(best_w))
        tree.best = best


# Completions -------------------------------------------------------------------------------


def make_prompt(tokenizer, stable: list[int]) -> list[int]:
    """BOS + the stable tokens, cut at the start exactly as `CompletionEngine` cuts it."""
    from midword.completion.engine import MAX_PROMPT_TOKENS, PROMPT_CUT_STEP

    if len(stable) > MAX_PROMPT_TOKENS:
        drop = len(stable) - MAX_PROMPT_TOKENS
        drop = -(-drop // PROMPT_CUT_STEP) * PROMPT_CUT_STEP
        stable = stable[drop:]
    bos = tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + list(stable)


def _utf8_text(data: bytes) -> str:
    """`data` as text, without an incomplete character at its end."""
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace")


@dataclass
class ExactCompletion:
    inserted: str
    prompt: list[int]
    typed: bytes
    tree: CoverTree | None


def exact_complete(model, prefix: str, suffix: str = "", *, max_tokens: int = DEFAULT_MAX_TOKENS,
                   time_budget_s: float = DEFAULT_TIME_BUDGET_S, target: bytes | None = None,
                   full_nodes: int = EXACT_FULL_NODES, max_nodes: int = EXACT_MAX_NODES) -> ExactCompletion:
    """The `exact` mode: the heaviest first free token over every spelling of the typed
    bytes, then the same greedy loop as the engine (single line, no grammar).
    `target` (typed bytes + truth) only records the agreeing events for `logprob`."""
    from midword.completion.cpc import backoff
    from midword.completion.decode import StopRules, generate

    started = time.perf_counter()
    tok = model.tokenizer
    vocab = _Vocab.of(tok)
    constraint = vocab.constraint
    back = backoff(tok, prefix.encode("utf-8"), "exact")
    prompt = make_prompt(tok, back.stable)
    state = constraint.initial(back.typed)
    initial: list[int] = []
    tree = None
    if back.typed:
        full_target = back.typed + target if target is not None else None
        tree = expand_covers(model, prompt, back.typed, weighting="global", target=full_target, want_best=True,
                             full_nodes=full_nodes, max_nodes=max_nodes)
        if tree.best is not None:
            initial = list(tree.best.tokens)
            for t in initial:
                state = constraint.advance(state, t)
    rules = StopRules(max_tokens=max_tokens, single_line=True, suffix_line=suffix.split("\n", 1)[0].strip(),
                      time_budget_s=time_budget_s)
    gen = generate(model, constraint, prompt, state, rules, initial_tokens=initial, typed_len=len(back.typed),
                   started=started)
    return ExactCompletion(_utf8_text(gen.inserted), prompt, back.typed, tree)


# The logprob metric --------------------------------------------------------------------------


def continuation_logprob(model, prompt: list[int], events: list[CoverEvent], target: bytes, log_norm: float,
                         keep: int = CONTINUATION_EVENTS) -> float:
    """log Σ_e exp(logw_e - log_norm) · P(encode(target[end_e:]) | prompt + e.tokens) over
    the `keep` heaviest events."""
    import numpy as np

    tok = model.tokenizer
    chosen = sorted(events, key=lambda e: -e.logw)[:keep]
    branches, used = [], []
    for ev in chosen:
        rest = target[ev.end:] if ev.end < len(target) else b""
        try:
            cont = tok.encode(rest) if rest else []
        except ValueError:
            continue  # a cut inside a character this tokenizer cannot spell alone
        branches.append(list(ev.tokens) + cont)
        used.append(ev)
    if not branches:
        return -math.inf
    scores = model.score_branches(prompt, branches)
    vals = [ev.logw + float(np.sum(s.token_logprobs[len(ev.tokens):], dtype=np.float64))
            for ev, s in zip(used, scores)]
    return _logsumexp(vals) - log_norm


def cpc_events(model, prompt: list[int], stable: list[int], typed: bytes, target: bytes,
               checks: int = CANON_CHECKS) -> tuple[list[CoverEvent], float]:
    """The cpc sampler's covers that agree with `target`, and log Σ P(canonical covers)."""
    import numpy as np

    from midword.completion.cpc import is_canonical, search_covers

    tok = model.tokenizer
    vocab = _Vocab.of(tok)
    search = search_covers(model, tok, prompt, stable, typed,
                           lambda rest: vocab.constraint.candidates_after(None, rest), exhaustive=True)
    if not search.splits:
        return [], -math.inf
    flat = np.concatenate([sp.left_logprob + sp.candidate_logprobs.astype(np.float64) for sp in search.splits])
    owner = np.concatenate([np.full(sp.candidates.size, j) for j, sp in enumerate(search.splits)])
    index = np.concatenate([np.arange(sp.candidates.size) for sp in search.splits])
    order = np.argsort(-flat)
    canonical = []
    for k in order[:checks].tolist():
        sp = search.splits[owner[k]]
        if is_canonical(tok, search.context, sp.left, int(sp.candidates[index[k]]), typed[:sp.split]):
            canonical.append(flat[k])
    unchecked = flat[order[checks:]]
    log_norm = _logsumexp(canonical + ([float(np.logaddexp.reduce(unchecked))] if unchecked.size else []))
    events = []
    for sp in search.splits:
        tail = target[sp.split:]
        for j, t in enumerate(sp.candidates.tolist()):
            b = tok.token_bytes(t)
            if not (tail.startswith(b) or b.startswith(tail)):
                continue
            if is_canonical(tok, search.context, sp.left, t, typed[:sp.split]):
                events.append(CoverEvent(tuple(sp.left) + (t,), sp.split + len(b),
                                         sp.left_logprob + float(sp.candidate_logprobs[j])))
    return events, log_norm


def mode_logprob(model, mode: str, prefix: str, head: bytes, *, exact_tree: CoverTree | None = None,
                 full_nodes: int = EXACT_FULL_NODES, max_nodes: int = EXACT_MAX_NODES,
                 keep: int = CONTINUATION_EVENTS) -> float:
    """log P(head | prefix) under `mode` (see the module docstring); nan when `head` is empty."""
    from midword.completion.cpc import backoff

    if not head:
        return math.nan
    tok = model.tokenizer
    back = backoff(tok, prefix.encode("utf-8"), "exact" if mode == "exact" else mode)
    prompt = make_prompt(tok, back.stable)
    target = back.typed + head
    if mode == "cpc" and back.typed:
        events, log_norm = cpc_events(model, prompt, back.stable, back.typed, target)
        return continuation_logprob(model, prompt, events, target, log_norm, keep)
    weighting = "local" if mode in ("heal1", "align") else "global"
    tree = exact_tree if mode == "exact" and exact_tree is not None and exact_tree.complete else None
    if tree is None:
        tree = expand_covers(model, prompt, back.typed, weighting=weighting, target=target, want_best=False,
                             enumerate_all=False, full_nodes=full_nodes, max_nodes=max_nodes)
    log_norm = tree.log_total if weighting == "global" and back.typed else 0.0
    return continuation_logprob(model, prompt, tree.consistent, target, log_norm, keep)


# The benchmark --------------------------------------------------------------------------------


@dataclass
class ModeResult:
    inserted: str
    em_word: bool
    em_line: bool
    latency_ms: float
    forwards: int
    positions: int = 0
    logprob: float = math.nan
    note: str = ""


@dataclass
class Options:
    max_tokens: int = DEFAULT_MAX_TOKENS
    time_budget_s: float = DEFAULT_TIME_BUDGET_S
    logprob: bool = True
    exact_full_nodes: int = EXACT_FULL_NODES
    exact_max_nodes: int = EXACT_MAX_NODES


def _warm(model, prefix: str) -> None:
    """Leaves the KV cache holding the prompt up to the start of the cursor's line.

    The backend keeps a longer cached sequence when asked for a prefix of it, so the
    prompt is followed by a token no prompt has there (BOS): the next request shares
    exactly the line-start prompt and prefills the rest."""
    tok = model.tokenizer
    line_start = prefix.rfind("\n") + 1
    prompt = make_prompt(tok, tok.encode(prefix[:line_start].encode("utf-8")))
    sentinel = tok.bos_token_id if tok.bos_token_id is not None else min(tok.eos_token_ids, default=0)
    if prompt:
        model.next_logits(prompt + [sentinel])


def run_case(engine, case: Case, modes, opts: Options) -> dict[str, ModeResult]:
    from midword.completion.types import CompletionRequest, GrammarSpec

    model = engine.model
    head = truth_head(case.truth)
    out: dict[str, ModeResult] = {}
    exact_tree = None
    for mode in modes:
        _warm(model, case.prefix)
        before, before_pos = model.stats.forward_passes, model.stats.tokens_prefilled
        t0 = time.perf_counter()
        note = ""
        if mode == "exact":
            res = exact_complete(model, case.prefix, case.suffix, max_tokens=opts.max_tokens,
                                 time_budget_s=opts.time_budget_s, target=head if opts.logprob else None,
                                 full_nodes=opts.exact_full_nodes, max_nodes=opts.exact_max_nodes)
            inserted = res.inserted
            exact_tree = res.tree
            if exact_tree is not None and exact_tree.best_first:
                note = f"best-first, {exact_tree.nodes} nodes, stop: {exact_tree.stop}"
                if exact_tree.stop == "cap":
                    note += ", certified" if exact_tree.certified else ", not certified"
        else:
            request = CompletionRequest(prefix=case.prefix, suffix=case.suffix, language="python",
                                        grammar=GrammarSpec(kind="none"), max_tokens=opts.max_tokens,
                                        temperature=0.0, mode=mode, single_line=True,
                                        time_budget_s=opts.time_budget_s)
            inserted = engine.complete(request).insert_text(case.prefix)
        ms = (time.perf_counter() - t0) * 1e3
        out[mode] = ModeResult(inserted=inserted, em_word=word_match(case, inserted), em_line=line_match(case, inserted),
                               latency_ms=ms, forwards=model.stats.forward_passes - before,
                               positions=model.stats.tokens_prefilled - before_pos, note=note)
    if opts.logprob:
        for mode in modes:
            out[mode].logprob = mode_logprob(model, mode, case.prefix, head, exact_tree=exact_tree,
                                             full_nodes=opts.exact_full_nodes, max_nodes=opts.exact_max_nodes)
    return out


def _mean(values: list[float]) -> float | None:
    """The mean, or None (JSON null) for no values."""
    return sum(values) / len(values) if values else None


def summarize(records: list[dict[str, ModeResult]], modes) -> tuple[dict, list[str]]:
    summary = {}
    notes = []
    for mode in modes:
        rs = [r[mode] for r in records]
        lps = [r.logprob for r in rs if not math.isnan(r.logprob)]
        finite = [v for v in lps if v != -math.inf]
        lat = [r.latency_ms for r in rs]
        summary[mode] = {
            "em_word": _mean([float(r.em_word) for r in rs]),
            "em_line": _mean([float(r.em_line) for r in rs]),
            "logprob": _mean(finite),
            "latency_p50_ms": percentile(lat, 50) if lat else None,
            "latency_p95_ms": percentile(lat, 95) if lat else None,
            "forwards": _mean([float(r.forwards) for r in rs]),
            "positions": _mean([float(r.positions) for r in rs]),
        }
        if len(finite) < len(lps):
            notes.append(f"{mode}: {len(lps) - len(finite)} case(s) where the mode cannot spell the truth "
                         "(log-prob -inf) are left out of its mean")
        if mode == "exact":
            big = [r for r in rs if r.note]
            if big:
                capped = [r for r in big if "stop: cap" in r.note]
                uncert = [r for r in capped if "not certified" in r.note]
                notes.append(f"exact: {len(big)} case(s) had too many spellings to score them all and were expanded "
                             f"heaviest first until the argmax was certified; {len(capped)} hit the node cap, "
                             f"{len(uncert)} of those without a certified argmax")
    return summary, notes


def run_benchmark(engine, cases, modes=ALL_MODES, opts: Options | None = None, *, progress=None,
                  dump=None) -> dict:
    """Runs every case through every mode; returns the JSON summary (`cases`, `modes`, `notes`)."""
    opts = opts or Options()
    for m in modes:
        if m not in ALL_MODES:
            raise BenchError(f"unknown mode {m!r}: expected some of {', '.join(ALL_MODES)}")
    if "exact" in modes or opts.logprob:
        _Vocab.of(engine.tokenizer)  # one-time tables, not part of any completion's latency
    records = []
    for k, case in enumerate(cases):
        res = run_case(engine, case, modes, opts)
        records.append(res)
        if dump is not None:
            dump.write(json.dumps(_case_record(case, res), ensure_ascii=False) + "\n")
            dump.flush()
        if progress is not None:
            progress(k + 1, case, res)
    summary, notes = summarize(records, modes)
    return {"cases": len(records), "modes": summary, "notes": notes}


def _case_record(case: Case, res: dict[str, ModeResult]) -> dict:
    return {
        "name": case.name,
        "before": case.prefix[-80:],
        "typed_word": case.typed_word,
        "truth_word": case.truth_word,
        "truth_line": case.line_truth,
        "modes": {m: {"inserted": r.inserted, "em_word": r.em_word, "em_line": r.em_line,
                      "logprob": None if math.isnan(r.logprob) else (r.logprob if r.logprob != -math.inf else "-inf"),
                      "latency_ms": round(r.latency_ms, 2), "forwards": r.forwards, "positions": r.positions,
                      **({"note": r.note} if r.note else {})}
                  for m, r in res.items()},
    }


def format_table(result: dict) -> str:
    head = (f"{'mode':<7} {'em_word':>8} {'em_line':>8} {'logprob':>9} {'p50 ms':>8} {'p95 ms':>8} {'forwards':>9} "
            f"{'positions':>10}")
    lines = [head]
    def cell(value, width, fmt):
        return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"

    for mode, s in result["modes"].items():
        lines.append(f"{mode:<7} {cell(s['em_word'], 8, '.3f')} {cell(s['em_line'], 8, '.3f')} "
                     f"{cell(s['logprob'], 9, '.3f')} {cell(s['latency_p50_ms'], 8, '.0f')} "
                     f"{cell(s['latency_p95_ms'], 8, '.0f')} {cell(s['forwards'], 9, '.1f')} "
                     f"{cell(s.get('positions'), 10, '.1f')}")
    for note in result.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


# Command line -------------------------------------------------------------------------------


def add_cpc_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--corpus", metavar="DIR",
                     help="cut source files under DIR (default: this Python's standard library)")
    src.add_argument("--jsonl", metavar="FILE", help="HumanEval-infilling cases (prompt, canonical_solution, suffix)")
    parser.add_argument("--glob", default="*.py", help="which corpus files to cut (default: *.py)")
    parser.add_argument("--seed", type=int, default=0, help="corpus sampling seed (default: 0)")
    parser.add_argument("--limit", type=int, default=100, help="take the first N cases (default: 100)")
    parser.add_argument("--modes", default=",".join(ALL_MODES),
                        help=f"comma-separated, from {','.join(ALL_MODES)} (default: all)")
    parser.add_argument("--model", default="gemma3", help='"gemma3" (default), a .gguf file or a model folder')
    parser.add_argument("--weights", choices=["int8", "float32", "bfloat16"], default="int8",
                        help="how the model's weights are held (default int8)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument("--context-chars", type=int, default=DEFAULT_CONTEXT_CHARS,
                        help="document characters before the cursor given to the model")
    parser.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET_S, help="seconds per completion")
    parser.add_argument("--exact-full-nodes", type=int, default=EXACT_FULL_NODES,
                        help="exact mode: cover trees up to this size are scored whole")
    parser.add_argument("--exact-max-nodes", type=int, default=EXACT_MAX_NODES,
                        help="exact mode: larger trees are expanded best-first up to this many nodes")
    parser.add_argument("--no-logprob", action="store_true", help="skip the log-prob metric (faster)")
    parser.add_argument("--dump", metavar="FILE", help="write one JSON line per case (what every mode inserted)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    for m in modes:
        if m not in ALL_MODES:
            raise BenchError(f"--modes: unknown mode {m!r}: expected some of {', '.join(ALL_MODES)}")
    if not modes:
        raise BenchError("--modes: no mode given")
    return tuple(dict.fromkeys(modes))


def _cases_from_args(args) -> tuple[Iterator[Case], str]:
    if args.context_chars < 1:
        raise BenchError(f"--context-chars must be positive, not {args.context_chars}")
    if args.jsonl:
        return read_jsonl(Path(args.jsonl), args.context_chars), args.jsonl
    if args.corpus:
        root = Path(args.corpus)
    else:
        import sysconfig

        root = Path(sysconfig.get_paths()["stdlib"])
    return sample_corpus(root, args.seed, args.glob, args.context_chars), f"{root} (seed {args.seed})"


def run_cpc(args, *, engine=None) -> int:
    """`midword bench cpc`; `engine` replaces the model named by `--model` (tests)."""
    try:
        modes = _parse_modes(args.modes)
        if args.limit < 1:
            raise BenchError(f"--limit must be positive, not {args.limit}")
        if args.max_tokens < 1:
            raise BenchError(f"--max-tokens must be positive, not {args.max_tokens}")
        stream, source = _cases_from_args(args)
        cases = []
        for case in stream:
            cases.append(case)
            if len(cases) >= args.limit:
                break
        if not cases:
            raise BenchError(f"no cases in {source}")
    except (BenchError, LimitExceeded) as err:
        print(f"midword bench cpc: {err}", file=sys.stderr)
        return 2
    if engine is None:
        from midword.completion.engine import CompletionEngine
        from midword.completion.model import ModelUnavailable

        engine = CompletionEngine(args.model, weights=args.weights)
        try:
            engine.load()
        except ModelUnavailable as err:
            print(f"midword bench cpc: {err}", file=sys.stderr)
            return 2
    opts = Options(max_tokens=args.max_tokens, time_budget_s=args.time_budget, logprob=not args.no_logprob,
                   exact_full_nodes=args.exact_full_nodes, exact_max_nodes=args.exact_max_nodes)

    def progress(k, case, res):
        if args.quiet:
            return
        marks = " ".join(f"{m}:{'W' if r.em_word else '-'}{'L' if r.em_line else '-'}" for m, r in res.items())
        print(f"[{k}/{len(cases)}] {case.name}  {case.typed_word}|{case.truth_word[len(case.typed_word):]}  {marks}",
              file=sys.stderr, flush=True)

    dump = open(args.dump, "w", encoding="utf-8") if args.dump else None
    try:
        result = run_benchmark(engine, cases, modes, opts, progress=progress, dump=dump)
    finally:
        if dump is not None:
            dump.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"character prefix conditioning: {result['cases']} cases from {source}; model {args.model}, greedy, "
              f"single line, at most {args.max_tokens} tokens, no grammar")
        print(format_table(result))
    return 0
