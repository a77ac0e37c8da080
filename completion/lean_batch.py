"""Decode steps of several sequences in one forward of the lean Gemma 3, and the batcher
that gathers them.

On a memory-bound CPU a decode step's cost is reading the weights (about 100 MB of
int8 for Gemma 3 270M); the arithmetic of one row is small beside it. Several documents
completed at once each paying their own step read the weights once per document;
`batch_step_py` reads them once for all: each int8 product runs over the B rows
(`matvec_rows_py`: each int8 weight converted once for four rows, their sums
interleaved), and the head's rows that need the whole vocabulary share one pass over
it too (`_batch_heads`), while the rotation, the cache writes and
attention are per sequence, each over its own KV cache and at its own position. Row r
of the result is what a step of sequence r alone gives, up to float32 rounding: the
interleaved sums are vectorised in another order than a lone row's, as in any batched
inference engine, so a greedy completion run beside others can part from its solo run
only where two tokens tie to the last bits.

`StepBatcher` is where the jobs meet. Concurrent completions share the engine's lock
(the "baton": only one job runs Python engine work at a time, so grammar, constraint
and tokenizer caches see one caller); a job whose next step is a plain decode step of
its own KV cache hands it to the batcher and lets go of the baton while it waits. The
batch runs as soon as every job inside the engine has handed in a step (one job alone:
at once, no wait), or after `window_s` when some job is busy elsewhere (CPC, prefill,
a grammar): the others go ahead without it. Prefill and CPC scoring run per job, under
the baton, on the job's own cache (kv_slots.SlotView).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import prange

from .lean_kernels import (
    GROUP,
    SQRT_2_OVER_PI,
    _attend_into,
    _layer,
    _rebind,
    _rms_into,
    _row_sum,
    layer_reader,
    stamp_layer_reader,
)

# Output rows of an int8 product per block of `matvec_rows_py` (a unit of parallel work).
MATVEC_BLOCK = 32

# How long a handed-in step waits for the steps of jobs that have not decoded yet (busy
# with a prefill, CPC, a grammar): they join a later batch.
DEFAULT_WINDOW_S = 0.010

# How long a batch waits at most for a decoding job's next step. Such a job comes back
# from the last batch to choose its token and compute its next mask under the baton (a few
# milliseconds each, one job after another); a batch that left it out would run twice as
# many forwards, each reading the whole model, and the jobs would fall out of step.
DEFAULT_ROUND_WAIT_S = 0.100


def matvec_rows_py(q, scales, x, out):
    """lean_kernels.matvec_py for several rows x[m]: each row's sum is added up group by
    group (64 products per group), as matvec_py adds it. A group of `GROUP` inputs is
    unrolled whole, as in matvec_py.

    One row's group sum is a chain of dependent multiply-adds, slow beside the rate at
    which a core could issue them, so a batch of four rows cost more than twice one row.
    Rows are taken four at a time, their chains interleaved in one pass over the weight
    row, each int8 weight converted once, in registers, for the four of them (a row
    converted to float32 in memory first and read back for each row made the pass
    load-bound). The compiler vectorises the interleaved sums in another order than a
    lone row's: results agree to float32 rounding, not to the bit (module docstring)."""
    n_out, k_in = q.shape
    n_groups = scales.shape[1]
    gs = k_in // n_groups
    rows = x.shape[0]
    blocks = (n_out + MATVEC_BLOCK - 1) // MATVEC_BLOCK
    for b in prange(blocks):
        for n in range(b * MATVEC_BLOCK, min(n_out, (b + 1) * MATVEC_BLOCK)):
            first = 0
            # Four rows' chains interleaved: only for whole groups of GROUP, whose loop
            # unrolls (other group sizes, and the rows left over, go one at a time).
            while gs == GROUP and first + 4 <= rows:
                m = first
                t0 = t1 = t2 = t3 = np.float32(0.0)
                for g in range(n_groups):
                    base = g * GROUP
                    a0 = a1 = a2 = a3 = np.float32(0.0)
                    for k in range(GROUP):
                        wk = np.float32(q[n, base + k])
                        a0 += wk * x[m, base + k]
                        a1 += wk * x[m + 1, base + k]
                        a2 += wk * x[m + 2, base + k]
                        a3 += wk * x[m + 3, base + k]
                    sc = scales[n, g]
                    t0 += a0 * sc
                    t1 += a1 * sc
                    t2 += a2 * sc
                    t3 += a3 * sc
                out[m, n] = t0
                out[m + 1, n] = t1
                out[m + 2, n] = t2
                out[m + 3, n] = t3
                first += 4
            for m in range(first, rows):
                out[m, n] = _row_sum(q[n], scales[n], x[m])


def batch_step_py(
    tokens,
    positions,
    embed_q,
    embed_s,
    embed_scale,
    qkv_q,
    qkv_s,
    o_q,
    o_s,
    gu_q,
    gu_s,
    d_q,
    d_s,
    norms,
    qk_norms,
    sliding,
    inv_freq,
    window,
    keys_list,
    values_list,
    eps,
    scaling,
    heads,
    final_norm,
    out,
):
    """The final hidden rows out (B, hidden) of B sequences' next tokens `tokens[r]` at
    positions `positions[r]`, sequence r's cache holding its positions [0, positions[r])
    in keys_list[r]/values_list[r] (layers, kv_heads, capacity, head_dim); each token's key
    and value are written at its position. The weights are lean_kernels.decode_step_py's."""
    hidden = embed_q.shape[1]
    n_layers = norms.shape[0]
    kv_heads = keys_list[0].shape[1]
    head_dim = keys_list[0].shape[3]
    half = head_dim // 2
    rep = heads // kv_heads
    q_size = heads * head_dim
    kv_size = kv_heads * head_dim
    inter = _layer(gu_q, 0, np.int8).shape[0] // 2
    egs = hidden // embed_s.shape[1]
    n = tokens.shape[0]
    longest = 0
    for r in range(n):
        if positions[r] + 1 > longest:
            longest = positions[r] + 1

    x = np.empty((n, hidden), dtype=np.float32)
    for r in range(n):
        token = tokens[r]
        for i in range(hidden):
            x[r, i] = np.float32(embed_q[token, i]) * embed_s[token, i // egs] * embed_scale
    h = np.empty((n, hidden), dtype=np.float32)
    t = np.empty((n, hidden), dtype=np.float32)
    qkv = np.empty((n, q_size + 2 * kv_size), dtype=np.float32)
    qr = np.empty((n, q_size), dtype=np.float32)
    attn = np.empty((n, q_size), dtype=np.float32)
    gu = np.empty((n, 2 * inter), dtype=np.float32)
    m = np.empty((n, inter), dtype=np.float32)
    cos = np.empty(half, dtype=np.float32)
    sin = np.empty(half, dtype=np.float32)
    tmp = np.empty(head_dim, dtype=np.float32)
    scores = np.empty((rep, longest), dtype=np.float32)

    for li in range(n_layers):
        for r in range(n):
            _rms_into(x[r], norms[li, 0], eps, h[r])
        matvec_rows_py(_layer(qkv_q, li, np.int8), _layer(qkv_s, li, np.float32), h, qkv)
        for r in range(n):
            p = positions[r]
            keys = keys_list[r]
            values = values_list[r]
            for i in range(half):
                angle = np.float32(p) * inv_freq[li, i]
                cos[i] = np.float32(math.cos(angle))
                sin[i] = np.float32(math.sin(angle))
            for hh in range(heads):
                base = hh * head_dim
                _rms_into(qkv[r, base : base + head_dim], qk_norms[li, 0], eps, tmp)
                for i in range(half):
                    a = tmp[i]
                    b = tmp[i + half]
                    qr[r, base + i] = a * cos[i] - b * sin[i]
                    qr[r, base + i + half] = b * cos[i] + a * sin[i]
            for kh in range(kv_heads):
                base = q_size + kh * head_dim
                _rms_into(qkv[r, base : base + head_dim], qk_norms[li, 1], eps, tmp)
                for i in range(half):
                    a = tmp[i]
                    b = tmp[i + half]
                    keys[li, kh, p, i] = a * cos[i] - b * sin[i]
                    keys[li, kh, p, i + half] = b * cos[i] + a * sin[i]
                vbase = q_size + kv_size + kh * head_dim
                for i in range(head_dim):
                    values[li, kh, p, i] = qkv[r, vbase + i]
            stop = p + 1
            start = 0
            if sliding[li] and window > 0 and stop > window:
                start = stop - window
            _attend_into(qr[r], keys[li], values[li], start, stop, scaling, scores, attn[r])

        matvec_rows_py(_layer(o_q, li, np.int8), _layer(o_s, li, np.float32), attn, t)
        for r in range(n):
            _rms_into(t[r], norms[li, 1], eps, h[r])
            for i in range(hidden):
                x[r, i] += h[r, i]
            _rms_into(x[r], norms[li, 2], eps, h[r])
        matvec_rows_py(_layer(gu_q, li, np.int8), _layer(gu_s, li, np.float32), h, gu)
        for r in range(n):
            for i in range(inter):
                g = gu[r, i]
                inner = np.float32(SQRT_2_OVER_PI) * (g + np.float32(0.044715) * g * g * g)
                m[r, i] = np.float32(0.5) * g * (np.float32(1.0) + np.float32(math.tanh(inner))) * gu[r, inter + i]
        matvec_rows_py(_layer(d_q, li, np.int8), _layer(d_s, li, np.float32), m, t)
        for r in range(n):
            _rms_into(t[r], norms[li, 3], eps, h[r])
            for i in range(hidden):
                x[r, i] += h[r, i]
    for r in range(n):
        _rms_into(x[r], final_norm, eps, out[r])


_compiled = None
_compile_lock = threading.Lock()


def compiled():
    """The compiled batched step (lean_kernels' helpers compiled with it, the int8
    products parallel over output rows; the thread count is numba's, set by the caller)."""
    global _compiled
    with _compile_lock:
        if _compiled is None:
            import types

            import numba

            opts = dict(cache=True, nogil=True, fastmath=True, boundscheck=False)
            g = dict(batch_step_py.__globals__)
            # lean_kernels' helpers get dispatchers of their own here, uncached: their
            # code is linked into the cached batch step, and a second cache entry for the
            # same function beside lean_kernels' own is not worth the risk of a mix-up.
            helper = dict(opts, cache=False)
            # The product is inlined into a step compiled parallel, whose compilation turns
            # its prange into threads: a cached serial function calling a parallel one
            # crashes when loaded from numba's cache in a later process (numba issue 8578).
            row_sum = numba.njit(inline="always", **helper)(_row_sum)
            g.update(
                matvec_rows_py=numba.njit(inline="always", **helper)(
                    _rebind(matvec_rows_py, dict(matvec_rows_py.__globals__, _row_sum=row_sum))
                ),
                _rms_into=numba.njit(**helper)(_rms_into),
                _attend_into=numba.njit(**helper)(_attend_into),
                _layer=layer_reader(),
            )
            fn = types.FunctionType(batch_step_py.__code__, g, batch_step_py.__name__)
            fn.__qualname__ = batch_step_py.__qualname__
            fn.__module__ = batch_step_py.__module__
            _compiled = numba.njit(parallel=True, **opts)(fn)
            stamp_layer_reader(_compiled)
        return _compiled


def cached() -> bool:
    """Whether numba's disk cache holds the batched step (loading it is a fraction of a
    second; compiling it, far longer)."""
    import os

    try:
        index = compiled()._cache._cache_file._index_path
    except AttributeError:  # a numba that keeps its cache elsewhere
        return False
    return os.path.exists(index)


def supports(model) -> bool:
    """Whether `model` runs batched decode steps: a lean Gemma 3 with its compiled step's
    arrays (every matrix int8)."""
    return getattr(model, "backend", None) == "lean" and getattr(model, "_kernel_args", None) is not None


def warm_up(model, in_child: bool = False) -> None:
    """Compiles the batched step (or loads it from numba's disk cache) over scratch caches
    of one position, so that the first completion does not wait for the compiler. With
    `in_child`, a child process compiles it into the cache first (kernel_precompile.py:
    numba's compile lock in this process stays free for the grammar's kernels)."""
    import numba
    from numba.typed import List

    a = model._kernel_args
    layers = len(a["weights"][0])
    kv_heads, head_dim = model.spec.kv_heads, model.spec.head_dim
    keys_list, values_list = List(), List()
    keys_list.append(np.zeros((layers, kv_heads, 1, head_dim), dtype=np.float32))
    values_list.append(np.zeros((layers, kv_heads, 1, head_dim), dtype=np.float32))
    out = np.empty((1, model.hidden_size), dtype=np.float32)
    args = _arguments(model, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), keys_list, values_list, out)
    if in_child:
        from . import kernel_precompile

        kernel_precompile.compile_in_child([("batch_step", kernel_precompile.signature_of(args))])
    numba.set_num_threads(min(model.threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    compiled()(*args)


def _arguments(
    model, tokens: np.ndarray, positions: np.ndarray, keys_list, values_list, out: np.ndarray, packed: bool = True
) -> tuple:
    """batch_step_py's arguments: its compiled copy's (the weights packed), or with
    `packed=False` the plain twin's."""
    a = model._kernel_args
    return (
        tokens,
        positions,
        a["embed_q"],
        a["embed_s"],
        a["embed_scale"],
        *a["packed_weights" if packed else "weights"],
        a["norms"],
        a["qk_norms"],
        a["sliding"],
        a["inv_freq"],
        a["window"],
        keys_list,
        values_list,
        a["eps"],
        a["scaling"],
        a["heads"],
        a["final_norm"],
        out,
    )


def step_states(model, states, tokens, *, python: bool = False, threads: int | None = None) -> np.ndarray:
    """One decode step of each parked model state (cached_model.ModelState of a lean
    model) with its next token: state r's cached sequence grows by tokens[r] (its keys,
    values and final hidden row). Returns the hidden rows (B, hidden). `python`: the
    plain-Python twin instead of the compiled kernel (tests); `threads`: the compiled
    kernel's (default: the model's)."""
    from .cached_model import append_rows

    b = len(states)
    if b != len(tokens) or b == 0:
        raise ValueError(f"{b} states for {len(tokens)} tokens")
    toks = np.asarray(tokens, dtype=np.int64)
    positions = np.empty(b, dtype=np.int64)
    for r, state in enumerate(states):
        f = state.fields
        pos = int(f["_tokens"].size)
        if f["_cache"].filled != pos:
            raise ValueError(f"state {r} caches {f['_cache'].filled} positions for {pos} tokens")
        if pos + 1 > model.max_context:
            raise ValueError(f"state {r} is full ({pos} of {model.max_context} positions)")
        f["_cache"].reserve(pos + 1)
        positions[r] = pos
    out = np.empty((b, model.hidden_size), dtype=np.float32)
    if python:
        keys_list = [s.fields["_cache"].k for s in states]
        values_list = [s.fields["_cache"].v for s in states]
        batch_step_py(*_arguments(model, toks, positions, keys_list, values_list, out, packed=False))
    else:
        import numba
        from numba.typed import List

        keys_list, values_list = List(), List()
        for s in states:
            keys_list.append(s.fields["_cache"].k)
            values_list.append(s.fields["_cache"].v)
        numba.set_num_threads(min(threads or model.threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
        compiled()(*_arguments(model, toks, positions, keys_list, values_list, out))
    model.stats.forward_passes += 1
    model.stats.tokens_prefilled += b
    for r, state in enumerate(states):
        f = state.fields
        f["_cache"].filled = int(positions[r]) + 1
        f["_tokens"] = np.append(f["_tokens"], toks[r])
        f["_hidden_buffer"], f["_hidden"] = append_rows(f["_hidden_buffer"], f["_hidden"], out[r : r + 1])
    return out


@dataclass(eq=False)
class _Step:
    state: Any  # a cached_model.ModelState
    token: int | None  # None: the state's sequence is cached up to `cached`, only its head runs
    ids: np.ndarray | None = None  # the head's rows for this step (None: all of them)
    cached: int = 0
    job: int = field(default_factory=threading.get_ident)  # the job's thread
    logits: np.ndarray | None = None
    error: BaseException | None = None
    done: bool = False
    at: float = field(default_factory=time.perf_counter)
    forward_ms: float = 0.0  # the batched forward it ran in


def _batch_heads(model, rows: np.ndarray, batch: list[_Step], threads: int | None = None) -> None:
    """Each step's logits from its hidden row: the rows that want the whole vocabulary in
    one product (the head's weights read once for all of them), the restricted ones each
    over its own ids (a few thousand rows read in place)."""
    full = [r for r, s in enumerate(batch) if s.ids is None]
    if full:
        logits = model._head(np.ascontiguousarray(rows[full]), None, threads=threads)
        for i, r in enumerate(full):
            batch[r].logits = logits[i]
    for r, s in enumerate(batch):
        if s.ids is not None:
            if s.ids.size == 0:  # a prefill's step: no logits wanted
                s.logits = np.zeros(0, dtype=np.float32)
            else:
                s.logits = model._head(rows[r : r + 1], s.ids, threads=threads)[0]


@dataclass
class BatchStats:
    batches: int = 0
    rows: int = 0  # steps run in batches (rows / batches: the mean batch size)
    largest: int = 0


class StepBatcher:
    """Runs the decode steps that concurrent jobs hand in as batched forwards (see the
    module docstring). `baton`: the lock every job holds while it runs engine work; a job
    calls `enter()` after taking it and `leave()` before letting it go for good."""

    def __init__(
        self,
        model,
        baton,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        round_wait_s: float = DEFAULT_ROUND_WAIT_S,
        python: bool = False,
        threads: int | None = None,
    ):
        """`threads`: of a batch of several steps (default: model.batch_threads()); a
        batch of one runs on the model's own threads."""
        from .model import batch_threads

        self.model = model
        self.threads = max(int(threads or batch_threads()), int(model.threads))
        self.baton = baton
        self.window_s = float(window_s)
        self.round_wait_s = float(round_wait_s)
        # Jobs (their threads) that have handed in a step since they entered: each batch
        # waits for their next steps, so that the decoding jobs go in step, one forward
        # for all of them.
        self._decoding: set[int] = set()
        self._last_end = 0.0
        self.python = python
        self.stats = BatchStats()
        self._cond = threading.Condition()
        self._waits = threading.local()  # each job thread's own wait times (take_waits)
        self._active = 0
        self._queue: list[_Step] = []
        self._running = False
        self._arriving = 0

    def arrive(self) -> None:
        """A completion is about to wait for the baton (see `alone`)."""
        with self._cond:
            self._arriving += 1

    def arrived(self) -> None:
        with self._cond:
            self._arriving -= 1

    @property
    def alone(self) -> bool:
        """Whether the job holding the baton is the only completion running or waiting to:
        then its step runs unbatched (a batch of one is slower) and keeps the baton."""
        return self._active < 2 and self._arriving == 0

    def enter(self) -> None:
        with self._cond:
            self._active += 1

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            self._decoding.discard(threading.get_ident())
            self._cond.notify_all()

    @property
    def active(self) -> int:
        return self._active

    def step(self, state, token: int | None, ids: np.ndarray | None = None, *, cached: int = 0) -> np.ndarray:
        """The logits after `token` follows the state's cached sequence (which grows by
        it), or with `token` None after the state's first `cached` tokens (already run: a
        head only): all of the vocabulary's, or those of `ids` in their order, computed in
        a batch with the other jobs' steps; called holding the baton, which is let go while
        the step waits. The head is part of the batch: a full head over the vocabulary
        reads more weights than the whole body, and the batch's rows that need it share
        one read."""
        if token is None and not 0 < cached <= state.fields["_hidden"].shape[0]:
            raise ValueError(f"a head after {cached} tokens of a state holding {state.fields['_hidden'].shape[0]}")
        s = _Step(state, None if token is None else int(token), ids, cached)
        with self._cond:
            self._decoding.add(s.job)
            self._queue.append(s)
            self._cond.notify_all()
        t0 = time.perf_counter()
        self.baton.release()
        try:
            self._drive(s)
        finally:
            t1 = time.perf_counter()
            self.baton.acquire()
            t2 = time.perf_counter()
            waits = self._thread_waits()
            waits["window"] += max(0.0, (t1 - t0) * 1e3 - s.forward_ms)
            waits["baton"] += (t2 - t1) * 1e3
        if s.error is not None:
            raise s.error
        assert s.logits is not None
        return s.logits

    def take_turn(self) -> None:
        """Called holding the baton before a forward of the job's own (not a batched step):
        jobs waiting for the baton go first (a baton without turns, kept), and the next
        batch does not wait for this job's step (it hands one in after its forward)."""
        me = threading.get_ident()
        if me in self._decoding:
            with self._cond:
                self._decoding.discard(me)
                self._cond.notify_all()
        pass_on = getattr(self.baton, "pass_on", None)
        if pass_on is None:
            return
        t0 = time.perf_counter()
        if pass_on():
            self._thread_waits()["baton"] += (time.perf_counter() - t0) * 1e3

    def waited_for_model(self, ms: float) -> None:
        self._thread_waits()["model"] += ms

    def _thread_waits(self) -> dict[str, float]:
        waits = getattr(self._waits, "ms", None)
        if waits is None:
            waits = self._waits.ms = {"window": 0.0, "baton": 0.0, "model": 0.0}
        return waits

    def take_waits(self) -> dict[str, float]:
        """The calling thread's waits since its last call (ms): "window", in a step for the
        batch to fill and for other batches ahead of it (not its own forward); "baton", to
        take the baton back after the step or a turn given to others (another job's
        Python, prefill or CPC holds it); "model", for the model before a forward of its
        own (a batch or another job's forward runs)."""
        waits = dict(self._thread_waits())
        self._waits.ms = None
        return waits

    def _drive(self, mine: _Step) -> None:
        while True:
            with self._cond:
                while True:
                    if mine.done:
                        return
                    if not self._running and self._queue:
                        wait = self._wait_left()
                        if wait <= 0:
                            batch, self._queue = self._queue, []
                            self._running = True
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
            self._run(batch)

    def _wait_left(self) -> float:
        """Seconds the queued steps still wait before they run as a batch (0: now): for
        the decoding jobs not in the queue (up to `round_wait_s` after the last batch ended
        or the first step came, whichever is later), then for the other jobs inside the
        engine (up to `window_s`)."""
        now = time.perf_counter()
        queued = {s.job for s in self._queue}
        if not self._decoding <= queued:
            return self.round_wait_s - (now - max(self._queue[0].at, self._last_end))
        if len(self._queue) >= self._active:
            return 0.0
        return self.window_s - (now - self._queue[0].at)

    def _run(self, batch: list[_Step]) -> None:
        try:
            # The model's lock: a job holding the baton may be in a forward of its own
            # (a prefill, CPC's scoring); the two never run at once.
            with self.model._lock:
                t0 = time.perf_counter()
                threads = self.threads if len(batch) > 1 else self.model.threads
                rows = np.empty((len(batch), self.model.hidden_size), dtype=np.float32)
                run = [r for r, s in enumerate(batch) if s.token is not None]
                if run:
                    stepped = [batch[r] for r in run]
                    rows[run] = step_states(
                        self.model,
                        [s.state for s in stepped],
                        [s.token for s in stepped],
                        python=self.python,
                        threads=threads,
                    )
                for r, s in enumerate(batch):
                    if s.token is None:
                        rows[r] = s.state.fields["_hidden"][s.cached - 1]
                _batch_heads(self.model, rows, batch, threads)
                forward_ms = (time.perf_counter() - t0) * 1e3
            for s in batch:
                s.forward_ms = forward_ms
        except BaseException as e:  # each job re-raises it in its own thread
            for s in batch:
                s.error = e
        with self._cond:
            for s in batch:
                s.done = True
            self._running = False
            self._last_end = time.perf_counter()
            self.stats.batches += 1
            self.stats.rows += len(batch)
            self.stats.largest = max(self.stats.largest, len(batch))
            self._cond.notify_all()


__all__ = ["StepBatcher", "batch_step_py", "cached", "compiled", "step_states", "supports", "BatchStats"]
