"""The decoding constraint (re-spell typed text, then the grammar) on the real Llama 3 tokenizer,
and character-prefix-conditioning back-off and covers with a scripted model."""

import random
from dataclasses import dataclass

import numpy as np
import pytest

from midword.completion.constraint import Constraint, ConstraintError, LogitsProcessor
from midword.completion.cpc import backoff, is_canonical, search_covers
from midword.engine import Grammar
from midword.engine.brackets import code_brackets_grammar
from midword.engine.matcher import mask_to_ids


def spelled(tok, mask):
    return {tok.token_bytes(int(t)) for t in mask_to_ids(mask, tok.vocab_size) if not tok.is_special(int(t))}


def test_respelling_without_grammar(llama3):
    c = Constraint(llama3)
    s = c.initial(typed=b"userNa")
    allowed = spelled(llama3, c.allowed(s))
    assert {b"u", b"user", b"userName"} <= allowed
    assert all(b.startswith(b"userNa") or b"userNa".startswith(b) for b in allowed)
    mask = c.allowed(s)
    assert not any((mask[t >> 5] >> (t & 31)) & 1 for t in llama3.eos_token_ids)
    s = c.advance(s, llama3.encode("user")[0])
    assert s.typed == b"Na"
    assert b"Name" in spelled(llama3, c.allowed(s))
    s = c.advance(s, llama3.encode("Name")[0])
    assert s.typed == b"" and c.is_accepting(s)
    with pytest.raises(ConstraintError):
        c.advance(c.initial(typed=b"userNa"), llama3.encode("order")[0])


def test_respelling_meets_the_bracket_grammar(llama3):
    # cursor inside `print(fo|`: the completion may close the paren, but not twice
    c = Constraint(llama3, code_brackets_grammar("(", language="python"))
    s = c.initial(typed=b"fo")
    allowed = spelled(llama3, c.allowed(s))
    assert b"foo" in allowed
    if b"fo)" in {llama3.token_bytes(t) for t in range(llama3.vocab_size)}:
        assert b"fo)" in allowed
    s = c.advance(s, llama3.encode("foo")[0])
    after = spelled(llama3, c.allowed(s))
    assert b")" in after and b"))" not in after and b"]" not in after


def test_eos_only_when_spelled_and_accepting(llama3):
    g = Grammar.from_lark('start: "a" NAME\nNAME: /[a-z]+/')
    c = Constraint(llama3, g)
    eos = min(llama3.eos_token_ids)
    s = c.initial()
    assert not (c.allowed(s)[eos >> 5] >> (eos & 31)) & 1
    s = c.advance(s, llama3.encode("ab")[0])
    assert (c.allowed(s)[eos >> 5] >> (eos & 31)) & 1
    done = c.advance(s, eos)
    assert done.done and not c.allowed(done).any()


def test_forced_tokens_come_from_the_grammar(llama3):
    g = Grammar.from_lark(r'start: "{\"name_of_the_person\":" /[0-9]+/ "}"')
    c = Constraint(llama3, g)
    s = c.initial()
    ff = c.forced(s)
    assert llama3.decode(ff) and b'{"name_of_the_person":'.startswith(llama3.decode(ff))
    assert c.forced(c.initial(typed=b"x")) == []  # nothing forced while re-spelling


def test_the_constraint_walks_and_steps_under_the_shared_recognizer_lock(llama3, monkeypatch):
    # Matchers and constraints of one grammar share its recognizer (tables, walk space),
    # and compiled walks run without the GIL: each use must hold the recognizer's lock.
    from midword.engine.mask import MaskWalker
    from midword.engine.recognizer import Recognizer

    g = Grammar.from_lark(r'start: "[" /[0-9]+/ ("," /[0-9]+/)* "]"')
    c = Constraint(llama3, g)
    held = []

    def checked(cls, name):
        original = getattr(cls, name)

        def call(self, *args):
            held.append(c.automaton.lock._is_owned())
            return original(self, *args)

        monkeypatch.setattr(cls, name, call)

    checked(MaskWalker, "mask")
    checked(MaskWalker, "subtree_mask")
    checked(Recognizer, "step_bytes")
    checked(Recognizer, "is_accepting")
    s = c.initial(typed=b"[1", grammar_prefix=b"[1")
    for text in ("[", "1", "2", ",", "3"):
        c.allowed(s)
        c.forced(s)
        s = c.advance(s, llama3.encode(text)[0])
    c.candidates_after(s.grammar, b",")
    assert held and all(held)


def test_logits_processor_masks_disallowed(llama3):
    c = Constraint(llama3, Grammar.from_regex("[0-9]+"))
    proc = LogitsProcessor(c, c.initial())
    logits = np.zeros(llama3.vocab_size, dtype=np.float32)
    out = proc([], logits)
    ok = np.isfinite(out)
    assert ok.any() and all(llama3.token_bytes(int(t)).isdigit() for t in np.flatnonzero(ok))
    seven = llama3.encode("7")[0]
    out2 = proc([seven], logits)
    assert np.isfinite(out2[seven])


def test_random_walks_agree_with_definition(llama3):
    g = code_brackets_grammar("([", language="python")
    c = Constraint(llama3, g)
    rng = random.Random(3)
    sample = rng.sample(range(llama3.vocab_size), 3000)
    for typed in [b"self.us", b"x", b" count"]:
        s = c.initial(typed=typed)
        for _ in range(4):
            mask = c.allowed(s)
            for t in sample:
                if llama3.is_special(t):
                    continue
                allowed = bool((mask[t >> 5] >> (t & 31)) & 1)
                try:
                    c.advance(s, t)
                    legal = True
                except ConstraintError:
                    legal = False
                assert allowed == legal, (typed, s.typed, llama3.token_bytes(t))
            ids = [int(t) for t in mask_to_ids(mask, llama3.vocab_size) if t not in c.eos]
            if not ids:
                break
            s = c.advance(s, rng.choice(ids))


def test_backoff_modes(llama3):
    prefix = b"def get_user(self):\n    return self.userNa"
    naive = backoff(llama3, prefix, "naive")
    assert naive.typed == b"" and llama3.decode(naive.stable) == prefix
    heal = backoff(llama3, prefix, "heal1")
    assert llama3.decode(heal.stable) + heal.typed == prefix and len(heal.stable) == len(naive.stable) - 1
    align = backoff(llama3, prefix, "align")
    assert align.typed.endswith(b"userNa") and llama3.decode(align.stable) + align.typed == prefix
    cpc = backoff(llama3, prefix, "cpc")
    assert cpc.typed.endswith(b"userNa") and llama3.decode(cpc.stable) + cpc.typed == prefix


@dataclass
class Score:
    token_logprobs: np.ndarray
    next_logprobs: np.ndarray


class ScriptedModel:
    """Log-probs from a table of preferred continuations: enough to test cover weighing."""

    def __init__(self, tok, prefer: dict[bytes, float]):
        self.tok = tok
        self.prefer = prefer
        self.calls = 0

    def next_logprobs(self, tokens):
        return self.score_branches([], [list(tokens)])[0].next_logprobs

    def score_branches(self, prompt, branches):
        self.calls += 1
        out = []
        for br in branches:
            lp = np.full(self.tok.vocab_size, -20.0)
            for text, v in self.prefer.items():
                ids = self.tok.encode(text)
                if ids[: len(br)] == br and len(ids) > len(br):
                    lp[ids[len(br)]] = max(lp[ids[len(br)]], v)
            out.append(Score(np.array([-1.0] * len(br)), lp))
        return out


def test_cover_search_prefers_the_canonical_single_token(llama3):
    c = Constraint(llama3)
    model = ScriptedModel(llama3, {b"userName": -0.1, b"userNav": -3.0})
    typed = b"userNa"
    search = search_covers(model, llama3, [], [], typed, lambda rest: c.candidates_after(None, rest))
    full = search_covers(model, llama3, [], [], typed, lambda rest: c.candidates_after(None, rest), exhaustive=True)
    # best-first pruning finds the same best cover with fewer splits run through the model
    assert len(search.splits) < len(full.splits)
    assert search.best_covers(llama3)[0] == full.best_covers(llama3)[0]
    search = full
    best = search.best_covers(llama3)
    assert best and llama3.decode(best[0].left + [best[0].token]).startswith(b"userName")
    for cover in best:
        text = llama3.decode(cover.left + [cover.token])
        assert text.startswith(typed)
        assert is_canonical(llama3, [], cover.left, cover.token, typed[: cover.split])
    sampled = search.sample(llama3, 1.0, np.random.default_rng(0))
    assert llama3.decode(sampled.left + [sampled.token]).startswith(typed)


def test_grammars_dropped_from_the_engines_cache_release_their_recognizers():
    import json

    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec
    from midword.engine.recognizer import Recognizer

    eng = CompletionEngine("unused", model_object=object())  # grammars need no model

    def grammar(source: str):
        return eng.grammar_for(CompletionRequest(prefix="", grammar=GrammarSpec("json_schema", source)))[0]

    schema = {"type": "object", "properties": {"kept": {"type": "integer"}}}
    g = grammar(json.dumps(schema))
    rec = Recognizer.for_grammar(g)
    # The same content under another key (other spacing) keeps the recognizer alive.
    assert grammar(json.dumps(schema, indent=1)).fingerprint() == g.fingerprint()
    for i in range(63):
        grammar(json.dumps({"type": "object", "properties": {f"k{i}": {"type": "integer"}}}))
    assert Recognizer.for_grammar(g) is rec  # the first entry went, its twin stays
    grammar(json.dumps({"type": "array"}))
    assert Recognizer.for_grammar(g) is not rec  # the twin went too: released


def test_forced_text_allows_only_its_first_canonical_token(llama3):
    # A sampler that never fast-forwards (vLLM's) samples from `allowed` where the
    # grammar forces text: only the forced text's first canonical token is there.
    g = Grammar.from_lark(r'start: "SELECT " cols " FROM " NAME' '\ncols: "*" | NAME ("," NAME)*\nNAME: /[a-z_]+/')
    c = Constraint(llama3, g)
    s = c.initial()
    spelled = [
        llama3.token_bytes(int(t))
        for t in np.flatnonzero(np.unpackbits(c.allowed(s).view(np.uint8), bitorder="little")[: llama3.vocab_size])
    ]
    assert spelled == [b"SELECT"] == [llama3.token_bytes(t) for t in c.forced(s)[:1]]
    for t in llama3.encode(b"SELECT *"):
        s = c.advance(s, t)
    ids = np.flatnonzero(np.unpackbits(c.allowed(s).view(np.uint8), bitorder="little")[: llama3.vocab_size])
    assert [llama3.token_bytes(int(t)) for t in ids] == [b" FROM"]
