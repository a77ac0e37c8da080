"""Int8 weight-only linear layers: the decode step reads a quarter of the bytes.

On a CPU a decoding step multiplies one hidden row by every weight matrix, so its time is
the time to stream the weights from memory: 392 MB per step for Gemma 3 270M's body in
float32, 670 MB more for its 262k-row output head. Storing the weights as int8 with one
float32 scale per group of 64 inputs cuts that by 4x; activations stay float32, so the
outlier-heavy hidden states of Gemma lose nothing (dynamic int8 activation quantization
as in torch.ao gives a KL of 0.6 nats per token on this model; weight-only int8 in groups
of 64 gives 0.0014, and the default model's weights came from a 4-bit GGUF anyway).

Few rows (decode steps, a handful of head rows) go through `int8_rows`, a compiled
kernel; many rows (prefill, token trees) go through a float32 matmul on the
*dequantized* weights, which are exactly `q * scale`. Both paths therefore compute with
the same weights and agree to float rounding, so a sequence's logits do not depend on
how it was prefilled. The plain-Python `int8_rows_py` is the kernel's reference twin.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from midword.engine._jit import njit

GROUP = 64
# Up to this many rows the int8 kernel beats a float32 matmul (it reads each weight row
# once for all of them); beyond it the matmul's blocking wins.
KERNEL_MAX_ROWS = 12
# Matrices with at least this many weights are split over the caller's threads (the
# 262k-row output head; a body layer is done before other threads would wake up).
PARALLEL_MIN_WEIGHTS = 1 << 23
# Output rows dequantized at once when a matrix without its float32 twin meets many rows
# (a few MB of floats: stays in cache next to the matmul reading it).
DEQUANT_BLOCK = 2048


def group_size(in_features: int, group: int = GROUP) -> int:
    """The scale group for a matrix with `in_features` columns: GROUP when it divides them,
    else one scale per row."""
    return group if in_features % group == 0 else in_features


def quantize(weight: np.ndarray, group: int = GROUP) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 quantization of an (out, in) float matrix, one scale per `group`
    consecutive inputs of a row: returns (q int8 (out, in), scales float32 (out, in/group))."""
    w = _as_matrix(weight)
    n, k = w.shape
    gs = group_size(k, group)
    q = np.empty((n, k), dtype=np.int8)
    scales = np.empty((n, k // gs), dtype=np.float32)
    deq = np.empty((n, k), dtype=np.float32)
    _quantize_kernel()(w, gs, q, scales, deq)
    return q, scales


def _as_matrix(weight) -> np.ndarray:
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight matrix, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("the weight matrix holds NaN or infinite values")
    return w


def quantize_reference(weight: np.ndarray, group: int = GROUP) -> tuple[np.ndarray, np.ndarray]:
    """`quantize` in whole-array numpy: the independent definition tests compare against."""
    w = _as_matrix(weight)
    n, k = w.shape
    gs = group_size(k, group)
    blocks = w.reshape(n, k // gs, gs)
    scales = np.abs(blocks).max(axis=2) / 127.0
    # An all-zero group keeps scale 0 and quantizes to zeros.
    safe = np.where(scales > 0, scales, 1.0)
    q = np.clip(np.rint(blocks / safe[:, :, None]), -127, 127).astype(np.int8)
    return q.reshape(n, k), scales.astype(np.float32)


def quantize_py(w, gs, q, scales, deq):
    """One pass per group: scale, int8 values and their dequantized floats (what the
    float32 matmul path multiplies with)."""
    n_out, k_in = w.shape
    for n in range(n_out):
        for g in range(k_in // gs):
            base = g * gs
            peak = np.float32(0.0)
            for k in range(gs):
                a = abs(w[n, base + k])
                if a > peak:
                    peak = a
            scale = np.float32(peak / np.float32(127.0))
            scales[n, g] = scale
            for k in range(gs):
                v = 0.0
                if scale > 0:
                    v = min(127.0, max(-127.0, np.rint(w[n, base + k] / scale)))
                q[n, base + k] = np.int8(v)
                deq[n, base + k] = np.float32(v) * scale


_quantize_compiled = None


def _quantize_kernel():
    global _quantize_compiled
    if _quantize_compiled is None:
        _quantize_compiled = njit(quantize_py)
    return _quantize_compiled


def dequantize(q: np.ndarray, scales: np.ndarray) -> np.ndarray:
    n, k = q.shape
    g = scales.shape[1]
    return (q.reshape(n, g, k // g).astype(np.float32) * scales[:, :, None]).reshape(n, k)


def dequantize_into_py(q, scales, lo, out):
    """out[i] = row lo + i of the matrix, exactly q * scale (the float32 values `dequantize`
    gives), in one pass, parallel over rows: the block a many-row product multiplies with."""
    n_groups = scales.shape[1]
    gs = q.shape[1] // n_groups
    for i in prange(out.shape[0]):
        n = lo + i
        for g in range(n_groups):
            scale = scales[n, g]
            base = g * gs
            for k in range(gs):
                out[i, base + k] = np.float32(q[n, base + k]) * scale


_dequantize_compiled = None


def dequantize_kernel():
    """The compiled `dequantize_into_py` (numba's dispatcher, with its disk cache)."""
    global _dequantize_compiled
    if _dequantize_compiled is None:
        import numba

        _dequantize_compiled = numba.njit(parallel=True, cache=True, nogil=True, boundscheck=False)(dequantize_into_py)
    return _dequantize_compiled


def dequantize_arguments(q: np.ndarray, scales: np.ndarray, lo: int, out: np.ndarray) -> tuple:
    # A memory map is read through a plain ndarray view of it (numba types subclasses apart).
    return np.asarray(q), np.asarray(scales), lo, out


def dequantize_into(q: np.ndarray, scales: np.ndarray, lo: int, out: np.ndarray, threads: int) -> None:
    """The compiled `dequantize_into_py` on `threads` of numba's threads."""
    import numba

    kernel = dequantize_kernel()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]  # set at import
    kernel(*dequantize_arguments(q, scales, lo, out))


def int8_rows_py(q, scales, x, out):
    """out[m, n] = sum_k x[m, k] * q[n, k] * scales[n, k // group], for few rows m."""
    n_out, k_in = q.shape
    n_groups = scales.shape[1]
    gs = k_in // n_groups
    rows = x.shape[0]
    if rows <= 2:
        # Converting the int8 row on the fly costs nothing next to reading it.
        for n in range(n_out):
            for m in range(rows):
                total = np.float32(0.0)
                for g in range(n_groups):
                    acc = np.float32(0.0)
                    base = g * gs
                    for k in range(gs):
                        acc += np.float32(q[n, base + k]) * x[m, base + k]
                    total += acc * scales[n, g]
                out[m, n] = total
        return
    # More rows: dequantize each weight row once and reuse it for four rows at a time.
    w = np.empty(k_in, dtype=np.float32)
    for n in range(n_out):
        for g in range(n_groups):
            scale = scales[n, g]
            base = g * gs
            for k in range(gs):
                w[base + k] = np.float32(q[n, base + k]) * scale
        m = 0
        while m + 4 <= rows:
            a0 = np.float32(0.0)
            a1 = np.float32(0.0)
            a2 = np.float32(0.0)
            a3 = np.float32(0.0)
            for k in range(k_in):
                wk = w[k]
                a0 += wk * x[m, k]
                a1 += wk * x[m + 1, k]
                a2 += wk * x[m + 2, k]
                a3 += wk * x[m + 3, k]
            out[m, n] = a0
            out[m + 1, n] = a1
            out[m + 2, n] = a2
            out[m + 3, n] = a3
            m += 4
        while m < rows:
            acc = np.float32(0.0)
            for k in range(k_in):
                acc += w[k] * x[m, k]
            out[m, n] = acc
            m += 1


def _compile_int8_rows():
    import numba

    # fastmath lets the group sums vectorise (reassociation only; no NaN/inf shortcuts
    # matter for finite weights and activations).
    return numba.njit(cache=True, nogil=True, fastmath=True, boundscheck=False)(int8_rows_py)


_kernel = None


def int8_rows_kernel():
    """The compiled `int8_rows_py` (numba's dispatcher, with its disk cache)."""
    global _kernel
    if _kernel is None:
        _kernel = _compile_int8_rows()
    return _kernel


def int8_rows(q, scales, x, out, threads: int = 1, min_parallel: int | None = None):
    """The compiled kernel; with `threads` > 1 a matrix of at least `min_parallel` weights
    (default PARALLEL_MIN_WEIGHTS) is split by output rows over that many threads (the
    kernel releases the GIL). Small matrices stay on one thread: waking others costs more
    than they save."""
    kernel = int8_rows_kernel()
    n_out = q.shape[0]
    if threads <= 1 or q.size < (PARALLEL_MIN_WEIGHTS if min_parallel is None else min_parallel) or n_out < 2:
        kernel(q, scales, x, out)
        return
    step = -(-n_out // threads)
    pieces = [(lo, min(n_out, lo + step)) for lo in range(0, n_out, step)]
    # Each thread writes its own block of columns; a contiguous copy keeps the kernel's
    # stores sequential.
    parts = [np.empty((x.shape[0], hi - lo), dtype=np.float32) for lo, hi in pieces]
    futures = [
        _pool(threads).submit(kernel, q[lo:hi], scales[lo:hi], x, part)
        for (lo, hi), part in zip(pieces[1:], parts[1:], strict=False)
    ]
    lo, hi = pieces[0]
    kernel(q[lo:hi], scales[lo:hi], x, parts[0])
    for f in futures:
        f.result()
    for (lo, hi), part in zip(pieces, parts, strict=False):
        out[:, lo:hi] = part


_executor = None
_executor_threads = 0


def _pool(threads: int):
    global _executor, _executor_threads
    if _executor is None or _executor_threads != threads:
        from concurrent.futures import ThreadPoolExecutor

        if _executor is not None:
            _executor.shutdown(wait=False)
        _executor = ThreadPoolExecutor(max_workers=max(1, threads - 1), thread_name_prefix="midword-int8")
        _executor_threads = threads
    return _executor


class Int8Weights:
    """A quantized (out, in) matrix, with or without its dequantized float32 twin.

    Without the twin (`keep_dequantized=False`, or made by `from_quantized`) the matrix
    holds a quarter of the bytes; products over many rows then dequantize it block by
    block (`DEQUANT_BLOCK` output rows at a time) for a float32 matmul, which gives the
    same values as the twin would."""

    def __init__(self, weight, group: int = GROUP, *, in_place: bool = False, keep_dequantized: bool = True):
        """`weight`: a float array, or a torch tensor. With `in_place`, `weight` (float32,
        contiguous, on the CPU) itself is overwritten with the dequantized values and
        becomes `dequantized`: no second copy of a large matrix, and tensors sharing its
        storage (a tied embedding table) see the same weights."""
        if hasattr(weight, "detach"):  # a torch tensor, without importing torch here
            source = weight.detach()
            if in_place and not (
                str(source.dtype) == "torch.float32" and source.is_contiguous() and source.device.type == "cpu"
            ):
                raise ValueError("in-place quantization needs a contiguous float32 CPU tensor")
            array = source.numpy() if in_place else source.float().cpu().numpy()
        else:
            array = np.asarray(weight)
            if in_place and not (array.dtype == np.float32 and array.flags.c_contiguous and array.flags.writeable):
                raise ValueError("in-place quantization needs a contiguous, writable float32 array")
        # A contiguous float32 array comes back as itself: in place, `w` is `weight`'s memory.
        w = _as_matrix(array)
        n, k = w.shape
        gs = group_size(k, group)
        self.q = np.empty((n, k), dtype=np.int8)
        self.scales = np.empty((n, k // gs), dtype=np.float32)
        # Each group is read in full before it is written, so the output may be the input.
        deq = w if in_place else np.empty((n, k), dtype=np.float32)
        _quantize_kernel()(w, gs, self.q, self.scales, deq)
        self.dequantized: np.ndarray | None = deq if keep_dequantized or in_place else None
        self.out_features, self.in_features = n, k
        self.threads = 1
        self.min_parallel: int | None = None

    @classmethod
    def from_quantized(cls, q: np.ndarray, scales: np.ndarray) -> "Int8Weights":
        """Wrap int8 values and their scales (arrays or memory maps) without a float twin."""
        if q.ndim != 2 or q.dtype != np.int8:
            raise ValueError(f"expected a 2-D int8 matrix, got {q.dtype} of shape {q.shape}")
        n, k = q.shape
        if (
            scales.ndim != 2
            or scales.dtype != np.float32
            or scales.shape[0] != n
            or not scales.shape[1]
            or k % scales.shape[1]
        ):
            raise ValueError(f"scales of {scales.dtype} shape {scales.shape} do not fit an int8 matrix of {q.shape}")
        self = cls.__new__(cls)
        self.q, self.scales = q, scales
        self.dequantized = None
        self.out_features, self.in_features = n, k
        self.threads = 1
        self.min_parallel = None
        return self

    @staticmethod
    def concat(parts: "list[Int8Weights]") -> "Int8Weights":
        """One matrix holding the rows of `parts` in order (a fused QKV or gate/up
        projection): each row keeps its own scales, so the products are those of the parts."""
        groups = {p.scales.shape[1] for p in parts}
        if len(groups) != 1 or len({p.in_features for p in parts}) != 1:
            raise ValueError("fused matrices need the same input size and scale groups")
        return Int8Weights.from_quantized(
            np.concatenate([p.q for p in parts]), np.concatenate([p.scales for p in parts])
        )

    def dequantize_rows(self, ids) -> np.ndarray:
        """float32 rows `ids` (an index array or a slice) of the matrix, exactly the dequantized values."""
        q = np.ascontiguousarray(self.q[ids])
        s = np.ascontiguousarray(self.scales[ids])
        g = s.shape[-1]
        w = q.reshape(*q.shape[:-1], g, self.in_features // g).astype(np.float32) * s[..., None]
        return w.reshape(q.shape)

    def matmul(self, x: np.ndarray, threads: int | None = None) -> np.ndarray:
        """x @ W.T for a float32 array x of shape (..., in); `threads`: the caller's thread
        count, used for the kernel when it is larger than the matrix's own `threads`."""
        x = np.asarray(x, dtype=np.float32)
        rows = x.size // self.in_features if x.size else 0
        own = self.threads if threads is None else max(self.threads, int(threads))
        if 0 < rows <= KERNEL_MAX_ROWS:
            flat = np.ascontiguousarray(x.reshape(rows, self.in_features))
            out = np.empty((rows, self.out_features), dtype=np.float32)
            int8_rows(
                self.q, self.scales, flat, out, own if self.min_parallel is None else self.threads, self.min_parallel
            )
            return out.reshape(*x.shape[:-1], self.out_features)
        if self.dequantized is not None:
            return x @ self.dequantized.T
        out = np.empty((*x.shape[:-1], self.out_features), dtype=np.float32)
        block = np.empty((min(DEQUANT_BLOCK, self.out_features), self.in_features), dtype=np.float32)
        for lo in range(0, self.out_features, DEQUANT_BLOCK):
            hi = min(self.out_features, lo + DEQUANT_BLOCK)
            # On one thread: numba's parallel workers and the BLAS threads of the product
            # that follows each block take turns badly over the same cores (many times
            # slower than a serial conversion).
            dequantize_into(self.q, self.scales, lo, block[: hi - lo], 1)
            np.matmul(x, block[: hi - lo].T, out=out[..., lo:hi])
        return out


def __getattr__(name):
    # The torch module wrappers moved to quantized_torch.py, so that the lean forward's
    # weights load without importing torch.
    if name in ("Int8Linear", "quantize_linears"):
        from . import quantized_torch

        return getattr(quantized_torch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
