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
`--fresh` first runs a start with empty model, tokenizer and numba caches (a new install:
the model conversion's own seconds are shown apart); `--cold-numba` one with the user's
model caches and an empty numba cache (what the compiler alone costs a new install).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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

# Runs in the child process for --model; prints one JSON line. The progress callback
# stamps the start of each loading stage; the engine's warm-up times its own steps.
_MODEL_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from midword.completion.engine import CompletionEngine
from midword.completion.types import CompletionRequest
t1 = time.perf_counter()
engine = CompletionEngine(sys.argv[1], weights=sys.argv[2])
marks = {}
def progress(stage, fraction):
    marks.setdefault(stage, time.perf_counter() - t0)
engine.load(progress)
t3 = time.perf_counter()
t2 = t0 + marks.get("ready", t3 - t0)
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
def cpu():
    return time.process_time()
ready_rss, ready_cpu = rss(), cpu()
text = open(sys.argv[3], encoding="utf-8").read()
cut = text.rindex(sys.argv[4]) + len(sys.argv[4])
result = engine.complete(CompletionRequest(prefix=text[:cut], suffix=text[cut:], language="python"))
t4 = time.perf_counter()
wait_batched = getattr(engine, "wait_batched_step", None)
if wait_batched is not None:
    wait_batched()
t5 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "model": t2 - t1, "batched_step_after_ready": t5 - t3, "warm_up": t3 - t2, "ready": t3 - t0,
                  "first_completion": t4 - t3, "total": t4 - t0, "rss_ready_mb": ready_rss, "rss_mb": rss(),
                  "cpu_ready": ready_cpu, "cpu_total": cpu(),
                  "backend": getattr(engine.model, "backend", "?"), "source": getattr(engine.model, "source", "?"),
                  "stages": sorted(marks.items(), key=lambda kv: kv[1]), "warm_up_steps": getattr(engine, "warm_up_seconds", {}),
                  "bpe_load": getattr(engine.tokenizer, "backend_load_seconds", 0.0),
                  "tokenizer_converted": getattr(engine.tokenizer, "converted", False),
                  "text": result.text, "stop": getattr(result, "stop_reason", None)}))
"""

MODEL_STAGES = ("imports", "model", "warm_up", "ready", "first_completion", "total", "cpu_ready", "rss_ready_mb")
# Packages whose import cost the breakdown names (wherever in the start they are first imported).
HEAVY_IMPORTS = ("torch", "transformers", "tokenizers", "numba", "numpy", "safetensors", "midword")


def import_costs(importtime_log: str) -> dict[str, float]:
    """Seconds of the first import of each of HEAVY_IMPORTS, from `python -X importtime`'s
    stderr (its cumulative column counts everything the import pulled in)."""
    out: dict[str, float] = {}
    for line in importtime_log.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line.split("|")
        if len(parts) != 3:
            continue
        name = parts[2].strip()
        if name in HEAVY_IMPORTS:
            try:
                out[name] = int(parts[1]) / 1e6
            except ValueError:
                continue
    return out


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


def _sample_file() -> tuple[str, str]:
    """(path of the text completed, the text the cursor follows)."""
    import midword.completion

    here = Path(midword.completion.__file__).resolve().parent.parent / "tests" / "data" / "mid_word.py"
    if here.is_file():
        return str(here), "self.user_na"
    fd, text_file = tempfile.mkstemp(suffix=".py", prefix="midword-start-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_SAMPLE)
    return text_file, "self.user_na"


def run_model_once(model: str, weights: str, env: dict | None = None) -> dict:
    text_file, cursor = _sample_file()
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _MODEL_CHILD, model, weights, text_file, cursor],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
    )
    if out.returncode != 0:
        tail = "\n".join(line for line in out.stderr.splitlines() if not line.startswith("import time:"))
        raise RuntimeError(f"child process failed (exit {out.returncode}): {tail.strip()[-2000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["import_costs"] = import_costs(out.stderr)
    return row


def run_complete_once(model: str, weights: str, env: dict | None = None) -> dict:
    """Wall time of a one-shot `midword complete` at the sample's cursor (a new process)."""
    text_file, cursor = _sample_file()
    text = Path(text_file).read_text(encoding="utf-8")
    cut = text.rindex(cursor) + len(cursor)
    line = text.count("\n", 0, cut)
    character = cut - (text.rfind("\n", 0, cut) + 1)
    cmd = [sys.executable, "-m", "midword", "complete", text_file, "--line", str(line), "--character", str(character)]
    cmd += ["--model", model, "--weights", weights, "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"midword complete failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    result = json.loads(out.stdout)
    return {"wall": wall, "text": result.get("text", ""), "stop": result.get("stop_reason")}


_SAMPLE = (
    "class Account:\n    def __init__(self, user_name, balance):\n        self.user_name = user_name\n"
    '        self.balance = balance\n\n    def describe(self):\n        return f"{self.user_na\n'
)

# Loading stages that only a first start runs: converting the GGUF model, its checks, and
# writing the converted and int8 copies (and rebuilding a damaged one).
ONE_TIME_STAGES = (
    "assembling GGUF file",
    "converting GGUF weights (first run only)",
    "checking model",
    "writing model cache",
    "quantizing weights to int8",
    "checking the lean forward",
    "writing the int8 cache",
)


def stage_durations(row: dict) -> list[tuple[str, float]]:
    """(stage, seconds) of each loading stage, in order: from its first report to the next
    stage's (the last one, "ready", is the end of the model load)."""
    marks = [(name, float(t)) for name, t in row.get("stages", [])]
    return [(name, marks[i + 1][1] - t) for i, (name, t) in enumerate(marks[:-1])]


def conversion_seconds(row: dict) -> float:
    """Seconds of the one-time stages. "checking model" checks a converted model's logits
    on every start of the transformers path, so it only counts in a run that converted;
    loading the tokenizer counts when it was converted from the GGUF file."""
    stages = stage_durations(row)
    converted = any(name == "converting GGUF weights (first run only)" for name, _ in stages)
    return sum(
        d
        for name, d in stages
        if (name in ONE_TIME_STAGES and (converted or name != "checking model"))
        or name.startswith("rebuilding")
        or (name == "loading tokenizer" and row.get("tokenizer_converted"))
    )


def _fresh_env() -> tuple[dict, list[str]]:
    caches = [tempfile.mkdtemp(prefix="midword-fresh-cache-"), tempfile.mkdtemp(prefix="midword-fresh-numba-")]
    return dict(os.environ, MIDWORD_CACHE_DIR=caches[0], NUMBA_CACHE_DIR=caches[1]), caches


def _breakdown(name: str, t: dict) -> list[str]:
    lines = [f"  {name}: imports before loading {t['imports']:.2f} s; first imports of"]
    costs = t.get("import_costs", {})
    lines.append("    " + ", ".join(f"{k} {costs[k]:.2f}" for k in HEAVY_IMPORTS if k in costs) + " s")
    lines.append("    model load stages: " + ", ".join(f"{k} {d:.2f}" for k, d in stage_durations(t)) + " s")
    steps = t.get("warm_up_steps", {})
    lines.append("    warm-up steps: " + ", ".join(f"{k} {d:.2f}" for k, d in steps.items()) + " s")
    lines.append(f"    BPE merges loaded in {t.get('bpe_load', 0.0):.2f} s (inside the stage that first encodes)")
    lines.append(f"    first completion: {t.get('text', '')!r} (stop: {t.get('stop')})")
    return lines


def run_model_start(args: argparse.Namespace) -> int:
    rows: list[tuple[str, dict]] = []
    complete: list[tuple[str, dict]] = []
    if args.fresh:
        env, caches = _fresh_env()
        try:
            rows.append(("fresh", run_model_once(args.model, args.weights, env)))
        finally:
            for c in caches:
                shutil.rmtree(c, ignore_errors=True)
    if args.cold_numba:
        numba_cache = tempfile.mkdtemp(prefix="midword-cold-numba-")
        try:
            rows.append(
                ("cold jit", run_model_once(args.model, args.weights, dict(os.environ, NUMBA_CACHE_DIR=numba_cache)))
            )
        finally:
            shutil.rmtree(numba_cache, ignore_errors=True)
    rows += [(f"run {i + 1}", run_model_once(args.model, args.weights)) for i in range(max(1, args.warm))]
    if args.complete:
        complete.append(("complete", run_complete_once(args.model, args.weights)))
    if args.json:
        out = {name: t for name, t in rows + complete}
        print(json.dumps(out))
        return 0
    print(
        f"process start to a completion with model {args.model!r} ({args.weights}), seconds; RSS in MB; "
        "cpu_ready: CPU seconds of the process (all threads) until ready, less sensitive to a shared "
        "machine's load than the wall times (which are noisy there)"
    )
    print(f"{'run':8s}" + "".join(f"{s:>17s}" for s in MODEL_STAGES) + "  backend / source")
    for name, t in rows:
        print(
            f"{name:8s}"
            + "".join(f"{t[s]:17.2f}" if s != "rss_ready_mb" else f"{t[s]:17.0f}" for s in MODEL_STAGES)
            + f"  {t['backend']} / {t['source']}"
        )
    print("breakdown (seconds):")
    for name, t in rows:
        print("\n".join(_breakdown(name, t)))
    for name, t in rows:
        if name == "fresh":
            conv = conversion_seconds(t)
            print(
                f"fresh install (empty model, tokenizer and numba caches): first completion {t['total']:.2f} s "
                f"after process start, of which the one-time model conversion {conv:.2f} s; "
                f"without it {t['total'] - conv:.2f} s"
            )
    for name, t in rows:
        if name in ("fresh", "cold jit"):
            print(
                f"{name}: the batched decode step (compiled after ready, completions take turns till then) "
                f"was ready {t.get('batched_step_after_ready', 0.0):.2f} s after ready"
            )
    for _name, c in complete:
        print(f"`midword complete` one shot (new process, warm caches): {c['wall']:.2f} s wall, {c['text']!r}")
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
    p.add_argument("--warm", type=int, default=2, help="warm runs after the cold one (with --model: runs)")
    p.add_argument("--model", help="time process start to a first completion with this model instead (e.g. gemma3)")
    p.add_argument("--weights", default="int8", choices=["int8", "float32", "bfloat16"], help="with --model")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="with --model: first a run with empty model, tokenizer and numba caches (a fresh install; minutes)",
    )
    p.add_argument(
        "--cold-numba",
        action="store_true",
        help="with --model: first a run with the user's model caches but an empty numba cache (the compile "
        "a fresh install pays, without the model conversion)",
    )
    p.add_argument(
        "--complete", action="store_true", help="with --model: also time a one-shot `midword complete` (wall)"
    )
    p.add_argument("--json", action="store_true")
