"""A small deterministic stand-in for `midword.completion.engine.CompletionEngine`.

It implements exactly the engine's contract (`load(progress)`, `ready`,
`complete(request, cancelled=..., partial=...)` returning a `Completion`, stop_reason
"cancelled" when `cancelled()` turns true between steps, `partial(text, replace_start)`
told the text so far before each step), with a "model" that predicts by
repetition, like word completion in a plain editor:

- cursor mid-word (`userNa|`): the first longer word of the document that starts with
  the typed part, followed by what came after that word where it appeared earlier
  (so `userNa` completes to `userName = 1` if `userName = 1` is above);
- cursor after other text: what followed the last earlier occurrence of the end of
  the line before the cursor (its last 12 characters at most).

One line when `single_line`, else up to three. Text comes out in "tokens" of three
characters, one every `step_ms`, so tests can see cancellation mid-way. The prompt is
the prefix in tokens of three characters too (`Timings.prompt_tokens`), of which those
shared with the previous request's prefix count as cached (`Timings.cached_tokens`).

Configured through the model name, since the server only passes `model`:
`fake?step_ms=20&first_ms=300&load_s=0.5&fail=load|complete|schema|crash&log=/tmp/calls.jsonl`
(all optional; `first_ms` is a wait before each answer, as a prefill, empty answers included;
`schema` raises RecursionError for a JSON Schema grammar, `crash` a BaseException when
the prefix holds `CRASH`).
`log` appends one JSON line per `complete` call with what the engine received.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
import time
from collections import deque
from urllib.parse import parse_qsl

from midword.completion.types import Completion, CompletionRequest, Timings

TOKEN_CHARS = 3


class FakeModelUnavailable(RuntimeError):
    pass


class FakeCrash(BaseException):
    """Not an Exception: escapes the worker's handlers and ends the model thread."""


def parse_model(model: str) -> dict[str, str]:
    name, _, query = model.partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    options["name"] = name
    return options


class FakeEngine:
    def __init__(self, model: str = "fake", **settings):
        options = parse_model(model)
        self.model = model
        self.step_ms = float(options.get("step_ms", 0))
        self.first_ms = float(options.get("first_ms", 0))
        self.load_s = float(options.get("load_s", 0))
        self.fail = options.get("fail", "")
        self.log_path = options.get("log")
        self.settings = settings
        # the latest requests (bounded: the soak bench makes tens of thousands)
        self.calls: deque[CompletionRequest] = deque(maxlen=1000)
        self._ready = False
        self._lock = threading.Lock()
        self._last_prefix = ""

    def load(self, progress=None) -> None:
        steps = 4
        for i in range(steps):
            if progress is not None:
                progress(f"fake load step {i + 1}/{steps}", i / steps)
            time.sleep(self.load_s / steps)
        if self.fail == "load":
            raise FakeModelUnavailable(f"model {self.model!r} is not available (fake failure)")
        if progress is not None:
            progress("fake model loaded", 1.0)
        self._ready = True

    @property
    def ready(self) -> bool:
        return self._ready

    def complete(self, request: CompletionRequest, *, cancelled=None, partial=None) -> Completion:
        if not self._ready:
            raise RuntimeError("complete() called before load()")
        with self._lock:
            self.calls.append(request)
        if self.log_path:
            record = {
                "prefix": request.prefix,
                "suffix": request.suffix,
                "language": request.language,
                "grammar_kind": request.grammar.kind,
                "grammar_source": request.grammar.source,
                "single_line": request.single_line,
                "max_tokens": request.max_tokens,
                "temperature": request.temperature,
                "mode": request.mode,
                "context": [[c.path, c.text, c.kind] for c in request.context],
                "path": request.path,
            }
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        if self.fail == "complete":
            raise RuntimeError("fake engine failure while completing")
        if self.fail == "schema" and request.grammar.kind == "json_schema":
            raise RecursionError("maximum recursion depth exceeded (fake schema compilation)")
        if self.fail == "crash" and "CRASH" in request.prefix:
            raise FakeCrash("the fake model thread dies")
        started = time.perf_counter()
        if self.first_ms:
            time.sleep(self.first_ms / 1000.0)
        shared = len(os.path.commonprefix([self._last_prefix, request.prefix]))
        self._last_prefix = request.prefix
        prompt = (-(-len(request.prefix) // TOKEN_CHARS), shared // TOKEN_CHARS)
        text, rs = propose(request)
        out = ""
        steps = 0
        for i in range(0, len(text), TOKEN_CHARS):
            if partial is not None:
                partial(out, rs)
            if steps >= request.max_tokens:
                return self._done(text[:i], rs, "max_tokens", steps, started, prompt)
            if cancelled is not None and cancelled():
                return self._done(out, rs, "cancelled", steps, started, prompt)
            if self.step_ms:
                time.sleep(self.step_ms / 1000.0)
            out = text[: i + TOKEN_CHARS]
            steps += 1
        if cancelled is not None and cancelled():
            return self._done(out, rs, "cancelled", steps, started, prompt)
        return self._done(text, rs, "eos", steps, started, prompt)

    @staticmethod
    def _done(text: str, rs: int, reason: str, steps: int, started: float, prompt: tuple[int, int]) -> Completion:
        ms = (time.perf_counter() - started) * 1000
        timings = Timings(total_ms=ms, decode_ms=ms, forward_passes=steps, tokens_generated=steps)
        timings.prompt_tokens, timings.cached_tokens = prompt
        return Completion(text=text, replace_start=rs, stop_reason=reason, timings=timings)


def _lines(text: str, single_line: bool) -> str:
    parts = text.split("\n")
    return parts[0] if single_line else "\n".join(parts[:3])


def propose(request: CompletionRequest) -> tuple[str, int]:
    """The fake model's (text, replace_start) for a request."""
    prefix = request.prefix
    typed = re.search(r"\w*\Z", prefix).group()
    rs = len(prefix) - len(typed)
    before = prefix[:rs]
    if typed:
        for m in re.finditer(r"\w+", before + " " + request.suffix):
            word = m.group()
            if word.startswith(typed) and word != typed:
                at = re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", before)
                rest = before[at.end() :] if at else ""
                return word + _lines(rest, request.single_line), rs
        return "", len(prefix)
    line = prefix[prefix.rfind("\n") + 1 :]
    # the end of the line's text (up to 12 characters), or on a blank line its indentation
    key = line.lstrip()[-12:] if line.strip() else prefix[-(len(line) + 1) :] if len(prefix) > len(line) else ""
    if not key:
        return "", len(prefix)
    at = prefix.rfind(key, 0, len(prefix) - 1)
    if at < 0:
        return "", len(prefix)
    return _lines(prefix[at + len(key) :], request.single_line), len(prefix)


@contextlib.asynccontextmanager
async def fake_http_server():
    """midword's HTTP app on this fake engine, served by uvicorn on 127.0.0.1 at an
    ephemeral port inside the running event loop; yields the port, then stops it."""
    import uvicorn

    from midword.server.http import HttpConfig, create_app

    app = create_app(FakeEngine, HttpConfig(model="fake"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    task = asyncio.ensure_future(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # the server failed to start: raise its error
            await asyncio.sleep(0.01)
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task
        app.state.service.close()
