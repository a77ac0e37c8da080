"""Fill-in-the-middle templates found from a tokenizer's special tokens (completion/fim.py),
their prompt layouts (completion/context.py), and the engine completing through them
with character prefix conditioning on the word the cursor cuts.

The tokenizers are small byte-level BPEs trained in the test with each family's
sentinels (tests/fim_tokenizers.py); the model is scripted to write a given middle."""

from __future__ import annotations

import pytest
from fim_support import MiddleModel, fim_tokenizer, special_id

from midword.completion.context import assemble
from midword.completion.engine import CompletionEngine
from midword.completion.fim import detect
from midword.completion.types import CompletionRequest, ContextChunk, GrammarSpec


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("MIDWORD_NO_DISK_CACHE", "1")  # no trie files for throwaway vocabularies


@pytest.mark.parametrize(
    "family,order,sentinels",
    [
        ("qwen", "psm", ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")),
        ("starcoder", "psm", ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")),
        ("codegemma", "psm", ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")),
        ("codellama", "psm", ("\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>")),
        ("deepseek", "psm", ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")),
        ("codestral", "spm", ("[PREFIX]", "[SUFFIX]", None)),
    ],
)
def test_family_is_found_from_its_sentinels(family, order, sentinels):
    tok = fim_tokenizer(family)
    t = detect(tok)
    assert t is not None and t.family == family and t.order == order
    pre, suf, mid = sentinels
    assert (t.prefix, t.suffix) == (special_id(tok, pre), special_id(tok, suf))
    assert t.middle == (special_id(tok, mid) if mid else None)
    assert tok.eos_token_ids <= t.stop


def test_repository_tokens_and_stops():
    q = detect(fim_tokenizer("qwen"))
    tok = fim_tokenizer("qwen")
    assert q.repo_name == special_id(tok, "<|repo_name|>") and q.file_sep == special_id(tok, "<|file_sep|>")
    assert special_id(tok, "<|fim_pad|>") in q.stop and special_id(tok, "<|endoftext|>") in q.stop
    s = detect(fim_tokenizer("starcoder"))
    assert s.file_sep == special_id(fim_tokenizer("starcoder"), "<file_sep>")
    c = detect(fim_tokenizer("codellama"))
    assert special_id(fim_tokenizer("codellama"), "\u2581<EOT>") in c.stop and c.space_after_prefix


def test_models_without_sentinels_get_no_template(gemma3):
    assert detect(fim_tokenizer("plain")) is None
    assert detect(gemma3) is None


PREFIX = "from pkg.util import helper\n\nresult = he"
SUFFIX = "\nprint(result)\n"
OTHER = ContextChunk("def helper(value):\n    return value\n", path="pkg/util.py", kind="document")


def _layout(family, **kw):
    tok = fim_tokenizer(family)
    t = detect(tok)
    prefix_tokens = tok.encode(PREFIX)
    return (
        tok,
        t,
        prefix_tokens,
        assemble(tok, prefix_tokens, prefix=PREFIX, suffix=SUFFIX, template=t, path="pkg/main.py", **kw),
    )


def test_qwen_repository_layout():
    tok, t, pt, p = _layout("qwen", chunks=(OTHER,), budget=256, repo="demo")
    enc = tok.encode
    assert p.tokens == (
        [t.repo_name]
        + enc("demo\n")
        + [t.file_sep]
        + enc("pkg/util.py\n" + OTHER.text)
        + [t.file_sep]
        + enc("pkg/main.py\n")
        + [t.prefix]
        + pt
        + [t.suffix]
        + enc(SUFFIX)
        + [t.middle]
    )
    assert p.tail == []  # the middle starts fresh after its sentinel


def test_starcoder_repository_layout_puts_the_path_in_the_prefix_section():
    tok, t, pt, p = _layout("starcoder", chunks=(OTHER,), budget=256)
    enc = tok.encode
    assert p.tokens == (
        [t.file_sep]
        + enc("pkg/util.py\n" + OTHER.text)
        + [t.file_sep, t.prefix]
        + enc("pkg/main.py\n")
        + pt
        + [t.suffix]
        + enc(SUFFIX)
        + [t.middle]
    )


def test_plain_fim_without_context():
    tok, t, pt, p = _layout("qwen")
    assert p.tokens == [t.prefix] + pt + [t.suffix] + tok.encode(SUFFIX) + [t.middle]


def test_deepseek_layout_uses_comment_headers_inside_the_prefix_section():
    tok, t, pt, p = _layout("deepseek", chunks=(OTHER,), budget=256)
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    assert p.tokens == (
        bos
        + [t.prefix]
        + tok.encode("# pkg/util.py\n" + OTHER.text + "\n# pkg/main.py\n")
        + pt
        + [t.suffix]
        + tok.encode(SUFFIX)
        + [t.middle]
    )


def test_codegemma_separates_files_with_its_file_separator():
    tok, t, pt, p = _layout("codegemma", chunks=(OTHER,), budget=256)
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    assert p.tokens == (
        bos
        + tok.encode("# pkg/util.py\n" + OTHER.text)
        + [t.file_sep, t.prefix]
        + tok.encode("# pkg/main.py\n")
        + pt
        + [t.suffix]
        + tok.encode(SUFFIX)
        + [t.middle]
    )


def test_codestral_puts_the_suffix_first_and_ends_at_the_cursor():
    tok, t, pt, p = _layout("codestral")
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    assert p.tokens == bos + [t.suffix] + tok.encode(SUFFIX) + [t.prefix] + pt
    assert p.tail == pt


@pytest.mark.parametrize("family", ["qwen", "deepseek", "codellama"])
def test_engine_completes_the_middle_and_respells_the_typed_word(family):
    tok = fim_tokenizer(family)
    t = detect(tok)
    stop = min(t.stop - tok.eos_token_ids) if t.stop - tok.eos_token_ids else min(t.stop)
    model = MiddleModel(tok, "helper(value)", stop)
    engine = CompletionEngine("fim", model_object=model)
    req = CompletionRequest(
        prefix=PREFIX,
        suffix=SUFFIX,
        language="python",
        grammar=GrammarSpec(kind="none"),
        mode="cpc",
        context=(OTHER,),
        path="pkg/main.py",
    )
    c = engine.complete(req)
    assert c.text == "helper(value)" and c.insert_text(PREFIX) == "lper(value)"
    assert c.stop_reason == "eos"  # the family's end-of-middle token ends it
    prompt = model.prompts[-1]
    assert prompt[-1] == t.middle  # PSM: the model writes right after the middle sentinel
    text = tok.decode(prompt)
    assert b"def helper(value)" in text  # the other file is in the prompt
    # the typed part of the word moved out of the prefix section, into the middle
    assert tok.decode(prompt[: prompt.index(t.suffix)]).endswith(b"result =")
    assert c.timings.context_tokens > 0 and c.timings.prompt_tokens == len(prompt)


def test_engine_with_spm_keeps_the_prefix_last():
    tok = fim_tokenizer("codestral")
    model = MiddleModel(tok, "helper(value)", min(tok.eos_token_ids))
    engine = CompletionEngine("fim", model_object=model)
    req = CompletionRequest(prefix=PREFIX, suffix=SUFFIX, language="python", grammar=GrammarSpec(kind="none"))
    c = engine.complete(req)
    assert c.text == "helper(value)"
    t = detect(tok)
    prompt = model.prompts[-1]
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    assert prompt[: len(bos) + 1] == bos + [t.suffix] and tok.decode(prompt).endswith(b"result =")
