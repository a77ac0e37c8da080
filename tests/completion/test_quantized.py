"""Int8 weight-only layers: the compiled kernels against their twins, the two matmul
paths against each other, and the quantized default model against float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from midword.completion import quantized as q


def _matrix(rng, n, k, zero_group=False):
    w = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(0.01, 3.0)
    if zero_group and k >= 2:
        w[0, : q.group_size(k, 4)] = 0.0  # an all-zero group keeps scale 0
    return w


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 9), groups=st.integers(1, 4), gs=st.sampled_from([1, 3, 4, 8]), seed=st.integers(0, 2**31))
def test_quantize_kernel_equals_reference(n, groups, gs, seed):
    rng = np.random.default_rng(seed)
    w = _matrix(rng, n, groups * gs, zero_group=True)
    got_q, got_s = q.quantize(w, group=gs)
    ref_q, ref_s = q.quantize_reference(w, group=gs)
    np.testing.assert_array_equal(got_s, ref_s)
    # rint of x.5 may round either way in the two implementations' float orders
    assert np.abs(got_q.astype(int) - ref_q.astype(int)).max() <= 1
    assert (got_q == ref_q).mean() > 0.95
    deq = q.dequantize(got_q, got_s)
    step = np.repeat(got_s, gs, axis=1)
    assert np.all(np.abs(deq - w) <= step * 0.5 + 1e-6)


def test_group_falls_back_to_whole_rows():
    assert q.group_size(640) == 64
    assert q.group_size(100) == 100  # 64 does not divide it: one scale per row
    w = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
    qq, s = q.quantize(w)
    assert qq.shape == (3, 100) and s.shape == (3, 1)


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="2-D"):
        q.quantize(np.zeros(5, dtype=np.float32))
    w = np.ones((2, 64), dtype=np.float32)
    w[1, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        q.quantize(w)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), rows=st.integers(1, 9), groups=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_int8_rows_kernel_equals_twin_and_dense(n, rows, groups, seed):
    rng = np.random.default_rng(seed)
    k = groups * 8
    qq, s = q.quantize(_matrix(rng, n, k), group=8)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    compiled = np.empty((rows, n), dtype=np.float32)
    twin = np.empty((rows, n), dtype=np.float32)
    q.int8_rows(qq, s, x, compiled)
    q.int8_rows_py(qq, s, x, twin)
    dense = x @ q.dequantize(qq, s).T
    np.testing.assert_allclose(compiled, twin, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled, dense, rtol=1e-4, atol=1e-4)


def test_threaded_kernel_equals_single_thread(monkeypatch):
    rng = np.random.default_rng(7)
    monkeypatch.setattr(q, "PARALLEL_MIN_WEIGHTS", 1)
    qq, s = q.quantize(_matrix(rng, 1001, 64))  # rows that do not split evenly
    for rows in (1, 5):
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        one = np.empty((rows, 1001), dtype=np.float32)
        three = np.empty((rows, 1001), dtype=np.float32)
        q.int8_rows(qq, s, x, one)
        q.int8_rows(qq, s, x, three, threads=3)
        np.testing.assert_array_equal(one, three)


def test_int8_linear_paths_agree():
    torch.manual_seed(0)
    lin = torch.nn.Linear(128, 40, bias=True)
    layer = q.Int8Linear(lin)
    with torch.inference_mode():
        few = torch.randn(1, 3, 128)  # the kernel
        many = torch.randn(q.KERNEL_MAX_ROWS + 5, 128)  # the dense matmul
        for x in (few, many):
            want = torch.nn.functional.linear(x, layer.weight, layer.bias)
            got = layer(x)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        # close to the original float layer: int8 in groups of 64 keeps ~2 significant digits
        err = (layer(many) - lin(many)).abs().max() / lin(many).abs().max()
        assert err < 0.02


def test_quantize_linears_replaces_nested_layers():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(64, 8)))
    assert q.quantize_linears(model) == 2
    assert isinstance(model[0], q.Int8Linear) and isinstance(model[1][1], q.Int8Linear)
    with torch.inference_mode():
        assert model(torch.randn(2, 64)).shape == (2, 8)


def test_in_place_quantization_keeps_tied_storage():
    table = torch.randn(50, 64)
    view = table[:]  # a tied embedding sees the same storage
    weights = q.Int8Weights(table, in_place=True)
    assert weights.dequantized.ctypes.data == table.data_ptr()
    torch.testing.assert_close(view, torch.from_numpy(q.dequantize(weights.q, weights.scales)))
    with pytest.raises(ValueError, match="contiguous float32"):
        q.Int8Weights(torch.randn(64, 50).t(), in_place=True)


# -- the default model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models():
    from midword.completion.model import load_model

    full = load_model("gemma3")
    small = load_model("gemma3", dtype="int8")
    return full, small


@pytest.mark.slow
def test_int8_model_stays_close_to_float32(models):
    full, small = models
    assert small.weights == "int8" and full.weights == "float32"
    text = "import os\n\ndef list_python_files(root):\n    for name in os.listdir(root):\n        if name.endswith("
    toks = full.encode_prompt(text)
    a = full.next_logprobs(toks)
    b = small.next_logprobs(toks)
    kl = float(np.sum(np.exp(a) * (a - b)))
    assert kl < 0.02
    assert int(np.argmax(a)) == int(np.argmax(b))
    # sequence log-probs through both matmul paths: a long prefill and token-by-token steps agree
    per_token = small.logprobs(toks)
    small.reset()
    stepwise = [small.next_logprobs(toks[:i])[toks[i]] for i in range(len(toks) - 4, len(toks))]
    np.testing.assert_allclose(per_token[-4:], stepwise, atol=2e-3)


@pytest.mark.slow
def test_int8_restricted_head_matches_full_head(models):
    _, small = models
    toks = small.encode_prompt("def add(a, b):\n    return a")
    ids = np.array([5, 100, 2000, 70000, 262000])
    full = small.next_logits(toks)
    np.testing.assert_allclose(small.next_logits(toks, allowed=ids), full[ids], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("threads", [1, 2])
def test_dequantize_into_equals_dequantize(threads):
    """The compiled block dequantization (many-row products without a float twin) and its
    twin give exactly `dequantize`'s values, from any first row, on any thread count."""
    rng = np.random.default_rng(threads)
    qm, scales = q.quantize(rng.standard_normal((70, 192)).astype(np.float32))
    want = q.dequantize(qm, scales)
    for lo, hi in ((0, 70), (13, 40), (69, 70)):
        got = np.full((hi - lo, 192), np.nan, dtype=np.float32)
        q.dequantize_into(qm, scales, lo, got, threads)
        np.testing.assert_array_equal(got, want[lo:hi])
        twin = np.empty_like(got)
        q.dequantize_into_py(qm, scales, lo, twin)
        np.testing.assert_array_equal(twin, want[lo:hi])


def test_many_rows_without_the_float_twin_equal_the_twin():
    """A matrix without its float32 copy (the lean model's, the stored int8 weights)
    multiplies many rows block by block: the same values as with the copy."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((q.DEQUANT_BLOCK + 37, 128)).astype(np.float32)
    full = q.Int8Weights(w)
    bare = q.Int8Weights.from_quantized(full.q, full.scales)
    x = rng.standard_normal((q.KERNEL_MAX_ROWS + 5, 128)).astype(np.float32)
    np.testing.assert_allclose(bare.matmul(x), full.matmul(x), rtol=1e-6, atol=1e-5)
    # A torch tensor quantizes to the same values as its array.
    from_tensor = q.Int8Weights(torch.from_numpy(w))
    np.testing.assert_array_equal(from_tensor.q, full.q)
    np.testing.assert_array_equal(from_tensor.scales, full.scales)
