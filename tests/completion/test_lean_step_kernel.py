"""The compiled decode step of the lean Gemma 3 forward (completion/lean_kernels.py).

On tiny random int8 Gemma 3 models (a 4-token sliding window, grouped-query attention):
the compiled step equals its plain-Python twin, writes the same key and value rows, and
decoding through it gives the logits of the matrix path and of the model's own forward.
"""

from __future__ import annotations

import numpy as np
import pytest
from byte_tokenizer import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_lean_gemma3 import PROMPT, TOL, fresh_logits, pair  # noqa: E402

from midword.completion import gemma3_lean, lean_kernels  # noqa: E402


@pytest.fixture(scope="module")
def byte_tok():
    return byte_tokenizer()


@pytest.mark.parametrize("kwargs", [{}, {"heads": 2, "kv_heads": 1}, {"window": 64}])
def test_compiled_step_equals_twin(byte_tok, kwargs):
    _, _, lean = pair(byte_tok, int8=True, seed=5, **kwargs)
    assert lean._kernel_args is not None
    toks = lean.encode_prompt(PROMPT)
    pos = len(toks) - 3
    lean.prefill(toks[:pos])
    step = lean_kernels.compiled().step
    results = []
    # The compiled step with the weights packed (as the model runs it) and as tuples.
    for fn, packed in ((step, True), (step, False), (lean_kernels.decode_step_py, False)):
        keys, values = lean._cache.k.copy(), lean._cache.v.copy()
        out = np.empty((3, lean.hidden_size), dtype=np.float32)
        fn(*lean.step_arguments(np.array(toks[pos:]), pos, keys, values, out, packed=packed))
        results.append((out, keys[:, :, : pos + 3], values[:, :, : pos + 3]))
    for got in results[:2]:
        for got_part, want in zip(got, results[2], strict=True):
            np.testing.assert_allclose(got_part, want, atol=1e-5, rtol=1e-5)
    # The positions before `pos` are untouched, the new ones are written.
    np.testing.assert_array_equal(results[0][1][:, :, :pos], lean._cache.k[:, :, :pos])
    assert np.abs(results[0][1][:, :, pos:]).max() > 0


def test_layer_groups_are_packed_unless_pack_refuses_a_matrix():
    rng = np.random.default_rng(0)
    q = tuple(rng.integers(-127, 128, (4, 64), dtype=np.int8) for _ in range(3))
    s = tuple(rng.random((4, 1), dtype=np.float32) for _ in range(3))
    packed = lean_kernels.pack_layers((q, s))
    assert [g.dtype for g in packed] == [np.int64, np.int64]
    assert packed[0][0] == q[0].ctypes.data and packed[1][3] == s[1].ctypes.data
    frozen = q[2].copy()
    frozen.flags.writeable = False
    assert lean_kernels.pack_layers(((q[0], q[1], frozen), s)) == ((q[0], q[1], frozen), s)


def test_a_run_of_positions_equals_steps_one_by_one(byte_tok):
    """Draft tokens are verified as one run: each position's logits equal those of
    decoding it alone, bit for bit, so drafted and plain decoding pick the same tokens."""
    _, _, lean = pair(byte_tok, int8=True, seed=7)
    toks = lean.encode_prompt(PROMPT)
    lean.next_logits(toks[:20])
    alone = [lean.next_logits(toks[:i]) for i in range(21, 30)]
    lean.reset()
    lean.next_logits(toks[:20])
    lean.stats.reset()
    lean.prefill(toks[:29])
    assert lean.stats.forward_passes == 1 and lean.stats.tokens_prefilled == 9
    together = [lean.next_logits(toks[:i]) for i in range(21, 30)]
    assert lean.stats.forward_passes == 1
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_array_equal(a, b)


def test_decoding_through_the_kernel_equals_the_model(byte_tok):
    hf, _, lean = pair(byte_tok, int8=True, seed=6)
    toks = lean.encode_prompt(PROMPT)
    ref = fresh_logits(hf, toks)
    plain = pair(byte_tok, int8=True, seed=6)[2]
    plain.use_kernel = False
    plain._prepare_kernel()
    assert plain._kernel_args is None
    lean.next_logits(toks[:3])
    plain.next_logits(toks[:3])
    for i in range(4, len(toks) + 1):
        got = lean.next_logits(toks[:i])
        np.testing.assert_allclose(got, ref[i - 1], atol=TOL)
        np.testing.assert_allclose(got, plain.next_logits(toks[:i]), atol=TOL)
    # Back to an earlier prefix and on along another path: the kernel overwrites the
    # cropped positions.
    other = toks[:10] + byte_tok.encode(" # x")
    np.testing.assert_allclose(lean.next_logits(other), fresh_logits(hf, other)[-1], atol=TOL)


def test_matvec_equals_dequantized_product():
    from midword.completion.quantized import dequantize, quantize

    rng = np.random.default_rng(0)
    w = rng.standard_normal((37, 128)).astype(np.float32)
    x = rng.standard_normal(128).astype(np.float32)
    q, s = quantize(w)
    mv = lean_kernels.compiled().matvec
    out = np.empty(37, dtype=np.float32)
    twin = np.empty(37, dtype=np.float32)
    mv(q, s, x[None], out[None])
    lean_kernels.matvec_py(q, s, x[None], twin[None])
    ref = dequantize(q, s) @ x
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(twin, ref, rtol=1e-5, atol=1e-5)
    # Several rows at once give each row's own result bit for bit.
    xs = rng.standard_normal((5, 128)).astype(np.float32)
    xs[2] = x
    many = np.empty((5, 37), dtype=np.float32)
    mv(q, s, xs, many)
    np.testing.assert_array_equal(many[2], out)


@pytest.mark.parametrize("in_features", [640, 96])
def test_matvec_unrolled_and_general_groups(in_features):
    """640 inputs make groups of GROUP (the unrolled path), 96 one group of 96 (the general
    loop): both give the dequantized product, in the compiled kernels and their twins."""
    from midword.completion import lean_batch
    from midword.completion.quantized import GROUP, dequantize, quantize

    assert lean_kernels.GROUP == GROUP
    rng = np.random.default_rng(1)
    w = rng.standard_normal((70, in_features)).astype(np.float32)
    xs = rng.standard_normal((3, in_features)).astype(np.float32)
    q, s = quantize(w)
    assert (in_features // s.shape[1] == GROUP) == (in_features % GROUP == 0)
    ref = xs @ dequantize(q, s).T
    ids = np.array([69, 0, 33], dtype=np.int64)
    for fn in (lean_kernels.compiled().matvec, lean_kernels.matvec_py, lean_batch.matvec_rows_py):
        out = np.empty((3, 70), dtype=np.float32)
        fn(q, s, xs, out)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
    for fn in (lean_kernels.compiled().head_rows, lean_kernels.head_rows_py):
        out = np.empty((3, ids.size), dtype=np.float32)
        fn(q, s, ids, xs, out)
        np.testing.assert_allclose(out, ref[:, ids], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("in_features", [640, 96])
def test_batched_rows_product_in_blocks_of_four_and_one(in_features):
    """The batched product takes rows four at a time, then one at a time (and one at a
    time only for groups other than GROUP wide): every count of rows from 1 to 9 gives the
    dequantized product, compiled and in the twin, and a row's result agrees with the same
    row computed alone."""
    import numba

    from midword.completion import lean_batch
    from midword.completion.quantized import dequantize, quantize

    rng = np.random.default_rng(7)
    w = rng.standard_normal((70, in_features)).astype(np.float32)
    q, s = quantize(w)
    # Compiled as lean_batch.compiled() does: its one-row tail calls the compiled row sum.
    row_sum = numba.njit(inline="always", fastmath=True)(lean_kernels._row_sum)
    globals_ = dict(lean_batch.matvec_rows_py.__globals__, _row_sum=row_sum)
    compiled = numba.njit(parallel=True, fastmath=True)(lean_kernels._rebind(lean_batch.matvec_rows_py, globals_))
    for rows in range(1, 10):
        xs = rng.standard_normal((rows, in_features)).astype(np.float32)
        ref = xs @ dequantize(q, s).T
        for fn in (compiled, lean_batch.matvec_rows_py):
            out = np.empty((rows, 70), dtype=np.float32)
            fn(q, s, xs, out)
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
            for m in range(rows):
                alone = np.empty((1, 70), dtype=np.float32)
                fn(q, s, xs[m : m + 1], alone)
                np.testing.assert_allclose(out[m], alone[0], rtol=1e-6, atol=1e-5)


def _attention_reference(qr, keys, values, start, stop, scaling):
    """Grouped-query attention in float64 numpy: the definition the kernel is checked against."""
    kv_heads, _, head_dim = keys.shape
    rep = qr.size // head_dim // kv_heads
    q = qr.reshape(kv_heads, rep, head_dim).astype(np.float64)
    k = keys[:, start:stop].astype(np.float64)
    v = values[:, start:stop].astype(np.float64)
    s = np.einsum("hrd,hjd->hrj", q, k) * scaling
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hrj,hjd->hrd", p, v).reshape(-1)


@pytest.mark.parametrize(("kv_heads", "rep", "start", "stop"), [(1, 4, 0, 37), (2, 2, 5, 37), (3, 1, 36, 37)])
def test_attention_equals_reference(kv_heads, rep, start, stop):
    """The compiled attention and its twin over a window [start, stop) of a cache with
    room beyond it (garbage there must not leak in), against float64 numpy."""
    rng = np.random.default_rng(kv_heads)
    head_dim = 32
    keys = rng.standard_normal((kv_heads, 48, head_dim)).astype(np.float32)
    values = rng.standard_normal((kv_heads, 48, head_dim)).astype(np.float32)
    keys[:, stop:] = np.nan
    values[:, stop:] = np.nan
    qr = rng.standard_normal(kv_heads * rep * head_dim).astype(np.float32) * 2
    scaling = np.float32(head_dim**-0.5)
    want = _attention_reference(qr, keys, values, start, stop, scaling)
    for fn in (lean_kernels.compiled().attend, lean_kernels._attend_into):
        scores = np.full((rep, 48), np.nan, dtype=np.float32)
        out = np.full(qr.size, np.nan, dtype=np.float32)
        fn(qr, keys, values, start, stop, scaling, scores, out)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


_CACHED_STEP_SCRIPT = """
import numpy as np
from midword.completion import lean_kernels

rng = np.random.default_rng(0)
layers, hidden, heads, kv_heads, head_dim, inter, vocab = 2, 64, 2, 1, 32, 128, 50

def mat(n, k):
    return rng.integers(-127, 128, (n, k), dtype=np.int8), rng.random((n, k // 64), dtype=np.float32) * 0.02

def per_layer(n, k):
    pairs = [mat(n, k) for _ in range(layers)]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)

embed_q, embed_s = mat(vocab, hidden)
qkv, o = per_layer((heads + 2 * kv_heads) * head_dim, hidden), per_layer(hidden, heads * head_dim)
gu, d = per_layer(2 * inter, hidden), per_layer(hidden, inter)
keys = np.zeros((layers, kv_heads, 8, head_dim), dtype=np.float32)
values = np.zeros_like(keys)
out = np.empty((3, hidden), dtype=np.float32)
lean_kernels.compiled().step(
    np.array([3, 1, 4]), 0, embed_q, embed_s, np.float32(8.0), *qkv, *o, *gu, *d,
    np.ones((layers, 4, hidden), dtype=np.float32), np.ones((layers, 2, head_dim), dtype=np.float32),
    np.array([True, False]), np.full((layers, head_dim // 2), 0.1, dtype=np.float32), 2, keys, values,
    1e-6, np.float32(head_dim**-0.5), heads, np.ones(hidden, dtype=np.float32), out,
)
print(float(out.sum()))
"""


@pytest.mark.slow
def test_the_step_loaded_from_numbas_cache_runs(tmp_path):
    """The step compiled in one process and loaded from numba's disk cache in the next
    gives the same rows (a serial cached function calling a parallel one crashed here
    when loaded from the cache: numba issue 8578)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [
        subprocess.run(
            [sys.executable, "-c", _CACHED_STEP_SCRIPT], env=env, capture_output=True, text=True, timeout=600
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert any(tmp_path.rglob("*decode_step_py*.nbc")), "the first run wrote the step to the cache"
    # The freshly compiled and the cached code may round differently in the last place.
    first, second = (float(run.stdout) for run in runs)
    assert second == pytest.approx(first, rel=1e-5)


def test_restricted_head_equals_dequantized_rows(byte_tok):
    """The compiled restricted head (allowed rows read in place) against the float product
    with the dequantized rows, and its twin."""
    _, _, lean = pair(byte_tok, int8=True, seed=8)
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((3, lean.hidden_size)).astype(np.float32)
    ids = np.array([299, 0, 17, 17, 5])
    got = lean._head(hidden, ids)
    want = hidden @ lean._head_int8.dequantize_rows(ids).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    twin = np.empty_like(got)
    a = lean._kernel_args
    lean_kernels.head_rows_py(a["embed_q"], a["embed_s"], ids, hidden, twin)
    np.testing.assert_allclose(twin, got, rtol=1e-6, atol=1e-6)
    with pytest.raises(IndexError, match="head ids"):
        lean._head(hidden, np.array([300]))


@pytest.mark.parametrize("window", [4, 512])
def test_prefill_equals_steps_one_by_one(byte_tok, window):
    """A prompt prefilled in one chunk (longer than the compiled runs: the float32 matrix
    path, causal attention from position 0, with a float mask where a sliding window is
    crossed) leaves the cache and logits of decoding it token by token."""
    _, _, lean = pair(byte_tok, int8=True, seed=9, window=window)
    toks = lean.encode_prompt(PROMPT * 2)
    assert len(toks) > 2 * gemma3_lean.KERNEL_MAX_POSITIONS
    lean.stats.reset()
    chunk = lean.next_logits(toks)
    assert lean.stats.forward_passes == 1
    keys = lean._cache.k[:, :, : len(toks)].copy()
    lean.reset()
    lean.next_logits(toks[:1])
    for i in range(2, len(toks) + 1):
        step = lean.next_logits(toks[:i])
    np.testing.assert_allclose(chunk, step, atol=TOL)
    np.testing.assert_allclose(keys, lean._cache.k[:, :, : len(toks)], atol=1e-5)
