"""`midword bench ab`: this checkout's engine against another revision's, in one process.

MaskBench runs on a shared machine drift by 10 to 30 % from one run to the next, so a
change worth a few percent cannot be told from two runs. Here both engines are loaded in
one process, the other revision's under a package name of its own, and take turns file
by file (the order swapped every file), each call timed by the thread's CPU clock. Two
copies of one engine then differ by about 3 % in TBM average and by 5 to 8 % in mean
TTFM: `--against HEAD` with a clean tree shows the floor of the day.

The other revision's `engine/` and `grammars/` are taken from git (`git archive`) into
a folder under the user's cache, which also keeps its compiled code: the first run
against a revision compiles its hot loops (about a minute), later ones load them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..collector import settle_after_start
from .masks import (
    BenchInputError,
    FileResult,
    MidwordAdapter,
    list_files,
    load_case,
    quiet_thread_pools,
    reference_tokenizer,
    resolve_tokenizer,
    run_file,
    warmup_case,
)
from .masks_dataset import add_sample_arguments


def source_root() -> Path:
    """The checkout this midword runs from (an editable install), or BenchInputError."""
    import midword

    root = Path(midword.__file__).resolve().parent.parent
    if not (root / "engine").is_dir() or not (root / ".git").exists():
        raise BenchInputError(f"{root} is not a git checkout of midword: `bench ab` needs an editable install")
    return root


def _cache_base() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "midword" / "ab"


def prepare_revision(rev: str, root: Path | None = None, cache_dir: Path | None = None) -> str:
    """Makes revision `rev`'s engine importable under a name of its own and returns that
    name (`midword_at_<commit>`: its `engine` and `grammars` subpackages)."""
    root = root or source_root()
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise BenchInputError(f"--against {rev!r}: not a revision of {root} ({e})") from None
    name = f"midword_at_{sha[:12]}"
    home = (cache_dir or _cache_base()) / sha[:12]
    package = home / name
    if not (package / ".complete").exists():
        partial = home / (name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", sha, "engine", "grammars", "midword/__init__.py"],
            capture_output=True,
            check=True,
        ).stdout
        unpacked = home / "unpacked"
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            try:
                tar.extractall(unpacked, filter="data")
            except TypeError:  # a Python before extraction filters (3.11.4): git's own archive
                tar.extractall(unpacked)
        partial.mkdir(parents=True)
        shutil.move(str(unpacked / "engine"), partial / "engine")
        shutil.move(str(unpacked / "grammars"), partial / "grammars")
        shutil.move(str(unpacked / "midword" / "__init__.py"), partial / "__init__.py")
        shutil.rmtree(unpacked)
        (partial / ".complete").write_text(sha + "\n")
        shutil.rmtree(package, ignore_errors=True)
        os.replace(partial, package)
    if str(home) not in sys.path:
        sys.path.insert(0, str(home))
    return name


# (label, summary key); every figure is in µs except the counts.
ROWS = (
    ("files passed", "passed"),
    ("masks", "masks"),
    ("TBM avg", "tbm_avg"),
    ("TBM p50", "tbm_p50"),
    ("TBM p90", "tbm_p90"),
    ("TBM p99", "tbm_p99"),
    ("TTFM p50", "ttfm_p50"),
    ("TTFM p90", "ttfm_p90"),
    ("TTFM mean", "ttfm_mean"),
    ("ff call avg", "ff_avg"),
)


def summarize(results: list[FileResult]) -> dict[str, Any]:
    tbm = np.fromiter((t for r in results for t in r.tbm_ns), dtype=np.float64) / 1000.0
    ttfm = np.fromiter((t for r in results for t in r.ttfm_ns), dtype=np.float64) / 1000.0
    ff_calls = sum(r.ff_calls for r in results)
    ff_ns = sum(r.ff_ns for r in results)

    def stat(values, what):
        if values.size == 0:
            return None
        return float(values.mean()) if what == "mean" else float(np.percentile(values, what))

    return {
        "passed": sum(r.passed for r in results),
        "masks": int(tbm.size),
        "tbm_avg": stat(tbm, "mean"),
        "tbm_p50": stat(tbm, 50),
        "tbm_p90": stat(tbm, 90),
        "tbm_p99": stat(tbm, 99),
        "ttfm_p50": stat(ttfm, 50),
        "ttfm_p90": stat(ttfm, 90),
        "ttfm_mean": stat(ttfm, "mean"),
        "ff_avg": ff_ns / ff_calls / 1000.0 if ff_calls else None,
    }


def format_ab(new: dict[str, Any], old: dict[str, Any], new_label: str, old_label: str) -> str:
    lines = [f"{'':14s} {new_label:>14s} {old_label:>14s} {'change':>9s}"]
    for label, key in ROWS:
        a, b = new[key], old[key]
        if a is None or b is None:
            lines.append(f"{label:14s} {'-':>14s} {'-':>14s}")
            continue
        change = f"{100.0 * (a / b - 1.0):+8.1f}%" if key not in ("passed", "masks") and b else ""
        fmt = "{:14,.0f}" if key in ("passed", "masks") else "{:14,.1f}"
        lines.append(f"{label:14s} {fmt.format(a)} {fmt.format(b)} {change:>9s}")
    return "\n".join(lines)


def run_ab(args: argparse.Namespace) -> int:
    try:
        files = list_files(args.paths, args.limit, args.sample, args.seed, args.exclude)
        spec = resolve_tokenizer(args.tokenizer)
        other = prepare_revision(args.against)
    except BenchInputError as e:
        print(f"bench ab: {e}", file=sys.stderr)
        return 2
    if not files:
        print("bench ab: no .json files found", file=sys.stderr)
        return 2
    quiet_thread_pools()
    labels = ("this checkout", args.against)
    adapters = {labels[0]: MidwordAdapter(spec), labels[1]: MidwordAdapter(spec, package=other)}
    reference = reference_tokenizer(spec)
    warmup = warmup_case(reference)
    for adapter in adapters.values():
        run_file(adapter, warmup, spec.eos_ids)  # compiles (or loads) each engine's hot loops
    # As `bench masks` workers and `midword serve` do after start-up.
    settle_after_start()
    results: dict[str, list[FileResult]] = {label: [] for label in labels}
    for n, path in enumerate(files):
        try:
            case = load_case(path, reference, args.max_tests or None)
        except BenchInputError as e:
            print(f"bench ab: skipping {e}", file=sys.stderr)
            continue
        for label in labels if n % 2 == 0 else labels[::-1]:
            results[label].append(
                run_file(adapters[label], case, spec.eos_ids, args.timeout or None, "file", clock=time.thread_time_ns)
            )
    new, old = summarize(results[labels[0]]), summarize(results[labels[1]])
    if args.json:
        print(json.dumps({labels[0]: new, labels[1]: old}, indent=2))
    else:
        print(format_ab(new, old, labels[0], labels[1]))
        print(
            "\nCPU time of the calls, both engines in one process taking turns file by file; "
            "`--against HEAD` on a clean tree shows the noise floor."
        )
    return 0


def add_ab_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="DIR", help="MaskBench folders or files")
    parser.add_argument("--against", required=True, help="git revision to compare with (HEAD, a commit, a branch)")
    parser.add_argument("--tokenizer", default="llama3", help="tokenizer name or tokenizer.json path (default llama3)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N files in name order")
    add_sample_arguments(parser)
    parser.add_argument("--max-tests", type=int, default=0, help="instances per file, 0 for all")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per file per engine, 0 for none")
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by engine")
