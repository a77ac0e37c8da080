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
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from .masks_dataset import (
    BenchInputError,
    Case,
    Instance,
    add_sample_arguments,
    list_files,
    load_case,
    resolve_tokenizer,
    warmup_case,
)
from .masks_report import WorstMasks, format_table
from .masks_runner import (
    BUILTIN_ENGINES,
    QUIET_THREAD_POOLS,
    EngineRunner,
    FileResult,
    MidwordAdapter,
    cpu_times,
    quiet_thread_pools,
    run_file,
    steal_share,
)
from .masks_statistics import EngineStats, reason_key, same_files
from .peers import EngineUnavailable, reference_tokenizer

__all__ = [
    "BenchInputError",
    "Case",
    "EngineRunner",
    "EngineStats",
    "FileResult",
    "Instance",
    "MidwordAdapter",
    "QUIET_THREAD_POOLS",
    "add_masks_arguments",
    "cpu_times",
    "format_table",
    "list_files",
    "load_case",
    "main",
    "quiet_thread_pools",
    "reason_key",
    "reference_tokenizer",
    "resolve_tokenizer",
    "run_file",
    "run_masks",
    "steal_share",
    "warmup_case",
]


def _engine_list(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    for n in names:
        if n not in BUILTIN_ENGINES and ":" not in n:
            raise argparse.ArgumentTypeError(f"unknown engine {n!r}: use {', '.join(BUILTIN_ENGINES)} or module:Class")
    return names


def add_masks_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="DIR", help="MaskBench folders or files")
    parser.add_argument("--tokenizer", default="llama3", help="tokenizer name or tokenizer.json path (default llama3)")
    parser.add_argument(
        "--engines",
        type=_engine_list,
        default=["midword"],
        help="engines to run, comma-separated (default midword)",
    )
    parser.add_argument(
        "--compare",
        type=_engine_list,
        default=[],
        help="peers to run beside them, comma-separated: llguidance,xgrammar",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by engine")
    parser.add_argument("--limit", type=int, default=None, help="only the first N files in name order")
    add_sample_arguments(parser)
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per file per engine, 0 for none (default 60)"
    )
    parser.add_argument(
        "--compile",
        dest="compile_per",
        choices=("test", "file"),
        default="test",
        help="compile per instance (default; every instance gives a TTFM sample) or once per "
        "file (MaskBench's way, one TTFM sample per schema; much faster for slow compilers)",
    )
    parser.add_argument("--max-tests", type=int, default=0, help="instances per file, 0 for all (default 0)")
    parser.add_argument(
        "--budget",
        type=float,
        default=0.0,
        help="stop starting files after this many seconds and report those done (default: none)",
    )
    parser.add_argument("--details", action="store_true", help="list every failing file under the table")
    parser.add_argument(
        "--worst",
        type=int,
        default=0,
        metavar="N",
        help="list each engine's N slowest masks: file, instance, token, the text before it",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per file and engine on stderr")
    add_phases_argument(parser)


def add_phases_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--phases",
        action="store_true",
        help="instead of the comparison, time midword's time to first mask by phase, once per file",
    )


# The phases of midword's time to first mask, in the order they run.
PHASES = ("normalise", "grammar", "tables", "matcher", "first mask", "total")


def time_phases(files: Sequence[Path], tokenizer_path: str) -> dict[str, dict[str, Any]]:
    """p50/p90 in µs of each phase of midword's TTFM, one sample per schema: schema
    normalisation to the IR, the grammar built from it, the recognizer's lexer and
    parser tables, the rest of the matcher, the first mask. In process, with the same
    recognizer cache release as the benchmark after each file."""
    from midword.engine.jsonschema.compiler import _Compiler
    from midword.engine.jsonschema.generate import _Generator
    from midword.engine.limits import DEFAULT_LIMITS, GrammarError, LimitExceeded
    from midword.engine.matcher import Matcher
    from midword.engine.recognizer import Recognizer
    from midword.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tokenizer_path)
    samples: dict[str, list[float]] = {k: [] for k in PHASES}
    clock = time.perf_counter_ns
    for path in files:
        try:
            schema = json.loads(Path(path).read_text(encoding="utf-8"))["schema"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            t0 = clock()
            comp = _Compiler(schema, strict=True, limits=DEFAULT_LIMITS, lenient=False, formats="assert")
            root = comp.root()
            t1 = clock()
            grammar = _Generator(comp, DEFAULT_LIMITS, "any").build(root, "flexible")
            t2 = clock()
            Recognizer.for_grammar(grammar)
            t3 = clock()
            matcher = Matcher(tok, grammar)
            t4 = clock()
            matcher.compute_mask()
            t5 = clock()
        except (GrammarError, LimitExceeded, RecursionError):
            continue
        Recognizer.release(grammar)
        for name, ns in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0), strict=True):
            samples[name].append(ns / 1000.0)
    out = {}
    for name, xs in samples.items():
        a = np.asarray(xs, dtype=np.float64)
        out[name] = {
            "p50_us": float(np.percentile(a, 50)) if a.size else float("nan"),
            "p90_us": float(np.percentile(a, 90)) if a.size else float("nan"),
            "files": int(a.size),
        }
    return out


def _inputs(args: argparse.Namespace):
    """(MaskBench files, tokenizer spec) named by the arguments, or None once the problem
    is printed."""
    try:
        return list_files(args.paths, args.limit, args.sample, args.seed, args.exclude), resolve_tokenizer(
            args.tokenizer
        )
    except BenchInputError as e:
        print(f"maskbench: {e}", file=sys.stderr)
        return None


def run_phases(args: argparse.Namespace) -> int:
    inputs = _inputs(args)
    if inputs is None:
        return 2
    files, spec = inputs
    quiet_thread_pools()
    # One file first, untimed: numba's kernels load and the tokenizer's tries are built.
    time_phases(files[:1], spec.path)
    phases = time_phases(files, spec.path)
    if args.json:
        print(json.dumps(phases, indent=2))
        return 0
    print(f"{'phase':<12}{'p50 (µs)':>12}{'p90 (µs)':>12}")
    for name, row in phases.items():
        print(f"{name:<12}{row['p50_us']:>12,.0f}{row['p90_us']:>12,.0f}")
    print(f"\n{phases['total']['files']} schemas, midword only (p90 of the total is not the sum of p90s)")
    return 0


def run_masks(args: argparse.Namespace) -> int:
    if getattr(args, "phases", False):
        return run_phases(args)
    engines: list[str] = []
    for e in list(args.engines) + list(args.compare):
        if e not in engines:
            engines.append(e)
    if not engines:
        print("maskbench: no engine to run", file=sys.stderr)
        return 2
    inputs = _inputs(args)
    if inputs is None:
        return 2
    files, spec = inputs
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
    worst = WorstMasks(args.worst) if args.worst > 0 else None
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
            if worst is not None:
                worst.add(case, done)
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
        if worst is not None:
            print(worst.format())
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
