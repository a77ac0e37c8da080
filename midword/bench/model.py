"""`midword bench model`: the lean Gemma 3 forward beside transformers, in one process.

Both backends hold the same int8 weights (the lean model is built over the transformers
model's quantized matrices), read the same real prompt (a source file of this checkout)
and decode the same continuation, so the figures differ only by the forward itself. For
each thread count it reports:

- prefill tokens/s of a fresh prompt,
- a decode step with the head restricted to `--allowed` ids (what a grammar mask lets
  through), median and 90th percentile over `--steps` steps,
- the step broken down into int8/float matmuls, attention (lean), the head, and the rest
  (Python, norms, RoPE, cache; for transformers also its attention),
- the floors beside them: the lean int8 products' read rate (weight bytes over their
  time) against a plain memory read of this machine, and prefill's GFLOP/s against a
  large float32 matrix product at the same thread count.

Three backends: transformers, `lean` (a decode step is one compiled call,
lean_kernels.py) and `lean-numpy` (the same model with its decode step issued as numpy
operations, the path before the compiled step). transformers' and lean-numpy's matmuls
are timed around the shared matmul entry point; the compiled step is one call, so its
matmuls and attention are timed apart right after each step, by the same kernels over
the same cache (`LeanGemma3.time_parts`).

The machine may be shared: every figure is a median of interleaved runs, and the spread
is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def _prompt_text() -> str:
    import midword.completion.model_transformers as mt

    return Path(mt.__file__).read_text(encoding="utf-8")


class _MatmulTimer:
    """Adds up the seconds spent in `Int8Weights.matmul` (both backends' projections)."""

    def __init__(self):
        from midword.completion import quantized

        self.quantized = quantized
        self.original = quantized.Int8Weights.matmul
        self.seconds = 0.0
        self.on = False
        timer = self

        def timed(weights, x, *args, **kwargs):
            if not timer.on:
                return timer.original(weights, x, *args, **kwargs)
            t0 = time.perf_counter()
            try:
                return timer.original(weights, x, *args, **kwargs)
            finally:
                timer.seconds += time.perf_counter() - t0

        quantized.Int8Weights.matmul = timed

    def restore(self):
        self.quantized.Int8Weights.matmul = self.original


def _steps(model, prompt: list[int], n: int, steps: int, allowed: np.ndarray, timer: _MatmulTimer):
    """Per-step seconds, matmul seconds and head seconds of `steps` decode steps after a
    prefill of `prompt[:n]` (not timed)."""
    model.reset()
    model.next_logits(prompt[:n], allowed)
    totals, matmuls, heads, attention = [], [], [], []
    prof = getattr(model, "profile", None)
    apart = getattr(model, "_kernel_args", None) is not None
    for i in range(n + 1, n + steps + 1):
        timer.seconds = 0.0
        head0 = model.stats.head_seconds
        att0 = prof.attention if prof is not None else 0.0
        timer.on = True
        t0 = time.perf_counter()
        model.next_logits(prompt[:i], allowed)
        totals.append(time.perf_counter() - t0)
        timer.on = False
        heads.append(model.stats.head_seconds - head0)
        matmuls.append(timer.seconds)
        attention.append((prof.attention - att0) if prof is not None else float("nan"))
        if apart:
            matmuls[-1], attention[-1] = model.time_parts()
    return {"step": totals, "matmul": matmuls, "head": heads, "attention": attention}


def _prefill(model, prompt: list[int], n: int) -> float:
    model.reset()
    t0 = time.perf_counter()
    model.next_logits(prompt[:n], np.arange(8))
    return time.perf_counter() - t0


def _body_weights(lean) -> tuple[int, int]:
    """Bytes (int8 values and scales) and multiply-adds per token of the lean model's layer
    matrices: what a decode step streams and what a prefilled token computes."""
    a = lean._kernel_args
    if a is None:
        return 0, 0
    arrays = [m for part in a["weights"] for m in part]
    return sum(m.nbytes for m in arrays), sum(q.size for part in a["weights"][0::2] for q in part)


def _memory_read_gb_s() -> float:
    """A plain one-thread numpy read of 256 MiB (a sum), best of five: the bandwidth the
    int8 products are compared with."""
    big = np.ones(256 * 1024 * 1024 // 8, dtype=np.int64)
    big.sum()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        big.sum()
        best = min(best, time.perf_counter() - t0)
    return big.nbytes / best / 1e9


def _gemm_gflop_s(threads: int) -> float:
    """float32 GFLOP/s of a 2048-square torch matrix product at `threads`, best of five."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * 2048**3 / best / 1e9


def run_model_bench(args: argparse.Namespace) -> int:
    import torch

    from midword.completion.gemma3_lean import LeanGemma3, StepProfile
    from midword.completion.model import load_model

    t0 = time.perf_counter()
    tm = load_model(args.model, dtype="int8", backend="transformers")
    lean = LeanGemma3.from_transformers(tm)
    lean.profile = StepProfile()
    lean_numpy = LeanGemma3.from_transformers(tm, use_kernel=False)
    lean_numpy.profile = StepProfile()
    load_s = time.perf_counter() - t0
    prompt = tm.encode_prompt(_prompt_text())
    n = min(args.context, len(prompt) - args.steps - 1)
    rng = np.random.default_rng(0)
    allowed = np.sort(rng.choice(tm.vocab_size, args.allowed, replace=False))
    timer = _MatmulTimer()
    results: dict = {
        "model": args.model,
        "context": n,
        "allowed": int(args.allowed),
        "steps": args.steps,
        "prefill_tokens": args.prefill,
        "load_s": load_s,
        "threads": {},
    }
    body_bytes, body_macs = _body_weights(lean)
    results["body_weight_bytes"] = body_bytes
    results["memory_read_gb_s"] = _memory_read_gb_s()
    try:
        with torch.inference_mode():
            for threads in args.threads:
                torch.set_num_threads(threads)
                lean.set_threads(threads)
                lean_numpy.set_threads(threads)
                backends = (("transformers", tm), ("lean-numpy", lean_numpy), ("lean", lean))
                per: dict = {name: {"prefill": [], "runs": []} for name, _ in backends}
                for _ in range(args.repeats):
                    for name, model in backends:
                        per[name]["prefill"].append(_prefill(model, prompt, args.prefill))
                        per[name]["runs"].append(_steps(model, prompt, n, args.steps, allowed, timer))
                row = _summarise(per, args.prefill)
                row["int8_read_gb_s"] = body_bytes / (row["lean"]["matmul_ms"] / 1e3) / 1e9
                row["prefill_gflop_s"] = 2 * body_macs * row["lean"]["prefill_tok_s"] / 1e9
                row["gemm_gflop_s"] = _gemm_gflop_s(threads)
                results["threads"][threads] = row
    finally:
        timer.restore()
    if args.json:
        print(json.dumps(results))
        return 0
    _print(results)
    return 0


def _summarise(per: dict, prefill_tokens: int) -> dict:
    out = {}
    for name, d in per.items():
        steps = {k: np.concatenate([np.asarray(r[k]) for r in d["runs"]]) for k in d["runs"][0]}
        step = steps["step"]
        row = {
            "prefill_tok_s": float(prefill_tokens / np.median(d["prefill"])),
            "prefill_tok_s_range": [
                float(prefill_tokens / max(d["prefill"])),
                float(prefill_tokens / min(d["prefill"])),
            ],
            "step_ms_p50": float(np.median(step) * 1e3),
            "step_ms_p90": float(np.percentile(step, 90) * 1e3),
            "step_ms_min": float(step.min() * 1e3),
            "matmul_ms": float(np.median(steps["matmul"]) * 1e3),
            "head_ms": float(np.median(steps["head"]) * 1e3),
        }
        att = steps["attention"]
        row["attention_ms"] = None if np.isnan(att).all() else float(np.median(att) * 1e3)
        row["other_ms"] = float(np.median(step - steps["matmul"] - steps["head"] - np.nan_to_num(att)) * 1e3)
        out[name] = row
    out["ratio_step_p50"] = out["lean"]["step_ms_p50"] / out["transformers"]["step_ms_p50"]
    out["ratio_prefill"] = out["lean"]["prefill_tok_s"] / out["transformers"]["prefill_tok_s"]
    out["ratio_step_vs_numpy_ops"] = out["lean"]["step_ms_p50"] / out["lean-numpy"]["step_ms_p50"]
    return out


def _print(r: dict) -> None:
    print(
        f"model {r['model']} (int8 weights), decode after {r['context']} tokens of a source file, head restricted "
        f"to {r['allowed']} ids, {r['steps']} steps x repeats; prefill of {r['prefill_tokens']} tokens; "
        f"load {r['load_s']:.1f} s"
    )
    print("figures are medians of interleaved runs; the machine may be shared with other work")
    for threads, t in r["threads"].items():
        print(f"\n{threads} thread(s)")
        print(
            f"{'backend':14s}{'step p50':>10s}{'p90':>8s}{'min':>8s}{'matmul':>9s}{'attn':>8s}{'head':>8s}"
            f"{'other':>8s}{'prefill tok/s':>15s}"
        )
        for name in ("transformers", "lean-numpy", "lean"):
            x = t[name]
            att = "-" if x["attention_ms"] is None else f"{x['attention_ms']:.1f}"
            print(
                f"{name:14s}{x['step_ms_p50']:10.1f}{x['step_ms_p90']:8.1f}{x['step_ms_min']:8.1f}"
                f"{x['matmul_ms']:9.1f}{att:>8s}{x['head_ms']:8.1f}{x['other_ms']:8.1f}"
                f"{x['prefill_tok_s']:9.0f} ({x['prefill_tok_s_range'][0]:.0f}-{x['prefill_tok_s_range'][1]:.0f})"
            )
        print(
            f"lean / transformers: step {t['ratio_step_p50']:.2f}x, prefill {t['ratio_prefill']:.2f}x; "
            f"lean / lean-numpy: step {t['ratio_step_vs_numpy_ops']:.2f}x"
        )
        print(
            f"floors: lean int8 products read {r['body_weight_bytes'] / 1e6:.1f} MB at {t['int8_read_gb_s']:.1f} GB/s "
            f"(one-thread memory read {r['memory_read_gb_s']:.1f} GB/s); lean prefill {t['prefill_gflop_s']:.0f} "
            f"GFLOP/s in its layer matrices (float32 matrix product {t['gemm_gflop_s']:.0f} GFLOP/s)"
        )
    print(
        "\n(ms per step; 'other' is the step minus matmul, attention and head: Python, norms, RoPE, the cache;"
        " transformers' attention is inside its 'other'; lean's matmul and attention are timed apart)"
    )


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="gemma3")
    p.add_argument("--context", type=int, default=500, help="tokens of the prompt before the timed decode steps")
    p.add_argument("--steps", type=int, default=24, help="decode steps per run")
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs per backend and thread count")
    p.add_argument("--allowed", type=int, default=2000, help="ids of the restricted head")
    p.add_argument("--prefill", type=int, default=256, help="tokens of the timed prefill")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch and int8-kernel threads to run with")
    p.add_argument("--json", action="store_true")
