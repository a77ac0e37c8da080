"""A byte-level BPE tokenizer with no merges and a `<s>` BOS token (257 ids), built in
the test process: the tiny random-weight models of the completion tests use it."""

from __future__ import annotations


def byte_tokenizer_json() -> str:
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = HFTokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<s>", special=True)])
    return tok.to_str()


def byte_tokenizer():
    """midword's Tokenizer over `byte_tokenizer_json()`."""
    from tokenizers import Tokenizer as HFTokenizer

    from midword.engine import Tokenizer

    return Tokenizer.from_hf(HFTokenizer.from_str(byte_tokenizer_json()), name="bytes")
