"""The one thread that runs the model, and the queue in front of it.

The event loop must never wait on the model, and a CPU model can only do one
completion at a time well, so all model work (loading, completing) runs on ONE
worker thread. In front of it sits a queue of length one where the newest request
wins: submitting a job resolves the job still waiting as "superseded" and asks the
running one to stop (through the `cancelled` callback the engine polls between
decoding steps), because a request the user has typed past is worth nothing. A
prefetch only runs when nothing else is waiting or running, and any real request
supersedes it.

Two requests asking exactly the same thing (an editor sends a completion and an
inline-completion request for one keystroke) share one job, and a request that the
running job's answer will cover (the user typed on, and typed what the model is
predicting) joins it rather than starting over. Work the user has typed past is not
thrown away while it is still right: the server's `keep_alive(job)` says whether the
job's answer can still be served from the cache for the current document, judged on
the text the job has produced so far (`job.partial`). A job whose waiters all gave
up, or whose document changed, runs on while that holds, and stops as soon as it does
not; its answer reaches the server through `on_done`.

A front end that bounds its own concurrency (the HTTP API's turns) may instead run a
job `beside` the others: on a thread of its own at once, superseding nothing. The
engine then interleaves the jobs' work and runs their decode steps together in one
forward (`batches`: whether the loaded engine does; completion/lean_batch.py).

Jobs resolve their `future` (a `concurrent.futures.Future`) with an `Outcome`; no
exception crosses from the worker to the server, so a failing engine turns into an
"error" outcome and the server keeps answering. State changes (loading progress,
ready, error, busy, idle) go to the `notify` callback, called on the worker thread.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from midword.collector import collect_when_idle, settle_after_start
from midword.completion.types import Completion, CompletionRequest

log = logging.getLogger(__name__)

# How long a job whose requests were all cancelled waits for the edit that explains it.
CANCEL_GRACE_S = 0.05
# Crashes of the model thread after which it is no longer restarted (a crash loop).
MAX_RESTARTS = 5


class Engine(Protocol):
    """The contract of `midword.completion.engine.CompletionEngine` the server relies on."""

    def load(self, progress: Callable[[str, float], None] | None = None) -> None: ...

    @property
    def ready(self) -> bool: ...

    def complete(
        self,
        request: CompletionRequest,
        *,
        cancelled: Callable[[], bool] | None = None,
        partial: Callable[[str, int], None] | None = None,
    ) -> Completion: ...


EngineFactory = Callable[..., Engine]


@dataclass
class Outcome:
    status: str  # "done", "cancelled", "superseded", "error", "not_ready"
    completion: Completion | None = None
    error: str | None = None
    engine_ms: float = 0.0


@dataclass(eq=False)
class Job:
    uri: str
    version: int | None
    request: CompletionRequest
    prefetch: bool = False
    future: Future = field(default_factory=Future)
    waiters: int = 1
    reason: str = ""
    # (replace_start, text so far), written by the worker thread after each step
    partial: tuple[int, str] | None = None
    # When the last waiter gave up (None: someone waits), and whether the document has
    # changed since the job started: only then is it worth finishing for nobody.
    orphaned_at: float | None = None
    edited: bool = False
    # When the model thread took the job (time.perf_counter()): the wait before is queueing.
    started: float | None = None
    # Called on the model thread with the job after each step (when `partial` changed):
    # a front end's early stops and token streaming, without polling.
    listeners: list[Callable[["Job"], None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self.reason = reason
            self._stop.set()

    def stopped(self) -> bool:
        return self._stop.is_set()


def _resolve(future: Future, outcome: Outcome) -> None:
    try:
        future.set_result(outcome)
    except InvalidStateError:  # already resolved (e.g. superseded while running)
        pass


@dataclass(frozen=True)
class Event:
    kind: str  # "loading", "progress", "ready", "error", "busy", "idle"
    message: str = ""
    fraction: float | None = None
    data: dict[str, Any] = field(default_factory=dict)


class ModelWorker:
    def __init__(
        self,
        factory: EngineFactory,
        notify: Callable[[Event], None] | None = None,
        keep_alive: Callable[[Job], bool] | None = None,
    ):
        self._factory = factory
        self._notify = notify or (lambda event: None)
        self._keep_alive = keep_alive
        self._cond = threading.Condition()
        self._pending: Job | None = None
        self._running: Job | None = None
        self._beside: set[Job] = set()  # jobs running on threads of their own
        self._load_model: str | None = None
        self._closed = False
        self._engine: Engine | None = None
        self.state = "idle"  # "idle" (nothing loaded), "loading", "ready", "error"
        self.error: str | None = None
        self.model: str | None = None
        # what the engine actually did (a shared job counts once)
        self.runs = 0
        self.tokens_generated = 0
        self.tokens_forced = 0
        # where the engine's time went, summed over runs (ms): total, prefill, cpc, decode, mask
        self.engine_ms = {"total": 0.0, "prefill": 0.0, "cpc": 0.0, "decode": 0.0, "mask": 0.0}
        self.stopped_runs = 0  # runs that ended early: superseded, cancelled, or typed past
        self.crashes = 0
        self._thread = self._start_thread()

    def _start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self._supervised, name="midword-model", daemon=True)
        thread.start()
        return thread

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def engine(self) -> Engine | None:
        """The loaded engine (None while loading); for reading its statistics."""
        return self._engine

    # -- called from the server (any thread) ------------------------------------------

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def batches(self) -> bool:
        """Whether the loaded engine runs jobs beside each other with their decode steps
        batched (otherwise they would only take turns inside it)."""
        return self.ready and getattr(self._engine, "batcher", None) is not None

    def _jobs(self) -> tuple[Job | None, ...]:
        return (self._running, self._pending, *self._beside)

    def load(self, model: str) -> None:
        """(Re)load the engine for `model` before any later job runs."""
        with self._cond:
            self._load_model = model
            self.state = "loading"
            self.error = None
            for job in (self._running, *self._beside):
                if job is not None:
                    job.stop("superseded")
            self._supersede_pending()
            self._cond.notify()

    def submit(
        self,
        uri: str,
        version: int | None,
        request: CompletionRequest,
        *,
        prefetch: bool = False,
        beside: bool = False,
    ) -> Job:
        """A job for `request`. Normally the newest request wins (see the module docstring);
        `beside`: the job starts at once on a thread of its own and supersedes nothing."""
        job = Job(uri, version, request, prefetch)
        with self._cond:
            if self._closed:
                _resolve(job.future, Outcome("cancelled"))
                return job
            if beside:
                self._beside.add(job)
                threading.Thread(target=self._run_beside, args=(job,), name="midword-job", daemon=True).start()
                return job
            if prefetch and (self._running is not None or self._pending is not None or self.state != "ready"):
                _resolve(job.future, Outcome("superseded"))  # only when idle
                return job
            for other in (self._running, self._pending):
                if (
                    other is not None
                    and not other.stopped()
                    and not other.prefetch
                    and other.uri == uri
                    and other.request == request
                ):
                    other.waiters += 1
                    return other
            self._supersede_pending()
            if self._running is not None:
                self._running.stop("superseded")
            self._pending = job
            self._cond.notify()
        return job

    def join(self, uri: str, serves: Callable[[Job], bool]) -> Job | None:
        """The running (or waiting) job of `uri` whose answer `serves(job)` says will cover
        a new request, now with one more waiter; None when there is none."""
        with self._cond:
            for job in self._jobs():
                if job is not None and job.uri == uri and not job.stopped() and serves(job):
                    job.waiters += 1
                    return job
        return None

    def release(self, job: Job) -> None:
        """One waiter on `job` gave up (the client cancelled its request)."""
        with self._cond:
            job.waiters -= 1
            if job.waiters > 0:
                return
            if job is self._running or job in self._beside:
                # Editors cancel a request when the user types, often just before the
                # edit arrives: the model thread decides after CANCEL_GRACE_S (stop_now).
                job.orphaned_at = time.monotonic()
                return
            job.stop("cancelled")
            if job is self._pending:
                self._pending = None
                _resolve(job.future, Outcome("cancelled"))

    def cancel_stale(self, uri: str, version: int | None) -> None:
        """The document changed: work on its older versions is worthless unless the user
        typed what it predicts (`keep_alive`)."""
        with self._cond:
            for job in self._jobs():
                if job is None or job.uri != uri or job.version == version:
                    continue
                if version is not None and self._worth_finishing(job):
                    job.edited = True
                else:
                    job.stop("stale")
            if self._pending is not None and self._pending.stopped():
                _resolve(self._pending.future, Outcome("cancelled"))
                self._pending = None

    def release_document(self, uri: str) -> None:
        """`uri` closed: the engine cancels a grammar still compiling for it alone (on its
        compile thread; the model thread may be busy with another document)."""
        release = getattr(self._engine, "release_document", None)
        if callable(release):
            try:
                release(uri)
            except Exception:  # noqa: BLE001 - a failing release must not fail the close
                log.exception("releasing the document's grammar failed")

    def cancel_all(self, reason: str = "cancelled") -> None:
        with self._cond:
            for job in (self._running, *self._beside):
                if job is not None:
                    job.stop(reason)
            if self._pending is not None:
                self._pending.stop(reason)
                _resolve(self._pending.future, Outcome("cancelled"))
                self._pending = None

    @property
    def busy(self) -> bool:
        return self._running is not None or self._pending is not None or bool(self._beside)

    def close(self, timeout: float | None = 0.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self.cancel_all()
        if timeout:
            self._thread.join(timeout)

    def _worth_finishing(self, job: Job) -> bool:
        if self._keep_alive is None or job.stopped():
            return False
        try:
            return bool(self._keep_alive(job))
        except Exception:  # a broken predicate must not keep work alive, nor stop the worker
            log.exception("keep_alive failed")
            return False

    # -- the worker thread ---------------------------------------------------------------

    def _supersede_pending(self) -> None:
        if self._pending is not None:
            self._pending.stop("superseded")
            _resolve(self._pending.future, Outcome("superseded"))
            self._pending = None

    def _supervised(self) -> None:
        """The model thread: `_run`, and should anything escape it (a bug, a
        BaseException from an engine), the waiting jobs are answered with an error, the
        crash is reported as an "error" event and a fresh thread reloads the model, so no
        request waits on a dead thread."""
        try:
            self._run()
            return
        except BaseException as e:  # noqa: BLE001 - reported and restarted, never silent
            message = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            log.exception("the model thread crashed")
        with self._cond:
            self.crashes += 1
            for job in (self._running, self._pending):
                if job is not None:
                    job.stop("crashed")
                    _resolve(job.future, Outcome("error", error=f"the model thread crashed: {message}"))
            self._running = self._pending = None
            restart = not self._closed and self.crashes <= MAX_RESTARTS
            model = self.model or self._load_model
            self._engine = None
            self.state = "error"
            self.error = message
            if restart and model is not None and self._load_model is None:
                self._load_model = model
                self.state = "loading"
        self._emit(
            Event(
                "error",
                f"the model thread crashed ({message}); "
                + ("restarting it" if restart else "too many crashes, not restarting"),
            )
        )
        if restart:
            self._thread = self._start_thread()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._load_model is None and self._pending is None:
                    self._cond.wait()
                if self._closed:
                    return
                if self._load_model is not None:
                    model, self._load_model = self._load_model, None
                    job = None
                else:
                    job, self._pending = self._pending, None
                    self._running = job
            if job is None:
                self._load(model)
                continue
            try:
                self._complete(job)
            except BaseException as e:  # the supervisor reports it; this job must not wait forever
                _resolve(job.future, Outcome("error", error=f"the model thread crashed: {type(e).__name__}: {e}"))
                raise
            finally:
                with self._cond:
                    self._running = None
                    idle = self._pending is None
                if idle:
                    self._emit(Event("idle"))
                    # Between requests: an older collector pass due soon runs now, not
                    # inside the next completion's masks.
                    collect_when_idle()

    def _run_beside(self, job: Job) -> None:
        try:
            self._complete(job)
        except BaseException as e:  # noqa: BLE001 - this job's thread only: answered, logged, never silent
            log.exception("a job beside the others crashed")
            _resolve(job.future, Outcome("error", error=f"the job crashed: {type(e).__name__}: {e}"))
        finally:
            with self._cond:
                self._beside.discard(job)
                idle = self._running is None and self._pending is None and not self._beside
            if idle:
                self._emit(Event("idle"))

    def _emit(self, event: Event) -> None:
        try:
            self._notify(event)
        except Exception:  # a broken listener must not stop the model thread
            log.exception("worker event listener failed")

    def _load(self, model: str) -> None:
        self._emit(Event("loading", f"loading {model}", 0.0))
        old, self._engine = self._engine, None
        if old is not None:
            # The old engine was frozen out of the collector's reach after its load
            # (settle_after_start): thaw it, or its cycles would be kept forever.
            _close_engine(old)
            del old
            gc.unfreeze()
            gc.collect()
        started = time.perf_counter()
        try:
            engine = self._factory(model=model)

            def progress(message: str, fraction: float) -> None:
                self._emit(Event("progress", str(message), _clamp_fraction(fraction)))

            engine.load(progress)
            # The model, tokenizer tables and tries are millions of long-lived objects: out of
            # the collector's way, its passes during completions stay short and rare.
            settle_after_start()
        except BaseException as e:  # noqa: BLE001 - anything the engine raises is reported, never fatal
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            message = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            with self._cond:
                superseded = self._load_model is not None
                if not superseded:
                    self.state = "error"
                    self.error = message
            if not superseded:
                self._emit(Event("error", f"could not load model {model!r}: {message}"))
            return
        with self._cond:
            if self._load_model is not None:  # a newer load was asked for meanwhile
                return
            self._engine = engine
            self.model = model
            self.state = "ready"
        self._emit(Event("ready", f"{model} ready", 1.0, {"load_s": time.perf_counter() - started}))

    def _complete(self, job: Job) -> None:
        if job.stopped():
            _resolve(job.future, Outcome("cancelled" if job.reason != "superseded" else "superseded"))
            return
        engine = self._engine
        if engine is None or self.state != "ready":
            _resolve(job.future, Outcome("not_ready"))
            return
        self._emit(Event("busy", "completing", data={"prefetch": job.prefetch}))
        started = job.started = time.perf_counter()

        def stop_now() -> bool:
            if job.stopped():
                return True
            # The user may have typed something other than what the job predicts since
            # the last check: its text grows every step.
            if self._keep_alive is not None and not self._worth_finishing(job):
                job.stop("stale")
                return True
            orphaned = job.orphaned_at
            if (
                job.waiters <= 0
                and orphaned is not None
                and not job.edited
                and time.monotonic() - orphaned > CANCEL_GRACE_S
            ):
                job.stop("cancelled")  # cancelled, and not because the user typed on
                return True
            return False

        def record(text: str, replace_start: int) -> None:
            job.partial = (replace_start, text)
            for listener in tuple(job.listeners):
                try:
                    listener(job)
                except Exception:  # a broken listener must not stop the completion
                    log.exception("job listener failed")

        try:
            completion = engine.complete(job.request, cancelled=stop_now, partial=record)
        except Exception as e:  # noqa: BLE001 - reported to the client as a log message
            message = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            _resolve(job.future, Outcome("error", error=message, engine_ms=_ms(started)))
            return
        with self._cond:
            self.runs += 1
            t = completion.timings
            self.tokens_generated += t.tokens_generated
            self.tokens_forced += t.tokens_forced
            for name in self.engine_ms:
                self.engine_ms[name] += float(getattr(t, f"{name}_ms", 0.0) or 0.0)
            if job.stopped() or completion.stop_reason == "cancelled":
                self.stopped_runs += 1
        if job.stopped() or completion.stop_reason == "cancelled":
            status = "superseded" if job.reason == "superseded" else "cancelled"
            _resolve(job.future, Outcome(status, completion, engine_ms=_ms(started)))
            return
        _resolve(job.future, Outcome("done", completion, engine_ms=_ms(started)))


def _close_engine(engine) -> None:
    close = getattr(engine, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # noqa: BLE001 - a failing close must not stop the reload
            log.exception("closing the old engine failed")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _clamp_fraction(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if f != f:
        return None
    return min(1.0, max(0.0, f))
