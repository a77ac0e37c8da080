"""`midword bench start`: process start to first mask, with a cold and a warm numba cache.

Each run is a new Python process (the only honest way to count imports, the tokenizer
load, the disk caches and compiling the walk). "cold" points numba at an empty cache
folder, as on the first run after installing; the "warm" runs that follow reuse
what it compiled, as every later process does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Runs in the child process; prints one JSON line of timings in seconds.
_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from midword.engine.grammar import Grammar
from midword.engine.matcher import Matcher
from midword.engine.tokenizer import Tokenizer
t1 = time.perf_counter()
tok = Tokenizer.from_pretrained(sys.argv[1])
t2 = time.perf_counter()
grammar = Grammar.from_lark(open(sys.argv[2]).read())
t3 = time.perf_counter()
matcher = Matcher(tok, grammar)
matcher.compute_mask()
t4 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "tokenizer": t2 - t1, "grammar": t3 - t2, "first_mask": t4 - t3,
                  "total": t4 - t0}))
"""

STAGES = ("imports", "tokenizer", "grammar", "first_mask", "total")


def default_grammar() -> str:
    import midword.grammars

    return str(Path(midword.grammars.__file__).resolve().parent / "json.lark")


def run_once(tokenizer: str, grammar: str, numba_cache: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=numba_cache)
    out = subprocess.run([sys.executable, "-c", _CHILD, tokenizer, grammar], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"child process failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_start_bench(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="midword-numba-") as cache:
        rows = [("cold", run_once(args.tokenizer, args.grammar, cache))]
        for i in range(args.warm):
            rows.append((f"warm {i + 1}", run_once(args.tokenizer, args.grammar, cache)))
    if args.json:
        print(json.dumps({name: timings for name, timings in rows}))
        return 0
    print(f"process start to first mask ({args.tokenizer}, {Path(args.grammar).name}), seconds")
    print(f"{'run':8s}" + "".join(f"{s:>12s}" for s in STAGES))
    for name, t in rows:
        print(f"{name:8s}" + "".join(f"{t[s]:12.2f}" for s in STAGES))
    return 0


def add_start_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", default="llama3")
    p.add_argument("--grammar", default=default_grammar(), help="a .lark grammar (default grammars/json.lark)")
    p.add_argument("--warm", type=int, default=2, help="warm runs after the cold one")
    p.add_argument("--json", action="store_true")
