"""The compiled decode step of the lean Gemma 3 forward (completion/lean_kernels.py).

On tiny random int8 Gemma 3 models (a 4-token sliding window, grouped-query attention):
the compiled step equals its plain-Python twin, writes the same key and value rows, and
decoding through it gives the logits of the torch path and of the model's own forward.
"""

from __future__ import annotations

import numpy as np
import pytest
from byte_tokenizer import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_lean_gemma3 import PROMPT, TOL, fresh_logits, pair  # noqa: E402

from midword.completion import lean_kernels  # noqa: E402


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
    for fn in (step, lean_kernels.decode_step_py):
        keys, values = lean._cache.k.numpy().copy(), lean._cache.v.numpy().copy()
        out = np.empty((3, lean.hidden_size), dtype=np.float32)
        fn(*lean.step_arguments(np.array(toks[pos:]), pos, keys, values, out))
        results.append((out, keys[:, :, : pos + 3], values[:, :, : pos + 3]))
    for got, want in zip(results[0], results[1], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    # The positions before `pos` are untouched, the new ones are written.
    np.testing.assert_array_equal(results[0][1][:, :, :pos], lean._cache.k.numpy()[:, :, :pos])
    assert np.abs(results[0][1][:, :, pos:]).max() > 0


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
