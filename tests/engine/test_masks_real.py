"""compute_mask equals the reference definition on real tokenizers (Llama 3, Gemma 3, cl100k),
for shipped and hand-written grammars, along random valid walks."""

import random

import numpy as np
import pytest

from midword.engine import Grammar, Matcher, Tokenizer
from midword.engine.brackets import code_brackets_grammar
from midword.engine.matcher import mask_to_ids
from midword.grammars import read_grammar

TOKENIZERS = ["llama3", "gemma3", "cl100k"]

ARITHMETIC = r"""
start: expr
expr: expr ("+" | "-") term | term
term: term ("*" | "/") factor | factor
factor: NUMBER | "(" expr ")" | NAME ("(" expr ("," expr)* ")")?
NAME: /[a-zA-Z_]\w*/
%import common.NUMBER
%ignore " "
"""


def grammars():
    return {
        "json": Grammar.from_lark(read_grammar("json.lark")),
        "arithmetic": Grammar.from_lark(ARITHMETIC),
        "python_in_call": code_brackets_grammar("(", language="python"),
        "identifier_regex": Grammar.from_regex(r"[a-z_][a-z0-9_]{0,12}(\.[a-z_][a-z0-9_]{0,12})*"),
    }


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return Tokenizer.from_pretrained(request.param)


def bits(mask, ids):
    ids = np.asarray(ids, dtype=np.int64)
    return (mask[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1


@pytest.mark.parametrize("grammar_name", ["json", "arithmetic", "python_in_call", "identifier_regex"])
def test_mask_equals_reference_on_real_tokenizer(tokenizer, grammar_name):
    grammar = grammars()[grammar_name]
    rng = random.Random(f"{tokenizer.name}/{grammar_name}")
    m = Matcher(tokenizer, grammar)
    sample = rng.sample(range(tokenizer.vocab_size), 6000)
    for step in range(6):
        got = m.compute_mask()
        allowed = mask_to_ids(got, tokenizer.vocab_size).tolist()
        # every token we allow, plus a random sample for the ones we might miss
        check = sorted(set(allowed[:20000]) | set(sample))
        ref = m.reference_mask(tokens=check)
        assert np.array_equal(bits(got, check), bits(ref, check)), (
            f"{tokenizer.name} {grammar_name} step {step} after {tokenizer.decode(m.tokens)!r}"
        )
        choices = [t for t in allowed if t not in tokenizer.eos_token_ids]
        if not choices:
            break
        m.consume_token(rng.choice(choices))


@pytest.mark.slow
@pytest.mark.parametrize("grammar_name", ["json", "python_in_call"])
def test_full_vocabulary_mask_equals_reference(tokenizer, grammar_name):
    grammar = grammars()[grammar_name]
    m = Matcher(tokenizer, grammar)
    text = {"json": '{"key": [1, 2.5, "caf', "python_in_call": "x, [y for y in 'ab"}[grammar_name]
    m.consume_tokens(tokenizer.encode(text))
    for sliced in (True, False):
        m2 = Matcher(tokenizer, grammar, slicer=sliced)
        m2.consume_tokens(m.tokens)
        assert np.array_equal(m2.compute_mask(), m.reference_mask())
