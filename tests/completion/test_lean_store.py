"""The on-disk int8 copy of a lean model (completion/lean_store.py): round trip, damage
detection, and the loader's use of it (no re-quantization, a damaged copy rebuilt)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from byte_tokenizer import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from midword.completion import lean_store, model_store  # noqa: E402
from midword.completion.gemma3_lean import build_checked  # noqa: E402
from midword.completion.model_transformers import TransformersModel  # noqa: E402
from midword.engine import Tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def byte_tok() -> Tokenizer:
    return byte_tokenizer()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MIDWORD_CACHE_DIR", str(tmp_path))
    return tmp_path


def tiny_lean(byte_tok, seed=0):
    cfg = transformers.Gemma3TextConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        sliding_window=4,
        max_position_embeddings=512,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    )
    hf = transformers.AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    tm = TransformersModel(hf.eval(), byte_tok, name="tiny")
    tm.quantize_int8()
    return build_checked(tm)[0]


PROMPT = "for i in range(10):\n    print(i * i)\n"


def test_round_trip(cache_dir, byte_tok):
    lean = tiny_lean(byte_tok)
    folder = lean_store.lean_dir("tiny")
    assert str(folder).startswith(str(cache_dir))
    assert lean_store.problem(folder) == "not built yet"
    assert lean_store.store(folder, lean, lean.probe_reference, lean.probe_sets()) is None
    assert lean_store.problem(folder) is None
    copy = lean_store.open_lean(folder, byte_tok, name="tiny")
    assert copy.weights == "int8" and copy.backend == "lean"
    # the matrices are memory maps of the file, not copies
    assert isinstance(copy._layers[0].qkv.w.q, np.memmap)
    toks = lean.encode_prompt(PROMPT)
    np.testing.assert_array_equal(copy.next_logits(toks), lean.next_logits(toks))
    np.testing.assert_array_equal(copy.next_logits(toks, np.array([3, 9])), lean.next_logits(toks, np.array([3, 9])))
    np.testing.assert_array_equal(copy.logprobs(toks), lean.logprobs(toks))


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("flip", "changed"),
        ("truncate", "bytes"),
        ("manifest", "missing"),
        ("reference", "changed"),
    ],
)
def test_damage_is_detected(cache_dir, byte_tok, damage, reason):
    lean = tiny_lean(byte_tok, seed=1)
    folder = lean_store.lean_dir("tiny")
    lean_store.store(folder, lean, lean.probe_reference, lean.probe_sets())
    weights = folder / "weights.bin"
    data = bytearray(weights.read_bytes())
    if damage == "flip":
        data[100] ^= 0x40
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(bytes(data[:-64]))
    elif damage == "manifest":
        (folder / "lean.json").unlink()
    else:
        ref = np.load(folder / "reference.npy")
        np.save(folder / "reference.npy", ref + 1.0)
    assert reason in lean_store.problem(folder)


def test_wrong_reference_is_damage(cache_dir, byte_tok):
    # Intact files whose reference does not match the weights: the probe check catches it.
    lean = tiny_lean(byte_tok, seed=2)
    folder = lean_store.lean_dir("tiny")
    lean_store.store(folder, lean, lean.probe_reference + 0.5, lean.probe_sets())
    assert lean_store.problem(folder) is None
    with pytest.raises(lean_store.Damaged, match="differs"):
        lean_store.open_lean(folder, byte_tok, name="tiny")


def test_loader_uses_and_rebuilds_the_copy(cache_dir, byte_tok, monkeypatch):
    lean = tiny_lean(byte_tok, seed=3)
    folder = lean_store.lean_dir("tiny")
    stored = ("tiny", "tiny", "unused")
    monkeypatch.setattr(model_store, "_tokenizer", lambda source, what, report: byte_tok)
    report = model_store._Progress(None)
    assert model_store._open_lean_cache(stored, report, 1, None) is None  # nothing yet
    lean_store.store(folder, lean, lean.probe_reference, lean.probe_sets())
    got = model_store._open_lean_cache(stored, report, 1, None)
    assert got.source == "int8 cache"
    toks = lean.encode_prompt(PROMPT)
    np.testing.assert_array_equal(got.next_logits(toks), lean.next_logits(toks))
    manifest = json.loads((folder / "lean.json").read_text())
    manifest["probes"][0] = manifest["probes"][0][:-1]  # a probe whose reference is another's
    (folder / "lean.json").write_text(json.dumps(manifest))
    assert model_store._open_lean_cache(stored, report, 1, None) is None
    assert not folder.exists()  # deleted, to be rebuilt by the next full load


def test_a_verified_copy_skips_the_probe_check_until_something_changes(cache_dir, byte_tok, monkeypatch):
    from midword.completion.gemma3_lean import LeanGemma3
    from midword.completion.model import ModelUnavailable

    lean = tiny_lean(byte_tok, seed=4)
    folder = lean_store.lean_dir("tiny")
    lean_store.store(folder, lean, lean.probe_reference, lean.probe_sets())
    checks = []
    real_check = LeanGemma3.check_against

    def counted(self, reference, probes, tolerance=None):
        checks.append(len(probes))
        return real_check(self, reference, probes, tolerance)

    monkeypatch.setattr(LeanGemma3, "check_against", counted)
    lean_store.open_lean(folder, byte_tok, name="tiny")
    assert len(checks) == 1 and (folder / "verified.json").is_file()
    copy = lean_store.open_lean(folder, byte_tok, name="tiny")  # stamped: no probe run
    assert len(checks) == 1
    toks = lean.encode_prompt(PROMPT)
    np.testing.assert_array_equal(copy.next_logits(toks), lean.next_logits(toks))
    monkeypatch.setenv("MIDWORD_VERIFY_MODEL", "1")
    lean_store.open_lean(folder, byte_tok, name="tiny")
    assert len(checks) == 2
    monkeypatch.delenv("MIDWORD_VERIFY_MODEL")
    # Another reference (same size, newer file): the stamp no longer vouches, the check
    # runs and finds it wrong.
    np.save(folder / "reference.npy", lean.probe_reference + 0.5)

    def failing(self, reference, probes, tolerance=None):
        checks.append(len(probes))
        raise ModelUnavailable("differs")

    monkeypatch.setattr(LeanGemma3, "check_against", failing)
    with pytest.raises(lean_store.Damaged, match="differs"):
        lean_store.open_lean(folder, byte_tok, name="tiny")
    assert len(checks) == 3


@pytest.mark.slow
def test_gemma_int8_cache_round_trip():
    from midword.completion.model import load_model

    first = load_model("gemma3", dtype="int8")
    assert first.backend == "lean"
    folder = lean_store.lean_dir(model_store._lean_cache("gemma3")[0])
    assert lean_store.problem(folder) is None
    toks = first.encode_prompt("import numpy as np\n\ndef mean(xs):\n    return np.")
    want = first.next_logits(toks)
    del first
    again = load_model("gemma3", dtype="int8")
    assert again.source == "int8 cache" and isinstance(again._embed.q, np.memmap)
    np.testing.assert_allclose(again.next_logits(toks), want, atol=1e-5)
