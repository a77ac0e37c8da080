"""The headless completion API: `midword serve --http [HOST:]PORT`.

Editor plugins that already speak an HTTP completion protocol point at midword
unchanged: llama.cpp's `/infill` and `/completion` (llama.vscode, llama.vim,
llama.qtcreator, Continue's and Tabby's llama.cpp backends, Twinny), OpenAI's
`/v1/completions` (Continue, Tabby's `openai/completion` backend, minuet-ai, Zed)
and Tabby's own `/v1/completions`, `/v1/health`, `/v1/events` (tabby-agent). The wire
formats live in `server.http_formats`; this module is the service behind them.

It is thin over `midword.completion` and shares the language server's parts: the
one model thread (`server.worker.ModelWorker`), the type-through cache
(`server.cache`) and the grammar choice (`server.grammar_choice`), so every route
gets character prefix conditioning (the text before the cursor may end mid-word)
and a JSON document naming a `$schema` is constrained as in LSP.

Requests queue in front of the one model thread, first come first served, at most
`max_queue` waiting (past that: 503 with Retry-After); a newer request for the same
document replaces its waiting older one, and while others wait a running completion
ends once it had its share of the time budget. The engine keeps a KV cache slot per
document, so documents taking turns do not prefill each other out. A client that disconnects
leaves the queue at once, and its job stops at the engine's next decoding step after
a short grace (the worker's, as for LSP cancellations). A request whose answer the
running job will give (the user typed on, and typed what the model predicts) joins
that job instead of queueing, even one whose client just aborted it, and one the
cache can answer never reaches the model.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import itertools
import logging
import os
import platform
import socket
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, cast

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from midword import __version__
from midword.completion.types import MODES, Completion, CompletionRequest, ContextChunk, GrammarSpec, Mode

from .cache import CompletionCache, answer_may_serve, request_key
from .editing import wants_multiline
from .grammar_choice import (
    Choice,
    GrammarResolver,
    document_language,
    fallback_grammar,
    is_json_document,
    schema_reference,
)
from .http_formats import (
    SSE_DONE,
    BadRequest,
    compact_json,
    cut_at_indent,
    cut_at_stop,
    error_body,
    get_bool,
    get_int,
    get_list,
    get_number,
    get_object,
    get_stop,
    get_str,
    infill_extra,
    llama_timings,
    normalize_newlines,
    parse_fim_prompt,
    parse_json_body,
    select_fields,
    sse_event,
    strip_markers,
    tabby_snippets,
)
from .settings import Settings
from .worker import EngineFactory, Event, Job, ModelWorker

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8012  # what llama.vscode and llama.vim expect for FIM
URI = "http:"  # the cache and the worker key documents by URI; HTTP clients name none
MAX_TOKENS = 1024
N_CTX = 1536  # the engine's prompt window (completion.engine.MAX_PROMPT_TOKENS)
# Choosing a JSON document's grammar may read its `$schema` file: on a thread, within this.
GRAMMAR_CHOICE_TIMEOUT_S = 2.0
LATENCY_BUCKETS_S = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class HttpConfig:
    model: str = "gemma3"
    api_key: str | None = None
    # Grammar and schema files may only be read from here (None: no file is ever read).
    workspace: str | None = None
    max_queue: int = 16
    max_body_bytes: int = 4 * 1024 * 1024
    max_tokens: int = 48  # when a request names none
    time_budget_s: float = 2.0
    context_tokens: int = 1024  # of input_extra / snippets / repository context the prompt may show
    # While others wait for the model thread, a running completion ends (with the text it
    # has) once it had its share, time_budget_s / (1 + waiting): one editor's long answer
    # must not keep every other editor waiting for its whole budget.
    fair_share: bool = True
    # Completions that run at once when the engine batches their decode steps (one
    # forward for all: lean_batch.py); with an engine that does not, one at a time.
    lanes: int = 4


class Unavailable(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class Disconnected(Exception):
    pass


# --------------------------------------------------------------------------------------
# what a route asks, what it gets


@dataclass
class Ask:
    prefix: str  # the document before the cursor (CRLF already normalised)
    suffix: str = ""
    language: str | None = None
    filename: str | None = None
    context: list[ContextChunk] = field(default_factory=list)
    max_tokens: int = 48
    temperature: float = 0.0
    mode: Mode = "cpc"
    single_line: bool | None = None  # None: one line, or several after a block opener (as in LSP)
    grammar: GrammarSpec | None = None  # None: chosen as in LSP
    stops: list[str] = field(default_factory=list)
    n_indent: int = 0
    t_max_predict_ms: float | None = None
    seed: int | None = None


@dataclass
class Result:
    text: str  # what goes after the cursor
    completion: Completion | None
    source: str  # "model", "cache", "joined", "empty"
    stop_type: str = "eos"  # llama.cpp: "eos", "limit", "word", "none"
    stopping_word: str = ""
    prefix: str = ""  # the engine's prefix (context included)
    queue_ms: float = 0.0
    engine_ms: float = 0.0
    ran: bool = False  # the model computed it for this request (not the cache, not joined)
    handoff_ms: float = 0.0  # to the model thread and back, beyond the engine's time

    @property
    def finish_reason(self) -> str:
        return (
            "length"
            if self.stop_type == "limit" and self.completion is not None and self.completion.stop_reason == "max_tokens"
            else "stop"
        )

    @property
    def tokens_predicted(self) -> int:
        return self.completion.timings.tokens_generated if self.completion is not None and self.ran else 0

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the prompt the model read (0 for an answer that needed no model)."""
        return self.completion.timings.prompt_tokens if self.completion is not None and self.ran else 0

    @property
    def prompt_evaluated(self) -> int:
        """Of those, the ones not already in the model's KV cache (llama.cpp's prompt_n)."""
        if self.completion is None or not self.ran:
            return 0
        t = self.completion.timings
        return max(0, t.prompt_tokens - t.cached_tokens)


class Metrics:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], int] = {}
        self.cancellations = 0
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0

    def record(self, route: str, outcome: str, seconds: float | None = None) -> None:
        key = (route, outcome)
        self.requests[key] = self.requests.get(key, 0) + 1
        if outcome == "cancelled":
            self.cancellations += 1
        if seconds is not None:
            for i, bound in enumerate(LATENCY_BUCKETS_S):
                if seconds <= bound:
                    self.buckets[i] += 1
                    break
            else:
                self.buckets[-1] += 1
            self.latency_sum += seconds
            self.latency_count += 1


class WorkspaceResolver(GrammarResolver):
    """The LSP's grammar choice with the workspace as its one folder: `choose(...,
    root=self.root)` reads files only inside it, and a request's file path is taken
    relative to it (`inside`)."""

    def __init__(self, workspace: str | None):
        super().__init__()
        self.root = os.path.realpath(workspace) if workspace else None

    def inside(self, path: str) -> str | None:
        if self.root is None:
            return None
        real = os.path.realpath(os.path.join(self.root, path))
        return real if real == self.root or real.startswith(self.root.rstrip(os.sep) + os.sep) else None


# --------------------------------------------------------------------------------------
# the service


class HttpService:
    def __init__(self, engine_factory: EngineFactory, config: HttpConfig = HttpConfig()):
        self.config = config
        self.cache = CompletionCache(per_document=64, documents=1)
        self.grammars = WorkspaceResolver(config.workspace)
        self.metrics = Metrics()
        self.started = time.time()
        self.load_s: float | None = None
        # The model's turns: `_holding` requests hold one (at most `_lanes()`), the others
        # wait in `_queue`, first come first served, as (future, request).
        self._holding = 0
        self._queue: deque[tuple[asyncio.Future, CompletionRequest]] = deque()
        self.superseded = 0
        # Jobs running beside each other (several lanes), with their requests: a newer
        # request for the same document stops the older one's job.
        self._running_jobs: dict[Job, CompletionRequest] = {}
        self._ids = itertools.count(1)
        self.worker = ModelWorker(engine_factory, self._from_worker)
        self.worker.load(config.model)

    # -- state -------------------------------------------------------------------------

    def _from_worker(self, event: Event) -> None:  # the model thread
        if event.kind == "ready":
            self.load_s = event.data.get("load_s")
        elif event.kind == "error":
            log.error("%s", event.message)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def state(self) -> str:
        return self.worker.state  # "loading", "ready", "error" ("idle" before the first load)

    @property
    def model_id(self) -> str:
        """The advertised model name; never contains "gpt" or "claude" (Continue switches
        to chat templates on those)."""
        name = os.path.basename(self.config.model.partition("?")[0].rstrip("/\\")) or "model"
        name = name.lower().replace("gpt", "g-p-t").replace("claude", "c-laude")
        return f"midword-{name}"

    def close(self) -> None:
        self.worker.close(timeout=2.0)

    def check_ready(self) -> None:
        if self.state == "ready":
            return
        if self.state == "error":
            raise Unavailable(500, f"the model could not be loaded: {self.worker.error}")
        raise Unavailable(503, "Loading model", retry_after=1)

    # -- one completion ----------------------------------------------------------------

    async def build(self, ask: Ask) -> CompletionRequest:
        language = document_language(ask.language, ask.filename)
        names_schema = schema_reference(ask.prefix) is not None
        if language is None and names_schema:
            language = "json"  # a document with a top-level "$schema" is JSON
        if ask.grammar is not None:
            spec = ask.grammar
        else:
            # A request's file is taken relative to the workspace (a `$schema` path relative
            # to the document then resolves there too); outside it, it has no path.
            doc_path = self.grammars.inside(ask.filename or "untitled")
            choose = functools.partial(
                self.grammars.choose,
                path=doc_path,
                language_id=language,
                text=ask.prefix + ask.suffix,
                settings=Settings(),
                root=self.grammars.root,
            )
            if names_schema or is_json_document(language, doc_path):
                spec = (await self._choose_off_loop(choose, language, doc_path)).spec
            else:
                spec = choose().spec  # no file to read: cheaper here than a thread hop
        single = ask.single_line if ask.single_line is not None else not wants_multiline(ask.prefix, ask.suffix)
        return CompletionRequest(
            prefix=ask.prefix,
            suffix=ask.suffix,
            language=language,
            grammar=spec,
            max_tokens=ask.max_tokens,
            temperature=ask.temperature,
            mode=ask.mode,
            single_line=single,
            time_budget_s=self.config.time_budget_s,
            seed=ask.seed,
            context=tuple(ask.context),
            context_tokens=self.config.context_tokens,
            path=ask.filename,
        )

    async def _choose_off_loop(self, choose: Callable[[], Choice], language: str | None, path: str | None) -> Choice:
        """The grammar choice on a thread (it may read a schema file) within
        GRAMMAR_CHOICE_TIMEOUT_S; past that, or on any failure, the fallback grammar (as
        the language server does)."""
        try:
            return await asyncio.wait_for(
                asyncio.get_running_loop().run_in_executor(None, choose), GRAMMAR_CHOICE_TIMEOUT_S
            )
        except asyncio.TimeoutError:
            note = f"choosing the grammar took over {GRAMMAR_CHOICE_TIMEOUT_S:g} s (a slow schema file?)"
        except Exception as e:  # noqa: BLE001 - a bad schema file never takes completions down
            note = f"choosing the grammar failed: {type(e).__name__}: {e}"
        log.warning("%s; using the default grammar", note)
        return Choice(fallback_grammar(language, path), "fallback", note)

    async def complete(
        self, ask: Ask, request: Request, on_partial: Callable[[tuple[int, str]], None] | None = None
    ) -> Result:
        """The answer to `ask`; Unavailable when it cannot run now, Disconnected when the
        client left before the answer. `on_partial((replace_start, text so far))` is
        called on the event loop after each decoding step of the model's run (streaming)."""
        self.check_ready()
        creq = await self.build(ask)
        hit = self.cache.get(URI, creq)
        if hit is not None:
            return self._result(ask, creq, hit[0], "cache")
        watch = asyncio.ensure_future(_disconnected(request))
        try:
            joined = await self._join(ask, creq, watch)
            if joined is not None:
                return joined
            queued = time.perf_counter()
            turn = await self._turn(creq, watch)
            if turn == "superseded":
                return Result("", None, "superseded", "none", prefix=creq.prefix)
            try:
                queue_ms = (time.perf_counter() - queued) * 1000.0
                hit = self.cache.get(URI, creq)  # a request ahead in the queue may have answered this one
                if hit is not None:
                    return self._result(ask, creq, hit[0], "cache", queue_ms=queue_ms)
                return await self._run(ask, creq, watch, queue_ms, on_partial)
            finally:
                self._next_turn()
        finally:
            watch.cancel()

    async def _turn(self, creq: CompletionRequest, watch: asyncio.Future) -> str:
        """Waits for the model thread's turn: "go" (the caller holds it and must call
        `_next_turn`), or "superseded" when a newer request for the same document came
        while this one waited (an editor that does not abort its requests wants only
        the newest). Disconnected when the client left first."""
        if self._holding < self._lanes():
            self._holding += 1
            return "go"
        for fut, older in self._queue:
            if not fut.done() and _same_document(older, creq):
                fut.set_result("superseded")
        live = sum(1 for fut, _ in self._queue if not fut.done())
        if live >= self.config.max_queue:
            raise Unavailable(503, f"{live} requests are already waiting for the model; try again", retry_after=1)
        entry = (asyncio.get_running_loop().create_future(), creq)
        self._queue.append(entry)
        try:
            await asyncio.wait({entry[0], watch}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if entry[0].done() and entry[0].result() == "go":
                self._next_turn()  # handed the turn just as the caller went away: pass it on
            raise
        finally:
            if entry in self._queue:
                self._queue.remove(entry)
        if entry[0].done():  # handed the turn (or superseded), even if the client left meanwhile
            turn = entry[0].result()
            if turn == "superseded":
                self.superseded += 1
            return turn
        entry[0].cancel()
        raise Disconnected()

    def _next_turn(self) -> None:
        """Hands the model thread's turn to the longest waiting request, or frees it."""
        while self._queue:
            fut, _ = self._queue.popleft()
            if not fut.done():
                fut.set_result("go")
                return
        self._holding -= 1

    def _lanes(self) -> int:
        return max(1, self.config.lanes) if self.worker.batches else 1

    async def _join(self, ask: Ask, creq: CompletionRequest, watch: asyncio.Future) -> Result | None:
        key = request_key(creq)

        def serves(job: Job) -> bool:
            r = job.request
            return (
                request_key(r) == key
                and (not r.single_line or creq.single_line)
                and answer_may_serve(r, job.partial, creq.prefix, creq.suffix)
            )

        job = self.worker.join(URI, serves)
        if job is None:
            return None
        outcome = await _wait_job(self.worker, job, watch)
        if outcome.status == "done" and outcome.completion is not None:
            self.cache.put(URI, job.request, outcome.completion)
            hit = self.cache.get(URI, creq)
            if hit is not None:
                return self._result(ask, creq, hit[0], "joined")
        return None

    async def _run(
        self,
        ask: Ask,
        creq: CompletionRequest,
        watch: asyncio.Future,
        queue_ms: float,
        on_partial: Callable[[tuple[int, str]], None] | None = None,
    ) -> Result:
        share = (lambda: len(self._queue), self.config.time_budget_s) if self.config.fair_share else None
        limiter = _Limiter(ask, creq.prefix, share)
        listeners: list[Callable[[Job], None]] = [limiter]
        if on_partial is not None:
            loop = asyncio.get_running_loop()

            def forward(job: Job) -> None:  # the model thread
                if job.partial is not None:
                    loop.call_soon_threadsafe(on_partial, job.partial)

            listeners.append(forward)
        submitted = time.perf_counter()
        beside = self._lanes() > 1
        if beside:
            # Only the newest request for a document is worth its share of the forwards (an
            # editor that does not abort its requests wants only the newest answer). With
            # one lane the worker does this itself.
            for older_job, older in self._running_jobs.items():
                if _same_document(older, creq):
                    older_job.stop("superseded")
        job = self.worker.submit(URI, None, creq, beside=beside)
        # (the model thread calls them after its first step, which follows the prompt's
        # prefill: they are in place long before)
        job.listeners.extend(listeners)
        self._running_jobs[job] = creq
        try:
            outcome = await _wait_job(self.worker, job, watch)
        finally:
            self._running_jobs.pop(job, None)
        if outcome.status == "superseded":
            self.superseded += 1
            return Result("", None, "superseded", "none", prefix=creq.prefix)
        # the hand-off to the model thread and back: its wake-up, the GIL, the loop's wake-up
        handoff_ms = max(0.0, (time.perf_counter() - submitted) * 1000.0 - outcome.engine_ms)
        limited = [limiter.reason] if limiter.reason else []
        if outcome.status == "error":
            raise Unavailable(500, f"the engine failed: {outcome.error}")
        if outcome.status == "not_ready":
            self.check_ready()
            raise Unavailable(503, "Loading model", retry_after=1)
        completion = outcome.completion
        if completion is None or (outcome.status != "done" and not limited):
            raise Unavailable(503, f"the completion was {outcome.status}; try again", retry_after=1)
        if outcome.status == "done":
            self.cache.put(URI, creq, completion)
        result = self._result(ask, creq, completion, "model", queue_ms=queue_ms, engine_ms=outcome.engine_ms)
        if limited and result.stop_type == "eos":
            result.stop_type = "limit"
        result.handoff_ms = handoff_ms
        return result

    def _result(
        self,
        ask: Ask,
        creq: CompletionRequest,
        completion: Completion,
        source: str,
        *,
        queue_ms: float = 0.0,
        engine_ms: float = 0.0,
    ) -> Result:
        prefix = creq.prefix
        rs = max(0, min(completion.replace_start, len(prefix)))
        typed = prefix[rs:]
        # A completion that does not re-spell the typed part cannot be said as an insertion.
        text = completion.text[len(typed) :] if completion.text.startswith(typed) else ""
        text = strip_markers(normalize_newlines(text))
        stop_type = "limit" if completion.stop_reason in ("max_tokens", "time") else "eos"
        text, word = cut_at_stop(text, ask.stops)
        if word is not None:
            stop_type = "word"
        if ask.n_indent > 0:
            cut = cut_at_indent(text, ask.n_indent)
            if cut != text:
                text, stop_type = cut, "eos"
        return Result(
            text,
            completion,
            source if text else "empty",
            stop_type,
            word or "",
            prefix,
            queue_ms,
            engine_ms,
            ran=source == "model",
        )

    def next_id(self, kind: str) -> str:
        return f"{kind}-{uuid.uuid4().hex[:12]}-{next(self._ids)}"


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (ASGI `http.disconnect`)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _wait_job(worker: ModelWorker, job: Job, watch: asyncio.Future):
    fut = asyncio.wrap_future(job.future)
    try:
        done, _ = await asyncio.wait({fut, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # a stream whose client left: as a disconnect
        worker.release(job)
        raise
    if fut in done:
        return fut.result()
    # As in the language server, a running job whose last client left goes on for the
    # worker's grace (CANCEL_GRACE_S) and then stops at the next decoding step, unless a
    # request its answer serves joins it meanwhile: llama.vim aborts the request in flight
    # on every keystroke and sends the next one at once, often for text the job predicts.
    worker.release(job)
    raise Disconnected()


class _Limiter:
    """Stops a job early when its text so far already ends the answer: llama.cpp's
    `t_max_predict_ms` (past that time since the first token, at a newline), `n_indent`
    (a line indented less) or a stop string; or, with `share` = (how many wait, time
    budget), when others wait and the job has had its share of the model thread. A job
    listener: it runs on the model thread after each step, where the text changes, so
    nothing polls."""

    def __init__(self, ask: Ask, prefix: str, share: tuple[Callable[[], int], float] | None = None):
        self.ask = ask
        self.prefix = prefix
        self.share = share
        self.started = time.perf_counter()
        self.first: float | None = None
        self.reason: str | None = None

    def __call__(self, job: Job) -> None:
        if job.partial is None or self.reason is not None:
            return
        ask = self.ask
        rs, text = job.partial
        typed = self.prefix[rs:]
        inserted = text[len(typed) :] if text.startswith(typed) else ""
        if inserted and self.first is None:
            self.first = time.perf_counter()
        reason = None
        if (
            ask.t_max_predict_ms is not None
            and self.first is not None
            and "\n" in inserted
            and (time.perf_counter() - self.first) * 1000.0 >= ask.t_max_predict_ms
        ):
            reason = "t_max_predict_ms"
        elif ask.n_indent > 0 and cut_at_indent(inserted, ask.n_indent) != inserted:
            reason = "n_indent"
        elif ask.stops and cut_at_stop(inserted, ask.stops)[1] is not None:
            reason = "stop"
        elif inserted.strip() and self.share is not None:
            waiting, budget_s = self.share
            others = waiting()
            if others and time.perf_counter() - self.started >= budget_s / (1 + others):
                reason = "fair_share"
        if reason is not None:
            self.reason = reason
            job.stop(reason)


def _same_document(older: CompletionRequest, newer: CompletionRequest) -> bool:
    """Whether `newer` asks about the same document as `older` after an edit at its
    cursor: the same file and text after the cursor, and everything before the cursor's
    line unchanged (the user typed, deleted or pressed Enter there)."""
    if older.path != newer.path or older.suffix != newer.suffix:
        return False
    line_start = older.prefix.rfind("\n") + 1
    return line_start > 0 and newer.prefix.startswith(older.prefix[:line_start])


# --------------------------------------------------------------------------------------
# request parsing per format


def _clamp_tokens(value: int | None, default: int) -> int:
    if value is None or value < 0:  # llama.cpp's -1: as many as allowed
        return default if value is None else MAX_TOKENS
    return min(value, MAX_TOKENS)


def _temperature(body: dict) -> float:
    return get_number(body, "temperature", 0.0, lo=0.0, hi=2.0)


def _midword_extras(body: dict, ask: Ask) -> Ask:
    """Fields midword reads on every route beyond the client's format: `language`,
    `filename` (grammar choice) and `mode`."""
    ask.language = get_str(body, "language", None) or ask.language
    ask.filename = get_str(body, "filename", None) or ask.filename
    mode = get_str(body, "mode", None)
    if mode is not None:
        if mode not in MODES:
            raise BadRequest(f'"mode" must be one of {", ".join(MODES)}, got {mode!r}')
        ask.mode = cast(Mode, mode)  # one of MODES
    return ask


def infill_ask(body: dict, config: HttpConfig) -> tuple[Ask, int]:
    """llama.cpp `/infill`: (what to complete, n_predict as given)."""
    input_prefix = get_str(body, "input_prefix")
    input_suffix = get_str(body, "input_suffix")
    prompt = get_str(body, "prompt", "")
    n_predict = get_int(body, "n_predict", None)
    t_max = get_number(body, "t_max_predict_ms", None, lo=0.0)
    ask = Ask(
        prefix=input_prefix + prompt,
        suffix=input_suffix,
        context=infill_extra(body),
        max_tokens=_clamp_tokens(n_predict, config.max_tokens),
        temperature=_temperature(body),
        stops=get_stop(body),
        n_indent=get_int(body, "n_indent", 0, lo=0),
        t_max_predict_ms=t_max if t_max else None,
        seed=_seed(body),
    )
    # One answer, one object, whatever n_cmpl asks: llama.vscode (src/completion.ts
    # getComplFromContent) takes `"content" in data` as one candidate and would merge an
    # array's contents into a set, and greedy decoding (the default; llama.vscode sends no
    # temperature) gives the same text for each. Its status bar reads the object's
    # tokens_cached and timings, which an array has not.
    get_int(body, "n_cmpl", 1, lo=1)
    get_list(body, "response_fields")
    get_bool(body, "cache_prompt", True)
    return _midword_extras(body, ask), (n_predict if n_predict is not None else -1)


def _seed(body: dict) -> int | None:
    seed = get_int(body, "seed", None)
    return None if seed is None or seed < 0 else seed


def completion_ask(body: dict, config: HttpConfig) -> tuple[Ask, int]:
    """llama.cpp `/completion`: a (FIM-templated) prompt."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest(
            '"prompt" is required and must be a string'
            if prompt is None
            else '"prompt" must be a string (token arrays are not supported)'
        )
    fim = parse_fim_prompt(prompt, get_str(body, "input_suffix", None))
    n_predict = get_int(body, "n_predict", None)
    ask = Ask(
        prefix=fim.prefix,
        suffix=fim.suffix,
        context=fim.context,
        filename=fim.filename,
        max_tokens=_clamp_tokens(n_predict, config.max_tokens),
        temperature=_temperature(body),
        stops=get_stop(body),
        n_indent=get_int(body, "n_indent", 0, lo=0),
        t_max_predict_ms=get_number(body, "t_max_predict_ms", None, lo=0.0) or None,
        seed=_seed(body),
    )
    return _midword_extras(body, ask), (n_predict if n_predict is not None else -1)


def openai_ask(body: dict, config: HttpConfig) -> Ask:
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise BadRequest('"prompt" must be a string or an array of one string')
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest('"prompt" is required and must be a string' if prompt is None else '"prompt" must be a string')
    fim = parse_fim_prompt(prompt, get_str(body, "suffix", None))
    get_bool(body, "stream", False)
    get_number(body, "top_p", None)
    ask = Ask(
        prefix=fim.prefix,
        suffix=fim.suffix,
        context=fim.context,
        filename=fim.filename,
        max_tokens=_clamp_tokens(get_int(body, "max_tokens", None), config.max_tokens),
        temperature=_temperature(body),
        stops=get_stop(body),
        seed=_seed(body),
    )
    return _midword_extras(body, ask)


def tabby_ask(body: dict, config: HttpConfig) -> Ask:
    segments = get_object(body, "segments")
    if segments is None:
        raise BadRequest('"segments" must be an object with "prefix"')
    ask = Ask(
        prefix=get_str(segments, "prefix", where="segments."),
        suffix=get_str(segments, "suffix", "", where="segments."),
        language=get_str(body, "language", None),
        filename=get_str(segments, "filepath", None, where="segments."),
        context=tabby_snippets(segments),
        max_tokens=config.max_tokens,
        temperature=_temperature(body),
        seed=_seed(body),
    )
    return ask


def midword_ask(body: dict, config: HttpConfig) -> Ask:
    ask = Ask(
        prefix=get_str(body, "prefix"),
        suffix=get_str(body, "suffix", ""),
        max_tokens=_clamp_tokens(get_int(body, "max_tokens", None), config.max_tokens),
        temperature=_temperature(body),
        seed=_seed(body),
    )
    multi = get_bool(body, "multi_line", False) if "multi_line" in body else None
    ask.single_line = None if multi is None else not multi
    if "grammar" in body:
        ask.grammar = _grammar_spec(body["grammar"])
    return _midword_extras(body, ask)


def _grammar_spec(value: Any) -> GrammarSpec:
    if value is None:
        return GrammarSpec(kind="none")
    if not isinstance(value, dict) or len(value) != 1:
        raise BadRequest('"grammar" must be null or an object with one of "lark", "json_schema", "regex"')
    ((kind, source),) = value.items()
    if kind in ("lark", "regex"):
        if not isinstance(source, str):
            raise BadRequest(f'"grammar.{kind}" must be a string')
        return GrammarSpec(kind=kind, source=source)
    if kind == "json_schema":
        if isinstance(source, str):
            return GrammarSpec(kind="json_schema", source=source)
        if isinstance(source, (dict, bool)):
            import json

            return GrammarSpec(kind="json_schema", source=json.dumps(source))
        raise BadRequest('"grammar.json_schema" must be a JSON Schema (an object, a boolean, or its text)')
    raise BadRequest(f'"grammar" has an unknown kind {kind!r}: expected "lark", "json_schema" or "regex"')


# --------------------------------------------------------------------------------------
# answers per format


def llama_answer(service: HttpService, result: Result | None, n_predict: int, ask: Ask | None) -> dict[str, Any]:
    """llama.cpp's `/infill` and `/completion` answer (non-streamed, or the last event)."""
    completion = result.completion if result is not None else None
    t = completion.timings if result is not None and completion is not None and result.ran else None
    text = result.text if result is not None else ""
    predicted_n = result.tokens_predicted if result is not None else 0
    return {
        "index": 0,
        "content": text,
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": service.model_id,
        "tokens_predicted": predicted_n,
        "tokens_evaluated": result.prompt_tokens if result is not None else 0,
        "generation_settings": {
            "n_ctx": N_CTX,
            "n_predict": n_predict,
            "model": service.model_id,
            "temperature": ask.temperature if ask is not None else 0.0,
            "mode": ask.mode if ask is not None else "cpc",
        },
        "has_new_line": "\n" in text,
        "truncated": False,
        "stop_type": result.stop_type if result is not None else "limit",
        "stopping_word": result.stopping_word if result is not None else "",
        # llama.cpp's n_past: what the KV cache holds after the answer
        "tokens_cached": (result.prompt_tokens + predicted_n) if result is not None else 0,
        "timings": llama_timings(
            result.prompt_evaluated if result is not None else 0,
            t.prefill_ms if t else 0.0,
            predicted_n,
            (t.total_ms - t.prefill_ms) if t else 0.0,
        ),
    }


def openai_answer(service: HttpService, result: Result | None, cid: str, created: int) -> dict[str, Any]:
    completion_tokens = result.tokens_predicted if result is not None else 0
    prompt_tokens = result.prompt_tokens if result is not None else 0
    return {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": service.model_id,
        "choices": [
            {
                "index": 0,
                "text": result.text if result is not None else "",
                "logprobs": None,
                "finish_reason": result.finish_reason if result is not None else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def midword_answer(result: Result) -> dict[str, Any]:
    c = result.completion
    prefix = result.prefix
    if c is None:
        return {
            "text": "",
            "insert_text": "",
            "replace_start": len(prefix),
            "stop_reason": "",
            "timings": {},
            "note": "",
            "source": result.source,
        }
    t = c.timings
    return {
        "text": prefix[max(0, min(c.replace_start, len(prefix))) :] + result.text,
        "insert_text": result.text,
        "replace_start": c.replace_start,
        "stop_reason": c.stop_reason,
        "timings": {
            "total_ms": round(t.total_ms, 3),
            "prefill_ms": round(t.prefill_ms, 3),
            "decode_ms": round(t.decode_ms, 3),
            "mask_ms": round(t.mask_ms, 3),
            "cpc_ms": round(t.cpc_ms, 3),
            "forward_passes": t.forward_passes,
            "tokens_generated": t.tokens_generated,
            "tokens_forced": t.tokens_forced,
        },
        "note": c.note,
        "source": result.source,
    }


# --------------------------------------------------------------------------------------
# the app


class _CompactJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return compact_json(content).encode("utf-8")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _CompactJSON(error_body(status, message), status_code=status, headers=headers)


SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _sse(events: list[bytes]) -> Response:
    # An answer that exists before the first byte goes out (the cache's, a short one) is
    # one body: every event parses on its own, and no `: ping` comment precedes them
    # (Continue's parser stops there).
    return Response(b"".join(events), headers=SSE_HEADERS)


def stream_text(ask: Ask, prefix: str, partial: tuple[int, str]) -> str:
    """The part of a running completion's text (`partial`: replace_start, text so far)
    that no later step can take back, as the answer will give it (`HttpService._result`):
    the markers, stop strings, `n_indent` and the engine's own cuts (one line: at its end;
    several: whole lines only; the text after the cursor where it is re-typed) applied,
    and the last characters held back while they may begin a stop string."""
    rs, text = partial
    typed = prefix[rs:] if 0 <= rs <= len(prefix) else ""
    if not text.startswith(typed):
        return ""
    out = strip_markers(normalize_newlines(text[len(typed) :]))
    out, word = cut_at_stop(out, ask.stops)
    if word is None and ask.stops:
        out = out[: max(0, len(out) - max(len(s) for s in ask.stops) + 1)]
    nl = out.find("\n")
    if nl >= 0:
        out = out[: out.rfind("\n") + 1]  # a line may still be cut at its end, or dropped
    if ask.n_indent > 0:
        out = cut_at_indent(out, ask.n_indent)
    suffix_line = ask.suffix.split("\n", 1)[0].strip()
    if suffix_line:
        at = out.find(suffix_line)
        out = out[: max(0, len(out) - len(suffix_line) + 1)] if at < 0 else out[:at]
    return out


class Streamer:
    """Runs one completion for an SSE answer: `start()` waits for the first text that can
    go out (or for the whole answer, whichever comes first), then `events()` yields one
    event per new piece as the model produces it and the closing events at the end."""

    def __init__(
        self,
        service: HttpService,
        ask: Ask,
        request: Request,
        piece: Callable[[str], bytes],
        closing: Callable[[Result | None], list[bytes]],
    ):
        self.ask = ask
        self.piece = piece
        self.closing = closing
        self.queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self.task = asyncio.ensure_future(service.complete(ask, request, on_partial=self.queue.put_nowait))
        self.sent = ""
        self.first: str | None = None

    async def start(self) -> Result | None:
        """The finished answer when it came before any streamable text, else None (then
        `events()` streams it). Raises what `complete` raises before the first piece."""
        while not self.task.done():
            new = await self._next()
            if new:
                self.first = new
                return None
        return self.task.result()

    async def _next(self) -> str | None:
        """New streamable text after the next step (None when the completion ended)."""
        getter = asyncio.ensure_future(self.queue.get())
        try:
            await asyncio.wait({self.task, getter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if not getter.done() or getter.cancelled():
            return None
        partial = getter.result()
        while not self.queue.empty():  # steps that came meanwhile: only the newest counts
            partial = self.queue.get_nowait()
        safe = stream_text(self.ask, self.ask.prefix, partial)
        if len(safe) > len(self.sent) and safe.startswith(self.sent):
            new, self.sent = safe[len(self.sent) :], safe
            return new
        return ""

    async def events(self) -> AsyncIterator[bytes]:
        try:
            if self.first:
                yield self.piece(self.first)
            while not self.task.done():
                new = await self._next()
                if new:
                    yield self.piece(new)
            try:
                result: Result | None = self.task.result()
            except (Unavailable, Disconnected, BadRequest) as e:  # after the first byte: the stream just ends
                log.info("stream ended early: %s", e)
                result = None
            if result is not None:
                if result.text.startswith(self.sent):
                    rest = result.text[len(self.sent) :]
                    if rest:
                        yield self.piece(rest)
                else:  # not expected (stream_text holds back what may change); the client keeps what it has
                    log.warning("a streamed completion changed after it was sent; its end is left out")
            for event in self.closing(result):
                yield event
        finally:
            if not self.task.done():  # the client left: stop the completion
                self.task.cancel()


PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/v1/models", "/models"})


def create_app(engine_factory: EngineFactory, config: HttpConfig = HttpConfig()) -> Starlette:
    service = HttpService(engine_factory, config)

    def authorised(request: Request) -> bool:
        if not config.api_key or request.url.path in PUBLIC_PATHS:
            return True
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer":
            token = request.headers.get("x-api-key", "")
        return hmac.compare_digest(token.strip().encode(), config.api_key.encode())

    async def read_body(request: Request) -> dict[str, Any]:
        length = request.headers.get("content-length")
        limit = config.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            raise BadRequest(f"the request body is {length} bytes; the limit is {limit}", status=413)
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise BadRequest(f"the request body is over the limit of {limit} bytes", status=413)
        return parse_json_body(bytes(data))

    def endpoint(route: str, handler: Callable[[Request], Awaitable[Response]]):
        async def run(request: Request) -> Response:
            started = time.perf_counter()
            if not authorised(request):
                service.metrics.record(route, "unauthorized")
                return _error(401, "Invalid API Key", headers={"WWW-Authenticate": "Bearer"})
            try:
                response = await handler(request)
            except BadRequest as e:
                service.metrics.record(route, "too_large" if e.status == 413 else "bad_request")
                return _error(e.status, str(e))
            except Unavailable as e:
                service.metrics.record(route, "busy" if e.status == 503 else "error")
                headers = {"Retry-After": str(e.retry_after)} if e.retry_after else None
                return _error(e.status, e.message, headers=headers)
            except Disconnected:
                service.metrics.record(route, "cancelled")
                return Response(status_code=499)  # nobody reads it
            outcome = getattr(request.state, "outcome", None)
            if outcome is not None:
                service.metrics.record(route, outcome, time.perf_counter() - started)
            return response

        return run

    def timing_headers(request: Request, result: Result | None, started: float) -> dict[str, str]:
        request.state.outcome = "answered" if result is not None and result.text else "empty"
        server_ms = (time.perf_counter() - started) * 1000.0
        if result is None:
            return {"Server-Timing": f"total;dur={server_ms:.3f}"}
        phases = ""
        if result.ran and result.completion is not None:
            # where the engine's time went (the bench's per-phase breakdown): its phases, and
            # its waits for other completions running beside it
            t = result.completion.timings
            named = {"prefill": t.prefill_ms, "cpc": t.cpc_ms, "decode": t.decode_ms, "mask": t.mask_ms}
            named.update({f"wait-{k}": v for k, v in t.waits.items()})
            phases = "".join(f", {k};dur={float(v):.3f}" for k, v in named.items())
        return {
            "Server-Timing": f"queue;dur={result.queue_ms:.3f}, engine;dur={result.engine_ms:.3f}, "
            f"handoff;dur={result.handoff_ms:.3f}, total;dur={server_ms:.3f}{phases}",
            "X-Midword-Source": result.source,
        }

    # -- llama.cpp -------------------------------------------------------------------

    async def infill(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request)
        ask, n_predict = infill_ask(body, config)
        fields = body.get("response_fields")
        if n_predict == 0:  # the clients' warm-up: nothing to predict
            result = None
        else:
            result = await service.complete(ask, request)
        answer = llama_answer(service, result, n_predict, ask)
        if isinstance(fields, list) and fields:
            answer = select_fields(answer, fields)
        return _CompactJSON(answer, headers=timing_headers(request, result, started))

    async def completion(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request)
        ask, n_predict = completion_ask(body, config)
        if get_bool(body, "stream", False):
            return await completion_stream(request, ask, n_predict, started)
        result = None if n_predict == 0 else await service.complete(ask, request)
        final = llama_answer(service, result, n_predict, ask)
        headers = timing_headers(request, result, started)
        fields = body.get("response_fields")
        if isinstance(fields, list) and fields:
            final = select_fields(final, fields)
        return _CompactJSON(final, headers=headers)

    async def completion_stream(request: Request, ask: Ask, n_predict: int, started: float) -> Response:
        # llama.cpp's stream: every event has content and stop; the last has stop: true,
        # stop_type and timings; no [DONE] (Continue's LlamaCpp.ts reads until stop).
        def piece(text: str) -> bytes:
            return sse_event({"index": 0, "content": text, "tokens": [], "stop": False, "id_slot": 0})

        def closing(result: Result | None) -> list[bytes]:
            return [sse_event({**llama_answer(service, result, n_predict, ask), "content": ""})]

        if n_predict == 0:
            response = _sse(closing(None))
            response.headers.update(timing_headers(request, None, started))
            return response
        return await streamed(request, ask, started, piece, closing)

    async def streamed(
        request: Request,
        ask: Ask,
        started: float,
        piece: Callable[[str], bytes],
        closing: Callable[[Result | None], list[bytes]],
    ) -> Response:
        streamer = Streamer(service, ask, request, piece, closing)
        try:
            result = await streamer.start()
        except BaseException:
            streamer.task.cancel()
            raise
        if result is not None:  # done before any text could go out: one body
            response = _sse(([piece(result.text)] if result.text else []) + closing(result))
            response.headers.update(timing_headers(request, result, started))
            return response
        request.state.outcome = "streamed"
        return StreamingResponse(streamer.events(), headers=SSE_HEADERS)

    # -- OpenAI and Tabby --------------------------------------------------------------

    async def completions(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request)
        if "segments" in body:  # tabby-agent's own format
            result = await service.complete(tabby_ask(body, config), request)
            return _CompactJSON(
                {"id": service.next_id("cmpl"), "choices": [{"index": 0, "text": result.text}]},
                headers=timing_headers(request, result, started),
            )
        ask = openai_ask(body, config)
        cid, created = service.next_id("cmpl"), int(time.time())
        if get_bool(body, "stream", False):
            # Every chunk has a non-empty `choices`; the last JSON chunk has finish_reason,
            # then [DONE] (tabby-agent and Zed need that order).
            def piece(text: str) -> bytes:
                return sse_event(
                    {
                        "id": cid,
                        "object": "text_completion",
                        "created": created,
                        "model": service.model_id,
                        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}],
                    }
                )

            def closing(result: Result | None) -> list[bytes]:
                answer = openai_answer(service, result, cid, created)
                answer["choices"][0]["text"] = ""
                return [sse_event(answer), SSE_DONE]

            return await streamed(request, ask, started, piece, closing)
        result = await service.complete(ask, request)
        answer = openai_answer(service, result, cid, created)
        return _CompactJSON(answer, headers=timing_headers(request, result, started))

    async def midword_complete(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request)
        result = await service.complete(midword_ask(body, config), request)
        return _CompactJSON(midword_answer(result), headers=timing_headers(request, result, started))

    # -- status ------------------------------------------------------------------------

    async def health(request: Request) -> Response:
        if service.state == "ready":
            return _CompactJSON({"status": "ok"})
        if service.state == "error":
            return _error(500, f"the model could not be loaded: {service.worker.error}")
        return _error(503, "Loading model")

    async def v1_health(request: Request) -> Response:
        # One body for tabby-agent (HealthState: model, device, arch, cpu_info, cpu_count,
        # cuda_devices, version.git_describe) and for llama.cpp-style checks (status).
        status = {"ready": "ok", "error": "error"}.get(service.state, "loading")
        return _CompactJSON(
            {
                "status": status,
                "model": service.model_id,
                "chat_model": None,
                "chat_device": None,
                "device": "cpu",
                "arch": platform.machine() or "unknown",
                "cpu_info": platform.processor() or platform.machine() or "unknown",
                "cpu_count": os.cpu_count() or 1,
                "cuda_devices": [],
                "version": {"build_date": "", "build_timestamp": "", "git_sha": "", "git_describe": f"v{__version__}"},
                "webserver": False,
            }
        )

    async def events(request: Request) -> Response:
        # tabby-agent's view/select/dismiss events: accepted whatever they hold, not kept
        try:
            await read_body(request)
        except BadRequest as e:
            if e.status == 413:
                raise
        return Response(status_code=200)

    async def server_setting(request: Request) -> Response:
        return _CompactJSON({"disable_client_side_telemetry": True})

    async def models(request: Request) -> Response:
        return _CompactJSON(
            {
                "object": "list",
                "data": [
                    {"id": service.model_id, "object": "model", "created": int(service.started), "owned_by": "midword"}
                ],
            }
        )

    async def props(request: Request) -> Response:
        return _CompactJSON(
            {
                "default_generation_settings": {
                    "n_ctx": N_CTX,
                    "n_predict": config.max_tokens,
                    "model": service.model_id,
                    "params": {"n_predict": config.max_tokens, "temperature": 0.0},
                },
                "total_slots": 1,
                "model_path": config.model,
                "chat_template": "",
                "build_info": f"midword {__version__}",
                "modalities": {"vision": False, "audio": False},
            }
        )

    async def metrics(request: Request) -> Response:
        return Response(_prometheus(service), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document())

    routes = [
        Route("/infill", endpoint("infill", infill), methods=["POST"]),
        Route("/completion", endpoint("completion", completion), methods=["POST"]),
        Route("/v1/completions", endpoint("completions", completions), methods=["POST"]),
        Route("/completions", endpoint("completions", completions), methods=["POST"]),
        Route("/beta/completions", endpoint("completions", completions), methods=["POST"]),
        Route("/v1/midword/complete", endpoint("midword", midword_complete), methods=["POST"]),
        Route("/health", endpoint("health", health), methods=["GET"]),
        Route("/v1/health", endpoint("health", v1_health), methods=["GET", "POST"]),
        Route("/v1/events", endpoint("events", events), methods=["POST"]),
        Route("/v1beta/server_setting", endpoint("status", server_setting), methods=["GET"]),
        Route("/v1/models", endpoint("models", models), methods=["GET"]),
        Route("/models", endpoint("models", models), methods=["GET"]),
        Route("/props", endpoint("status", props), methods=["GET"]),
        Route("/metrics", endpoint("metrics", metrics), methods=["GET"]),
        Route("/openapi.json", endpoint("status", openapi), methods=["GET"]),
    ]

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        yield
        service.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = service
    return app


def _prometheus(service: HttpService) -> str:
    m = service.metrics
    w = service.worker
    lines = [
        "# HELP midword_http_requests_total HTTP requests by route and outcome.",
        "# TYPE midword_http_requests_total counter",
    ]
    for (route, outcome), n in sorted(m.requests.items()):
        lines.append(f'midword_http_requests_total{{route="{route}",outcome="{outcome}"}} {n}')
    lines += [
        "# HELP midword_http_cancellations_total Requests whose client left before the answer.",
        "# TYPE midword_http_cancellations_total counter",
        f"midword_http_cancellations_total {m.cancellations}",
        "# HELP midword_http_request_duration_seconds Time to answer a completion request.",
        "# TYPE midword_http_request_duration_seconds histogram",
    ]
    cumulative = 0
    for bound, n in zip(LATENCY_BUCKETS_S, m.buckets, strict=False):
        cumulative += n
        lines.append(f'midword_http_request_duration_seconds_bucket{{le="{bound}"}} {cumulative}')
    cumulative += m.buckets[-1]
    lines += [
        f'midword_http_request_duration_seconds_bucket{{le="+Inf"}} {cumulative}',
        f"midword_http_request_duration_seconds_sum {m.latency_sum:.6f}",
        f"midword_http_request_duration_seconds_count {m.latency_count}",
        "# HELP midword_tokens_generated_total Tokens the model generated.",
        "# TYPE midword_tokens_generated_total counter",
        f"midword_tokens_generated_total {w.tokens_generated}",
        "# HELP midword_tokens_forced_total Tokens the grammar forced without a model call.",
        "# TYPE midword_tokens_forced_total counter",
        f"midword_tokens_forced_total {w.tokens_forced}",
        "# HELP midword_engine_runs_total Completions the engine ran (stopped_runs: ended early).",
        "# TYPE midword_engine_runs_total counter",
        f"midword_engine_runs_total {w.runs}",
        f"midword_engine_stopped_runs_total {w.stopped_runs}",
        *_slot_metrics(w.engine),
        "# HELP midword_http_superseded_total Requests (queued or running) a newer one for their document replaced.",
        "# TYPE midword_http_superseded_total counter",
        f"midword_http_superseded_total {service.superseded}",
        "# HELP midword_http_queue_waiting Requests waiting for the model thread.",
        "# TYPE midword_http_queue_waiting gauge",
        f"midword_http_queue_waiting {service.waiting}",
        "# HELP process_resident_memory_bytes Resident memory of the server process.",
        "# TYPE process_resident_memory_bytes gauge",
        f"process_resident_memory_bytes {_rss_bytes()}",
        "# HELP midword_model_state 1 for the model's current state.",
        "# TYPE midword_model_state gauge",
    ]
    for state in ("loading", "ready", "error"):
        lines.append(f'midword_model_state{{state="{state}"}} {1 if service.state == state else 0}')
    return "\n".join(lines) + "\n"


def _slot_metrics(engine) -> list[str]:
    """The KV cache slots' statistics (completion/kv_slots.py), for an engine that has them."""
    held = getattr(engine, "slot_stats", None)
    if held is None:
        return []
    count, stats = held
    return [
        "# HELP midword_kv_slots KV cache slots held (one per document completed in turn).",
        "# TYPE midword_kv_slots gauge",
        f"midword_kv_slots {count}",
        "# HELP midword_kv_slot_switches_total Requests that brought back a parked slot.",
        "# TYPE midword_kv_slot_switches_total counter",
        f"midword_kv_slot_switches_total {stats.switches}",
        f"midword_kv_slot_created_total {stats.created}",
        f"midword_kv_slot_evicted_total {stats.evicted}",
        "# HELP midword_kv_slot_parked_bytes Memory of the parked slots.",
        "# TYPE midword_kv_slot_parked_bytes gauge",
        f"midword_kv_slot_parked_bytes {stats.parked_bytes}",
    ]


def _rss_bytes() -> int:
    """This process's resident memory (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def openapi_document() -> dict[str, Any]:
    """A description of every route (request fields as the clients send them)."""

    def obj(props: dict[str, str], required: tuple[str, ...] = ()) -> dict[str, Any]:
        types = {"s": "string", "i": "integer", "n": "number", "b": "boolean", "a": "array", "o": "object"}
        schema: dict[str, Any] = {
            "type": "object",
            "additionalProperties": True,
            "properties": {k: {"type": types[v]} for k, v in props.items()},
        }
        if required:
            schema["required"] = list(required)
        return schema

    def post(summary: str, schema: dict[str, Any], answer: str = "application/json") -> dict[str, Any]:
        return {
            "post": {
                "summary": summary,
                "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
                "responses": {
                    "200": {"description": "the completion", "content": {answer: {}}},
                    "400": {"description": "malformed request (the message names the field)"},
                    "401": {"description": "missing or wrong API key"},
                    "413": {"description": "request body too large"},
                    "503": {"description": "model loading or queue full (Retry-After)"},
                },
            }
        }

    def get(summary: str) -> dict[str, Any]:
        return {"get": {"summary": summary, "responses": {"200": {"description": "OK"}}}}

    infill = obj(
        {
            "input_prefix": "s",
            "input_suffix": "s",
            "prompt": "s",
            "input_extra": "a",
            "n_predict": "i",
            "n_indent": "i",
            "t_max_predict_ms": "n",
            "stop": "a",
            "n_cmpl": "i",
            "response_fields": "a",
            "temperature": "n",
            "cache_prompt": "b",
            "samplers": "a",
            "id_slot": "i",
            "language": "s",
            "filename": "s",
        },
        ("input_prefix", "input_suffix"),
    )
    completion = obj({"prompt": "s", "n_predict": "i", "stream": "b", "stop": "a", "temperature": "n"}, ("prompt",))
    completions = {
        "oneOf": [
            obj(
                {
                    "prompt": "s",
                    "suffix": "s",
                    "max_tokens": "i",
                    "temperature": "n",
                    "top_p": "n",
                    "stop": "a",
                    "stream": "b",
                    "model": "s",
                },
                ("prompt",),
            ),
            obj({"language": "s", "segments": "o", "temperature": "n", "seed": "i"}, ("segments",)),
        ]
    }
    midword = obj(
        {
            "prefix": "s",
            "suffix": "s",
            "language": "s",
            "filename": "s",
            "mode": "s",
            "max_tokens": "i",
            "multi_line": "b",
            "grammar": "o",
            "temperature": "n",
        },
        ("prefix",),
    )
    paths = {
        "/infill": post("llama.cpp fill-in-the-middle (llama.vscode, llama.vim)", infill),
        "/completion": post("llama.cpp completion of a (FIM-templated) prompt; stream: SSE without [DONE]", completion),
        "/v1/completions": post(
            "OpenAI completions (FIM templates parsed back) or Tabby (segments); stream: SSE ending with data: [DONE]",
            completions,
        ),
        "/completions": post("alias of /v1/completions", completions),
        "/beta/completions": post("alias of /v1/completions", completions),
        "/v1/midword/complete": post("midword's own completion: prefix, suffix, grammar", midword),
        "/health": get("{status: ok}, 503 while the model loads"),
        "/v1/health": {
            **get("server state for tabby-agent and llama.cpp clients"),
            "post": {"summary": "same as GET", "responses": {"200": {"description": "OK"}}},
        },
        "/v1/events": post("tabby-agent events (accepted, not kept)", obj({"type": "s", "completion_id": "s"})),
        "/v1/models": get("the model, as an OpenAI model list"),
        "/props": get("llama.cpp server properties"),
        "/metrics": get("Prometheus metrics"),
        "/openapi.json": get("this document"),
    }
    return {"openapi": "3.1.0", "info": {"title": "midword completion API", "version": __version__}, "paths": paths}


# --------------------------------------------------------------------------------------
# running it


def default_engine_factory(**settings):
    from midword.completion.engine import CompletionEngine  # heavy: imported on the model thread

    return CompletionEngine(**settings)


def parse_hostport(value: str | None) -> tuple[str, int]:
    """`[HOST:]PORT` (also `HOST:` or nothing) with the defaults 127.0.0.1 and 8012."""
    if not value:
        return DEFAULT_HOST, DEFAULT_PORT
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or DEFAULT_HOST
    if port == "":
        return host, DEFAULT_PORT
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--http must look like [HOST:]PORT (e.g. 127.0.0.1:8012), got {value!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The warning a bind reachable from other machines without an API key deserves."""
    if api_key or is_loopback(host):
        return None
    return (
        f"midword serve: WARNING: listening on {host or 'all interfaces'}, reachable from other machines, "
        "without an API key: anyone who can reach it can use the model. Set --api-key or MIDWORD_API_KEY."
    )


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound and listening. It is made as a TCP socket by name, so
    that asyncio turns Nagle's algorithm off on each connection it accepts (asyncio checks
    the protocol number, which a plain stream socket leaves 0): uvicorn writes an answer's
    head and body apart, and the body would otherwise wait for the client's delayed
    acknowledgement of the head, tens of milliseconds on many answers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def serve_http(engine_factory: EngineFactory, host: str, port: int, config: HttpConfig) -> int:
    """Runs the HTTP API until interrupted. Prints the address it listens on (the real
    port when `port` is 0) to stderr once it accepts connections."""
    import uvicorn

    warning = exposure_warning(host, config.api_key)
    if warning:
        print(warning, file=sys.stderr)
    try:
        sock = listening_socket(host, port)
    except OSError as e:
        print(f"midword serve: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
        return 2
    app = create_app(engine_factory, config)
    bound = sock.getsockname()[1]

    class _Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            print(f"midword: HTTP API on http://{host}:{bound} (model {config.model})", file=sys.stderr, flush=True)

    # Keep-alive outlives the clients' own (Node's agents keep idle sockets 5 s): a server that
    # closes first races a client reusing the socket, which then sees a reset.
    server = _Server(
        uvicorn.Config(
            app,
            http="h11",
            lifespan="on",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=2,
        )
    )
    server.run(sockets=[sock])
    return 0
