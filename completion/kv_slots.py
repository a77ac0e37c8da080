"""Several KV caches for one model: a slot per document being completed.

The model keeps the keys and values of one token sequence and reuses its longest
common prefix with the next prompt (model.py). One editor typing into one file gets
every keystroke's prompt almost entirely from that cache. Two editors (or two files)
taking turns would each find the other's sequence there and prefill their whole
prompt again on every request.

`KVSlots` parks the model's state per document and brings back, before each prompt,
the one that shares the most of it, as llama.cpp's server picks a slot by prompt
similarity: the slot whose cached tokens cover at least `min_shared` of the prompt
(the best one), else a fresh slot. Parked slots are dropped least recently used
first, so that at most `max_slots` exist besides those checked out by running jobs,
and the parked ones take at most `max_bytes`. The model only needs `swap_state` and `cached_tokens` (a backend
without `swap_state` keeps its one cache and `use` does nothing).

Completions that run at the same time (several documents, steps batched by
lean_batch.StepBatcher) each take a slot out with `checkout`: a `SlotView` is the model
as that job sees it, its own KV cache installed around each call, and a decode step
handed to the batcher when there is one. `checkin` parks the slot again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

# Slots kept (the model's current one included) and memory the parked ones may take.
# A Gemma 3 270M slot holding a full prompt is some tens of MiB (keys and values of
# 18 layers, the hidden rows, the cached log-prob rows).
DEFAULT_SLOTS = 4
DEFAULT_SLOT_BYTES = 768 * 1024 * 1024
# A slot serves a prompt when it already holds at least this share of it; below, a
# fresh slot is cheaper for the other documents (their caches stay).
DEFAULT_MIN_SHARED = 0.5


@dataclass
class SlotStats:
    switches: int = 0  # a parked slot brought back
    created: int = 0  # a fresh slot for a prompt no slot covered
    evicted: int = 0  # parked slots dropped (count or memory bound)
    parked_bytes: int = 0


class KVSlots:
    def __init__(
        self,
        model,
        *,
        max_slots: int = DEFAULT_SLOTS,
        max_bytes: int = DEFAULT_SLOT_BYTES,
        min_shared: float = DEFAULT_MIN_SHARED,
    ):
        if max_slots < 1:
            raise ValueError(f"max_slots must be at least 1, got {max_slots}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be at least 0, got {max_bytes}")
        if not 0.0 <= min_shared <= 1.0:
            raise ValueError(f"min_shared must be between 0 and 1, got {min_shared}")
        self.model = model
        self.max_slots = int(max_slots)
        self.max_bytes = int(max_bytes)
        self.min_shared = float(min_shared)
        self.stats = SlotStats()
        # parked states, least recently used first: id -> (state, its bytes)
        # (a backend's state object: `tokens` and `nbytes`, e.g. cached_model.ModelState)
        self._parked: OrderedDict[int, tuple[Any, int]] = OrderedDict()
        self._next_id = 0
        self._out = 0  # slots checked out by running jobs

    @property
    def enabled(self) -> bool:
        return self.max_slots > 1 and callable(getattr(self.model, "swap_state", None))

    def __len__(self) -> int:
        return 1 + len(self._parked)

    def use(self, prompt: Sequence[int]) -> int:
        """Makes the model's current cache the slot that best serves `prompt` (before the
        prompt is prefilled). Returns how many of its tokens that slot already holds."""
        prompt_arr = np.asarray(prompt, dtype=np.int64)
        cached = np.asarray(getattr(self.model, "cached_tokens", ()), dtype=np.int64)
        current = _shared(prompt_arr, cached)
        if not self.enabled or not prompt_arr.size:
            return current
        need = self.min_shared * prompt_arr.size
        best_id, best = None, current
        for slot_id, (state, _) in self._parked.items():
            shared = _shared(prompt_arr, state.tokens)
            if shared > best:
                best_id, best = slot_id, shared
        if best_id is not None and best >= need:
            state, _ = self._parked.pop(best_id)
            self.stats.switches += 1
        elif current >= need or current == cached.size:
            # the current slot serves it, or holds nothing the prompt would overwrite
            return current
        else:
            state, best = None, 0
            self.stats.created += 1
        self._park(self.model.swap_state(state))
        return best

    def checkout(self, prompt: Sequence[int], batcher=None) -> "SlotView":
        """The slot that best serves `prompt` (as `use` picks it), taken out of the pool
        for one job until `checkin`: a job running beside others owns its cache."""
        prompt_arr = np.asarray(prompt, dtype=np.int64)
        model = self.model
        with model._lock:
            # The model's own state becomes a parked slot like the others: from now on it
            # holds an empty cache between the views' calls.
            if len(model.cached_tokens):
                self._park(model.swap_state(None))
        need = self.min_shared * prompt_arr.size
        best_id, best, whole = None, 0, False
        for slot_id, (state, _) in self._parked.items():
            shared = _shared(prompt_arr, state.tokens)
            if shared > best:
                best_id, best, whole = slot_id, shared, shared == state.tokens.size
        # A slot the prompt only extends serves it however little it holds: a prefill cut
        # short by a keystroke goes on from there at the next one, instead of from zero.
        if best_id is not None and best > 0 and (best >= need or whole):
            state, _ = self._parked.pop(best_id)
            self.stats.switches += 1
            self.stats.parked_bytes = sum(n for _, n in self._parked.values())
        else:
            with model._lock:
                state, best = model.swap_state(None), 0  # the empty one; the model gets another
            self.stats.created += 1
        self._out += 1
        return SlotView(self, state, best, batcher)

    def checkin(self, view: "SlotView") -> None:
        """Parks `view`'s slot again (most recently used)."""
        self._out -= 1
        self._park(view.state)

    def _park(self, state) -> None:
        if not len(state.tokens):
            return  # an empty cache is not worth a slot
        self._parked[self._next_id] = (state, state.nbytes)
        self._next_id += 1
        total = sum(n for _, n in self._parked.values())
        # The count bounds the parked slots and the model's current one; slots checked out
        # are not counted: a document's slot parked while other jobs run must survive until
        # its next keystroke, else every request of several clients prefills from zero
        # (their memory is the running jobs' own, bounded by how many run at once).
        while self._parked and (len(self._parked) + 1 > self.max_slots or total > self.max_bytes):
            _, (_, n) = self._parked.popitem(last=False)
            total -= n
            self.stats.evicted += 1
        self.stats.parked_bytes = total

    def clear(self) -> None:
        self._parked.clear()
        self.stats.parked_bytes = 0


class SlotView:
    """The model as one job sees it: its slot's KV cache (`state`) installed for each call
    (under the model's lock) and parked again after, so jobs running beside each other
    never see each other's caches. A decode step that grows the cached sequence by one
    token goes to `batcher` (lean_batch.StepBatcher) when there is one; prefill, CPC's
    scoring and everything else run here, on the calling job's thread. Other attributes
    are the model's."""

    def __init__(self, slots: KVSlots, state, cached: int, batcher=None):
        self.slots = slots
        self.state = state
        self.cached = cached  # prompt tokens the slot held when taken out
        self.batcher = batcher
        self._model = slots.model

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def _installed(self, name: str, *args, turn: bool = True, **kwargs):
        """Calls the model's `name` with this job's cache installed; with `turn`, other jobs
        waiting for the engine's lock go first (`_take_turn`): a job's forwards of its own
        (a prefill, CPC's branches) would otherwise keep it through all of them."""
        if turn:
            self._take_turn()
        model = self._model
        t0 = time.perf_counter()
        with model._lock:
            if self.batcher is not None:
                self.batcher.waited_for_model((time.perf_counter() - t0) * 1e3)
            parked = model.swap_state(self.state)
            try:
                return getattr(model, name)(*args, **kwargs)
            finally:
                self.state = model.swap_state(parked)

    @property
    def cached_tokens(self) -> tuple[int, ...]:
        return tuple(self.state.tokens.tolist())

    def is_cached(self, tokens: Sequence[int]) -> bool:
        n = len(tokens)
        held = self.state.tokens
        return 0 < n <= held.size and bool(np.array_equal(held[:n], np.asarray(tokens, dtype=np.int64)))

    def _take_turn(self) -> None:
        """Before a forward of this job's own: other jobs waiting for the engine's lock (to
        resume after a batched step, or to start) go first."""
        if self.batching:
            self.batcher.take_turn()

    def prefill(self, tokens, cancelled=None) -> bool:
        if self.is_cached(tokens):  # nothing to run: no need to wait for the model
            stats = self._model.stats
            stats.cache_hits += 1
            stats.tokens_reused += len(tokens)
            return True
        toks = np.asarray(tokens, dtype=np.int64)
        if self.batching and self._one_step(toks):  # one new token: a step without a head
            self.batcher.step(self.state, int(toks[-1]), _NO_IDS)
            return True
        return self._installed("prefill", tokens, cancelled)

    def next_logprobs(self, tokens, allowed=None):
        return self._installed("next_logprobs", tokens, allowed)

    def logprobs(self, tokens, start: int = 1):
        return self._installed("logprobs", tokens, start)

    def score_branches(self, prefix, branches, allowed=None):
        return self._installed("score_branches", prefix, branches, allowed)

    def next_logits(self, tokens, allowed=None):
        toks = np.asarray(tokens, dtype=np.int64)
        # A completion running alone takes the model's own step (compiled head included):
        # a batch of one is slower. One that arrives meanwhile is let in at the next step.
        if not self.batching:
            return self._installed("next_logits", tokens, allowed, turn=False)
        model = self._model
        ids = model._allowed(allowed, "allowed")
        if self._one_step(toks):
            return self.batcher.step(self.state, int(toks[-1]), ids)
        if self.is_cached(toks):
            # Run before (a draft, an earlier answer): a head only. Over the whole vocabulary
            # it reads more weights than a step, shared in a batch; a few rows (CPC's covers,
            # a grammar's choices) cost less than waiting for the batch.
            if ids is None:
                return self.batcher.step(self.state, None, None, cached=toks.size)
            return self._installed("next_logits", tokens, allowed, turn=False)
        return self._installed("next_logits", tokens, allowed)

    @property
    def batching(self) -> bool:
        """Whether this job's decode steps run in batches with other jobs' now: then a
        forward of its own (draft tokens) costs the others their turn."""
        return self.batcher is not None and not self.batcher.alone

    def _one_step(self, toks: np.ndarray) -> bool:
        """Whether `toks` is the slot's cached sequence (cut back to it where it goes on
        differently) plus one token: a decode step the batcher can run."""
        held = self.state.tokens
        n = toks.size
        if n < 2 or n > self._model.max_context or int(toks[-1]) >= self._model.vocab_size or int(toks[-1]) < 0:
            return False
        k = _shared(toks, held)
        if k != n - 1:
            return False  # already cached (a head only), or more than one token to run
        if held.size > k:
            f = self.state.fields
            f["_cache"].crop(k - held.size)
            f["_tokens"] = held[:k]
            f["_hidden"] = f["_hidden"][:k]
        return True


_NO_IDS = np.zeros(0, dtype=np.int64)  # a step whose head is not wanted (a prefill's)


def _shared(a: np.ndarray, b: np.ndarray) -> int:
    m = min(a.size, b.size)
    if not m:
        return 0
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m
