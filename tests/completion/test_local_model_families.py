"""`--model PATH` for local causal LMs of the Llama, Qwen2 and StarCoder2 families
(completion/model_store.py): the model's own tokenizer, its FIM template and stop tokens,
the int8 path, prompt layout, stop rules and character prefix conditioning, and the
errors a bad path or an unsupported architecture gives.

Each model is built here: a transformers config with two layers and a hidden size of 32,
random weights, saved with `save_pretrained` beside a small byte-level BPE tokenizer
trained in the test with the family's special tokens (no downloads). A "stopper" variant
has its weights set so that the family's end-of-middle token always has the highest
logit: the completion must spell the typed part of the word (CPC) and then stop there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fim_support import CORPUS

from midword.completion.engine import CompletionEngine
from midword.completion.fim import detect
from midword.completion.model import ModelUnavailable, load_model
from midword.completion.types import CompletionRequest, ContextChunk, GrammarSpec

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# architecture -> (config class, FIM family, specials: the EOS first, then the rest,
# the end-of-middle token the stopper model prefers, an extra EOS only config.json names)
FAMILIES = {
    "llama": (
        "LlamaConfig",
        "codellama",
        ["</s>", "<s>", "\u2581<PRE>", "\u2581<MID>", "\u2581<SUF>", "\u2581<EOT>"],
        "\u2581<EOT>",
        None,
    ),
    "qwen2": (
        "Qwen2Config",
        "qwen",
        [
            "<|endoftext|>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
            "<|im_end|>",
        ],
        "<|file_sep|>",
        "<|im_end|>",
    ),
    "starcoder2": (
        "Starcoder2Config",
        "starcoder",
        ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<repo_name>", "<file_sep>"],
        "<file_sep>",
        None,
    ),
}

PREFIX = "import os\nfrom pkg.util import helper\n\nresult = hel"
SUFFIX = "\nprint(result)\n"
OTHER = ContextChunk("def helper(value):\n    return value\n", path="pkg/util.py", kind="document")


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")  # no trie files for throwaway vocabularies


def _tokenizer(specials):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator(CORPUS * 20, trainer)
    hf.add_special_tokens(specials)
    return hf


def build_model(folder, arch: str, *, stopper: bool = False):
    """A tiny random-weight `arch` model with its tokenizer, saved in `folder`."""
    config_name, _, specials, stop, extra_eos = FAMILIES[arch]
    hf_tok = _tokenizer(specials)
    folder.mkdir(parents=True)
    hf_tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": specials[0]}))
    eos = [hf_tok.token_to_id(specials[0])] + ([hf_tok.token_to_id(extra_eos)] if extra_eos else [])
    config = getattr(transformers, config_name)(
        vocab_size=hf_tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=hf_tok.token_to_id("<s>"),
        eos_token_id=eos if len(eos) > 1 else eos[0],
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    if stopper:
        _prefer(model, hf_tok.token_to_id(stop))
    model.save_pretrained(str(folder))
    return folder


def _prefer(model, token: int) -> None:
    """Make `token` the highest logit after any input: the layers add nothing to the
    residual stream, which is then the input embedding, whose dimension 0 is 1 for every
    token; the final norm keeps only that dimension, and only `token`'s head row reads it."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "o_proj.bias", "down_proj.weight", "c_proj.weight", "c_proj.bias")):
                p.zero_()
        model.get_input_embeddings().weight[:, 0] = 1.0
        norm = model.model.norm
        norm.weight.zero_()
        norm.weight[0] = 1.0
        if getattr(norm, "bias", None) is not None:
            norm.bias.zero_()
        head = model.get_output_embeddings().weight
        head.zero_()
        head[token, 0] = 10.0


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("local-models")
    return {
        (arch, stopper): build_model(root / f"{arch}-{'stopper' if stopper else 'random'}", arch, stopper=stopper)
        for arch in FAMILIES
        for stopper in (False, True)
    }


def _request(**kw):
    args = dict(
        prefix=PREFIX,
        suffix=SUFFIX,
        language="python",
        grammar=GrammarSpec(kind="none"),
        mode="cpc",
        max_tokens=8,
        context=(OTHER,),
        path="pkg/main.py",
        repo="demo",
    )
    args.update(kw)
    return CompletionRequest(**args)


def _id(tok, text: str) -> int:
    ids = [i for i, b in enumerate(tok.all_token_bytes()) if b == text.encode("utf-8")]
    assert len(ids) == 1, (text, ids)
    return ids[0]


@pytest.mark.parametrize("arch", list(FAMILIES))
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_loads_with_its_own_tokenizer_fim_template_and_stops(models, arch, dtype):
    _, family, specials, stop, extra_eos = FAMILIES[arch]
    folder = models[(arch, False)]
    m = load_model(folder, dtype=dtype)
    tok = m.tokenizer
    assert m.source == "directory" and m.weights == dtype and m.backend == "transformers"
    assert arch in m.lean_problem  # the lean forward computes Gemma 3 only; transformers runs the rest
    assert tok.tokenizer_file == str(folder / "tokenizer.json") and tok.vocab_size == m.vocab_size
    # the specials are the model's own, found in its tokenizer.json
    assert all(tok.is_special(_id(tok, s)) for s in specials)
    assert _id(tok, specials[0]) in tok.eos_token_ids
    if extra_eos:  # named by config.json only
        assert _id(tok, extra_eos) in tok.eos_token_ids
    t = detect(tok)
    assert t is not None and t.family == family and t.order == "psm"
    assert _id(tok, stop) in t.stop
    logits = m.next_logits(tok.encode("def foo(x):"))
    assert logits.shape == (m.vocab_size,) and bool(torch.isfinite(torch.as_tensor(logits)).all())


def _expected_prompt(arch, tok, t, prefix_section: str):
    enc = tok.encode
    if arch == "qwen2":  # repository-level: repo name, files, then the FIM sections
        return (
            [t.repo_name]
            + enc("demo\n")
            + [t.file_sep]
            + enc("pkg/util.py\n" + OTHER.text)
            + [t.file_sep]
            + enc("pkg/main.py\n")
            + [t.prefix]
            + enc(prefix_section)
            + [t.suffix]
            + enc(SUFFIX)
            + [t.middle]
        )
    if arch == "starcoder2":  # StarCoder2: the repo name has no newline; the path starts the prefix section
        return (
            [t.repo_name]
            + enc("demo")
            + [t.file_sep]
            + enc("pkg/util.py\n" + OTHER.text)
            + [t.file_sep, t.prefix]
            + enc("pkg/main.py\n")
            + enc(prefix_section)
            + [t.suffix]
            + enc(SUFFIX)
            + [t.middle]
        )
    return None


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_prompt_layout_and_cpc_on_the_partial_word(models, arch):
    m = load_model(models[(arch, False)], dtype="int8")
    engine = CompletionEngine(arch, model_object=m)
    t = engine.fim_template
    tok = m.tokenizer
    c = engine.complete(_request())
    # CPC: whatever the random model writes spells the typed part of the word first
    assert c.typed(PREFIX) == "hel" and c.text.startswith("hel")
    assert c.insert_text(PREFIX) == c.text[len("hel") :]
    prompt = list(m.cached_tokens)[: c.timings.prompt_tokens]
    assert prompt[-1] == t.middle  # PSM: the model writes right after the middle sentinel
    assert c.timings.context_tokens > 0
    expected = _expected_prompt(arch, tok, t, "import os\nfrom pkg.util import helper\n\nresult =")
    if expected is not None:
        assert prompt == expected
    else:  # CodeLlama: no file tokens, a comment header per file; `▁<PRE> ` then the text
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        assert prompt[: len(bos) + 1] == bos + [t.prefix]
        text = tok.decode(prompt[len(bos) + 1 :])
        assert text.startswith(b" # pkg/util.py\n" + OTHER.text.encode())
        assert prompt.index(t.prefix) < prompt.index(t.suffix) < prompt.index(t.middle)
        assert tok.decode(prompt[prompt.index(t.suffix) + 1 : -1]) == SUFFIX.encode()
        assert tok.decode(prompt[: prompt.index(t.suffix)]).endswith(b"# pkg/main.py\n" + PREFIX[:-4].encode())


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_the_familys_end_of_middle_token_stops_the_completion(models, arch):
    _, _, _, stop, _ = FAMILIES[arch]
    m = load_model(models[(arch, True)], dtype="float32")
    tok = m.tokenizer
    assert m.next_logits(tok.encode("x = 1")).argmax() == _id(tok, stop)
    engine = CompletionEngine(arch, model_object=m)
    c = engine.complete(_request())
    # the typed bytes are re-spelled although the model wants to stop at once, then it stops
    assert c.text == "hel" and c.insert_text(PREFIX) == "" and c.stop_reason == "eos"


def _cli(*args, env_extra=None):
    env = dict(os.environ, MIDWORD_NO_DISK_CACHE="1", **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "midword", *args], capture_output=True, text=True, timeout=600, env=env
    )


@pytest.mark.slow
def test_midword_complete_with_a_local_model_directory(models, tmp_path):
    doc = tmp_path / "main.py"
    doc.write_text(PREFIX + SUFFIX)
    line = PREFIX.count("\n")
    column = len(PREFIX.rsplit("\n", 1)[1])
    r = _cli(
        "complete", str(doc), "--line", str(line), "--character", str(column), "--json",
        "--model", str(models[("qwen2", True)]),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text"] == "hel" and out["insert_text"] == "" and out["stop_reason"] == "eos"
    assert out["timings"]["prompt_tokens"] > 0
    bad = _cli("complete", str(doc), "--line", "0", "--character", "0", "--model", str(tmp_path / "nowhere"))
    assert bad.returncode == 2 and str(tmp_path / "nowhere") in bad.stderr and "Traceback" not in bad.stderr


def test_bad_paths_and_unsupported_architectures_are_named(models, tmp_path):
    with pytest.raises(ModelUnavailable, match="no file or directory .*nowhere"):
        load_model(tmp_path / "nowhere")
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(ModelUnavailable) as err:
        load_model(folder)
    assert str(folder) in str(err.value) and "BertModel" in str(err.value) and "'bert'" in str(err.value)
    (folder / "config.json").write_text(json.dumps({"model_type": "no-such-arch"}))
    with pytest.raises(ModelUnavailable, match="unsupported architecture .*'no-such-arch'"):
        load_model(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelUnavailable, match="cannot read the model configuration"):
        load_model(folder)
    # a Qwen2 directory without its weights, or without its tokenizer
    src = models[("qwen2", False)]
    for missing, message in (("model.safetensors", "no weights"), ("tokenizer.json", "no tokenizer.json")):
        broken = tmp_path / f"no-{missing}"
        broken.mkdir()
        for f in src.iterdir():
            if f.name != missing:
                (broken / f.name).write_bytes(f.read_bytes())
        with pytest.raises(ModelUnavailable) as err:
            load_model(broken)
        assert str(broken) in str(err.value) and message in str(err.value) and "qwen2" in str(err.value)


# Qwen2 tensor names in GGUF (llama.cpp's), from the transformers names.
_GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def write_qwen2_gguf(folder, out, architecture: str = "qwen2"):
    """The Qwen2 model in `folder` as an unquantized .gguf file, tokenizer included."""
    gguf = pytest.importorskip("gguf")
    import numpy as np
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    tj = json.loads((folder / "tokenizer.json").read_text())
    tokens, types = [""] * cfg["vocab_size"], [1] * cfg["vocab_size"]  # 1: normal, 3: control
    for text, i in tj["model"]["vocab"].items():
        tokens[i] = text
    for a in tj["added_tokens"]:
        tokens[a["id"]], types[a["id"]] = a["content"], 3
    w = gguf.GGUFWriter(str(out), architecture)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta") or cfg.get("rope_theta")))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
    eos = cfg["eos_token_id"]
    w.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    top["lm_head.weight"] = "output.weight"
    for name, value in load_file(str(folder / "model.safetensors")).items():
        if name not in top:
            _, _, block, rest = name.split(".", 3)
        w.add_tensor(top.get(name) or f"blk.{block}.{_GGUF_NAMES[rest]}", np.ascontiguousarray(value, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.mark.slow
def test_a_gguf_file_loads_with_its_own_tokenizer(models, tmp_path, monkeypatch):
    monkeypatch.setenv("MIDWORD_CACHE_DIR", str(tmp_path / "cache"))  # the converted copy goes here
    folder = models[("qwen2", False)]
    path = write_qwen2_gguf(folder, tmp_path / "tiny-qwen2.gguf")
    hf = load_model(folder)
    m = load_model(path)
    assert m.source == "converted" and load_model(path).source == "cache"
    tok = m.tokenizer
    assert tok.all_token_bytes() == hf.tokenizer.all_token_bytes()
    t = detect(tok)
    assert t is not None and t.family == "qwen" and t.file_sep == _id(tok, "<|file_sep|>")
    assert _id(tok, "<|endoftext|>") in tok.eos_token_ids
    ids = hf.tokenizer.encode("def foo(x):\n    return x")
    assert tok.decode(tok.encode("def foo(x):\n    return x")) == b"def foo(x):\n    return x"
    assert abs(m.next_logits(ids) - hf.next_logits(ids)).max() < 1e-4  # the same weights
    c = CompletionEngine("gguf", model_object=m).complete(_request())
    assert c.typed(PREFIX) == "hel" and c.text.startswith("hel")
    with pytest.raises(ModelUnavailable, match="architecture foo is not supported"):
        load_model(write_qwen2_gguf(folder, tmp_path / "foo.gguf", architecture="foo"))


def test_only_special_tokens_of_the_config_become_stops(models, tmp_path):
    folder = tmp_path / "qwen2"
    folder.mkdir()
    for f in models[("qwen2", False)].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    text_token = _tokenizer(FAMILIES["qwen2"][2]).token_to_id("d")
    im_end = _tokenizer(FAMILIES["qwen2"][2]).token_to_id("<|im_end|>")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [text_token, im_end]}))
    tok = load_model(folder).tokenizer
    assert im_end in tok.eos_token_ids and text_token not in tok.eos_token_ids
