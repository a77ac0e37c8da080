"""`midword bench start`: process start to first mask, with a cold and a warm numba cache;
with `--model`, process start to the first completion with the model.

Each run is a new Python process (the only honest way to count imports, the tokenizer
load, the disk caches and compiling the walk). "cold" points numba at an empty cache
folder, as on the first run after installing; the "warm" runs that follow reuse
what it compiled, as every later process does.

`--model NAME` times what `midword serve` and `midword complete` do before answering
(`CompletionEngine.load`), with the user's own caches (converted model, int8 copy,
numba) as they are: imports, loading the model (the tokenizer included; the mask
kernels warm on a thread meanwhile), the rest of the engine's warm-up, one completion of
tests/data/mid_word.py-like text, and the process's resident memory when ready.
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

# Runs in the child process for --model; prints one JSON line.
_MODEL_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from midword.completion.engine import CompletionEngine
from midword.completion.types import CompletionRequest
t1 = time.perf_counter()
engine = CompletionEngine(sys.argv[1], weights=sys.argv[2])
marks = {}
engine.load(lambda stage, fraction: stage == "ready" and marks.setdefault("model", time.perf_counter()))
t3 = time.perf_counter()
t2 = marks.get("model", t3)
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
ready_rss = rss()
text = open(sys.argv[3], encoding="utf-8").read()
cut = text.rindex(sys.argv[4]) + len(sys.argv[4])
result = engine.complete(CompletionRequest(prefix=text[:cut], suffix=text[cut:], language="python"))
t4 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "model": t2 - t1, "warm_up": t3 - t2, "ready": t3 - t0,
                  "first_completion": t4 - t3, "total": t4 - t0, "rss_ready_mb": ready_rss, "rss_mb": rss(),
                  "backend": getattr(engine.model, "backend", "?"), "source": getattr(engine.model, "source", "?")}))
"""

MODEL_STAGES = ("imports", "model", "warm_up", "ready", "first_completion", "total", "rss_ready_mb")


def default_grammar() -> str:
    import midword.grammars

    return str(Path(midword.grammars.__file__).resolve().parent / "json.lark")


def run_once(tokenizer: str, grammar: str, numba_cache: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=numba_cache)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, tokenizer, grammar], env=env, capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        raise RuntimeError(f"child process failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_model_once(model: str, weights: str) -> dict:
    import midword.completion

    here = Path(midword.completion.__file__).resolve().parent.parent / "tests" / "data" / "mid_word.py"
    text_file = str(here) if here.is_file() else None
    if text_file is None:
        fd, text_file = tempfile.mkstemp(suffix=".py", prefix="midword-start-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_SAMPLE)
    out = subprocess.run(
        [sys.executable, "-c", _MODEL_CHILD, model, weights, text_file, "self.user_na"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(f"child process failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


_SAMPLE = (
    "class Account:\n    def __init__(self, user_name, balance):\n        self.user_name = user_name\n"
    '        self.balance = balance\n\n    def describe(self):\n        return f"{self.user_na\n'
)


def run_model_start(args: argparse.Namespace) -> int:
    rows = [(f"run {i + 1}", run_model_once(args.model, args.weights)) for i in range(max(1, args.warm))]
    if args.json:
        print(json.dumps({name: t for name, t in rows}))
        return 0
    print(
        f"process start to a completion with model {args.model!r} ({args.weights}), seconds; RSS in MB "
        "(the machine may be shared: figures are noisy)"
    )
    print(f"{'run':8s}" + "".join(f"{s:>18s}" for s in MODEL_STAGES) + "  backend / source")
    for name, t in rows:
        print(
            f"{name:8s}"
            + "".join(f"{t[s]:18.2f}" if s != "rss_ready_mb" else f"{t[s]:18.0f}" for s in MODEL_STAGES)
            + f"  {t['backend']} / {t['source']}"
        )
    return 0


def run_start_bench(args: argparse.Namespace) -> int:
    if args.model:
        return run_model_start(args)
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
    p.add_argument("--model", help="time process start to a first completion with this model instead (e.g. gemma3)")
    p.add_argument("--weights", default="int8", choices=["int8", "float32", "bfloat16"], help="with --model")
    p.add_argument("--json", action="store_true")
