"""Small byte-level BPE tokenizers with the FIM sentinels of each model family, trained
in the test process with the `tokenizers` library (no downloads), and a scripted model
that writes a given text."""

from __future__ import annotations

from functools import cache

import numpy as np

from midword.completion.model import BranchScore, ModelStats
from midword.engine import Tokenizer

CORPUS = [
    "def foo(x):\n    return x + 1\n",
    "class Bar:\n    def __init__(self, value):\n        self.value = value\n",
    "import os\nfrom pkg.util import helper\n\nresult = helper(os.getcwd())\n",
    "for item in items:\n    if item:\n        total += item\n",
]

FAMILY_SPECIALS = {
    "qwen": [
        "<|endoftext|>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<|file_sep|>",
    ],
    "starcoder": [
        "<|endoftext|>",
        "<fim_prefix>",
        "<fim_middle>",
        "<fim_suffix>",
        "<fim_pad>",
        "<repo_name>",
        "<file_sep>",
    ],
    "codegemma": ["<eos>", "<bos>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|file_separator|>"],
    "codellama": ["</s>", "<s>", "\u2581<PRE>", "\u2581<MID>", "\u2581<SUF>", "\u2581<EOT>"],
    "deepseek": [
        "<｜end▁of▁sentence｜>",
        "<｜begin▁of▁sentence｜>",
        "<｜fim▁begin｜>",
        "<｜fim▁hole｜>",
        "<｜fim▁end｜>",
        "<|EOT|>",
    ],
    "codestral": ["</s>", "<s>", "[PREFIX]", "[SUFFIX]", "[MIDDLE]"],
    "plain": ["<|endoftext|>"],
}


@cache
def fim_tokenizer(family: str) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator(CORPUS * 20, trainer)
    # added tokens, as the real tokenizers hold them (their text is not byte-level encoded)
    hf.add_special_tokens(FAMILY_SPECIALS[family])
    return Tokenizer.from_hf(hf, name=f"fim-{family}")


def special_id(tok: Tokenizer, text: str) -> int:
    ids = [i for i, b in enumerate(tok.all_token_bytes()) if b == text.encode("utf-8")]
    assert len(ids) == 1, (text, ids)
    return ids[0]


class MiddleModel:
    """Writes `middle` after the prompt it was last prefilled with, then a stop token:
    at each step the longest token continuing `middle` gets the highest logit. The
    middle may start with the space before the word (where the prompt backed off it)."""

    name = "middle"

    def __init__(self, tokenizer, middle: str, stop: int, lead_space: bool = True):
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self.stats = ModelStats()
        self.want = middle.encode("utf-8")
        self.stop = stop
        self.lead_space = lead_space
        self.prompts: list[list[int]] = []

    def encode_prompt(self, text):
        return self.tokenizer.encode(text)

    def prefill(self, tokens, cancelled=None):
        self.prompts.append(list(tokens))
        return True

    def _logits(self, tokens) -> np.ndarray:
        done = self.tokenizer.decode(tokens[len(self.prompts[-1]) :])
        rest = b""
        for want in (b" " + self.want, self.want) if self.lead_space else (self.want,):
            if want.startswith(done) and (done or not self.lead_space or want == b" " + self.want):
                rest = want[len(done) :]
                break
        out = np.full(self.vocab_size, -20.0)
        if not rest:
            out[self.stop] = 10.0
            return out
        for i, b in enumerate(self.tokenizer.all_token_bytes()):
            if b and rest.startswith(b) and not self.tokenizer.is_special(i):
                out[i] = len(b)
        return out

    def next_logits(self, tokens, allowed=None):
        lg = self._logits(list(tokens))
        return lg if allowed is None else lg[np.asarray(allowed, dtype=np.int64)]

    def next_logprobs(self, tokens, allowed=None):
        lg = self._logits(list(tokens))
        lp = lg - (lg.max() + np.log(np.exp(lg - lg.max()).sum()))
        return lp if allowed is None else lp[np.asarray(allowed, dtype=np.int64)]

    def score_branches(self, prefix, branches, allowed=None):
        out = []
        for br in branches:
            seq, lps = list(prefix), []
            for t in br:
                lps.append(self.next_logprobs(seq)[t])
                seq.append(t)
            out.append(BranchScore(tuple(br), np.asarray(lps), self.next_logprobs(seq)))
        return out

    def logprobs(self, tokens, start=1):
        return np.asarray([self.next_logprobs(tokens[:i])[tokens[i]] for i in range(start, len(tokens))])

    def reset(self):
        pass
