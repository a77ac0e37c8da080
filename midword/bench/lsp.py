"""`midword bench lsp FILE`: completion latency as an editor user feels it.

The benchmark starts `midword serve` as a subprocess and talks LSP to it over stdio,
like an editor: it opens FILE (empty, or with its first `--start` characters) and
types the rest character by character, one keystroke every `--interval-ms`, with a
longer pause at each line end. After each keystroke it waits `--debounce-ms` and, if
no other key came, asks for a completion at the cursor; a keystroke that arrives
before the answer cancels the request (`$/cancelRequest`), as editors do.

With `--trace bursts` the typing comes in bursts instead (a seeded schedule, see
`burst_schedule`): a few to a few dozen keys at typing speed, then a pause of 300 to
1,500 ms, as a person who stops to think or to read a completion. Each pause is
scored by the time from its last keystroke to a shown completion (the answer to the
request for that keystroke, when it has items and comes before the next key).

Latency is measured from the keystroke to the answer. The report gives p50/p95/max
over answered requests (and split by source: the model, the type-through cache, a
prefetched completion), how many requests were cancelled or came back
ContentModified, and the server's counters (model runs, tokens generated, cache
hits), and, from the timings the server puts in each item's `data`, where a model
answer's time went: grammar choice, queue wait, prefill, CPC, decode. Nothing asserts on time; the figures are for a person to read or to compare
runs, with `--json` for machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

DEFAULT_ENGINE = "midword.completion.engine:CompletionEngine"

_LANGUAGES = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".tsx": "typescriptreact",
    ".jsx": "javascriptreact",
    ".json": "json",
    ".jsonc": "jsonc",
    ".rs": "rust",
    ".go": "go",
    ".c": "c",
    ".h": "c",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".cc": "cpp",
    ".java": "java",
    ".kt": "kotlin",
    ".rb": "ruby",
    ".sh": "shellscript",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".md": "markdown",
    ".cs": "csharp",
    ".swift": "swift",
    ".lark": "lark",
    ".txt": "plaintext",
}


def add_lsp_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the file whose typing is replayed")
    parser.add_argument(
        "--engine",
        default=DEFAULT_ENGINE,
        metavar="MODULE:ATTR",
        help="engine the server uses (e.g. tests.fake_engine:FakeEngine)",
    )
    parser.add_argument("--model", default=None, help="model name sent in the settings (default: the server's)")
    parser.add_argument(
        "--request",
        choices=["completion", "inline"],
        default="completion",
        help="textDocument/completion (one line) or textDocument/inlineCompletion",
    )
    parser.add_argument(
        "--start", type=int, default=0, help="characters of FILE already in the buffer when typing starts"
    )
    parser.add_argument("--limit", type=int, default=600, help="characters to type (0: to the end of FILE)")
    parser.add_argument("--interval-ms", type=float, default=150.0, help="time between keystrokes")
    parser.add_argument("--line-pause-ms", type=float, default=600.0, help="extra pause after typing a newline")
    parser.add_argument("--debounce-ms", type=float, default=50.0, help="quiet time after a keystroke before asking")
    parser.add_argument("--no-prefetch", action="store_true", help="turn the server's idle prefetch off")
    parser.add_argument("--ready-timeout-s", type=float, default=900.0, help="how long to wait for the model to load")
    parser.add_argument(
        "--no-suffix",
        action="store_true",
        help="drop the text after the typed part (default: it stays after the cursor)",
    )
    parser.add_argument("--language", default=None, help="languageId (default: from the file extension)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--trace",
        choices=["steady", "bursts"],
        default="steady",
        help="steady: one key every --interval-ms; bursts: typing bursts, then 300-1,500 ms pauses (seeded)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the bursts trace")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a midword setting sent to the server, e.g. startOnKeystroke=false (repeatable)",
    )


class Burst(NamedTuple):
    """Keystrokes `start`..`end` (exclusive, offsets into the typed text) typed at
    `gaps_ms` apart (one gap per key, the last one being the pause after the burst)."""

    start: int
    end: int
    gaps_ms: tuple[float, ...]


# A typist's rhythm: keys 60-220 ms apart inside a burst, 3-30 keys a burst, and a pause
# of 300-1,500 ms after it (reading, thinking, or looking at a completion).
BURST_KEYS = (3, 30)
BURST_GAP_MS = (60.0, 220.0)
PAUSE_MS = (300.0, 1500.0)


def burst_schedule(n: int, seed: int) -> list[Burst]:
    """The bursts trace for typing `n` characters: the same list for the same seed."""
    rng = random.Random(seed)
    bursts: list[Burst] = []
    at = 0
    while at < n:
        end = min(n, at + rng.randint(*BURST_KEYS))
        gaps = [rng.uniform(*BURST_GAP_MS) for _ in range(at, end - 1)]
        gaps.append(rng.uniform(*PAUSE_MS))
        bursts.append(Burst(at, end, tuple(round(g, 1) for g in gaps)))
        at = end
    return bursts


def _parse_settings(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--setting {pair!r}: expected KEY=VALUE with a JSON value")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a bare word: a string setting such as a model name
    return out


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": _round(percentile(values, 50)),
        "p95_ms": _round(percentile(values, 95)),
        "max_ms": _round(max(values) if values else None),
        "mean_ms": _round(statistics.fmean(values) if values else None),
    }


def _round(x, digits: int = 1):
    return None if x is None else round(x, digits)


class _Replay:
    """One benchmark session: a client, a document, the keystroke schedule."""

    def __init__(self, args: argparse.Namespace, text: str):
        from lsprotocol import types
        from pygls.lsp.client import LanguageClient

        self.types = types
        self.args = args
        self.text = text
        self.client = LanguageClient("midword-bench", "1")
        self.state = "none"
        self.state_message = ""
        self.records: list[dict[str, Any]] = []
        self.cancel_sent = 0
        self.next_id = 0

        @self.client.feature("midword/status")
        def _status(ls, params):
            self.state = _get(params, "state")
            self.state_message = _get(params, "message") or ""

        for method in (types.WINDOW_LOG_MESSAGE, types.WINDOW_SHOW_MESSAGE):

            @self.client.feature(method)
            def _message(ls, params):
                if params.type == types.MessageType.Error:
                    print(f"server: {params.message}", file=sys.stderr)

        @self.client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def _progress_create(ls, params):
            return None

        @self.client.feature(types.PROGRESS)
        def _progress(ls, params):
            return None

    async def run(self) -> dict[str, Any]:
        types = self.types
        args = self.args
        cmd = [sys.executable, "-m", "midword.server"]
        if args.engine != DEFAULT_ENGINE:
            cmd += ["--engine", args.engine]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
        await self.client.start_io(*cmd, env=env)
        settings: dict[str, Any] = {"prefetch": not args.no_prefetch}
        settings.update(_parse_settings(args.setting))
        if args.model:
            settings["model"] = args.model
        started = time.perf_counter()
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=True)),
                initialization_options={"midword": settings},
            )
        )
        self.client.initialized(types.InitializedParams())
        while self.state not in ("ready", "error"):
            if time.perf_counter() - started > args.ready_timeout_s:
                raise TimeoutError(f"the server was not ready after {args.ready_timeout_s:.0f} s ({self.state})")
            await asyncio.sleep(0.02)
        if self.state == "error":
            raise RuntimeError(f"the engine failed to load: {self.state_message}")
        load_s = time.perf_counter() - started
        try:
            report = await self._type()
        finally:
            try:
                stats = await asyncio.wait_for(self.client.protocol.send_request_async("midword/stats", {}), 30)
                await asyncio.wait_for(self.client.shutdown_async(None), 30)
                self.client.exit(None)
            except Exception:  # the report matters more than a clean goodbye
                stats = None
            await self.client.stop()
        report["load_s"] = round(load_s, 2)
        report["server"] = _plain(stats) if stats is not None else None
        return report

    async def _type(self) -> dict[str, Any]:
        from midword.server.positions import UTF16, LineIndex

        types = self.types
        args = self.args
        uri = Path(args.file).resolve().as_uri()
        language = args.language or _LANGUAGES.get(Path(args.file).suffix.lower(), "plaintext")
        start = max(0, min(args.start, len(self.text)))
        end = len(self.text) if args.limit <= 0 else min(len(self.text), start + args.limit)
        # the rest of the file stays after the cursor, as when retyping part of a file
        buffer = self.text[:start] + ("" if args.no_suffix else self.text[end:])
        version = 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=buffer)
            )
        )
        loop = asyncio.get_running_loop()
        outstanding: dict[str, Any] | None = None
        when = loop.time()
        cursor = start
        gaps = self._gaps(start, end)
        for i in range(start, end):
            ch = self.text[i]
            await _sleep_until(loop, when)
            keystroke = time.perf_counter()
            if outstanding is not None and not outstanding["future"].done():
                self.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=outstanding["id"]))
                outstanding["cancelled_by_typing"] = True
                self.cancel_sent += 1
            line, character = LineIndex(buffer).position(cursor, UTF16)
            pos = types.Position(line=line, character=character)
            version += 1
            self.client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[
                        types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=ch)
                    ],
                )
            )
            buffer = buffer[:cursor] + ch + buffer[cursor:]
            cursor += 1
            gap, pause = gaps[i - start]
            when += gap / 1000.0
            if args.debounce_ms < gap:
                await _sleep_until(loop, loop.time() + args.debounce_ms / 1000.0 - (time.perf_counter() - keystroke))
                line, character = LineIndex(buffer).position(cursor, UTF16)
                outstanding = self._ask(uri, types.Position(line=line, character=character), keystroke)
                outstanding["gap_ms"] = gap
                outstanding["pause"] = pause
        if outstanding is not None:  # let the last one finish
            try:
                await asyncio.wait_for(asyncio.wrap_future(outstanding["future"]), 60)
            except Exception:
                pass
        await asyncio.sleep(0.05)
        return self._report(end - start)

    def _gaps(self, start: int, end: int) -> list[tuple[float, bool]]:
        """(ms to the next key, whether a pause of the bursts trace follows) per key."""
        args = self.args
        if args.trace == "bursts":
            return [
                (g, k == b.end - b.start - 1)
                for b in burst_schedule(end - start, args.seed)
                for k, g in enumerate(b.gaps_ms)
            ]
        return [
            (args.interval_ms + (args.line_pause_ms if self.text[i] == "\n" else 0.0), False) for i in range(start, end)
        ]

    def _ask(self, uri: str, position, keystroke: float) -> dict[str, Any]:
        types = self.types
        self.next_id += 1
        msg_id = f"bench-{self.next_id}"
        if self.args.request == "inline":
            method = types.TEXT_DOCUMENT_INLINE_COMPLETION
            params = types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=position,
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            )
        else:
            method = types.TEXT_DOCUMENT_COMPLETION
            params = types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position)
        record: dict[str, Any] = {"id": msg_id, "keystroke": keystroke, "cancelled_by_typing": False}
        future = self.client.protocol.send_request(method, params, msg_id=msg_id)
        record["future"] = future

        def done(fut) -> None:
            record["latency_ms"] = (time.perf_counter() - keystroke) * 1000.0
            if fut.cancelled():
                record["outcome"] = "cancelled"
                return
            exc = fut.exception()
            if exc is not None:
                code = getattr(exc, "code", None)
                record["outcome"] = {-32800: "cancelled", -32801: "content_modified"}.get(code, "error")
                record["error"] = str(exc)
                return
            result = fut.result()
            items = getattr(result, "items", None) or []
            record["outcome"] = "answered" if items else "empty"
            if items:
                data = getattr(items[0], "data", None)
                record["source"] = (
                    _get(data, "source") if data is not None else "unreported (inline items carry no data)"
                )
                record["partial"] = bool(_get(data, "partial"))
                spent = _plain(_get(data, "ms"))
                if isinstance(spent, dict):
                    record["server_ms"] = spent
                text = getattr(items[0], "insert_text", None)
                if text is None:
                    text = items[0].text_edit.new_text
                record["chars"] = len(text)

        future.add_done_callback(done)
        self.records.append(record)
        return record

    def _report(self, typed: int) -> dict[str, Any]:
        answered = [r for r in self.records if r.get("outcome") == "answered"]
        by_source: dict[str, list[float]] = {}
        for r in answered:
            by_source.setdefault(r.get("source", "?"), []).append(r["latency_ms"])
        outcomes: dict[str, int] = {}
        for r in self.records:
            outcomes[r.get("outcome", "pending")] = outcomes.get(r.get("outcome", "pending"), 0) + 1
        return {
            "file": self.args.file,
            "request": self.args.request,
            "typed_chars": typed,
            "trace": self.args.trace,
            "interval_ms": self.args.interval_ms,
            "debounce_ms": self.args.debounce_ms,
            "requests": len(self.records),
            "outcomes": outcomes,
            "cancel_sent": self.cancel_sent,
            "latency": _summary([r["latency_ms"] for r in answered]),
            "latency_all_responses": _summary(
                [r["latency_ms"] for r in self.records if r.get("outcome") in ("answered", "empty")]
            ),
            "latency_by_source": {k: _summary(v) for k, v in sorted(by_source.items())},
            "mean_chars": _round(statistics.fmean([r["chars"] for r in answered]) if answered else None),
            "model_time_ms": _breakdown([r for r in answered if r.get("source") == "model"]),
            "pauses": self._pauses() if self.args.trace == "bursts" else None,
        }

    def _pauses(self) -> dict[str, Any]:
        """Per pause of the bursts trace: the time from its last keystroke to a shown
        completion (an answer with items that came before the next key)."""
        asked = [r for r in self.records if r.get("pause")]
        shown = [r for r in asked if r.get("outcome") == "answered" and r["latency_ms"] <= r["gap_ms"]]
        by_source: dict[str, list[float]] = {}
        for r in shown:
            by_source.setdefault(r.get("source", "?"), []).append(r["latency_ms"])
        return {
            "seed": self.args.seed,
            "pauses": len(asked),
            "shown": len(shown),
            "answered_share": _round(len(shown) / len(asked) if asked else None, 3),
            "pause_ms": _summary([r["gap_ms"] for r in asked]),
            "latency": _summary([r["latency_ms"] for r in shown]),
            "latency_by_source": {k: _summary(v) for k, v in sorted(by_source.items())},
            "partial_answers": sum(1 for r in shown if r.get("partial")),
            "mean_chars": _round(statistics.fmean([r["chars"] for r in shown]) if shown else None),
            "model_time_ms": _breakdown([r for r in shown if r.get("source") == "model"]),
            # one row per pause: how long it was, what its request got, and when
            "each": [
                {
                    "pause_ms": r["gap_ms"],
                    "outcome": r.get("outcome", "pending"),
                    "latency_ms": _round(r.get("latency_ms")),
                    "source": r.get("source"),
                    "partial": r.get("partial", False),
                    "server_ms": r.get("server_ms"),
                }
                for r in asked
            ],
        }


# What the server reports per answer (item `data.ms`), in the order time is spent.
TIME_PARTS = ("request", "queue", "prefill", "cpc", "decode", "mask", "server")


def _breakdown(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """p50 and mean of each part of the server's time over `records` that report it."""
    rows = [r["server_ms"] for r in records if "server_ms" in r]
    if not rows:
        return None
    out: dict[str, Any] = {"n": len(rows)}
    for part in TIME_PARTS:
        values = [float(row[part]) for row in rows if row.get(part) is not None]
        if values:
            out[part] = {"p50": _round(percentile(values, 50)), "mean": _round(statistics.fmean(values))}
    return out


async def _sleep_until(loop, when: float) -> None:
    delay = when - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _get(obj, key):
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def format_report(report: dict[str, Any]) -> str:
    lat = report["latency"]
    server = report.get("server") or {}
    rows = [
        f"midword bench lsp: {report['file']} ({report['request']}, {report['typed_chars']} keystrokes, "
        + ("in bursts" if report.get("trace") == "bursts" else f"{report['interval_ms']:.0f} ms apart")
        + f", debounce {report['debounce_ms']:.0f} ms; model loaded in {report['load_s']} s)",
        "",
        f"{'answers':<22} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}",
    ]

    def row(name, s):
        def fmt(x):
            return "-" if x is None else f"{x:.1f}"

        rows.append(f"{name:<22} {s['n']:>5} {fmt(s['p50_ms']):>8} {fmt(s['p95_ms']):>8} {fmt(s['max_ms']):>8}")

    row("all with a completion", lat)
    for source, s in report["latency_by_source"].items():
        row(f"  from {source}", s)
    row("all responses", report["latency_all_responses"])
    rows.append("")
    rows.append(
        f"requests {report['requests']}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(report["outcomes"].items()))
        + f"; $/cancelRequest sent {report['cancel_sent']}"
    )
    if server:
        rows.append(
            f"server: model runs {server.get('model_calls')}, tokens generated {server.get('tokens_generated')}, "
            f"cache hits {server.get('cache_hits')} (prefetched {server.get('prefetch_hits')}), "
            f"prefetches {server.get('prefetches')}, superseded {server.get('superseded')}, "
            f"content modified {server.get('content_modified')}, errors {server.get('errors')}"
        )
        rows.append(
            f"        joined a running job {server.get('joined')}, runs stopped early "
            f"{server.get('model_calls_stopped')}"
        )
        spent = server.get("engine_ms") or {}
        runs = server.get("model_calls") or 0
        if runs and spent:
            parts = ", ".join(f"{k} {spent.get(k, 0.0) / runs:.0f}" for k in ("prefill", "cpc", "decode", "mask"))
            rows.append(
                f"where the time goes, ms per model run (mean of {runs}): total {spent.get('total', 0.0) / runs:.0f}"
                f" = {parts} + the rest (grammar, tokenizer)"
            )
    _format_breakdown(rows, "model answers", report.get("model_time_ms"))
    pauses = report.get("pauses")
    if pauses:
        rows.append("")
        share = pauses["answered_share"]
        rows.append(
            f"bursts trace (seed {pauses['seed']}): {pauses['pauses']} pauses "
            f"(p50 {pauses['pause_ms']['p50_ms']} ms), a completion shown in {pauses['shown']}"
            + ("" if share is None else f" ({share * 100:.0f} %)")
            + f", {pauses['partial_answers']} of them a first part of a longer answer; mean {pauses['mean_chars']} chars"
        )
        rows.append(f"{'last key to shown':<22} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        row("all pauses shown", pauses["latency"])
        for source, s in pauses["latency_by_source"].items():
            row(f"  from {source}", s)
        _format_breakdown(rows, "pause answers from the model", pauses.get("model_time_ms"))
    return "\n".join(rows)


def _format_breakdown(rows: list[str], what: str, parts: dict[str, Any] | None) -> None:
    if not parts:
        return
    shown = ", ".join(f"{k} {parts[k]['p50']:.0f}" for k in TIME_PARTS if k in parts)
    rows.append(f"{what}, server time p50 ms (of {parts['n']}): {shown}")


def run_lsp_bench(args: argparse.Namespace) -> int:
    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"midword bench lsp: cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    if args.interval_ms <= 0 or args.debounce_ms < 0:
        print("midword bench lsp: --interval-ms must be positive and --debounce-ms not negative", file=sys.stderr)
        return 2
    try:
        _parse_settings(args.setting)
    except ValueError as e:
        print(f"midword bench lsp: {e}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(_Replay(args, text).run())
    except (TimeoutError, RuntimeError) as e:
        print(f"midword bench lsp: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="midword bench lsp", description=__doc__.splitlines()[0])
    add_lsp_bench_arguments(parser)
    return run_lsp_bench(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
