"""The lean Gemma 3 forward (completion/gemma3_lean.py) against transformers.

Fast tests build tiny randomly initialised Gemma 3 models (a 4-token sliding window, so
short prompts cross it) and compare the lean path's logits with the transformers
backend's and with the model's own uncached forward: float32 and int8, token by token
and in chunks, going back and diverging, token trees, a cache that outgrows its
preallocation. Slow tests do the same on the real default model (Gemma 3 270M).
"""

from __future__ import annotations

import numpy as np
import pytest
from byte_tokenizer import byte_tokenizer, byte_tokenizer_json

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from midword.completion import gemma3_lean, model_store  # noqa: E402
from midword.completion.gemma3_lean import LeanGemma3, build_checked, supports  # noqa: E402
from midword.completion.model import LanguageModel, ModelUnavailable, load_model  # noqa: E402
from midword.completion.model_transformers import TransformersModel  # noqa: E402
from midword.engine import Tokenizer  # noqa: E402

TOL = 1e-4
PROMPT = "def fibonacci(n):\n    if n <= 1:\n        return n\n    return fibonacci(n - 1) + fib"


@pytest.fixture(scope="module")
def byte_tok() -> Tokenizer:
    return byte_tokenizer()


def tiny_gemma(seed=0, window=4, softcap=None, attn_softcap=None, heads=4, kv_heads=2):
    cfg = transformers.Gemma3TextConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=16,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        max_position_embeddings=512,
        final_logit_softcapping=softcap,
        attn_logit_softcapping=attn_softcap,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
        },
    )
    hf = transformers.AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return hf.eval()


def fresh_logits(hf, tokens) -> np.ndarray:
    with torch.inference_mode():
        return hf(input_ids=torch.tensor([list(tokens)]), use_cache=False).logits[0].float().numpy()


def pair(byte_tok, int8=False, seed=0, **kwargs):
    hf = tiny_gemma(seed=seed, **kwargs)
    tm = TransformersModel(hf, byte_tok, name="tiny")
    if int8:
        tm.quantize_int8()
    lean, err = build_checked(tm)
    assert err <= TOL
    return hf, tm, lean


@pytest.mark.parametrize("int8", [False, True])
def test_lean_equals_transformers_token_by_token(byte_tok, int8):
    hf, tm, lean = pair(byte_tok, int8=int8)
    assert (
        isinstance(lean, LanguageModel) and lean.backend == "lean" and lean.weights == ("int8" if int8 else "float32")
    )
    toks = lean.encode_prompt(PROMPT)
    ref = fresh_logits(hf, toks)
    lean.stats.reset()
    for i in range(1, len(toks) + 1):
        np.testing.assert_allclose(lean.next_logits(toks[:i]), ref[i - 1], atol=TOL)
    # one prefill, then one decode step per token
    assert lean.stats.forward_passes == len(toks) and lean.stats.tokens_prefilled == len(toks)
    lean.reset()
    np.testing.assert_allclose(lean.next_logits(toks), ref[-1], atol=TOL)
    np.testing.assert_allclose(lean.logprobs(toks), tm.logprobs(toks), atol=TOL)


@pytest.mark.parametrize("kwargs", [{"softcap": 3.0}, {"heads": 2, "kv_heads": 1}, {"window": 64}])
def test_lean_variants(byte_tok, kwargs):
    hf, tm, lean = pair(byte_tok, seed=2, **kwargs)
    toks = lean.encode_prompt(PROMPT)
    ref = fresh_logits(hf, toks)
    lean.next_logits(toks[:9])
    np.testing.assert_allclose(lean.next_logits(toks), ref[-1], atol=TOL)
    if "softcap" in kwargs:
        assert np.abs(ref).max() <= 3.0


def test_kv_cache_prefill_then_decode_equals_full_forward(byte_tok):
    hf = tiny_gemma(seed=3)
    tm = TransformersModel(hf, byte_tok, name="tiny")
    # A small preallocation and short chunks: the cache grows while chunks cross the window.
    lean = LeanGemma3.from_transformers(tm, capacity=8, prefill_chunk=5)
    toks = lean.encode_prompt(PROMPT)
    ref = fresh_logits(hf, toks)
    np.testing.assert_allclose(lean.next_logits(toks[:30]), ref[29], atol=TOL)
    assert lean._cache.capacity >= 30 and lean.stats.forward_passes == 6
    for i in range(31, len(toks) + 1):
        np.testing.assert_allclose(lean.next_logits(toks[:i]), ref[i - 1], atol=TOL)
    # back (no forward pass), then a diverging sequence (cut at the common prefix)
    passes = lean.stats.forward_passes
    np.testing.assert_allclose(lean.next_logits(toks[:12]), ref[11], atol=TOL)
    assert lean.stats.forward_passes == passes
    other = toks[:20] + byte_tok.encode("# other")
    np.testing.assert_allclose(lean.next_logits(other), fresh_logits(hf, other)[-1], atol=TOL)
    assert lean.cached_tokens == tuple(other) and lean._cache.filled == len(other)


def test_cancellable_prefill(byte_tok):
    _, _, lean = pair(byte_tok, seed=4)
    toks = lean.encode_prompt(PROMPT * 3)
    calls = []
    assert lean.prefill(toks, lambda: calls.append(1) or len(calls) > 1) is False
    assert lean.cached_tokens == tuple(toks[:64]) and lean._cache.filled == 64
    assert lean.prefill(toks) is True and lean._cache.filled == len(toks)


@pytest.mark.parametrize("int8", [False, True])
def test_branches_and_heads_equal_transformers(byte_tok, int8):
    hf, tm, lean = pair(byte_tok, int8=int8, seed=5)
    toks = lean.encode_prompt(PROMPT)
    prefix, tail = toks[:-4], toks[-4:]
    branches = [tail, tail[:2], tail[:1] + [7, 8], []]
    allowed = [np.array([1, 5, 299]), None, None, np.array([tail[0]])]
    for a, b in zip(
        lean.score_branches(prefix, branches, allowed), tm.score_branches(prefix, branches, allowed), strict=False
    ):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=TOL)
        np.testing.assert_allclose(a.next_logprobs, b.next_logprobs, atol=TOL)
    # the tree's nodes are cropped off again
    assert lean._cache.filled == lean._tokens.size
    ids = np.array([299, 0, 17, 17, 256])
    full = lean.next_logits(toks)
    lean.stats.reset()
    np.testing.assert_allclose(lean.next_logits(toks, ids), full[ids], atol=1e-5)
    assert lean.stats.restricted_head_rows == 1 and lean.stats.full_head_rows == 0
    np.testing.assert_allclose(lean.next_logprobs(toks), tm.next_logprobs(toks), atol=TOL)


def test_greedy_tokens_equal(byte_tok):
    _, tm, lean = pair(byte_tok, int8=True, seed=6)
    for text in ("import os\n", "x = [", PROMPT):
        seqs = []
        for m in (tm, lean):
            toks = m.encode_prompt(text)
            for _ in range(24):
                toks.append(int(np.argmax(m.next_logits(toks))))
            seqs.append(toks)
        assert seqs[0] == seqs[1]


def test_arrays_round_trip(byte_tok):
    hf, tm, lean = pair(byte_tok, int8=True, seed=7)
    spec, arrays = lean.arrays()
    copy = LeanGemma3.from_arrays(spec, dict(arrays), byte_tok, name="copy")
    toks = lean.encode_prompt(PROMPT)
    np.testing.assert_array_equal(copy.next_logits(toks), lean.next_logits(toks))
    broken = dict(arrays)
    broken["layers.1.o.q"] = broken["layers.1.o.q"][:, :-64]
    with pytest.raises(ModelUnavailable, match="layers.1.o"):
        LeanGemma3.from_arrays(spec, broken, byte_tok, name="broken")
    del broken["final_norm"]
    with pytest.raises(ModelUnavailable, match="final_norm"):
        LeanGemma3.from_arrays(
            spec,
            {k: v for k, v in broken.items() if k != "layers.1.o.q"} | {"layers.1.o.q": arrays["layers.1.o.q"]},
            byte_tok,
            name="broken",
        )


def test_check_failure_falls_back_to_transformers(byte_tok, monkeypatch):
    hf = tiny_gemma(seed=8)
    tm = TransformersModel(hf, byte_tok, name="tiny")
    lean = LeanGemma3.from_transformers(tm)
    probes = lean.probe_sets()
    ref = gemma3_lean.reference_logits(tm, probes)
    with pytest.raises(ModelUnavailable, match="differs from the reference"):
        lean.check_against(ref + 0.01, probes)
    assert lean.check_against(ref, probes) <= TOL
    report = model_store._Progress(None)
    monkeypatch.setattr(gemma3_lean, "CHECK_TOLERANCE", -1.0)
    got = model_store._lean_or_fallback(tm, "auto", report)
    assert got is tm and got.backend == "transformers" and "differs" in got.lean_problem
    with pytest.raises(ModelUnavailable, match="differs"):
        model_store._lean_or_fallback(tm, "lean", report)


def _save_hf_dir(folder, hf):
    hf.save_pretrained(str(folder))
    (folder / "tokenizer.json").write_text(byte_tokenizer_json(), encoding="utf-8")


def test_other_architectures_stay_on_transformers(tmp_path):
    cfg = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    assert not supports(cfg)
    assert supports(tiny_gemma().config)
    assert not supports(tiny_gemma(attn_softcap=2.0).config)  # transformers' Gemma 3 ignores it; no guessing
    _save_hf_dir(tmp_path, transformers.AutoModelForCausalLM.from_config(cfg))
    m = load_model(tmp_path, threads=1)
    assert m.backend == "transformers" and "llama" in m.lean_problem
    with pytest.raises(ModelUnavailable, match="lean"):
        load_model(tmp_path, threads=1, backend="lean")


def test_gemma_directory_loads_lean(tmp_path):
    hf = tiny_gemma(seed=9)
    _save_hf_dir(tmp_path, hf)
    toks = [256] + list(PROMPT.encode()[:20])
    ref = fresh_logits(hf, toks)
    for dtype in ("float32", "int8"):
        m = load_model(tmp_path, threads=1, dtype=dtype)
        assert m.backend == "lean" and m.weights == dtype and m.source == "directory"
        got = m.next_logits(toks)
        if dtype == "float32":
            np.testing.assert_allclose(got, ref[-1], atol=TOL)
        else:  # int8 weights: close to float32, same top token
            assert np.abs(got - ref[-1]).max() < 0.05 * np.abs(ref[-1]).max() and got.argmax() == ref[-1].argmax()
    assert load_model(tmp_path, threads=1, backend="transformers").backend == "transformers"


# ---------------------------------------------------------------------------
# The real default model (Gemma 3 270M)


def _file_prompt(m, path, n):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / path).read_text(encoding="utf-8")
    toks = m.encode_prompt(text)
    assert len(toks) >= n
    return toks[:n]


@pytest.mark.slow
def test_gemma_lean_equals_transformers():
    tm = load_model("gemma3", backend="transformers")
    lean = LeanGemma3.from_transformers(tm)
    # float32: the probe set, and 600 tokens (past the 512-token window) as a prefill of
    # 550 and 50 decode steps against transformers' uncached forward
    probes = lean.probe_sets()
    assert lean.check_against(gemma3_lean.reference_logits(tm, probes), probes) <= TOL
    toks = _file_prompt(tm, "completion/model_transformers.py", 600)
    ref = gemma3_lean.reference_logits(tm, [toks])[0]
    lean.next_logits(toks[:550])
    for i in range(551, 601):
        got = lean.next_logits(toks[:i])
    assert lean.stats.tokens_prefilled == 600
    np.testing.assert_allclose(got, ref, atol=TOL)
    # int8: the same weights on both sides, then greedy tokens over real files
    tm.quantize_int8()
    lean, err = build_checked(tm)
    assert err <= TOL and lean.weights == "int8"
    for path, n in (("completion/decode.py", 300), ("completion/quantized.py", 420), ("tests/data/mid_word.py", 50)):
        prompt = _file_prompt(tm, path, n)
        seqs = []
        for m in (tm, lean):
            seq = list(prompt)
            for _ in range(12):
                seq.append(int(np.argmax(m.next_logits(seq))))
            seqs.append(seq[n:])
        assert seqs[0] == seqs[1], path


@pytest.mark.slow
def test_gemma_default_load_is_lean_int8():
    m = load_model("gemma3", dtype="int8")
    assert m.backend == "lean" and m.weights == "int8"
    toks = m.encode_prompt("def fibonacci(n):\n    if n <= 1:\n        return")
    assert m.tokenizer.token_bytes(int(np.argmax(m.next_logits(toks)))) == b" n"
