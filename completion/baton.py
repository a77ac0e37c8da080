"""The engine's lock, taken in turn.

Completions running at once (several editors, or several HTTP clients) share one
engine: grammar, constraint, tokenizer and CPC caches see one caller at a time, the
holder of the "baton". A job lets go of it while its decode step waits in the step
batcher (lean_batch.StepBatcher) and between its own model calls when others wait
(`Baton.pass_on`).

Python's `threading.Lock` has no order: a thread that lets go and asks again at once
usually gets it back, so one job running forwards of its own (a prefill, draft tokens)
kept the others from ever resuming. `Baton` hands the lock to whoever asked first.
"""

from __future__ import annotations

import threading
from collections import deque


class Baton:
    """A first-come, first-served lock (a drop-in for `threading.Lock` as a context
    manager, `acquire()` blocking only)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._held = False
        self._queue: deque[object] = deque()

    def acquire(self) -> bool:
        with self._cond:
            if not self._held and not self._queue:
                self._held = True
                return True
            ticket = object()
            self._queue.append(ticket)
            try:
                while self._held or self._queue[0] is not ticket:
                    self._cond.wait()
            except BaseException:
                self._queue.remove(ticket)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self._held = True
            return True

    def release(self) -> None:
        with self._cond:
            if not self._held:
                raise RuntimeError("release of a baton nobody holds")
            self._held = False
            if self._queue:
                self._cond.notify_all()

    def locked(self) -> bool:
        return self._held

    @property
    def waiting(self) -> int:
        """Threads waiting for the baton."""
        return len(self._queue)

    def pass_on(self) -> bool:
        """Called by the holder: when others wait, let them go first and take the baton
        back after them (True); else keep it (False)."""
        if not self._queue:
            return False
        self.release()
        self.acquire()
        return True

    def __enter__(self) -> "Baton":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = ["Baton"]
