"""`midword bench soak`: many completions over one long session of edits, with the
server's resident memory sampled along the way.

The bench starts `midword serve` over stdio and plays an editor that never closes the
file: it opens a document, then for each of `--completions` steps types one character
of a corpus (FILE, or a built-in Python snippet) at the end, with a line break now and
then, every so often deletes a stretch it typed or edits near the top, and asks for a
completion at the cursor, waiting for the answer. When the corpus is used up the typed
part is deleted and typing starts over, so the document stays the same size and only
the server's own state could grow.

The report gives the server's RSS after the warm-up (the first `--warmup` steps), at
the end and at its highest, the growth from warm-up to end, the answers by kind
(items, empty, error code) and any request left unanswered within `--timeout-s`.
Nothing asserts; the figures are for a person to read, `--json` for machines.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

DEFAULT_ENGINE = "midword.completion.engine:CompletionEngine"

CORPUS = """def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    total = 0.0
    averages = []
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        averages.append(total / min(index + 1, window))
    return averages


class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, count=1):
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count=1):
        left = self.items.get(name, 0) - count
        if left <= 0:
            self.items.pop(name, None)
        else:
            self.items[name] = left
"""

HEADER = "import math\nimport os\n\n\n"


def add_soak_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default=None, help="text typed over and over (default: a Python snippet)")
    parser.add_argument("--completions", type=int, default=10_000, help="completion requests in the session")
    parser.add_argument(
        "--engine",
        default=DEFAULT_ENGINE,
        metavar="MODULE:ATTR",
        help="engine the server uses (e.g. tests.fake_engine:FakeEngine)",
    )
    parser.add_argument("--model", default=None, help="model name sent in the settings (default: the server's)")
    parser.add_argument("--request", choices=["completion", "inline"], default="completion")
    parser.add_argument("--samples", type=int, default=20, help="RSS samples over the session")
    parser.add_argument("--warmup", type=int, default=200, help="steps before the baseline RSS sample")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="longest wait for one answer")
    parser.add_argument("--ready-timeout-s", type=float, default=900.0, help="longest wait for the model to load")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


class Server:
    """`midword serve` over stdio, with a thread that reads its frames into a queue."""

    def __init__(self, args: argparse.Namespace):
        cmd = [sys.executable, "-m", "midword.server"]
        if args.engine != DEFAULT_ENGINE:
            cmd += ["--engine", args.engine]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self.messages: queue.Queue = queue.Queue()
        self.statuses: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    self.messages.put(None)
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line in (b"\r\n", b"\n"):
                    break
            msg = json.loads(out.read(length))
            if msg.get("method") == "midword/status":
                self.statuses.append(msg.get("params") or {})
            elif msg.get("method") == "workspace/configuration" and "id" in msg:
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": [None]})
            elif msg.get("method") == "window/workDoneProgress/create" and "id" in msg:
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            else:
                self.messages.put(msg)

    def send(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def reply(self, msg_id, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                msg = self.messages.get(timeout=left)
            except queue.Empty:
                return None
            if msg is None:
                raise RuntimeError("the server exited")
            if "method" not in msg and msg.get("id") == msg_id:
                return msg

    def close(self) -> int | None:
        try:
            self.send({"jsonrpc": "2.0", "id": "shutdown", "method": "shutdown"})
            self.reply("shutdown", 30)
            self.send({"jsonrpc": "2.0", "method": "exit"})
            return self.proc.wait(timeout=30)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
            return None


def _position(text: str, offset: int) -> dict:
    before = text[:offset]
    line = before.count("\n")
    start = before.rfind("\n") + 1
    return {"line": line, "character": len(before[start:].encode("utf-16-le")) // 2}


def _range(text: str, start: int, end: int) -> dict:
    return {"start": _position(text, start), "end": _position(text, end)}


def run_soak(args: argparse.Namespace) -> int:
    corpus = Path(args.file).read_text(encoding="utf-8") if args.file else CORPUS
    if not corpus:
        print("midword bench soak: the corpus is empty", file=sys.stderr)
        return 2
    server = Server(args)
    uri = "file:///soak/session.py"
    settings = {"prefetch": False}
    if args.model:
        settings["model"] = args.model
    answers = {"items": 0, "empty": 0}
    unanswered = 0
    samples: list[tuple[int, float]] = []
    started = None
    try:
        server.send(
            {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {
                    "processId": os.getpid(),
                    "rootUri": None,
                    "capabilities": {},
                    "initializationOptions": {"midword": settings},
                },
            }
        )
        if server.reply("init", args.ready_timeout_s) is None:
            raise RuntimeError("no answer to initialize")
        server.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        deadline = time.monotonic() + args.ready_timeout_s
        while not any(s.get("state") in ("ready", "error") for s in server.statuses):
            if time.monotonic() > deadline:
                raise RuntimeError("the model did not load in time")
            time.sleep(0.05)
        head = text = HEADER
        version = 1
        server.send(
            {
                "jsonrpc": "2.0",
                "method": "textDocument/didOpen",
                "params": {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}},
            }
        )
        every = max(1, args.completions // max(1, args.samples))
        at = 0  # next corpus character
        method = "textDocument/completion" if args.request == "completion" else "textDocument/inlineCompletion"
        started = time.perf_counter()
        for step in range(args.completions):
            version += 1
            if at >= len(corpus):  # start over: delete everything typed
                change = {"range": _range(text, len(head), len(text)), "text": ""}
                text, at = head, 0
            elif step % 97 == 96 and len(text) > len(head) + 10:  # delete the last few characters typed
                n = 1 + step % 7
                change = {"range": _range(text, len(text) - n, len(text)), "text": ""}
                text = text[:-n]
                at = max(0, at - n)
            elif step % 131 == 130:  # an edit at the top, away from the cursor: a line added or removed
                if head == HEADER:
                    change = {"range": _range(text, 0, 0), "text": "#\n"}
                    head, text = "#\n" + HEADER, "#\n" + text
                else:
                    change = {"range": _range(text, 0, 2), "text": ""}
                    head, text = HEADER, text[2:]
            else:
                ch = corpus[at]
                change = {"range": _range(text, len(text), len(text)), "text": ch}
                text += ch
                at += 1
            server.send(
                {
                    "jsonrpc": "2.0",
                    "method": "textDocument/didChange",
                    "params": {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]},
                }
            )
            params = {"textDocument": {"uri": uri}, "position": _position(text, len(text))}
            if method.endswith("inlineCompletion"):
                params["context"] = {"triggerKind": 2}
            server.send({"jsonrpc": "2.0", "id": step, "method": method, "params": params})
            reply = server.reply(step, args.timeout_s)
            if reply is None:
                unanswered += 1
            elif "error" in reply:
                key = f"error {reply['error'].get('code')}"
                answers[key] = answers.get(key, 0) + 1
            else:
                items = (reply.get("result") or {}).get("items") or []
                answers["items" if items else "empty"] += 1
            if step + 1 == args.warmup or (step + 1) % every == 0 or step + 1 == args.completions:
                mb = rss_mb(server.proc.pid)
                if mb is not None:
                    samples.append((step + 1, round(mb, 1)))
        elapsed = time.perf_counter() - started
    finally:
        code = server.close()
    base = next((mb for n, mb in samples if n >= min(args.warmup, args.completions)), None)
    end = samples[-1][1] if samples else None
    report = {
        "completions": args.completions,
        "engine": args.engine,
        "model": args.model,
        "seconds": round(elapsed, 1),
        "per_second": round(args.completions / elapsed, 1) if elapsed else None,
        "answers": answers,
        "unanswered": unanswered,
        "rss_mb": {
            "after_warmup": base,
            "end": end,
            "max": max((mb for _, mb in samples), default=None),
            "growth": round(end - base, 1) if base is not None and end is not None else None,
        },
        "samples": samples,
        "exit_code": code,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        rss = report["rss_mb"]
        print(
            f"soak: {args.completions} completions in {report['seconds']} s ({report['per_second']}/s), "
            f"engine {args.engine}"
        )
        print(f"answers: {answers}; unanswered: {unanswered}; server exit code: {code}")
        print(
            f"RSS MB: after warm-up ({args.warmup} steps) {rss['after_warmup']}, end {rss['end']}, "
            f"max {rss['max']}, growth {rss['growth']}"
        )
        print("samples (step, MB): " + ", ".join(f"{n}:{mb}" for n, mb in samples))
    return 0 if unanswered == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="midword bench soak", description=__doc__.split("\n\n")[0])
    add_soak_arguments(parser)
    return run_soak(parser.parse_args(argv))
