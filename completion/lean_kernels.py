"""One compiled call per decode step of the lean Gemma 3 forward.

A decode step of Gemma 3 270M is 18 layers of small operations on one row: four int8
matrix-vector products, two RMSNorms, QK-norms, a rotation, attention over the cached
keys and a gated MLP. Issued as torch operations that is a few hundred dispatches, each
costing more than its arithmetic; here the whole stack of layers is one numba function
that releases the GIL and allocates nothing but its scratch rows.

- The int8 products (`_matvec`) read each weight row once, convert it to float32 in
  registers and sum 64 products per scale group, as `quantized.int8_rows_py` does; their
  output rows are spread over numba's threads (`prange`), which is where a second core
  helps: every other part of the step is far smaller than the weights.
- Attention (`_attend_into`) reads each cached key and value row, contiguous per head,
  for the query heads that share it (grouped-query attention); its inner loops run over
  one such row with float32 accumulators, so they vectorise; a sliding layer reads only
  its window; the softmax is numerically stable.
- The KV cache is the caller's preallocated buffer: the step writes the new position's
  key and value into it, so the next step (or a batched forward) sees them.

`decode_step_py` is the plain-Python twin (prange is range outside numba) that tests run
against the compiled function on a small random model.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numpy as np
from numba import prange

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# The scale group of the int8 matrices (quantized.GROUP), a literal so that the products
# unroll a whole group.
GROUP = 64


def _row_sum(w, scales, x):
    """sum_k w[k] * scales[k // group] * x[k] for one weight row (int8, or float32 already
    converted) and its group scales, added up group by group in one fixed order, so a
    row's result is the same whichever product or row count asks for it. A group of the
    usual size (`GROUP`, a compile-time constant) is one fully unrolled run of vector
    loads, conversions and multiply-adds with no loop bookkeeping; other sizes take the
    general loop. Inlined into the compiled products (compiled())."""
    n_groups = scales.shape[0]
    gs = w.shape[0] // n_groups
    total = np.float32(0.0)
    for g in range(n_groups):
        base = g * gs
        acc = np.float32(0.0)
        if gs == GROUP:
            for k in range(GROUP):
                acc += np.float32(w[base + k]) * x[base + k]
        else:
            for k in range(gs):
                acc += np.float32(w[base + k]) * x[base + k]
        total += acc * scales[g]
    return total


def _layer(group, li, dtype):
    """Layer li's matrix of a group of per-layer matrices (a tuple here). The compiled
    kernels bind this name to engine._views.member_2d, which also reads the group packed
    by address (`pack_layers`), the form the model passes: numba compiles a tuple of
    matrices member by member, a packed group as one array."""
    return group[li]


def layer_reader():
    """What `_layer` is bound to in the compiled kernels: engine._views.member_2d, or the
    plain `_layer` where numba's JIT is off (the "compiled" kernels are then the twins)."""
    import numba

    from midword.engine._views import member_2d

    return _layer if numba.config.DISABLE_JIT else member_2d


def stamp_layer_reader(dispatcher) -> None:
    """Adds the layer reader's module to the disk-cache stamp of a kernel that reads
    per-layer weights (numba stamps only the kernel's own file)."""
    from midword.engine import _views
    from midword.engine._jit import stamp_dependencies

    stamp_dependencies(dispatcher, (_views.__file__,))


def pack_layers(weights: tuple) -> tuple:
    """The step's per-layer weight groups (qkv_q, qkv_s, o_q, ...: tuples of int8 and
    float32 matrices) packed by address for the compiled kernels. The caller keeps the
    matrices alive as long as the packed groups are used."""
    import numba

    from midword.engine._views import pack

    if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]  # the "compiled" kernels are the plain twins
        return tuple(weights)
    try:
        return tuple(pack(group, (group[0].dtype.type,) * len(group)) for group in weights)
    except ValueError:
        # A matrix `pack` does not take (read-only, say): the kernels read tuples too.
        return tuple(weights)


def matvec_py(q, scales, x, out):
    """out[m, n] = sum_k q[n, k] * scales[n, k // group] * x[m, k] for an int8 (out, in)
    matrix and a few rows x[m]. A row's sum is added up group by group in the same order
    whatever the number of rows (`_row_sum`), so a position's result does not depend on
    the positions computed with it."""
    n_out = q.shape[0]
    rows = x.shape[0]
    for n in prange(n_out):
        for m in range(rows):
            out[m, n] = _row_sum(q[n], scales[n], x[m])


def head_rows_py(q, scales, ids, x, out):
    """out[m, j] = row ids[j] of the int8 matrix (q, scales) times x[m]: the output head
    restricted to the ids a mask allows, read in place (no gathered or dequantized copy of
    the rows), summed per scale group as `matvec_py` does; parallel over the ids."""
    rows = x.shape[0]
    for j in prange(ids.shape[0]):
        n = ids[j]
        for m in range(rows):
            out[m, j] = _row_sum(q[n], scales[n], x[m])


def _rms_into(x, weight, eps, out):
    """out = x / rms(x) * weight (the weight is Gemma's 1 + scale, precomputed)."""
    ss = 0.0
    for i in range(x.shape[0]):
        ss += np.float64(x[i]) * np.float64(x[i])
    inv = np.float32(1.0 / math.sqrt(ss / x.shape[0] + eps))
    for i in range(x.shape[0]):
        out[i] = x[i] * inv * weight[i]


def _attend_into(qr, keys, values, start, stop, scaling, scores, attn):
    """Grouped-query attention of the query heads qr (heads * head_dim) over one layer's
    cached positions [start, stop) of keys/values (kv_heads, capacity, head_dim), into
    attn (heads * head_dim); scores is scratch of at least (heads / kv_heads, stop - start).

    Each key and value row is read once for the `rep` query heads that share it; every
    inner loop runs over a contiguous head_dim row with float32 accumulators, so it
    vectorises."""
    kv_heads = keys.shape[0]
    head_dim = keys.shape[2]
    rep = qr.shape[0] // head_dim // kv_heads
    length = stop - start
    for kh in range(kv_heads):
        kk = keys[kh, start:stop]
        vv = values[kh, start:stop]
        q = qr[kh * rep * head_dim : (kh + 1) * rep * head_dim].reshape((rep, head_dim))
        o = attn[kh * rep * head_dim : (kh + 1) * rep * head_dim].reshape((rep, head_dim))
        for r in range(rep):
            qq = q[r]
            sr = scores[r]
            peak = np.float32(-np.inf)
            for j in range(length):
                kr = kk[j]
                acc = np.float32(0.0)
                for i in range(head_dim):
                    acc += qq[i] * kr[i]
                acc *= scaling
                sr[j] = acc
                peak = max(peak, acc)
            total = np.float32(0.0)
            for j in range(length):
                e = np.float32(math.exp(sr[j] - peak))
                sr[j] = e
                total += e
            inv = np.float32(1.0) / total
            orow = o[r]
            for i in range(head_dim):
                orow[i] = np.float32(0.0)
            for j in range(length):
                p = sr[j] * inv
                vr = vv[j]
                for i in range(head_dim):
                    orow[i] += p * vr[i]


def decode_step_py(
    tokens,
    pos,
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
    keys,
    values,
    eps,
    scaling,
    heads,
    final_norm,
    out,
):
    """The final hidden rows out (n, hidden) of the n `tokens` at positions pos, pos + 1,
    ..., the cache holding positions [0, pos) of every layer in keys/values (layers,
    kv_heads, capacity, head_dim); the tokens' own keys and values are written at their
    positions. Each row attends causally, so row r is what a step of its own would give.

    Per layer li: qkv_q[li]/qkv_s[li] (fused query, key, value projection), o, gu (fused
    gate and up), d (down) int8 matrices with their scales; norms[li] the four (1 + w)
    RMSNorm weights (input, post-attention, pre-MLP, post-MLP), qk_norms[li] the query
    and key norms; sliding[li] whether the layer sees only the last `window` positions;
    inv_freq[li] its rotary frequencies."""
    hidden = embed_q.shape[1]
    n_layers = norms.shape[0]
    kv_heads = keys.shape[1]
    head_dim = keys.shape[3]
    half = head_dim // 2
    rep = heads // kv_heads
    q_size = heads * head_dim
    kv_size = kv_heads * head_dim
    inter = _layer(gu_q, 0, np.int8).shape[0] // 2
    egs = hidden // embed_s.shape[1]
    n = tokens.shape[0]

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
    scores = np.empty((rep, pos + n), dtype=np.float32)

    for li in range(n_layers):
        for r in range(n):
            _rms_into(x[r], norms[li, 0], eps, h[r])
        matvec_py(_layer(qkv_q, li, np.int8), _layer(qkv_s, li, np.float32), h, qkv)
        for r in range(n):
            p = pos + r
            for i in range(half):
                angle = np.float32(p) * inv_freq[li, i]
                cos[i] = np.float32(math.cos(angle))
                sin[i] = np.float32(math.sin(angle))
            # Query heads: QK-norm, then the half-split rotation.
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
        for r in range(n):
            stop = pos + r + 1
            start = 0
            if sliding[li] and window > 0 and stop > window:
                start = stop - window
            _attend_into(qr[r], keys[li], values[li], start, stop, scaling, scores, attn[r])

        matvec_py(_layer(o_q, li, np.int8), _layer(o_s, li, np.float32), attn, t)
        for r in range(n):
            _rms_into(t[r], norms[li, 1], eps, h[r])
            for i in range(hidden):
                x[r, i] += h[r, i]
            _rms_into(x[r], norms[li, 2], eps, h[r])
        matvec_py(_layer(gu_q, li, np.int8), _layer(gu_s, li, np.float32), h, gu)
        for r in range(n):
            for i in range(inter):
                g = gu[r, i]
                inner = np.float32(SQRT_2_OVER_PI) * (g + np.float32(0.044715) * g * g * g)
                m[r, i] = np.float32(0.5) * g * (np.float32(1.0) + np.float32(math.tanh(inner))) * gu[r, inter + i]
        matvec_py(_layer(d_q, li, np.int8), _layer(d_s, li, np.float32), m, t)
        for r in range(n):
            _rms_into(t[r], norms[li, 3], eps, h[r])
            for i in range(hidden):
                x[r, i] += h[r, i]
    for r in range(n):
        _rms_into(x[r], final_norm, eps, out[r])


_compiled = None
_compile_lock = threading.Lock()


class Kernels(NamedTuple):
    step: object
    matvec: object
    attend: object
    head_rows: object


def compiled():
    """The compiled step, matvec and attention (the matvec parallel over output rows; the thread count is
    numba's, set per call by the caller). The model's start asks for them on a thread of its own while a
    first step may ask too, hence the lock: one set of dispatchers."""
    global _compiled
    with _compile_lock:
        if _compiled is None:
            import numba

            opts = dict(cache=True, nogil=True, fastmath=True, boundscheck=False)
            rms = numba.njit(**opts)(_rms_into)
            attend = numba.njit(**opts)(_attend_into)
            # The kernels call the compiled helpers through their globals (the row sum
            # inlined into each product). The step's matvec is inlined into the step, whose
            # own parallel compilation turns the prange into threads: a cached serial
            # function calling a parallel one crashes when it is loaded from numba's cache
            # in a later process (numba issue 8578).
            g = dict(decode_step_py.__globals__)
            g.update(
                _row_sum=numba.njit(inline="always", **opts)(_row_sum),
                _rms_into=rms,
                _attend_into=attend,
                _layer=layer_reader(),
            )
            matvec_fn = _rebind(matvec_py, g)
            mv = numba.njit(parallel=True, **opts)(matvec_fn)
            g["matvec_py"] = numba.njit(inline="always", **opts)(matvec_fn)
            step = numba.njit(parallel=True, **opts)(_rebind(decode_step_py, g))
            stamp_layer_reader(step)
            head_rows = numba.njit(parallel=True, **opts)(_rebind(head_rows_py, g))
            _compiled = Kernels(step, mv, attend, head_rows)
        return _compiled


def _rebind(fn, globals_):
    import types

    new = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    return new
