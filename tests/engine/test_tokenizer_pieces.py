"""Byte-level BPE encoded piece by piece (`_PieceEncoder`) against the tokenizers library
encoding the same text whole: Llama 3's own tokenizer and two small trained ones, one per
pre-tokenizer shape the piece encoder takes (a Split regex then ByteLevel, and ByteLevel
with its built-in regex)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.engine import Tokenizer
from midword.engine import tokenizer as tokmod

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Where the pre-tokenizer's classes meet: contractions in both cases, digit runs that
# split by three, space runs before words and line breaks, JSON punctuation.
FRAGMENTS = ["'s", "'S", "'ll", "'LL", "'re", "'d", "'", "123", "4567", " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t"]
FRAGMENTS += ['{"', '": ', '", "', "}", "]", ",", ".", "_", "-", "orderId", "Name", " the", "x", "A", "z9", "\x7e"]
# Outside the piece encoder's characters: whole-text encoding must take these.
OUTSIDE = ["é", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "中", "\x00", "\x7f"]


def _texts(fragments):
    return st.lists(
        st.sampled_from(fragments)
        | st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=4),
        max_size=12,
    ).map("".join)


def _trained(pre_tokenizer) -> Tokenizer:
    from tokenizers import Tokenizer as LibraryTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = LibraryTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizer
    hf.decoder = decoders.ByteLevel()
    corpus = [
        '{"orderId": 12345, "name": "the order", "items": [1, 2, 3]}',
        "It's the user's name; they'll say we're done and I'd go.\n\n\tdef f(x):\n    return x  # done\r\n",
        "The quick brown fox jumps over the lazy dog 0123456789 times.",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|end|>"]
    )
    hf.train_from_iterator(corpus, trainer)
    return Tokenizer.from_hf(hf, name="trained")


@pytest.fixture(scope="module")
def llama3() -> Tokenizer:
    return Tokenizer.from_pretrained("llama3")


@pytest.fixture(scope="module", params=["split-then-bytelevel", "bytelevel-regex"])
def trained(request) -> Tokenizer:
    from tokenizers import pre_tokenizers

    if request.param == "split-then-bytelevel":
        from tokenizers import Regex

        pre = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        pre = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return _trained(pre)


def _whole(tok: Tokenizer, text: str) -> list[int]:
    return tok._backend.tok.encode(text, add_special_tokens=False).ids


def _assert_pieces_agree(tok: Tokenizer, text: str) -> None:
    pieces = tok._backend.pieces
    assert pieces is not None
    assert pieces.covers(text)
    assert pieces.encode(text) == _whole(tok, text), repr(text)
    assert tok.encode(text) == _whole(tok, text)


@SETTINGS
@given(text=_texts(FRAGMENTS))
def test_llama3_pieces_equal_whole_text(llama3, text):
    _assert_pieces_agree(llama3, text)


@SETTINGS
@given(text=_texts(FRAGMENTS))
def test_trained_pieces_equal_whole_text(trained, text):
    _assert_pieces_agree(trained, text)


@SETTINGS
@given(head=_texts(FRAGMENTS), odd=st.sampled_from(OUTSIDE), tail=_texts(FRAGMENTS))
def test_other_characters_go_to_the_library(llama3, head, odd, tail):
    text = head + odd + tail
    assert not llama3._backend.pieces.covers(text)
    assert llama3.encode(text) == _whole(llama3, text)


def _after_by_definition(tok: Tokenizer, context: str, text: str) -> list[int]:
    """The whole text encoded by the library, then the tokens from where `text` starts
    when one ends there, else `text` encoded alone."""
    tokens, covered = _whole(tok, context + text), 0
    for k, t in enumerate(tokens):
        if covered == len(context):
            return tokens[k:]
        if covered > len(context):
            break
        covered += len(tok.token_bytes(t))
    return _whole(tok, text)


@SETTINGS
@given(context=_texts(FRAGMENTS), text=_texts(FRAGMENTS))
def test_tokens_after_a_context_equal_the_whole_texts(llama3, trained, context, text):
    # Fast-forward's question: how forced text is split after the tokens before it.
    # Only the pieces from the one holding the cut are encoded; the definition encodes
    # the whole text. `recent` spells the context, however it was tokenized.
    for tok in (llama3, trained):
        recent = tok.encode(context)
        got = tok.encode_after(recent, text.encode())
        if not text:
            assert got is None
            continue
        assert got == _after_by_definition(tok, context, text), (context, text)


def test_tokens_after_a_context_meet_a_token_across_the_cut(llama3):
    # `"user` then `_id"`: a piece starts at the cut. `{"na` then `me"`: `"name` is one
    # piece and one token, so no token ends at the cut and `me"` is encoded alone.
    assert llama3.encode_after(llama3.encode('{"user'), b'_id"') == llama3.encode('_id"')
    assert llama3.encode_after(llama3.encode('{"na'), b'me"') == llama3.encode('me"')
    assert _after_by_definition(llama3, '{"na', 'me"') == llama3.encode('me"')
    # Outside the piece encoder's text the caller encodes the whole text.
    assert llama3.encode_after(llama3.encode("é"), b"x") is None


def test_pieces_are_kept_and_bounded(llama3, monkeypatch):
    pieces = llama3._backend.pieces
    pieces._ids.clear()
    llama3.encode('{"serviceKey": "abc"}')
    assert '"serviceKey' in pieces._ids or "serviceKey" in pieces._ids
    monkeypatch.setattr(tokmod, "_PIECES_KEPT", 3)
    for word in ("alpha", "beta", "gamma", "delta", "epsilon"):
        llama3.encode(f" {word}")
        assert len(pieces._ids) <= 3
    long_piece = "x" * (tokmod._PIECE_MAX_CHARS + 1)
    assert llama3.encode(long_piece) == _whole(llama3, long_piece)
    assert long_piece not in pieces._ids
    long_text = " word" * (tokmod._PIECE_TEXT_MAX_CHARS // 5 + 1)
    assert not pieces.covers(long_text)
    assert llama3.encode(long_text) == _whole(llama3, long_text)


def test_shapes_the_piece_encoder_refuses():
    from tokenizers import AddedToken, pre_tokenizers

    assert tokmod._piece_split_regex({"model": {"type": "BPE"}, "pre_tokenizer": {"type": "Whitespace"}}) is None
    assert (
        tokmod._piece_split_regex({"model": {"type": "BPE", "dropout": 0.1}, "pre_tokenizer": {"type": "ByteLevel"}})
        is None
    )
    assert tokmod._piece_split_regex({"model": {"type": "BPE"}, "pre_tokenizer": {"type": "ByteLevel"}}) == (
        tokmod._GPT2_PATTERN
    )
    tok = _trained(pre_tokenizers.ByteLevel(add_prefix_space=False))
    assert tok._backend.pieces is not None
    # A non-special added token is cut out of the text before the pre-tokenizer runs.
    hf = _library_copy(tok)
    hf.add_tokens([AddedToken("orderId", special=False)])
    assert Tokenizer.from_hf(hf)._backend.pieces is None


def _library_copy(tok: Tokenizer):
    from tokenizers import Tokenizer as LibraryTokenizer

    return LibraryTokenizer.from_str(tok._backend.tok.to_str())


def test_ascii_pattern():
    assert tokmod._ascii_pattern(r"\p{L}+|[^\s\p{L}\p{N}]") == r"[A-Za-z]+|[^\sA-Za-z0-9]"
    assert tokmod._ascii_pattern(r"[]\p{N}]") == r"[]0-9]"
    assert tokmod._ascii_pattern(r"[^]\p{L}]x") == r"[^]A-Za-z]x"
    assert tokmod._ascii_pattern(r"\\p{L}") == r"\\p{L}"  # an escaped backslash, then text
    assert tokmod._ascii_pattern(r"\p{Lu}+") is None
    assert tokmod._ascii_pattern(r"\P{L}") is None
    assert tokmod._ascii_pattern(r"(?<x") is None  # does not compile
