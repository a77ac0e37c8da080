"""The greedy cover search (bounds, sparse-head rows, pruning) picks the cover that the
exhaustive search, which weighs every split with normalised log-probabilities, finds best.

A fake model over the real gemma3 tokenizer checks it on generated words (hypothesis);
the real default model on mid-word cuts of real code (slow)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from midword.completion.constraint import Constraint
from midword.completion.cpc import backoff, search_covers
from midword.completion.exact import make_prompt
from midword.completion.model import BranchScore


class OffsetModel:
    """log P(. | tokens): a pseudo-random distribution per token sequence, peaked enough
    that the best covers change from word to word. `next_logits` adds a large offset of
    its own to every sequence's row, as real logits are unnormalised: a search that
    compared rows without their normalisers would pick other covers."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.calls = {"next_logits": 0, "next_logprobs": 0, "score_branches": 0, "logprobs": 0}

    def _rng(self, tokens) -> np.random.Generator:
        digest = hashlib.sha256(np.asarray(list(tokens), dtype=np.int64).tobytes()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "little"))

    def dist(self, tokens) -> np.ndarray:
        logits = self._rng(tokens).standard_normal(self.vocab_size, dtype=np.float32).astype(np.float64) * 4.0
        logits -= logits.max()
        return logits - np.log(np.exp(logits).sum())

    def offset(self, tokens) -> float:
        return float(self._rng(list(tokens) + [-1]).uniform(-60.0, 60.0))

    def next_logits(self, tokens, allowed=None):
        self.calls["next_logits"] += 1
        row = self.dist(tokens) + self.offset(tokens)
        return row if allowed is None else row[np.asarray(allowed)]

    def next_logprobs(self, tokens, allowed=None):
        self.calls["next_logprobs"] += 1
        row = self.dist(tokens)
        return row if allowed is None else row[np.asarray(allowed)]

    def logprobs(self, tokens, start=1):
        self.calls["logprobs"] += 1
        return np.array([self.dist(tokens[:i])[tokens[i]] for i in range(start, len(tokens))])

    def score_branches(self, prompt, branches, allowed=None):
        self.calls["score_branches"] += 1
        out = []
        for br in branches:
            seq = list(prompt) + list(br)
            lps = np.array([self.dist(seq[: len(prompt) + j])[br[j]] for j in range(len(br))])
            out.append(BranchScore(tuple(br), lps, self.dist(seq)))
        return out


@pytest.fixture(scope="module")
def constraint(gemma3):
    return Constraint(gemma3)


def _both(model, tok, constraint, prefix: str):
    back = backoff(tok, prefix.encode("utf-8"), "cpc")
    prompt = make_prompt(tok, back.stable)

    def cands(rest):
        return constraint.candidates_after(None, rest)

    greedy = search_covers(model, tok, prompt, back.stable, back.typed, cands)
    full = search_covers(model, tok, prompt, back.stable, back.typed, cands, exhaustive=True)
    return prompt, back, greedy, full


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lead=st.sampled_from(["x = ", "    return self.", "print(", "def ", "import ", "if not "]),
    word=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
)
def test_greedy_search_picks_the_exhaustive_best_cover(gemma3, constraint, lead, word):
    model = OffsetModel(gemma3.vocab_size)
    prompt, back, greedy, full = _both(model, gemma3, constraint, lead + word)
    g = greedy.pick(gemma3, 0.0, np.random.default_rng(0))
    best = full.best_covers(gemma3)
    f = best[0] if best else None
    assert (g is None) == (f is None)
    if g is None or f is None:
        return
    assert (g.split, g.left, g.token) == (f.split, f.left, f.token)
    # the greedy weights are the exhaustive ones plus the prompt row's own constant (none
    # when that row was read whole, normalised)
    assert full.normalised
    shift = 0.0 if greedy.normalised else model.offset(prompt)
    assert g.logprob - shift == pytest.approx(f.logprob, abs=1e-6)
    gs, fs = greedy.stats, full.stats
    assert gs.splits == fs.splits and gs.scored + gs.bounded + gs.pruned + gs.empty == gs.splits
    assert fs.scored + fs.empty == fs.splits


def test_greedy_search_skips_normalisers(gemma3, constraint):
    """Over a set of words the greedy search computes fewer full-vocabulary rows than the
    exhaustive one, and drops splits unrun (a test that would pass with no pruning at all
    would not check the bounds)."""
    greedy_rows = full_rows = pruned = 0
    for prefix in ["    return self.showerr", "result = compute_tot", "import os\nos.path.jo", "x = {'key': valu"]:
        _, _, greedy, full = _both(OffsetModel(gemma3.vocab_size), gemma3, constraint, prefix)
        greedy_rows += greedy.stats.full_rows
        full_rows += full.stats.full_rows
        pruned += greedy.stats.pruned + greedy.stats.bounded
    assert pruned > 0
    assert greedy_rows < full_rows


# The real default model -----------------------------------------------------------------------

CUTS = [
    # (document before the cursor); cuts of real code, some of them from `bench cpc`'s sample
    "def f():\n    pri",
    "import os\nos.path.jo",
    "class UserAccount:\n    def __init__(self, user_na",
    "for index in range(10):\n    total += ind",
    "    def test_one(self):\n        self.asse",
    "import warnings\nwarnings.warn('old', DeprecationWarnin",
    "class T(unittest.TestCase):\n    @unittest.skipI",
    "def decode(data):\n    return data.decode('utf-8', 'surrogatee",
    "        if mode == 'r':\n            s",
    "    def tearD",
    "from . import rebin",
    "        co",
]


@pytest.fixture(scope="module")
def gemma_model():
    from midword.completion.engine import CompletionEngine

    eng = CompletionEngine("gemma3")
    eng.load()
    return eng.model


@pytest.mark.slow
def test_real_model_greedy_search_equals_exhaustive(gemma_model, constraint):
    tok = gemma_model.tokenizer
    with_left = 0
    greedy_rows = full_rows = 0
    for prefix in CUTS:
        prompt, back, greedy, full = _both(gemma_model, tok, constraint, prefix)
        assert back.typed, prefix
        g = greedy.pick(tok, 0.0, np.random.default_rng(0))
        f = full.best_covers(tok)[0]
        assert g is not None
        assert (g.split, g.left, g.token) == (f.split, f.left, f.token), prefix
        # the greedy weight is log P(cover), plus the prompt row's normaliser when not normalised
        t = g.left[0] if g.left else g.token
        z = float(gemma_model.next_logits(prompt, allowed=np.asarray([t]))[0] - gemma_model.next_logprobs(prompt)[t])
        z = 0.0 if greedy.normalised else z
        assert g.logprob - z == pytest.approx(f.logprob, abs=2e-3), prefix
        with_left += bool(g.left)
        greedy_rows += greedy.stats.full_rows
        full_rows += full.stats.full_rows
    assert with_left > 0  # the exact path (a full row after a left part) ran too
    assert greedy_rows < full_rows
