"""`midword bench http FILE`: the HTTP API's latency as editor clients feel it.

The benchmark starts `midword serve --http 127.0.0.1:0` as a subprocess and replays
the typing trace of `midword bench lsp` (FILE typed character by character, one
keystroke every `--interval-ms`, a longer pause at each line end, a request
`--debounce-ms` after a keystroke when no other key came) as llama.vscode-shaped
`/infill` requests, from 1, 4 and 16 concurrent clients. Each client types its own
copy of the file (a header line tells them apart, so no client is answered from
another's cache). A client behaves like llama.vscode (one request in flight; when it
is answered, the next goes out only for the newest keystroke, older ones are
skipped) or, with `--client vim`, like llama.vim (a keystroke aborts the request in
flight, which the server then stops).

Before typing, each client asks once at its starting position (untimed, as an editor
does when a file opens), so the figures show typing, not the first prefill of the
file. Latency is measured from the keystroke to the answer. The report gives, per number
of clients: latency p50/p95 of answered requests, the answered share of the requests
sent, how many were aborted or skipped (and how many the server turned away as
busy), the server's memory (RSS now and at its peak), and the server's own overhead:
the client's time (from sending the request to reading the answer) minus the time
the request waited for the model thread and the engine's time, both from the
answer's `Server-Timing` header. Nothing asserts on time; `--json` for machines.

The clients post over `_LeanHttp` (HTTP/1.1 keep-alive on asyncio streams), not a full
client library: a library's own per-request work on the bench's event loop is time
the overhead figure would otherwise charge to the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .lsp import DEFAULT_ENGINE, _round, _summary, percentile


def add_http_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the file whose typing is replayed")
    parser.add_argument(
        "--engine",
        default=DEFAULT_ENGINE,
        metavar="MODULE:ATTR",
        help="engine the server uses (e.g. tests.fake_engine:FakeEngine)",
    )
    parser.add_argument("--model", default=None, help="model the server loads (default: gemma3)")
    parser.add_argument("--clients", default="1,4,16", help="numbers of concurrent clients, comma-separated")
    parser.add_argument("--start", type=int, default=0, help="characters of FILE already typed when typing starts")
    parser.add_argument("--limit", type=int, default=200, help="characters each client types (0: to the end)")
    parser.add_argument("--interval-ms", type=float, default=150.0, help="time between keystrokes")
    parser.add_argument("--line-pause-ms", type=float, default=600.0, help="extra pause after typing a newline")
    parser.add_argument("--debounce-ms", type=float, default=50.0, help="quiet time after a keystroke before asking")
    parser.add_argument("--n-predict", type=int, default=128, help="n_predict of each request (llama.vscode's default)")
    parser.add_argument(
        "--client",
        choices=["vscode", "vim"],
        default="vscode",
        help="vscode: one request in flight, sent for the newest keystroke once the last one is "
        "answered (llama.vscode); vim: a keystroke aborts the request in flight (llama.vim)",
    )
    parser.add_argument("--ready-timeout-s", type=float, default=900.0, help="how long to wait for the model to load")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--records",
        metavar="PATH",
        default=None,
        help="append every request's record (latency, phases, tokens, stop type, text) to PATH as JSON lines",
    )


def infill_body(text: str, cursor: int, n_predict: int) -> dict[str, Any]:
    """The body llama.vscode sends (src/llama-server.ts createRequestPayload) for the
    cursor at `cursor` in `text`: lines before, the line up to the cursor, the rest."""
    line_start = text.rfind("\n", 0, cursor) + 1
    line_end = text.find("\n", cursor)
    line_end = len(text) if line_end < 0 else line_end
    line = text[line_start:line_end]
    prompt = text[line_start:cursor]
    indent = len(line) - len(line.lstrip())
    return {
        "id_slot": 0,
        "input_prefix": text[:line_start],
        "input_suffix": text[cursor:line_end] + "\n" + text[line_end + 1 :],
        "input_extra": [],
        "prompt": "" if not prompt.strip() else prompt,
        "n_predict": n_predict,
        "n_cmpl": 1,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        **({"n_indent": indent} if indent else {}),
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1000,
    }


# A model run's time, in the order it is spent: the client holding the keystroke back (its
# previous request still out), the server's queue, the engine's lock (another completion's
# prefill or CPC), the engine's phases; and, across them, the waits of its batched steps
# for other jobs' steps ("window"), for the lock after a step or a turn given to others
# ("baton") and for the model before a forward of its own ("model").
PHASES = (
    "send",
    "queue",
    "wait-lock",
    "prefill",
    "cpc",
    "decode",
    "wait-window",
    "wait-baton",
    "wait-model",
    "mask",
    "handoff",
)


def _phases(records: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out = {}
    for name in PHASES:
        values = [r["phases"][name] for r in records if name in r.get("phases", {})]
        if values:
            out[name] = {
                "p50": _round(percentile(values, 50)),
                "p95": _round(percentile(values, 95)),
                "mean": _round(sum(values) / len(values)),
            }
    return out


def _server_timing(header: str | None) -> dict[str, float]:
    out = {}
    for part in (header or "").split(","):
        m = re.match(r"\s*([\w-]+);dur=([\d.]+)", part)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _rss_kib(pid: int) -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) of a process in KiB, from /proc (None elsewhere)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None, None
    found = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
    return (int(found["VmRSS"]) if "VmRSS" in found else None, int(found["VmHWM"]) if "VmHWM" in found else None)


class _Response:
    def __init__(self, status_code: int, headers: dict[str, str], content: bytes):
        self.status_code = status_code
        self.headers = headers  # names in lower case
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class _LeanHttp:
    """JSON POSTs over HTTP/1.1 on asyncio streams, one connection per request in flight,
    idle connections kept for the next. A cancelled request closes its connection (an
    aborting client, as llama.vim's)."""

    def __init__(self, timeout: float = 120.0):
        self.timeout = timeout
        self._idle: dict[tuple[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def post(self, url: str, json: Any) -> _Response:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        idle = self._idle.setdefault((host, port), [])
        reader, writer = idle.pop() if idle else await asyncio.open_connection(host, port)
        keep = False
        try:
            data = _json_bytes(json)
            head = (
                f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            )
            writer.write(head.encode("ascii") + data)
            response, keep = await asyncio.wait_for(_read_response(reader), self.timeout)
            return response
        finally:
            if keep:
                idle.append((reader, writer))
            else:
                writer.close()

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for _, writer in conns:
                writer.close()
        self._idle.clear()

    async def __aenter__(self) -> "_LeanHttp":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


async def _read_response(reader: asyncio.StreamReader) -> tuple[_Response, bool]:
    """(the response, whether the connection may carry another request)."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection")
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            chunks.append(chunk[:-2])
        body = b"".join(chunks)
    else:
        return _Response(status, headers, await reader.read()), False
    return _Response(status, headers, body), headers.get("connection", "").lower() != "close"


class _Client:
    def __init__(self, http, url: str, text: str, header: str, args: argparse.Namespace):
        self.http = http
        self.url = url
        self.text = header + text
        self.offset = len(header)
        self.args = args
        self.records: list[dict[str, Any]] = []
        self.latest = -1  # the newest keystroke
        self.busy = False  # a request in flight (llama.vscode's isRequestInProgress)

    async def warm_up(self) -> None:
        """One request at the starting position, as an editor's first request on opening
        the file; not part of the figures."""
        args = self.args
        start = self.offset + max(0, min(args.start, len(self.text) - self.offset))
        end = len(self.text) if args.limit <= 0 else min(len(self.text), start + args.limit)
        buffer = self.text[:start] + self.text[end:]
        await self.http.post(self.url + "/infill", json=infill_body(buffer, start, self.args.n_predict))

    async def type(self) -> None:
        args = self.args
        text = self.text
        start = self.offset + max(0, min(args.start, len(text) - self.offset))
        end = len(text) if args.limit <= 0 else min(len(text), start + args.limit)
        loop = asyncio.get_running_loop()
        outstanding: asyncio.Task | None = None
        pending: list[asyncio.Task] = []
        when = loop.time()
        for i in range(start, end):
            delay = when - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            keystroke = time.perf_counter()
            self.latest = i
            if args.client == "vim" and outstanding is not None and not outstanding.done():
                outstanding.cancel()  # llama.vim aborts the request (closes its connection)
            ch = text[i]
            gap = args.interval_ms + (args.line_pause_ms if ch == "\n" else 0.0)
            when += gap / 1000.0
            if args.debounce_ms < gap:
                await asyncio.sleep(max(0.0, args.debounce_ms / 1000.0 - (time.perf_counter() - keystroke)))
                # the document is the file typed up to i (the rest of it stays after the cursor)
                buffer = text[: i + 1] + text[end:]
                if args.client == "vim":
                    outstanding = asyncio.ensure_future(self._ask(buffer, i + 1, keystroke))
                else:
                    outstanding = asyncio.ensure_future(self._ask_one_at_a_time(i, buffer, keystroke))
                    pending.append(outstanding)
        if outstanding is not None:
            try:
                await asyncio.wait_for(asyncio.shield(outstanding), 120)
            except Exception:
                pass
        for task in pending:
            if not task.done():
                task.cancel()

    async def _ask_one_at_a_time(self, i: int, buffer: str, keystroke: float) -> None:
        """llama.vscode (src/completion.ts): wait while a request is in flight, then ask
        only if no newer keystroke came meanwhile (VS Code cancelled the older call)."""
        while self.busy:
            await asyncio.sleep(0.01)
        if self.latest != i:
            self.records.append({"outcome": "skipped"})
            return
        self.busy = True
        try:
            await self._ask(buffer, i + 1, keystroke)
        finally:
            self.busy = False

    async def _ask(self, buffer: str, cursor: int, keystroke: float) -> None:
        record: dict[str, Any] = {"outcome": "pending"}
        self.records.append(record)
        sent = time.perf_counter()
        try:
            r = await self.http.post(self.url + "/infill", json=infill_body(buffer, cursor, self.args.n_predict))
        except asyncio.CancelledError:
            record["outcome"] = "aborted"
            raise
        except Exception as e:  # noqa: BLE001 - counted, the trace goes on
            record["outcome"] = "error"
            record["error"] = f"{type(e).__name__}: {e}"
            return
        record["latency_ms"] = (time.perf_counter() - keystroke) * 1000.0
        if r.status_code == 503:
            record["outcome"] = "busy"
            return
        if r.status_code != 200:
            record["outcome"] = "error"
            record["error"] = f"HTTP {r.status_code}: {r.text[:200]}"
            return
        answer = r.json()
        record["outcome"] = "answered" if answer.get("content") else "empty"
        record["tokens"] = answer.get("tokens_predicted")
        record["stop_type"] = answer.get("stop_type")
        record["content"] = answer.get("content")
        timing = _server_timing(r.headers.get("server-timing"))
        record["source"] = r.headers.get("x-midword-source", "?")
        record["queue_ms"] = timing.get("queue", 0.0)
        record["engine_ms"] = timing.get("engine", 0.0)
        # the time the request spent on the wire and in the server, beyond waiting and the engine
        record["overhead_ms"] = (time.perf_counter() - sent) * 1000.0 - record["queue_ms"] - record["engine_ms"]
        # the part of it inside the server's handler (parsing, grammar choice, the hand-off to
        # the model thread and back, the answer), without the wire and the client
        record["server_overhead_ms"] = timing.get("total", 0.0) - record["queue_ms"] - record["engine_ms"]
        # of that, the hand-off to the model thread and back (its wake-up, the GIL, the loop's)
        record["handoff_ms"] = timing.get("handoff", 0.0)
        # where a model run's time went (PHASES): the client's own wait before sending, then
        # the server's Server-Timing parts
        record["phases"] = {"send": (sent - keystroke) * 1000.0}
        record["phases"].update({k: timing[k] for k in PHASES[1:] if k in timing})


async def _level(url: str, text: str, n: int, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    async with _LeanHttp(timeout=120) as http:
        clients = [_Client(http, url, text, f"# client {n}.{k}\n", args) for k in range(n)]
        for c in clients:  # untimed: each document's first prompt is in the model's cache once
            await c.warm_up()
        started = time.perf_counter()
        await asyncio.gather(*(c.type() for c in clients))
        wall_s = time.perf_counter() - started
    records = [r for c in clients for r in c.records]
    if args.records:
        with open(args.records, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps({"clients": len(clients), **r}) + "\n")
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    asked = [r for r in records if r["outcome"] != "skipped"]
    answered = [r for r in records if r["outcome"] == "answered"]
    responded = [r for r in records if r["outcome"] in ("answered", "empty")]
    model = [r for r in responded if r.get("source") == "model"]
    rss, hwm = _rss_kib(pid)
    return {
        "clients": n,
        "requests": len(records),
        "outcomes": outcomes,
        "asked": len(asked),
        "answered_share": _round(100.0 * len(answered) / len(asked)) if asked else None,
        "aborted": outcomes.get("aborted", 0),
        "skipped": outcomes.get("skipped", 0),
        "latency": _summary([r["latency_ms"] for r in answered]),
        "latency_model": _summary([r["latency_ms"] for r in model]),
        "overhead_ms": {
            "p50": _round(percentile([r["overhead_ms"] for r in responded], 50)),
            "p95": _round(percentile([r["overhead_ms"] for r in responded], 95)),
        },
        "server_overhead_ms": {
            "p50": _round(percentile([r["server_overhead_ms"] for r in responded], 50)),
            "p95": _round(percentile([r["server_overhead_ms"] for r in responded], 95)),
        },
        "handoff_ms_p50": _round(percentile([r["handoff_ms"] for r in model], 50)),
        "engine_ms_p50": _round(percentile([r["engine_ms"] for r in model], 50)),
        "queue_ms_p95": _round(percentile([r["queue_ms"] for r in responded], 95)),
        "phases_ms": _phases(model),
        "rss_mib": _round(rss / 1024) if rss else None,
        "peak_rss_mib": _round(hwm / 1024) if hwm else None,
        "wall_s": round(wall_s, 1),
    }


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    text = Path(args.file).read_text(encoding="utf-8")
    levels = [int(x) for x in args.clients.split(",") if x.strip()]
    cmd = [sys.executable, "-m", "midword", "serve", "--http", "127.0.0.1:0"]
    if args.engine != DEFAULT_ENGINE:
        cmd += ["--engine", args.engine]
    if args.model:
        cmd += ["--model", args.model]
    env = dict(os.environ)
    env.pop("MIDWORD_API_KEY", None)
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        started = time.perf_counter()
        while url is None:
            line = await asyncio.to_thread(proc.stderr.readline)
            if not line:
                raise RuntimeError("the server exited before listening")
            m = re.search(r"HTTP API on (http://[\d.]+:\d+)", line)
            url = m.group(1) if m else None
        # keep reading stderr so the server never blocks on a full pipe
        asyncio.get_running_loop().run_in_executor(None, proc.stderr.read)
        async with httpx.AsyncClient(timeout=60) as http:
            while True:
                if time.perf_counter() - started > args.ready_timeout_s:
                    raise RuntimeError(f"the server was not ready after {args.ready_timeout_s:.0f} s")
                try:
                    r = await http.get(url + "/health")
                except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError):
                    # loading a model can keep the server from answering for a while
                    await asyncio.sleep(0.5)
                    continue
                if r.status_code == 200:
                    break
                if r.status_code != 503:
                    raise RuntimeError(f"the server is not ready: {r.status_code} {r.text[:200]}")
                await asyncio.sleep(0.1)
        load_s = time.perf_counter() - started
        rows = [await _level(url, text, n, args, proc.pid) for n in levels]
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(url + "/metrics")).text
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    cancellations = re.search(r"^midword_http_cancellations_total (\d+)", metrics, re.M)
    return {
        "file": args.file,
        "client": args.client,
        "engine": args.engine,
        "model": args.model or "gemma3",
        "load_s": round(load_s, 2),
        "typed_chars": args.limit,
        "interval_ms": args.interval_ms,
        "levels": rows,
        "server_cancellations": int(cancellations.group(1)) if cancellations else None,
    }


def format_report(report: dict[str, Any]) -> str:
    rows = [
        f"midword bench http: {report['file']} ({report['client']}-style clients, "
        f"{report['typed_chars']} keystrokes each, "
        f"{report['interval_ms']:.0f} ms apart; engine {report['engine']}, model {report['model']} "
        f"loaded in {report['load_s']} s)",
        f"{'clients':>7} {'requests':>8} {'answered':>8} {'p50 ms':>8} {'p95 ms':>8} {'model p50':>9} "
        f"{'aborted':>7} {'skipped':>7} {'busy':>5} {'ovh p50':>7} {'ovh p95':>7} {'srv p50':>7} {'RSS MiB':>7} {'peak':>6}",
    ]
    for lv in report["levels"]:
        lat, lm, ovh = lv["latency"], lv["latency_model"], lv["overhead_ms"]
        rows.append(
            f"{lv['clients']:>7} {lv['asked']:>8} {str(lv['answered_share']) + '%':>8} "
            f"{_show(lat['p50_ms']):>8} {_show(lat['p95_ms']):>8} {_show(lm['p50_ms']):>9} "
            f"{lv['aborted']:>7} {lv['skipped']:>7} {lv['outcomes'].get('busy', 0):>5} {_show(ovh['p50']):>7} "
            f"{_show(ovh['p95']):>7} {_show(lv['server_overhead_ms']['p50']):>7} "
            f"{_show(lv['rss_mib']):>7} {_show(lv['peak_rss_mib']):>6}"
        )
    rows.append(
        "model runs: engine p50 "
        + ", ".join(f"{lv['clients']}: {_show(lv['engine_ms_p50'])} ms" for lv in report["levels"])
        + "; of the server's overhead, hand-off to the model thread and back p50 "
        + ", ".join(f"{lv['clients']}: {_show(lv['handoff_ms_p50'])} ms" for lv in report["levels"])
    )
    for lv in report["levels"]:
        phases = lv.get("phases_ms") or {}
        if phases:
            rows.append(
                f"{lv['clients']} client(s), model runs, ms p50/p95/mean: "
                + "  ".join(f"{k} {_show(v['p50'])}/{_show(v['p95'])}/{_show(v['mean'])}" for k, v in phases.items())
            )
    rows.append(f"server-side cancellations (client aborts seen by the server): {report['server_cancellations']}")
    rows.append(
        "latency: keystroke to answer; ovh: request to answer minus queue wait and engine time "
        "(Server-Timing), over all responses; srv: the same inside the server's handler"
    )
    return "\n".join(rows)


def _show(x) -> str:
    return "-" if x is None else f"{x:g}"


def run_http_bench(args: argparse.Namespace) -> int:
    try:
        report = asyncio.run(_bench(args))
    except (RuntimeError, OSError) as e:
        print(f"midword bench http: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
