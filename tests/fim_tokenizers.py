"""Small byte-level BPE tokenizers with the FIM sentinels of each model family, trained
in the test process with the `tokenizers` library (no downloads)."""

from __future__ import annotations

from functools import lru_cache

from midword.engine import Tokenizer

CORPUS = [
    "def foo(x):\n    return x + 1\n",
    "class Bar:\n    def __init__(self, value):\n        self.value = value\n",
    "import os\nfrom pkg.util import helper\n\nresult = helper(os.getcwd())\n",
    "for item in items:\n    if item:\n        total += item\n",
]

FAMILY_SPECIALS = {
    "qwen": ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
             "<|repo_name|>", "<|file_sep|>"],
    "starcoder": ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<repo_name>",
                  "<file_sep>"],
    "codegemma": ["<eos>", "<bos>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|file_separator|>"],
    "codellama": ["</s>", "<s>", "\u2581<PRE>", "\u2581<MID>", "\u2581<SUF>", "\u2581<EOT>"],
    "deepseek": ["<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜fim▁begin｜>", "<｜fim▁hole｜>",
                 "<｜fim▁end｜>", "<|EOT|>"],
    "codestral": ["</s>", "<s>", "[PREFIX]", "[SUFFIX]", "[MIDDLE]"],
    "plain": ["<|endoftext|>"],
}


@lru_cache(maxsize=None)
def fim_tokenizer(family: str) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    hf.train_from_iterator(CORPUS * 20, trainer)
    # added tokens, as the real tokenizers hold them (their text is not byte-level encoded)
    hf.add_special_tokens(FAMILY_SPECIALS[family])
    return Tokenizer.from_hf(hf, name=f"fim-{family}")


def special_id(tok: Tokenizer, text: str) -> int:
    ids = [i for i, b in enumerate(tok.all_token_bytes()) if b == text.encode("utf-8")]
    assert len(ids) == 1, (text, ids)
    return ids[0]
