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
  bytes, given that the output starts with them, over every token sequence that can
  spell them (`midword.completion.exact`, which defines nodes, first free tokens and
  events). The prompt is the stable part of `Tokenizer.tokenize_partial` (as for cpc).
  Trees of more than `--exact-full-nodes` nodes are scored heaviest node first, up to
  `--exact-max-nodes`; the summary says how many cases needed that and how many were
  not certified.

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
- the cover search's cost (cpc, a note and `cover_search` in JSON): its share of the latency
  (`cpc_p50_ms`, `cpc_p95_ms`, from the engine's timings) and, per search, model calls,
  full-vocabulary rows (normalisers) and their time, sparse-head rows, and how many splits
  were weighed exactly, dropped by a sparse-head bound, pruned unrun or had no candidate.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from midword.completion.exact import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TIME_BUDGET_S,
    EXACT_FULL_NODES,
    EXACT_MAX_NODES,
    CoverEvent,
    CoverTree,
    _Vocab,
    exact_complete,
    expand_covers,
    make_prompt,
)
from midword.engine.limits import LimitExceeded

ALL_MODES = ("naive", "heal1", "align", "cpc", "exact")
TRUTH_BYTES = 16
DEFAULT_CONTEXT_CHARS = 2000
CONTINUATION_EVENTS = 8  # agreeing events whose continuation is scored, heaviest first
CANON_CHECKS = 4096  # cpc covers re-encoded for the canonical normaliser, heaviest first
MAX_CORPUS_FILES = 200_000
MAX_SAMPLE_MISSES = 20_000  # consecutive draws without a new cut before the corpus is deemed spent
MAX_FILE_BYTES = 2_000_000
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


def sample_corpus(
    root: Path, seed: int = 0, pattern: str = "*.py", context_chars: int = DEFAULT_CONTEXT_CHARS
) -> Iterator[Case]:
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
            yield Case(
                name=str(item.get("task_id", f"{path.name}:{n}")),
                prefix=prompt[start:],
                suffix=suffix,
                truth=middle + suffix,
                line_truth=middle.split("\n", 1)[0],
            )


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


# The logprob metric --------------------------------------------------------------------------


def continuation_logprob(
    model, prompt: list[int], events: list[CoverEvent], target: bytes, log_norm: float, keep: int = CONTINUATION_EVENTS
) -> float:
    """log Σ_e exp(logw_e - log_norm) · P(encode(target[end_e:]) | prompt + e.tokens) over
    the `keep` heaviest events."""
    import numpy as np

    tok = model.tokenizer
    chosen = sorted(events, key=lambda e: -e.logw)[:keep]
    branches, used = [], []
    for ev in chosen:
        rest = target[ev.end :] if ev.end < len(target) else b""
        try:
            cont = tok.encode(rest) if rest else []
        except ValueError:
            continue  # a cut inside a character this tokenizer cannot spell alone
        branches.append(list(ev.tokens) + cont)
        used.append(ev)
    if not branches:
        return -math.inf
    scores = model.score_branches(prompt, branches)
    vals = [
        ev.logw + float(np.sum(s.token_logprobs[len(ev.tokens) :], dtype=np.float64))
        for ev, s in zip(used, scores, strict=False)
    ]
    return _logsumexp(vals) - log_norm


def cpc_events(
    model, prompt: list[int], stable: list[int], typed: bytes, target: bytes, checks: int = CANON_CHECKS
) -> tuple[list[CoverEvent], float]:
    """The cpc sampler's covers that agree with `target`, and log Σ P(canonical covers)."""
    import numpy as np

    from midword.completion.cpc import is_canonical, search_covers

    tok = model.tokenizer
    vocab = _Vocab.of(tok)
    search = search_covers(
        model, tok, prompt, stable, typed, lambda rest: vocab.constraint.candidates_after(None, rest), exhaustive=True
    )
    if not search.splits:
        return [], -math.inf
    flat = np.concatenate([sp.left_logprob + sp.candidate_logprobs.astype(np.float64) for sp in search.splits])
    owner = np.concatenate([np.full(sp.candidates.size, j) for j, sp in enumerate(search.splits)])
    index = np.concatenate([np.arange(sp.candidates.size) for sp in search.splits])
    order = np.argsort(-flat)
    canonical = []
    for k in order[:checks].tolist():
        sp = search.splits[owner[k]]
        if is_canonical(tok, search.context, sp.left, int(sp.candidates[index[k]]), typed[: sp.split]):
            canonical.append(flat[k])
    unchecked = flat[order[checks:]]
    log_norm = _logsumexp(canonical + ([float(np.logaddexp.reduce(unchecked))] if unchecked.size else []))
    events = []
    for sp in search.splits:
        tail = target[sp.split :]
        for j, t in enumerate(sp.candidates.tolist()):
            b = tok.token_bytes(t)
            if not (tail.startswith(b) or b.startswith(tail)):
                continue
            if is_canonical(tok, search.context, sp.left, t, typed[: sp.split]):
                events.append(
                    CoverEvent(
                        tuple(sp.left) + (t,), sp.split + len(b), sp.left_logprob + float(sp.candidate_logprobs[j])
                    )
                )
    return events, log_norm


def mode_logprob(
    model,
    mode: str,
    prefix: str,
    head: bytes,
    *,
    exact_tree: CoverTree | None = None,
    full_nodes: int = EXACT_FULL_NODES,
    max_nodes: int = EXACT_MAX_NODES,
    keep: int = CONTINUATION_EVENTS,
) -> float:
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
        tree = expand_covers(
            model,
            prompt,
            back.typed,
            weighting=weighting,
            target=target,
            want_best=False,
            enumerate_all=False,
            full_nodes=full_nodes,
            max_nodes=max_nodes,
        )
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
    drafted: int = 0  # prompt-lookup draft tokens run ahead (decode.py)
    draft_accepted: int = 0
    cpc_ms: float = math.nan  # the cover search's share of the latency (cpc mode, a typed word)
    cpc_search: dict | None = None  # what the cover search did (cpc.SearchStats)


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

    if getattr(engine, "batch_steps", False):
        # Every mode starts from the same cache (`_warm`). Completions that may run beside
        # each other take a KV slot of their own each, which would hand a mode the cache of
        # the mode before it; the bench runs one completion at a time.
        engine.batch_steps = False
    model = engine.model
    head = truth_head(case.truth)
    out: dict[str, ModeResult] = {}
    exact_tree = None
    for mode in modes:
        _warm(model, case.prefix)
        before, before_pos = model.stats.forward_passes, model.stats.tokens_prefilled
        t0 = time.perf_counter()
        note = ""
        drafts = (0, 0)
        cpc_ms, cpc_search = math.nan, None
        if mode == "exact":
            res = exact_complete(
                model,
                case.prefix,
                case.suffix,
                max_tokens=opts.max_tokens,
                time_budget_s=opts.time_budget_s,
                target=head if opts.logprob else None,
                full_nodes=opts.exact_full_nodes,
                max_nodes=opts.exact_max_nodes,
            )
            inserted = res.inserted
            exact_tree = res.tree
            if exact_tree is not None and exact_tree.best_first:
                note = f"best-first, {exact_tree.nodes} nodes, stop: {exact_tree.stop}"
                if exact_tree.stop == "cap":
                    note += ", certified" if exact_tree.certified else ", not certified"
        else:
            request = CompletionRequest(
                prefix=case.prefix,
                suffix=case.suffix,
                language="python",
                grammar=GrammarSpec(kind="none"),
                max_tokens=opts.max_tokens,
                temperature=0.0,
                mode=mode,
                single_line=True,
                time_budget_s=opts.time_budget_s,
            )
            completion = engine.complete(request)
            inserted = completion.insert_text(case.prefix)
            drafts = (completion.timings.tokens_drafted, completion.timings.drafts_accepted)
            if completion.timings.cpc_search:
                cpc_ms, cpc_search = completion.timings.cpc_ms, completion.timings.cpc_search
        ms = (time.perf_counter() - t0) * 1e3
        out[mode] = ModeResult(
            inserted=inserted,
            em_word=word_match(case, inserted),
            em_line=line_match(case, inserted),
            latency_ms=ms,
            forwards=model.stats.forward_passes - before,
            positions=model.stats.tokens_prefilled - before_pos,
            note=note,
            drafted=drafts[0],
            draft_accepted=drafts[1],
            cpc_ms=cpc_ms,
            cpc_search=cpc_search,
        )
    if opts.logprob:
        for mode in modes:
            out[mode].logprob = mode_logprob(
                model,
                mode,
                case.prefix,
                head,
                exact_tree=exact_tree,
                full_nodes=opts.exact_full_nodes,
                max_nodes=opts.exact_max_nodes,
            )
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
        searched = [r for r in rs if r.cpc_search is not None]
        if searched:
            summary[mode]["cover_search"] = cover_search_summary(searched)
            notes.append(format_cover_search(mode, summary[mode]["cover_search"]))
        drafted = sum(r.drafted for r in rs)
        if drafted:
            taken = sum(r.draft_accepted for r in rs)
            notes.append(
                f"{mode}: {drafted} prompt-lookup draft tokens run ahead, {taken} taken "
                f"({taken / drafted:.0%}; {taken / len(rs):.1f} per completion)"
            )
        if len(finite) < len(lps):
            notes.append(
                f"{mode}: {len(lps) - len(finite)} case(s) where the mode cannot spell the truth "
                "(log-prob -inf) are left out of its mean"
            )
        if mode == "exact":
            big = [r for r in rs if r.note]
            if big:
                capped = [r for r in big if "stop: cap" in r.note]
                uncert = [r for r in capped if "not certified" in r.note]
                notes.append(
                    f"exact: {len(big)} case(s) had too many spellings to score them all and were expanded "
                    f"heaviest first until the argmax was certified; {len(capped)} hit the node cap, "
                    f"{len(uncert)} of those without a certified argmax"
                )
    return summary, notes


def cover_search_summary(results: list[ModeResult]) -> dict:
    """The cover search's cost over the completions that ran one: its latency share
    (p50, p95), and per search the means of its model calls, full-vocabulary rows, the
    time those rows took, and how many splits were weighed, bounded and pruned."""
    ms = [r.cpc_ms for r in results]
    out = {"searches": len(results), "cpc_p50_ms": percentile(ms, 50), "cpc_p95_ms": percentile(ms, 95)}
    for key in (
        "model_calls",
        "full_rows",
        "sparse_rows",
        "normaliser_ms",
        "model_ms",
        "splits",
        "scored",
        "bounded",
        "pruned",
        "empty",
    ):
        out[key] = _mean([float((r.cpc_search or {}).get(key, 0.0)) for r in results])
    return out


def format_cover_search(mode: str, c: dict) -> str:
    return (
        f"{mode}: cover search in {c['searches']} completion(s): p50 {c['cpc_p50_ms']:.1f} ms, "
        f"p95 {c['cpc_p95_ms']:.1f} ms; per search {c['model_calls']:.2f} model calls "
        f"({c['model_ms']:.1f} ms), {c['full_rows']:.2f} full-vocabulary rows ({c['normaliser_ms']:.1f} ms), "
        f"{c['sparse_rows']:.2f} sparse rows; splits {c['splits']:.2f}: {c['scored']:.2f} weighed, "
        f"{c['bounded']:.2f} dropped by a sparse-head bound, {c['pruned']:.2f} pruned unrun, "
        f"{c['empty']:.2f} without candidates"
    )


def run_benchmark(engine, cases, modes=ALL_MODES, opts: Options | None = None, *, progress=None, dump=None) -> dict:
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
        "modes": {
            m: {
                "inserted": r.inserted,
                "em_word": r.em_word,
                "em_line": r.em_line,
                "logprob": None if math.isnan(r.logprob) else (r.logprob if r.logprob != -math.inf else "-inf"),
                "latency_ms": round(r.latency_ms, 2),
                "forwards": r.forwards,
                "positions": r.positions,
                **({"note": r.note} if r.note else {}),
                **({"cpc_ms": round(r.cpc_ms, 2), "cover_search": r.cpc_search} if r.cpc_search is not None else {}),
            }
            for m, r in res.items()
        },
    }


def format_table(result: dict) -> str:
    head = (
        f"{'mode':<7} {'em_word':>8} {'em_line':>8} {'logprob':>9} {'p50 ms':>8} {'p95 ms':>8} {'forwards':>9} "
        f"{'positions':>10}"
    )
    lines = [head]

    def cell(value, width, fmt):
        return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"

    for mode, s in result["modes"].items():
        lines.append(
            f"{mode:<7} {cell(s['em_word'], 8, '.3f')} {cell(s['em_line'], 8, '.3f')} "
            f"{cell(s['logprob'], 9, '.3f')} {cell(s['latency_p50_ms'], 8, '.0f')} "
            f"{cell(s['latency_p95_ms'], 8, '.0f')} {cell(s['forwards'], 9, '.1f')} "
            f"{cell(s.get('positions'), 10, '.1f')}"
        )
    for note in result.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


# Command line -------------------------------------------------------------------------------


def add_cpc_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--corpus", metavar="DIR", help="cut source files under DIR (default: this Python's standard library)"
    )
    src.add_argument("--jsonl", metavar="FILE", help="HumanEval-infilling cases (prompt, canonical_solution, suffix)")
    parser.add_argument("--glob", default="*.py", help="which corpus files to cut (default: *.py)")
    parser.add_argument("--seed", type=int, default=0, help="corpus sampling seed (default: 0)")
    parser.add_argument("--limit", type=int, default=100, help="take the first N cases (default: 100)")
    parser.add_argument(
        "--modes", default=",".join(ALL_MODES), help=f"comma-separated, from {','.join(ALL_MODES)} (default: all)"
    )
    parser.add_argument("--model", default="gemma3", help='"gemma3" (default), a .gguf file or a model folder')
    parser.add_argument(
        "--weights",
        choices=["int8", "float32", "bfloat16"],
        default="int8",
        help="how the model's weights are held (default int8)",
    )
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument(
        "--drafts",
        type=int,
        default=None,
        metavar="K",
        help="prompt-lookup draft tokens per model step (0: none; default: the engine's)",
    )
    parser.add_argument(
        "--context-chars",
        type=int,
        default=DEFAULT_CONTEXT_CHARS,
        help="document characters before the cursor given to the model",
    )
    parser.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET_S, help="seconds per completion")
    parser.add_argument(
        "--exact-full-nodes",
        type=int,
        default=EXACT_FULL_NODES,
        help="exact mode: cover trees up to this size are scored whole",
    )
    parser.add_argument(
        "--exact-max-nodes",
        type=int,
        default=EXACT_MAX_NODES,
        help="exact mode: larger trees are expanded best-first up to this many nodes",
    )
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


def load_engine(args):
    """The completion engine for `--model` and `--weights`, loaded; None, with the reason
    printed, when the model cannot be had."""
    from midword.completion.engine import CompletionEngine
    from midword.completion.model import ModelUnavailable

    engine = CompletionEngine(args.model, weights=args.weights)
    try:
        engine.load()
    except ModelUnavailable as err:
        print(f"midword bench cpc: {err}", file=sys.stderr)
        return None
    return engine


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
        engine = load_engine(args)
        if engine is None:
            return 2
    if getattr(args, "drafts", None) is not None:
        if args.drafts < 0:
            print(f"midword bench cpc: --drafts must be 0 or more, not {args.drafts}", file=sys.stderr)
            return 2
        engine.draft_tokens = args.drafts
    opts = Options(
        max_tokens=args.max_tokens,
        time_budget_s=args.time_budget,
        logprob=not args.no_logprob,
        exact_full_nodes=args.exact_full_nodes,
        exact_max_nodes=args.exact_max_nodes,
    )

    def progress(k, case, res):
        if args.quiet:
            return
        marks = " ".join(f"{m}:{'W' if r.em_word else '-'}{'L' if r.em_line else '-'}" for m, r in res.items())
        print(
            f"[{k}/{len(cases)}] {case.name}  {case.typed_word}|{case.truth_word[len(case.typed_word) :]}  {marks}",
            file=sys.stderr,
            flush=True,
        )

    dump = open(args.dump, "w", encoding="utf-8") if args.dump else None
    try:
        result = run_benchmark(engine, cases, modes, opts, progress=progress, dump=dump)
    finally:
        if dump is not None:
            dump.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"character prefix conditioning: {result['cases']} cases from {source}; model {args.model}, greedy, "
            f"single line, at most {args.max_tokens} tokens, no grammar"
        )
        print(format_table(result))
    return 0
