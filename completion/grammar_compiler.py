"""Grammar compilation off the model thread: an executor, a cache by text, cancellation.

Compiling a document's grammar (a JSON Schema, a Lark file, a regex) is plain Python
that can take a large part of a second. On the model thread it would hold up every
other document's completion and could not be stopped. Here it runs on its own thread:

- `result(key, build, owner, wait_s)` starts `build()` for `key` unless it is already
  compiled or compiling, waits at most `wait_s` (polling the caller's `cancelled`), and
  returns the result, or None while it is still being compiled: the caller completes
  without it this time and finds it ready on a later keystroke. Finished results are
  handed over once (the engine caches them) and kept a little while for the next ask.
- Each compile runs under an `engine.limits.CompileBudget`: a deadline
  (`Limits.max_compile_seconds`, a refusal like any other limit) and a cancel event that
  the compile loops check cooperatively.
- An owner (a document) holds a claim on the key it asked for. `release(owner)` (the
  document closed) and asking for another key (its grammar changed) drop the claim; a
  compile nobody claims any more is cancelled, and a queued one never starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from midword.engine.limits import DEFAULT_LIMITS, CompileBudget, CompileCancelled, Limits, compile_budget

log = logging.getLogger(__name__)

# Finished compiles kept for an owner that asks again (the engine keeps its own cache).
KEEP_FINISHED = 16
# How often a waiting caller looks at its own cancel callback.
POLL_S = 0.02


@dataclass(eq=False)
class _Task:
    key: Hashable
    cancel: threading.Event = field(default_factory=threading.Event)
    owners: set = field(default_factory=set)
    future: Future | None = None
    started: float = field(default_factory=time.perf_counter)


class GrammarCompiler:
    def __init__(self, limits: Limits = DEFAULT_LIMITS, workers: int = 1):
        self.limits = limits
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="midword-compile")
        self._lock = threading.Lock()
        self._running: dict[Hashable, _Task] = {}
        self._finished: OrderedDict[Hashable, Any] = OrderedDict()
        self._claims: dict[Hashable, Hashable] = {}  # owner -> key it waits for
        self._closed = False
        # what happened, for tests and `midword/status`
        self.compiled = 0
        self.cancelled = 0

    def result(
        self,
        key: Hashable,
        build: Callable[[], Any],
        *,
        owner: Hashable = None,
        wait_s: float = 0.0,
        cancelled: Callable[[], bool] | None = None,
    ) -> Any | None:
        """`build()`'s result for `key`, or None when it is not ready within `wait_s`
        (or the caller's `cancelled()` turned true while waiting). `build` must not raise
        for a bad grammar (it returns its refusal); what it raises otherwise is raised
        here."""
        with self._lock:
            if key in self._finished:
                self._claim(owner, None)
                return self._finished.pop(key)
            task = self._running.get(key)
            if task is None:
                if self._closed:
                    raise RuntimeError("the grammar compiler is closed")
                task = _Task(key)
                self._running[key] = task
                task.future = self._pool.submit(self._run, task, build)
            self._claim(owner, task)
            future = task.future
            assert future is not None  # set under this lock when the task was made
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            left = deadline - time.monotonic()
            if future.done() or left <= 0 or (cancelled is not None and cancelled()):
                break
            try:
                future.result(timeout=min(POLL_S, left))
            except FutureTimeout:
                continue
            except BaseException:  # noqa: BLE001 - the compile failed or was cancelled: surfaced below
                break
        with self._lock:
            if key in self._finished:
                self._claim(owner, None)
                return self._finished.pop(key)
        if future.done() and not future.cancelled():
            exc = future.exception()
            if exc is not None and not isinstance(exc, CompileCancelled):
                raise exc
        return None

    def compiling(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._running

    def release(self, owner: Hashable) -> None:
        """`owner` wants nothing any more (its document closed): its compile is cancelled
        unless another owner still waits for the same grammar."""
        with self._lock:
            self._claim(owner, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for task in self._running.values():
                task.owners.clear()
                task.cancel.set()
            self._claims.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- under the lock --------------------------------------------------------------------

    def _claim(self, owner: Hashable, task: _Task | None) -> None:
        if owner is None:
            return
        old_key = self._claims.pop(owner, None)
        if task is not None:
            task.owners.add(owner)
            self._claims[owner] = task.key
        if old_key is None or (task is not None and old_key == task.key):
            return
        old = self._running.get(old_key)
        if old is not None:
            old.owners.discard(owner)
            if not old.owners:
                self._cancel(old)

    def _cancel(self, task: _Task) -> None:
        task.cancel.set()
        if task.future is not None and task.future.cancel():  # queued: it never starts
            self._running.pop(task.key, None)
            self.cancelled += 1

    # -- the compile thread ----------------------------------------------------------------

    def _run(self, task: _Task, build: Callable[[], Any]) -> Any:
        budget = CompileBudget(self.limits.max_compile_seconds, task.cancel)
        try:
            if task.cancel.is_set():
                raise CompileCancelled()
            with compile_budget(budget):
                value = build()
            if isinstance(budget.tripped, CompileCancelled):  # swallowed inside build
                raise budget.tripped
        except CompileCancelled:
            with self._lock:
                self._running.pop(task.key, None)
                self.cancelled += 1
            log.info("grammar compile cancelled after %.0f ms", (time.perf_counter() - task.started) * 1e3)
            raise
        except BaseException:
            with self._lock:
                self._running.pop(task.key, None)
            raise
        with self._lock:
            self._running.pop(task.key, None)
            self.compiled += 1
            self._finished[task.key] = value
            while len(self._finished) > KEEP_FINISHED:
                self._finished.popitem(last=False)
        return value
