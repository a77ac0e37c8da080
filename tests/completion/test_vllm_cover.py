"""CPC's cover search through a vLLM server picks the local engine's cover.

`VllmCompletionEngine.cover` splits the search into scoring requests (one per prefix of
the left parts: the best allowed candidate and the log-probabilities of chosen tokens);
here `score` answers those from a model function that `cpc.search_covers` reads too, so
the two must agree on the cover for every typed word. No vLLM needed: that the real
server's `score` answers with the model's own log-probabilities is checked in
tests/e2e/test_vllm_http.py.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from midword.completion.backend_vllm import VllmCompletionEngine, _Remote
from midword.completion.cpc import search_covers
from midword.completion.model import BranchScore
from midword.completion.types import CompletionRequest, GrammarSpec


class HashedModel:
    """log P(. | prompt): a fixed pseudo-random distribution per prompt, peaked enough that
    the best candidates (and whether they are canonical) change from prompt to prompt."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.calls = 0

    def dist(self, prompt) -> np.ndarray:
        digest = hashlib.sha256(np.asarray(list(prompt), dtype=np.int64).tobytes()).digest()
        logits = np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal(self.vocab_size) * 4.0
        logits -= logits.max()
        return logits - np.log(np.exp(logits).sum())

    # what search_covers reads
    def next_logprobs(self, prompt):
        return self.dist(prompt)

    def score_branches(self, prompt, branches):
        out = []
        for br in branches:
            lps = np.array([self.dist(list(prompt) + br[:j])[br[j]] for j in range(len(br))])
            out.append(BranchScore(tuple(br), lps, self.dist(list(prompt) + br)))
        return out

    # what vLLM answers (VllmCompletionEngine.score)
    def score(self, prompt, allowed=None, scored=(), cancelled=None):
        self.calls += 1
        d = self.dist(prompt)
        ids = np.arange(self.vocab_size) if allowed is None else np.asarray(allowed)
        best = int(ids[np.argmax(d[ids])])
        return best, float(d[best]), {int(t): float(d[t]) for t in scored}


@pytest.fixture(scope="module")
def engine(gemma3):
    eng = VllmCompletionEngine("gemma3", url="http://127.0.0.1:9")
    eng._model = _Remote("gemma3", gemma3)
    return eng


PREFIXES = [
    "def f():\n    pri",
    "import os\nos.path.jo",
    "class UserAccount:\n    def __init__(self, user_na",
    "for index in range(10):\n    total += ind",
    "    return self.showerr",
    "x = {'key': valu",
    "result = compute_tot",
    "        s",
]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_remote_cover_is_the_local_search_cover(engine, gemma3, prefix):
    model = HashedModel(gemma3.vocab_size)
    engine.score = model.score
    request = CompletionRequest(prefix=prefix, language="python", grammar=GrammarSpec(kind="none"), max_tokens=8)
    plan = engine.prepare(request)
    assert plan.typed, "each prefix ends inside a word the prompt backs off"
    remote = engine.cover(plan)
    local = search_covers(
        model,
        gemma3,
        plan.prompt,
        plan.tail,
        plan.typed,
        lambda rest: plan.constraint.candidates_after(plan.state.grammar, rest),
    ).pick(gemma3, 0.0, np.random.default_rng(0))
    assert local is not None and remote is not None
    assert (remote.split, remote.left, remote.token) == (local.split, local.left, local.token)
    assert remote.logprob == pytest.approx(local.logprob, abs=1e-6)
    assert gemma3.decode(remote.left + [remote.token]).startswith(plan.typed)


def test_a_grammar_limits_the_candidates(engine, gemma3):
    """Under a grammar the cover's first free token must suit it past the typed bytes."""
    model = HashedModel(gemma3.vocab_size)
    engine.score = model.score
    request = CompletionRequest(
        prefix='{"na',
        language="json",
        grammar=GrammarSpec(kind="json_schema", source='{"type":"object"}'),
        max_tokens=8,
    )
    plan = engine.prepare(request)
    remote = engine.cover(plan)
    assert remote is not None
    state = plan.state
    for t in remote.left + [remote.token]:
        state = plan.constraint.advance(state, t)  # raises when the grammar refuses the cover
    assert state.typed == b""
