"""`midword bench vllm --vllm-url URL`: mid-word completions through a vLLM server.

The `bench cpc` corpus cases (cuts inside identifiers of the standard library by default)
are completed through `--backend vllm` at 1, 4 and 8 concurrent requests (throughput,
p50/p95 latency per request) and, once, through the local engine (float32, mode cpc).
Both decode greedily, one line, no grammar; the word and line exact match of each is
printed beside the other. They are not expected to be equal: the local engine picks the
cover of the typed word by CPC's search, vLLM re-spells it token by token under the mask
(completion/backend_vllm.py says why).
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path


def add_vllm_bench_arguments(parser) -> None:
    parser.add_argument("--vllm-url", required=True, metavar="URL", help="a vLLM server with midword's plugin")
    parser.add_argument("--corpus", metavar="DIR", help="source folder to cut (default: this Python's stdlib)")
    parser.add_argument("--limit", type=int, default=24, help="cases (default 24)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", default="1,4,8", help="comma-separated levels (default 1,4,8)")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--no-local", action="store_true", help="skip the local engine's run")
    parser.add_argument("--json", action="store_true")


def _percentile(values, q):
    from midword.bench.cpc import percentile

    return percentile(values, q)


def run_vllm_bench(args) -> int:
    import sysconfig

    from midword.bench.cpc import line_match, sample_corpus, word_match
    from midword.completion.backend_vllm import VllmCompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec

    root = Path(args.corpus or sysconfig.get_paths()["stdlib"])
    cases = list(islice(sample_corpus(root, seed=args.seed, context_chars=1200), args.limit))

    def request(case):
        return CompletionRequest(
            prefix=case.prefix,
            language="python",
            grammar=GrammarSpec(kind="none"),
            max_tokens=args.max_tokens,
            time_budget_s=600.0,
        )

    remote = VllmCompletionEngine("gemma3", url=args.vllm_url)
    remote.load()
    rows = []

    def one(case):
        t0 = time.perf_counter()
        done = remote.complete(request(case))
        return case, done, time.perf_counter() - t0

    first = None
    for level in [int(x) for x in args.concurrency.split(",") if x.strip()]:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=level) as pool:
            results = list(pool.map(one, cases))
        wall = time.perf_counter() - t0
        latencies = [r[2] * 1e3 for r in results]
        tokens = sum(r[1].timings.tokens_generated for r in results)
        em = _em(results, word_match, line_match)
        first = first or results
        rows.append(
            {
                "backend": "vllm",
                "concurrency": level,
                "cases": len(cases),
                **em,
                "requests_per_s": len(cases) / wall,
                "tokens_per_s": tokens / wall,
                "p50_ms": _percentile(latencies, 50),
                "p95_ms": _percentile(latencies, 95),
            }
        )
    if not args.no_local:
        from midword.completion.engine import CompletionEngine

        local = CompletionEngine("gemma3", weights="float32")
        local.load()
        results = []
        for case in cases:
            t0 = time.perf_counter()
            done = local.complete(request(case))
            results.append((case, done, time.perf_counter() - t0))
        latencies = [r[2] * 1e3 for r in results]
        rows.append(
            {
                "backend": "local float32 cpc",
                "concurrency": 1,
                "cases": len(cases),
                **_em(results, word_match, line_match),
                "requests_per_s": len(cases) / sum(r[2] for r in results),
                "tokens_per_s": sum(r[1].timings.tokens_generated for r in results) / sum(r[2] for r in results),
                "p50_ms": _percentile(latencies, 50),
                "p95_ms": _percentile(latencies, 95),
            }
        )
        same = sum(a[1].text == b[1].text for a, b in zip(results, first or [], strict=False))
        rows[-1]["same_text_as_vllm"] = same
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(
            f"{'backend':<20} {'conc':>4} {'cases':>5} {'em_word':>7} {'em_line':>7} {'req/s':>7} "
            f"{'tok/s':>7} {'p50 ms':>8} {'p95 ms':>8}"
        )
        for r in rows:
            print(
                f"{r['backend']:<20} {r['concurrency']:>4} {r['cases']:>5} {r['em_word']:>7.3f} {r['em_line']:>7.3f} "
                f"{r['requests_per_s']:>7.2f} {r['tokens_per_s']:>7.1f} {r['p50_ms']:>8.0f} {r['p95_ms']:>8.0f}"
            )
        if "same_text_as_vllm" in rows[-1]:
            print(
                f"local and vLLM gave the same completion on {rows[-1]['same_text_as_vllm']}/{len(cases)} cases",
                file=sys.stderr,
            )
    return 0


def _em(results, word_match, line_match) -> dict:
    n = max(1, len(results))
    inserted = [(case, done.insert_text(case.prefix)) for case, done, _ in results]
    return {
        "em_word": sum(word_match(c, t) for c, t in inserted) / n,
        "em_line": sum(line_match(c, t) for c, t in inserted) / n,
    }
