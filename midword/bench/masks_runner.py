"""MaskBench runs: one file through one engine, and the worker process each engine runs in.

Per engine, per instance (masks.py describes the protocol): compile and fill
the first mask (TTFM), then at every position fill the mask (TBM), ask for forced tokens
and consume the instance's own token, and at the end ask whether the engine accepts.
Each engine runs in its own worker process, one file at a time; a worker stuck inside
native code past the file's limit plus a grace period is killed and restarted.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..collector import collect_when_idle, settle_after_start
from .masks_dataset import BenchInputError, Case, Instance
from .peers import CompileFailed, EngineAdapter, EngineUnavailable, TokenizerSpec, token_allowed

BUILTIN_ENGINES = {
    "midword": "midword.bench.masks_runner:MidwordAdapter",
    "llguidance": "midword.bench.peers:LlguidanceAdapter",
    "xgrammar": "midword.bench.peers:XgrammarAdapter",
}
PEERS = ("llguidance", "xgrammar")


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
        # Between files, as a server between requests: an older collector pass due soon
        # runs here, untimed, not inside the next file's masks.
        collect_when_idle()

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
    # per mask, aligned with tbm_ns: (instance index, token position) it was filled at
    mask_steps: list[tuple[int, int]] = field(default_factory=list)
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
                _record_mask(adapter, matcher, mask, clock() - t, res, (idx, 0))
            else:
                matcher, mask, compiled = _first_mask(adapter, case.schema, res, clock, idx)
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
MASK_CATEGORIES = (
    "0-2% & !sliced",
    "2-85% & !sliced",
    "85%+ & !sliced",
    "0-2% & sliced",
    "2-85% & sliced",
    "85%+ & sliced",
)


def _record_mask(adapter, matcher, mask: np.ndarray, ns: int, res: FileResult, step: tuple[int, int] = (0, 0)) -> None:
    res.tbm_ns.append(ns)
    res.mask_steps.append(step)
    sliced = adapter.mask_sliced(matcher)
    if sliced is None:
        return
    allowed = int(np.unpackbits(np.ascontiguousarray(mask).view(np.uint8)).sum())
    share = allowed / max(1, adapter.vocab_size())
    size = 0 if share <= 0.02 else 1 if share < 0.85 else 2
    res.mask_categories.append(size + (3 if sliced else 0))


def _first_mask(adapter: EngineAdapter, schema: Any, res: FileResult, clock, idx: int = 0):
    """Compile, make a matcher and fill its first mask: one TTFM sample (and one TBM)."""
    t0 = clock()
    compiled = adapter.compile(schema)
    matcher = adapter.new_matcher(compiled)
    t1 = clock()
    mask = adapter.fill_mask(matcher)
    t2 = clock()
    res.ttfm_ns.append(t2 - t0)
    _record_mask(adapter, matcher, mask, t2 - t1, res, (idx, 0))
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
            _record_mask(adapter, matcher, mask, clock() - t, res, (res.tests_run - 1, i))
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
    _record_mask(adapter, matcher, mask, clock() - t, res, (res.tests_run - 1, n))
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


def make_adapter(engine: str, spec: TokenizerSpec) -> EngineAdapter:
    target = BUILTIN_ENGINES.get(engine, engine)
    module_name, sep, class_name = target.partition(":")
    if not sep:
        raise BenchInputError(f"unknown engine {engine!r}: use one of {', '.join(BUILTIN_ENGINES)} or module:Class")
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
        self,
        engine: str,
        spec: TokenizerSpec,
        warmup: Case,
        start_timeout_s: float = 600.0,
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
            target=_worker_main,
            args=(child, self.engine, self.spec, self.warmup),
            daemon=True,
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
            raise RuntimeError(f"{self.engine}: worker died while starting (exit code {code})") from None
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
                    file=case.name,
                    status="crash",
                    tests_total=case.total_tests,
                    reason=f"worker could not restart: {e}",
                    wall_s=time.perf_counter() - started,
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
                file=case.name,
                status="crash",
                tests_total=case.total_tests,
                reason=f"worker died (exit code {code})",
                wall_s=time.perf_counter() - started,
            )
        self._kill()
        return FileResult(
            file=case.name,
            status="timeout",
            tests_total=case.total_tests,
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
