"""The midword language server: LSP requests in, `CompletionRequest`s to the engine,
`Completion`s back out as edits.

Handlers are thin adapters: they decode the typed params, call one method of
`MidwordServer` (which works on plain `CompletionRequest`/`Completion` values and the
documents in pygls's workspace) and encode the answer. What the server adds around
the engine:

- *Never block, never hang.* All model work runs on one worker thread
  (`server.worker`); handlers await it. A request that arrives while the engine loads
  (with `$/progress` and `midword/status` notifications) waits for it, up to
  `LOAD_HOLD_S`; when loading has failed, requests get an empty answer at once; a
  failure is logged (`window/logMessage`), never fatal.
- *Newest wins.* An edit cancels work on the document's older versions and a new
  request supersedes the one waiting; `$/cancelRequest` answers RequestCancelled, a
  request whose document changed meanwhile answers ContentModified, and one that was
  superseded at the same version gets an empty, incomplete list (so the editor asks
  again).
- *Type-through and prefetch* (`server.cache`): a completion stays valid while the user
  types its characters, and is served from memory; when the user pauses, the server
  completes at the end of the shown completion so that accepting it finds the next
  one ready.
- *Start at the keystroke, answer with the first words* (the time from a keystroke to
  a shown completion is what the user feels): once the editor has asked for
  completions in a document, an edit the cache cannot serve starts the model at once,
  and the request that follows the editor's debounce joins that job. A request whose
  model work has run `firstAnswerMs` is answered with the whole words decoded so far;
  the job goes on, and the next keystroke that types them is served its full answer
  from the cache (or from the job still running).

`midword/status` carries `{state: "loading"|"ready"|"error"|"busy", message,
lastLatencyMs}` for status bars, and `grammar: {uri, note}` when how much of a document
the grammar constrains changes; `midword/stats` (a request) returns counters for
tests and benchmarks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, NamedTuple
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from midword import __version__
from midword.completion.types import Completion, CompletionRequest, ContextChunk, GrammarSpec

from .cache import CompletionCache, answer_may_serve, first_words, request_key
from .documents import Document, DocumentWorkspace
from .editing import first_line, fit_to_line, wants_multiline
from .grammar_choice import Choice, GrammarResolver, document_language, fallback_grammar, is_json_document, uri_to_path
from .positions import choose_encoding
from .settings import SECTION, Settings, parse_settings, section_of
from .worker import EngineFactory, Event, Job, ModelWorker, Outcome
from .workspace_context import WorkspaceContext

log = logging.getLogger(__name__)


class _QuietProtocolErrors(logging.Filter):
    """pygls logs a traceback for every error response; ContentModified is routine
    here (every keystroke during a completion makes one), so it is not logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, JsonRpcContentModified)


logging.getLogger("pygls.protocol.json_rpc").addFilter(_QuietProtocolErrors())

STATUS = "midword/status"
STATS = "midword/stats"

# Trigger characters advertised for every document; each language answers only its own.
TRIGGERS_JSON = ('"', ":")
TRIGGERS_CODE = (".",)
ALL_TRIGGERS = [".", '"', ":"]
MAX_LABEL = 80
# A prefetch that finds the model thread busy tries again after at least this long.
PREFETCH_RETRY_S = 0.05
# Choosing a grammar may read a file (a `$schema`): past this the default grammar is used.
GRAMMAR_CHOICE_TIMEOUT_S = 2.0
# How long a completion waits for its document's grammar to compile (off the model
# thread) before it runs unconstrained and says so: a keystroke is worth more than the
# grammar, and the next one finds it compiled.
GRAMMAR_WAIT_S = 0.3
# A request's deadline beyond its time budget: prefilling a long new prompt on a CPU.
REQUEST_DEADLINE_SLACK_S = 60.0
# How long a completion request that arrives while the model loads waits for it. Editors
# do not ask again for a position they got an empty answer for, so answering at once
# would lose the completion the user is waiting for; the bound keeps a load that hangs
# from holding requests for ever.
LOAD_HOLD_S = 300.0


class Answer(NamedTuple):
    completion: Completion | None
    source: str  # "model", "cache", "prefetch", or why there is none: "not_ready", "error", "superseded", ...
    # Where the server's time went (ms): request (building it), queue (waiting for the model
    # thread), prefill, cpc, decode, mask, server (all of it); sent in the item's `data`.
    ms: dict[str, float] | None = None
    partial: bool = False  # the first words of an answer the model is still decoding


@dataclass
class Stats:
    requests: int = 0
    answered: int = 0
    empty: int = 0
    cache_hits: int = 0
    prefetch_hits: int = 0
    model_completions: int = 0  # answers the model produced for requests (not from cache)
    joined: int = 0  # requests that waited for a running job started by an earlier keystroke
    keystroke_starts: int = 0  # jobs an edit started before the editor asked
    first_answers: int = 0  # answers with the first words of a job still decoding
    prefetches: int = 0
    cancelled: int = 0
    superseded: int = 0
    content_modified: int = 0
    not_ready: int = 0
    errors: int = 0


def _accept_vscode_trigger_kind(params) -> None:
    """vscode-languageclient 9.0.1 (lib/common/codeConverter.js, asInlineCompletionParams)
    sends VS Code's own InlineCompletionTriggerKind, whose Invoke is 0, where LSP numbers
    Invoked 1: read as LSP's, every suggestion the user asks for (Alt+\\, or the
    extension's own trigger) would be refused as invalid. The server answers both kinds
    alike, so 0 is taken as Invoked; anything else is validated as sent."""
    context = params.get("context") if isinstance(params, dict) else None
    if isinstance(context, dict) and context.get("triggerKind") == 0 and type(context["triggerKind"]) is int:
        context["triggerKind"] = int(types.InlineCompletionTriggerKind.Invoked)


class MidwordProtocol(LanguageServerProtocol):
    """pygls's protocol with midword's position-encoding choice and documents."""

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        general = params.capabilities.general
        offered = general.position_encodings if general is not None else None
        if general is not None and offered:
            # pygls takes the client's first supported offer; leave it only ours.
            general.position_encodings = [choose_encoding(offered)]
        result = yield from super().lsp_initialize(params)
        workspace = self.workspace
        self._workspace = DocumentWorkspace(
            workspace.root_uri,
            types.TextDocumentSyncKind.Incremental,
            params.workspace_folders or [],
            workspace.position_encoding,
        )
        return result

    def structure_message(self, data):
        if data.get("method") == types.TEXT_DOCUMENT_INLINE_COMPLETION:
            _accept_vscode_trigger_kind(data.get("params"))
        return super().structure_message(data)

    def handle_message(self, message):
        super().handle_message(message)
        # pygls files every notification's future under a fresh id that nothing removes
        # (only requests' futures are popped when answered): a long session of edits
        # would keep one per keystroke forever. Finished ones are dropped in batches.
        futures = self._request_futures
        if len(futures) > 256:
            for key in [k for k, f in futures.items() if f.done()]:
                del futures[key]

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args):
        """Ends the session (`server.transport` reads `exit_code`): 0 after shutdown, else 1."""
        self.exit_code = 0 if self._shutdown else 1
        yield from ()


class MidwordServer(LanguageServer):
    def __init__(self, engine_factory: EngineFactory, *, default_model: str | None = None):
        super().__init__(
            "midword",
            __version__,
            protocol_cls=MidwordProtocol,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.engine_factory = engine_factory
        # What a setting the client leaves unset (null) means: the command line's choice.
        self.defaults = Settings() if default_model is None else Settings(model=default_model)
        self.settings = self.defaults
        self.cache = CompletionCache()
        self.grammars = GrammarResolver()
        self.stats = Stats()
        self.worker: ModelWorker | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.status_state = "loading"
        self.status_message = "starting"
        self.last_latency_ms: float | None = None
        self._pending_problems: list[str] = []
        self._logged_notes: set[tuple[str, str]] = set()
        self._grammar_notes: dict[str, str] = {}  # uri -> the engine's last note on its grammar
        self._prefetch_timer: asyncio.TimerHandle | None = None
        self._progress_queue: asyncio.Queue | None = None
        self._progress_ids = itertools.count(1)
        self._config_from_client = False
        self._progress_task: asyncio.Task | None = None
        # grammars whose compilation or use failed -> the message shown; they fall back
        self._broken_grammars: dict[GrammarSpec, str] = {}
        self.context = WorkspaceContext()  # open documents and recent edits for the prompt
        # uri -> the request kind ("completion" or "inline") the editor last sent for it: an
        # edit starts the model only in documents the editor asks completions for.
        # (All four keyed by the unquoted URI, as pygls keys its documents.)
        self._asked: dict[str, str] = {}
        self._keystroke_tasks: dict[str, asyncio.Task] = {}  # uri -> the edit's job being started
        self._keystroke_jobs: dict[str, Job] = {}  # uri -> the job its last edit started
        self._edited_at: dict[str, tuple[int | None, float]] = {}  # uri -> (version, when its last edit came)

    # -- documents -------------------------------------------------------------------------

    def document(self, uri: str) -> Document | None:
        """The open document `uri` (pygls keys documents by unquoted URI), or None."""
        doc = self.workspace.text_documents.get(unquote(uri))
        return doc if isinstance(doc, Document) else None

    # -- messages --------------------------------------------------------------------------

    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        (log.error if kind == types.MessageType.Error else log.info)("%s", message)
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=message))
        except Exception:  # no transport yet (unit use): the Python log has it
            log.debug("could not send logMessage", exc_info=True)

    def show(self, message: str, kind: types.MessageType = types.MessageType.Warning) -> None:
        self.log(message, kind)
        try:
            self.window_show_message(types.ShowMessageParams(type=kind, message=message))
        except Exception:
            log.debug("could not send showMessage", exc_info=True)

    def log_once(self, key: str, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        if (key, message) not in self._logged_notes:
            if len(self._logged_notes) > 10_000:  # a long session: forget, at worst log again
                self._logged_notes.clear()
            self._logged_notes.add((key, message))
            self.log(message, kind)

    def set_status(self, state: str, message: str = "", grammar: dict | None = None) -> None:
        self.status_state, self.status_message = state, message
        payload: dict[str, object] = {"state": state, "message": message, "lastLatencyMs": self.last_latency_ms}
        if grammar is not None:
            payload["grammar"] = grammar
        try:
            self.protocol.notify(STATUS, payload)
        except Exception:
            log.debug("could not send %s", STATUS, exc_info=True)

    # -- lifecycle -------------------------------------------------------------------------

    def on_initialize(self, params: types.InitializeParams) -> None:
        raw = params.initialization_options
        self._config_from_client = raw is not None
        self.settings, self._pending_problems = parse_settings(raw, self.settings, self.defaults)

    async def on_initialized(self) -> None:
        if self.worker is not None:  # a second `initialized`: the session has its model already
            self.log("midword: ignored a second `initialized` notification", types.MessageType.Warning)
            return
        self.loop = asyncio.get_running_loop()
        self._progress_queue = asyncio.Queue()
        self._progress_task = asyncio.ensure_future(self._progress_pump())
        self.worker = ModelWorker(self.engine_factory, self._from_worker, keep_alive=self._still_useful)
        for problem in self._pending_problems:
            self.show(problem)
        self._pending_problems = []
        if not self._config_from_client and self._client_pulls_configuration():
            await self.pull_configuration(restart=False)
        self._start_engine()

    def _start_engine(self) -> None:
        if not self.settings.enable:
            self.set_status("ready", "completions disabled (midword.enable is false)")
            return
        self.set_status("loading", f"loading {self.settings.model}")
        assert self.worker is not None  # made at `initialized`, before any engine starts
        self.worker.load(self.settings.model)

    def on_shutdown(self) -> None:
        self._cancel_prefetch()
        if self.worker is not None:
            self.worker.close()

    def end_session(self) -> None:
        """The client is gone (exit, or its connection closed): stop everything the
        session started, so a server that goes on listening holds none of it."""
        self.on_shutdown()
        self.worker = None
        if self._progress_task is not None:
            self._progress_task.cancel()
            self._progress_task = None
        self.cache.forget()
        if self._thread_pool is not None:
            self._thread_pool.shutdown(wait=False)

    # -- settings --------------------------------------------------------------------------

    def _client_pulls_configuration(self) -> bool:
        caps = getattr(self.protocol, "client_capabilities", None)
        return bool(caps and caps.workspace and caps.workspace.configuration)

    async def pull_configuration(self, *, restart: bool = True) -> None:
        """Ask the client for the `midword` section (clients that push nothing)."""
        try:
            values = await self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
            )
        except Exception as e:  # a client that cannot answer keeps the current settings
            self.log(f"workspace/configuration failed: {e}", types.MessageType.Warning)
            return
        if values and values[0] is not None:
            self.apply_settings(values[0], restart=restart)

    def apply_settings(self, raw: Any, *, restart: bool = True) -> None:
        """Apply a client's settings. An empty object says nothing (clients send `{}` when
        they have no section for us) and keeps the current settings."""
        if section_of(raw) in (None, {}):
            return
        old = self.settings
        new, problems = parse_settings(raw, old, self.defaults)
        for problem in problems:
            self.show(problem)
        if new == old:
            return
        self.settings = new
        self.cache.forget()
        self._cancel_prefetch()
        if not restart or self.worker is None:
            return
        if not new.enable:
            self.worker.cancel_all()
            self.set_status("ready", "completions disabled (midword.enable is false)")
        elif new.model != old.model or not old.enable or self.worker.state == "error":
            self._start_engine()

    async def on_did_change_configuration(self, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if section_of(settings) in (None, {}) and self._client_pulls_configuration():
            await self.pull_configuration()
            return
        self.apply_settings(settings)

    # -- the worker's events (arrive on the model thread) ----------------------------------

    def _from_worker(self, event: Event) -> None:
        self._call_soon(self._on_worker_event, event)

    def _call_soon(self, callback, *args) -> None:
        """Run `callback` on the event loop (from any thread); dropped once it has closed."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed between the check and the call (shutdown)
            pass

    def _on_worker_event(self, event: Event) -> None:
        if event.kind in ("loading", "progress", "ready", "error") and self._progress_queue is not None:
            self._progress_queue.put_nowait(event)
        if event.kind == "loading":
            self.set_status("loading", event.message)
        elif event.kind == "ready":
            self.log(f"midword: {event.message} (loaded in {event.data.get('load_s', 0):.1f} s)")
            self.set_status("ready", event.message)
        elif event.kind == "error":
            self.show(event.message, types.MessageType.Error)
            self.set_status("error", event.message)
        elif event.kind == "busy" and self.status_state in ("ready", "busy"):
            self.set_status("busy", "prefetching" if event.data.get("prefetch") else "completing")
        elif event.kind == "idle" and self.status_state == "busy":
            self.set_status("ready", "ready")

    def _client_has_progress(self) -> bool:
        caps = getattr(self.protocol, "client_capabilities", None)
        return bool(caps and caps.window and caps.window.work_done_progress)

    async def _progress_pump(self) -> None:
        """Turns load events into one `$/progress` sequence per load, in order. Reports
        that would repeat the shown percentage and message are dropped (an engine may
        report thousands of steps)."""
        token = None
        shown = None
        queue = self._progress_queue
        assert queue is not None  # made before the pump starts
        while True:
            event = await queue.get()
            try:
                if event.kind == "loading":
                    if token is not None:
                        self.work_done_progress.end(token, types.WorkDoneProgressEnd(message="restarted"))
                        token = None
                    if not self._client_has_progress():
                        continue
                    candidate = f"midword/load/{next(self._progress_ids)}"
                    # a client that never answers must not hold up the reports that follow
                    await asyncio.wait_for(self.work_done_progress.create_async(candidate), 10)
                    token = candidate
                    self.work_done_progress.begin(
                        token,
                        types.WorkDoneProgressBegin(
                            title="midword", message=event.message, percentage=0, cancellable=False
                        ),
                    )
                elif token is None:
                    continue
                elif event.kind == "progress":
                    pct = None if event.fraction is None else int(round(event.fraction * 100))
                    if (event.message, pct) == shown:
                        continue
                    shown = (event.message, pct)
                    self.work_done_progress.report(
                        token, types.WorkDoneProgressReport(message=event.message, percentage=pct)
                    )
                else:  # ready / error
                    self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=event.message))
                    token = None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a client that refuses progress still gets completions
                self.log(f"progress reporting failed: {e}", types.MessageType.Warning)
                token = None

    # -- completing --------------------------------------------------------------------------

    def workspace_roots(self) -> list[str]:
        """The workspace folders' paths (where grammar and schema files may be read)."""
        roots = [uri_to_path(uri) for uri in self.workspace.folders]
        return [r for r in roots if r]

    async def choose_grammar(self, doc: Document, path: str | None) -> Choice:
        """The document's grammar, chosen on a thread (it may read a file) within
        GRAMMAR_CHOICE_TIMEOUT_S; past that, or on any failure, the fallback grammar."""
        choose = functools.partial(
            self.grammars.choose,
            path=path,
            language_id=doc.language_id,
            text=doc.source,
            settings=self.settings,
            root=self.workspace.root_path,
            roots=self.workspace_roots(),
        )
        try:
            return await asyncio.wait_for(
                asyncio.get_running_loop().run_in_executor(None, choose), GRAMMAR_CHOICE_TIMEOUT_S
            )
        except asyncio.TimeoutError:
            note = f"choosing the grammar took over {GRAMMAR_CHOICE_TIMEOUT_S:g} s (a slow grammar file?)"
        except Exception as e:  # noqa: BLE001 - a bad grammar file never takes completions down
            note = f"choosing the grammar failed: {type(e).__name__}: {e}"
        return Choice(fallback_grammar(doc.language_id, path), "fallback", f"{note}; using the default grammar")

    async def build_request(self, doc: Document, offset: int, *, single_line: bool) -> CompletionRequest:
        text = doc.source  # as it is now: the request's version is checked after the model ran
        path = uri_to_path(doc.uri)
        choice = await self.choose_grammar(doc, path)
        broken = self._broken_grammars.get(choice.spec)
        if broken is not None:
            choice = Choice(fallback_grammar(doc.language_id, path), "fallback", broken)
        if choice.note:
            self.log_once(doc.uri, f"{doc.uri}: {choice.note}", types.MessageType.Warning)
        s = self.settings
        return CompletionRequest(
            prefix=text[:offset],
            suffix=text[offset:],
            language=document_language(doc.language_id, path),
            grammar=choice.spec,
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            mode=s.mode,
            single_line=single_line,
            time_budget_s=s.time_budget_ms / 1000.0,
            document=doc.uri,
            grammar_wait_s=GRAMMAR_WAIT_S,
            **self._context_fields(doc, single_line),
        )

    def _context_fields(self, doc: Document, single_line: bool) -> dict:
        """Workspace context and the line mode of a request (completion/context.py)."""
        root = self.workspace.root_path
        chunks: tuple[ContextChunk, ...] = ()
        if self.settings.context_tokens > 0:
            chunks = self.context.chunks(
                ((u, d.source) for u, d in self.workspace.text_documents.items()), unquote(doc.uri), root
            )
        return dict(
            context=chunks,
            context_tokens=self.settings.context_tokens,
            path=self.context.path_of(doc.uri, root),
            multiline="never" if single_line else "always",
        )

    async def complete(self, doc: Document, offset: int, *, single_line: bool, kind: str = "completion") -> Answer:
        """A completion at `offset` of `doc` (or none) and where it came from. Raises
        ContentModified when the document changed while the model worked."""
        await self._until_loaded(doc)
        started = time.perf_counter()
        self.stats.requests += 1
        self._cancel_prefetch()
        if not self.settings.enable or self.worker is None or not self.worker.ready:
            self.stats.not_ready += 1
            return Answer(None, "not_ready")
        self._note_asked(unquote(doc.uri), kind)
        version = doc.version
        starting = self._keystroke_tasks.get(unquote(doc.uri))
        if starting is not None and not starting.done():
            await asyncio.wait({starting})  # its job is submitted then, and this request joins it
        request = await self.build_request(doc, offset, single_line=single_line)
        built = time.perf_counter()
        self._check_version(doc.uri, version)
        hit = self.cache.get(doc.uri, request)
        if hit is not None:
            completion, entry = hit
            # the model's answer for this very keystroke, which the edit started: not a cache hit
            own = entry.origin == "keystroke" and entry.anchor_len == len(request.prefix)
            if own:
                self.stats.model_completions += 1
            else:
                self.stats.cache_hits += 1
            if entry.origin == "prefetch":
                self.stats.prefetch_hits += 1
            self._latency(started)
            if self.settings.prefetch:  # typing through it: the end of it is where the user goes next
                self._schedule_prefetch(doc.uri, doc.version, replace(request, prefix=entry.target, single_line=False))
            return Answer(
                fit_to_line(completion, request.prefix, single_line=request.single_line),
                "model" if own else "prefetch" if entry.origin == "prefetch" else "cache",
                _spent(started, built),
            )

        edit_job = self._keystroke_jobs.get(unquote(doc.uri))
        if (
            edit_job is not None
            and edit_job.future.done()
            and edit_job.version == version
            and edit_job.request == request
            and edit_job.future.result().status == "done"
        ):
            running = None  # the edit's job answered this very request already (with nothing to cache)
        else:
            edit_job = None
            running = self.worker.join(doc.uri, self._serves(request))
        if running is not None:
            # The user typed on while the model worked, and typed what it predicts (or the
            # edit itself started the job): its answer covers this request.
            got = await self._first(running, request, self._since(unquote(doc.uri), version, started))
            if isinstance(got, Completion):
                self._check_version(doc.uri, version)
                return self._first_answer(doc, version, running, request, got, started, built)
            self._store(running)
            hit = self.cache.get(doc.uri, request)
            if hit is not None:
                self._check_version(doc.uri, version)
                self.stats.joined += 1
                self._latency(started)
                completion, entry = hit
                if self.settings.prefetch:
                    self._schedule_prefetch(doc.uri, version, replace(request, prefix=entry.target, single_line=False))
                return Answer(
                    fit_to_line(completion, request.prefix, single_line=request.single_line),
                    "model",
                    _spent(started, built, running, got.completion),
                )
            if running.request == request and got.status == "done":
                # The job (the edit's, most often) answered this very request, with
                # nothing to cache: asking the model again would give the same.
                edit_job = running
        if edit_job is not None:
            job = edit_job
        else:
            job = self.worker.submit(doc.uri, version, request)
            # Runs on if the user types what it predicts, after this request is gone.
            job.future.add_done_callback(lambda future: self._call_soon(self._store, job))
        got = await self._first(job, request, self._since(unquote(doc.uri), version, started))
        if isinstance(got, Completion):
            self._check_version(doc.uri, version)
            return self._first_answer(doc, version, job, request, got, started, built)
        outcome = got
        if outcome.completion is not None and outcome.status == "done":
            self.stats.model_completions += 1
            # still right for the prefix it answered, which the user may type next
            target = self.cache.put(doc.uri, request, outcome.completion)
        else:
            target = None
        self._check_version(doc.uri, version)
        if outcome.status == "error":
            self.stats.errors += 1
            self.log(f"completion failed in {doc.uri}: {outcome.error}", types.MessageType.Error)
            if self._grammar_failed(doc, request, outcome.error):
                return await self.complete(doc, offset, single_line=single_line, kind=kind)
            return Answer(None, "error")
        if outcome.status != "done" or outcome.completion is None:
            self.stats.superseded += outcome.status == "superseded"
            self.stats.not_ready += outcome.status == "not_ready"
            return Answer(None, outcome.status)
        self._latency(started)
        note = getattr(outcome.completion, "note", "")
        if note:  # e.g. the engine could not use the grammar; once per document and note
            self.log_once(doc.uri, f"{doc.uri}: {note}", types.MessageType.Warning)
        self._report_grammar(doc.uri, note)
        if target is not None and self.settings.prefetch:
            self._schedule_prefetch(doc.uri, version, replace(request, prefix=target, single_line=False))
        return Answer(
            fit_to_line(outcome.completion, request.prefix, single_line=request.single_line),
            "model",
            _spent(started, built, job, outcome.completion),
        )

    def _since(self, uri: str, version: int | None, started: float) -> float:
        """When the user made the document as it is for this request: its last edit
        (the keystroke), or the request's arrival when the edit is not known."""
        edited = self._edited_at.get(uri)
        return min(started, edited[1]) if edited is not None and edited[0] == version else started

    def _serves(self, request: CompletionRequest):
        """Whether a running job's answer will cover `request` (for `ModelWorker.join`)."""
        key = request_key(request)
        return lambda job: (
            not job.prefetch
            and request_key(job.request) == key
            and (request.single_line or not job.request.single_line)
            and answer_may_serve(job.request, job.partial, request.prefix, request.suffix)
        )

    async def _first(self, job, request: CompletionRequest, started: float) -> Outcome | Completion:
        """The job's outcome, or, when the job has not finished `first_answer_ms` after
        `started` (the keystroke), its whole words so far that extend `request` (a Completion) as soon as
        there are some. Whichever comes first on the model thread wins (not whichever the
        event loop sees first), so the answer does not depend on the loop's load."""
        delay = self.settings.first_answer_ms / 1000.0
        early: concurrent.futures.Future = concurrent.futures.Future()

        def check(_job=None) -> None:  # on the model thread after each step, or the loop's timer
            if early.done() or job.future.done() or time.perf_counter() - started < delay:
                return
            completion = first_words(job.request, job.partial, request)
            if completion is not None:
                try:
                    early.set_result(completion)
                except concurrent.futures.InvalidStateError:  # the other caller was first
                    pass

        job.listeners.append(check)
        assert self.loop is not None  # set at `initialized`, before any request
        timer = self.loop.call_later(max(0.0, delay - (time.perf_counter() - started)), check)
        wrapped = asyncio.wrap_future(early)
        outcome = asyncio.ensure_future(self._wait(job))
        try:
            await asyncio.wait({outcome, wrapped}, return_when=asyncio.FIRST_COMPLETED)
            # `early` is only ever set before the job ends: when it is set, it came first.
            if not early.done():
                return await outcome
            # The job goes on for the cache; this request no longer waits for its outcome.
            outcome.add_done_callback(lambda task: task.cancelled() or task.exception())
            return early.result()
        except asyncio.CancelledError:
            outcome.cancel()  # `_wait` releases the job
            raise
        finally:
            timer.cancel()
            wrapped.cancel()
            try:
                job.listeners.remove(check)
            except ValueError:
                pass

    def _first_answer(
        self,
        doc: Document,
        version: int | None,
        job,
        request: CompletionRequest,
        completion: Completion,
        started,
        built,
    ) -> Answer:
        """The answer with a job's first words; the rest goes to the cache when the job
        ends, and a prefetch after it, if the user has not moved on by then."""
        self.stats.first_answers += 1
        self.stats.model_completions += 1
        self._latency(started)

        def finished(future) -> None:
            target = self._store(job)
            doc_now = self.document(doc.uri)
            if self.settings.prefetch and target is not None and doc_now is not None and doc_now.version == version:
                self._schedule_prefetch(doc.uri, version, replace(request, prefix=target, single_line=False))

        job.future.add_done_callback(lambda future: self._call_soon(finished, future))
        engine = self.worker.engine if self.worker is not None else None
        return Answer(
            fit_to_line(completion, request.prefix, single_line=request.single_line),
            "model",
            _spent(started, built, job, None, getattr(engine, "running_timings", None)),
            partial=True,
        )

    def _grammar_failed(self, doc: Document, request: CompletionRequest, error: str | None) -> bool:
        """After a failed completion with a grammar of the document's own (a schema, a
        Lark file, a regex): whatever the engine raised while compiling or using it, the
        document goes on with the fallback grammar (plain JSON, or the code grammar),
        and the user is told once. True when the request is worth asking again."""
        spec = request.grammar
        if spec.kind not in ("json_schema", "lark", "regex") or spec in self._broken_grammars:
            return False
        fallback = fallback_grammar(doc.language_id, uri_to_path(doc.uri))
        if spec == fallback:
            return False
        if len(self._broken_grammars) >= 64:
            self._broken_grammars.clear()
        what = "plain JSON" if fallback.kind == "lark" else "the code grammar"
        message = f"midword: the grammar of {doc.uri} could not be used ({error}); using {what}"
        self._broken_grammars[spec] = message
        self.show(message, types.MessageType.Warning)
        self.set_status(self.status_state, f"grammar not used: {error}")
        return True

    def _report_grammar(self, uri: str, note: str) -> None:
        """Tells the client, in `midword/status`, when how much of a document the grammar
        covers changes (all of it, one value of it, or none), so a status bar can say so."""
        if self._grammar_notes.get(uri, "") == note:
            return
        if note:
            self._grammar_notes[uri] = note
            while len(self._grammar_notes) > 1_000:
                self._grammar_notes.pop(next(iter(self._grammar_notes)))
        else:
            self._grammar_notes.pop(uri, None)
        self.set_status(self.status_state, self.status_message, grammar={"uri": uri, "note": note})

    async def _until_loaded(self, doc: Document) -> None:
        """Hold a request while the model loads (see LOAD_HOLD_S). `$/cancelRequest`
        cancels the wait; a document edited meanwhile answers ContentModified."""
        if not self.settings.enable or self.worker is None or self.worker.state != "loading":
            return
        version = doc.version
        deadline = time.monotonic() + LOAD_HOLD_S
        while self.worker.state == "loading" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self._check_version(doc.uri, version)

    async def _wait(self, job) -> Outcome:
        """The job's outcome, within its deadline: the time budget plus what prefilling a
        new prompt may take. Past it the job is stopped and the request answered with
        an error outcome, so no request waits on a stuck model."""
        deadline = job.request.time_budget_s + REQUEST_DEADLINE_SLACK_S
        worker = self.worker  # the job's: `shutdown` may clear the attribute meanwhile
        assert worker is not None
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(job.future)), deadline)
        except asyncio.TimeoutError:
            worker.release(job)
            job.stop("deadline")
            return Outcome("error", error=f"no answer within the request deadline of {deadline:g} s")
        except asyncio.CancelledError:
            worker.release(job)
            self.stats.cancelled += 1
            raise

    def _store(self, job) -> str | None:
        """Cache a finished job's answer (also when no request waits for it any more);
        its target text, or None."""
        if not job.future.done():
            return None
        outcome: Outcome = job.future.result()
        if outcome.status != "done" or outcome.completion is None:
            return None
        origin = (
            "prefetch"
            if job.prefetch
            else "keystroke"
            if self._keystroke_jobs.get(unquote(job.uri)) is job
            else "model"
        )
        return self.cache.put(job.uri, job.request, outcome.completion, origin=origin)

    def _check_version(self, uri: str, version: int | None) -> None:
        current = self.document(uri)
        if current is None or current.version != version:
            self.stats.content_modified += 1
            raise JsonRpcContentModified(
                f"{uri} changed (version {version} -> {None if current is None else current.version}) during completion"
            )

    def _still_useful(self, job) -> bool:
        """Whether `job`'s answer can still be served for the document as it is now
        (called from the model thread too; it only reads the current text)."""
        doc = self.document(job.uri)
        if doc is None:
            return False
        text = doc.source
        suffix = job.request.suffix
        if len(text) < len(suffix) or not text.endswith(suffix):
            return False
        return answer_may_serve(job.request, job.partial, text[: len(text) - len(suffix)], suffix, ahead=job.prefetch)

    def _latency(self, started: float) -> None:
        self.last_latency_ms = round((time.perf_counter() - started) * 1000.0, 1)

    # -- prefetch ----------------------------------------------------------------------------

    def _cancel_prefetch(self) -> None:
        if self._prefetch_timer is not None:
            self._prefetch_timer.cancel()
            self._prefetch_timer = None

    def _schedule_prefetch(self, uri: str, version: int | None, request: CompletionRequest) -> None:
        self._cancel_prefetch()
        if self.loop is None:
            return
        self._prefetch_timer = self.loop.call_later(
            self.settings.prefetch_delay_ms / 1000.0, self._prefetch, uri, version, request
        )

    def _prefetch(self, uri: str, version: int | None, request: CompletionRequest) -> None:
        self._prefetch_timer = None
        doc = self.document(uri)
        if doc is None or doc.version != version or self.worker is None or self.cache.get(uri, request):
            return
        job = self.worker.submit(uri, version, request, prefetch=True)
        if job.future.done() and job.future.result().status == "superseded" and self.worker.ready:
            # The model thread is still busy (often just handing back the answer that
            # scheduled this): try again once it may be idle. A keystroke cancels the timer.
            if self.loop is not None:
                self._prefetch_timer = self.loop.call_later(
                    max(self.settings.prefetch_delay_ms / 1000.0, PREFETCH_RETRY_S),
                    self._prefetch,
                    uri,
                    version,
                    request,
                )
            return
        job.future.add_done_callback(lambda future: self._call_soon(self._prefetch_done, job))

    def _prefetch_done(self, job) -> None:
        outcome: Outcome = job.future.result()
        if outcome.status == "done" and outcome.completion is not None:
            self.stats.prefetches += 1
            self.cache.put(job.uri, job.request, outcome.completion, origin="prefetch")
        elif outcome.status == "error":
            self.stats.errors += 1
            self.log(f"prefetch failed in {job.uri}: {outcome.error}", types.MessageType.Error)

    # -- document changes --------------------------------------------------------------------

    def on_did_change(self, uri: str, version: int | None, changes=()) -> None:
        self._edited_at.pop(unquote(uri), None)
        self._edited_at[unquote(uri)] = (version, time.perf_counter())
        while len(self._edited_at) > 256:
            self._edited_at.pop(next(iter(self._edited_at)))
        self._cancel_prefetch()
        if self.worker is not None:
            self.worker.cancel_stale(uri, version)
        self._start_at_keystroke(uri, version, changes)

    def _note_asked(self, uri: str, kind: str) -> None:
        self._asked.pop(uri, None)
        self._asked[uri] = kind
        while len(self._asked) > 256:
            self._asked.pop(next(iter(self._asked)))

    def _start_at_keystroke(self, uri: str, version: int | None, changes) -> None:
        """After one edit at a place the editor asks completions for, start the model
        for the cursor it leaves (after the inserted text) without waiting for the
        editor's request: unless the cache or a running job already answers there."""
        kind = self._asked.get(unquote(uri))
        s = self.settings
        worker = self.worker
        if kind is None or not (s.enable and s.start_on_keystroke) or worker is None or not worker.ready:
            return
        if len(changes) != 1 or getattr(changes[0], "range", None) is None or self.loop is None:
            return
        doc = self.document(uri)
        if doc is None or doc.version != version:
            return
        change = changes[0]
        cursor = min(doc.offset_of(change.range.start), doc.offset_of(change.range.end)) + len(change.text)
        old = self._keystroke_tasks.pop(unquote(doc.uri), None)
        if old is not None:
            old.cancel()  # still choosing its grammar: the newer edit wins
        self._keystroke_tasks[unquote(doc.uri)] = asyncio.ensure_future(self._keystroke_job(doc, version, cursor, kind))

    async def _keystroke_job(self, doc: Document, version: int | None, cursor: int, kind: str) -> None:
        source = doc.source
        if kind == "inline":
            lines = self.settings.multiline
            single_line = not (
                lines == "always"
                or (lines == "auto" and wants_multiline(source[:cursor], source[cursor : cursor + 200]))
            )
        else:
            single_line = True
        try:
            request = await self.build_request(doc, cursor, single_line=single_line)
        except Exception:  # noqa: BLE001 - the editor's own request reports what is wrong
            log.debug("starting at the keystroke failed", exc_info=True)
            return
        worker = self.worker
        current = self.document(doc.uri)
        if worker is None or not worker.ready or current is None or current.version != version:
            return
        if self.cache.get(doc.uri, request) is not None:
            return
        serves = self._serves(request)
        # Only a job that has predicted text the user then typed is worth waiting for: one
        # still in its prefill or cover search for a shorter prefix would make the pause
        # that follows wait for it, and then, as often as not, for a new run.
        running = worker.join(
            doc.uri, lambda job: serves(job) and (job.request.prefix == request.prefix or _predicted(job))
        )
        if running is not None:
            worker.release(running)  # only looked: the running job answers here already
            return
        job = self._keystroke_jobs[unquote(doc.uri)] = worker.submit(doc.uri, version, request)
        self.stats.keystroke_starts += 1
        job.future.add_done_callback(lambda future: self._call_soon(self._store, job))

    def on_did_close(self, uri: str) -> None:
        task = self._keystroke_tasks.pop(unquote(uri), None)
        if task is not None:
            task.cancel()
        self._keystroke_jobs.pop(unquote(uri), None)
        self._asked.pop(unquote(uri), None)
        self._edited_at.pop(unquote(uri), None)
        self.cache.forget(uri)
        self.context.forget(unquote(uri))
        if self.worker is not None:
            self.worker.cancel_stale(uri, None)
            self.worker.release_document(uri)


# -- encoding ------------------------------------------------------------------------------


def triggers_for(language_id: str | None, path: str | None) -> tuple[str, ...]:
    return TRIGGERS_JSON if is_json_document(language_id, path) else TRIGGERS_CODE


def completion_list(doc: Document, answer: Answer, cursor: int) -> types.CompletionList:
    """The LSP answer for the completion popup: one item whose edit replaces the typed
    part of the word. Always incomplete, so the editor asks again as the user types.
    The item's `data.source` says where it came from (model, cache, prefetch)."""
    completion = answer.completion
    if completion is None or not completion.text:
        return types.CompletionList(is_incomplete=True, items=[])
    text = completion.text
    typed = doc.source[completion.replace_start : cursor]
    label = first_line(text).strip() or text.strip() or text
    if len(label) > MAX_LABEL:
        label = label[: MAX_LABEL - 1] + "…"
    edit_range = types.Range(start=doc.position_of(completion.replace_start), end=doc.position_of(cursor))
    item = types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Text,
        detail="midword",
        filter_text=text if text.startswith(typed) else typed,
        sort_text="0",
        preselect=True,
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(range=edit_range, new_text=text),
        data=_item_data(answer),
    )
    return types.CompletionList(is_incomplete=True, items=[item])


def _predicted(job: Job) -> bool:
    """Whether `job` has decoded text past its own prefix yet."""
    if job.partial is None:
        return False
    replace_start, text = job.partial
    return replace_start + len(text) > len(job.request.prefix)


def _item_data(answer: Answer) -> dict:
    data: dict[str, object] = {"source": answer.source}
    if answer.ms is not None:
        data["ms"] = answer.ms
    if answer.partial:
        data["partial"] = True
    return data


def _spent(started: float, built: float, job=None, completion: Completion | None = None, timings=None) -> dict:
    """Where a request's time went, in ms (see `Answer.ms`)."""
    now = time.perf_counter()
    out = {"request": (built - started) * 1e3}
    if job is not None and job.started is not None:
        out["queue"] = max(0.0, (job.started - built) * 1e3)
    t = completion.timings if completion is not None else timings
    if t is not None:
        out.update(prefill=t.prefill_ms, cpc=t.cpc_ms, decode=t.decode_ms, mask=t.mask_ms)
        if completion is None and job is not None and job.started is not None:
            # still decoding: what its stages have not claimed so far is decoding
            out["decode"] = max(0.0, (now - job.started) * 1e3 - t.prefill_ms - t.cpc_ms)
    out["server"] = (now - started) * 1e3
    return {k: round(v, 1) for k, v in out.items()}


def inline_list(doc: Document, answer: Answer, cursor: int) -> types.InlineCompletionList:
    completion = answer.completion
    if completion is None or not completion.text:
        return types.InlineCompletionList(items=[])
    edit_range = types.Range(start=doc.position_of(completion.replace_start), end=doc.position_of(cursor))
    return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=completion.text, range=edit_range)])


# -- handlers --------------------------------------------------------------------------------


def _guarded(empty):
    """A handler that answers `empty()` (and logs) on any unexpected error, so no bug in
    the server or engine turns into a crash or an error popup in the editor."""

    def wrap(handler):
        @functools.wraps(handler)
        async def run(ls: MidwordServer, params):
            try:
                return await handler(ls, params)
            except (asyncio.CancelledError, JsonRpcContentModified):
                raise
            except Exception as e:  # noqa: BLE001
                log.exception("handler %s failed", handler.__name__)
                ls.stats.errors += 1
                ls.log(f"midword: {handler.__name__} failed: {type(e).__name__}: {e}", types.MessageType.Error)
                return empty()

        return run

    return wrap


def create_server(engine_factory: EngineFactory | None = None, *, default_model: str | None = None) -> MidwordServer:
    """A midword server whose engine comes from `engine_factory(model=...)`
    (default: `midword.completion.engine.CompletionEngine`)."""
    if engine_factory is None:
        engine_factory = default_engine_factory
    server = MidwordServer(engine_factory, default_model=default_model)

    @server.feature(types.INITIALIZE)
    def initialize(ls: MidwordServer, params: types.InitializeParams):
        ls.on_initialize(params)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: MidwordServer, params: types.InitializedParams):
        await ls.on_initialized()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: MidwordServer, params):
        ls.on_shutdown()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: MidwordServer, params: types.DidChangeConfigurationParams):
        try:
            await ls.on_did_change_configuration(params)
        except Exception as e:  # noqa: BLE001 - bad settings never take the server down
            log.exception("configuration change failed")
            ls.show(f"midword: could not apply settings: {type(e).__name__}: {e}", types.MessageType.Error)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MidwordServer, params: types.DidChangeTextDocumentParams):
        ls.context.note_change(unquote(params.text_document.uri), params.content_changes)
        ls.on_did_change(params.text_document.uri, params.text_document.version, params.content_changes)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MidwordServer, params: types.DidCloseTextDocumentParams):
        ls.on_did_close(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=ALL_TRIGGERS))
    @_guarded(lambda: types.CompletionList(is_incomplete=True, items=[]))
    async def completion(ls: MidwordServer, params: types.CompletionParams):
        doc = ls.document(params.text_document.uri)
        if doc is None:
            return types.CompletionList(is_incomplete=True, items=[])
        ctx = params.context
        if (
            ctx is not None
            and ctx.trigger_kind == types.CompletionTriggerKind.TriggerCharacter
            and ctx.trigger_character not in triggers_for(doc.language_id, uri_to_path(doc.uri))
        ):
            return types.CompletionList(is_incomplete=True, items=[])
        cursor = doc.offset_of(params.position)
        result = await ls.complete(doc, cursor, single_line=True)
        return completion_list(doc, result, cursor)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    @_guarded(lambda: types.InlineCompletionList(items=[]))
    async def inline_completion(ls: MidwordServer, params: types.InlineCompletionParams):
        doc = ls.document(params.text_document.uri)
        if doc is None:
            return types.InlineCompletionList(items=[])
        cursor = doc.offset_of(params.position)
        lines = ls.settings.multiline
        multi = lines == "always" or (
            lines == "auto" and wants_multiline(doc.source[:cursor], doc.source[cursor : cursor + 200])
        )
        result = await ls.complete(doc, cursor, single_line=not multi, kind="inline")
        return inline_list(doc, result, cursor)

    @server.feature(STATS)
    def stats(ls: MidwordServer, params):
        out = asdict(ls.stats)
        worker = ls.worker
        out.update(
            model_calls=worker.runs if worker else 0,
            tokens_generated=worker.tokens_generated if worker else 0,
            tokens_forced=worker.tokens_forced if worker else 0,
            model_calls_stopped=worker.stopped_runs if worker else 0,
            engine_ms={k: round(v, 1) for k, v in worker.engine_ms.items()} if worker else {},
        )
        out.update(
            state=ls.status_state,
            lastLatencyMs=ls.last_latency_ms,
            cacheEntries=len(ls.cache),
            model=ls.settings.model,
            positionEncoding=str(getattr(ls.workspace.position_encoding, "value", ls.workspace.position_encoding)),
        )
        return out

    return server


def default_engine_factory(**settings):
    from midword.completion.engine import CompletionEngine

    return CompletionEngine(**settings)
