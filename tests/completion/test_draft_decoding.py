"""Prompt-lookup draft tokens (completion/decode.py): the lookup itself, and completions
with drafts equal to completions without them on real files with the real default model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from midword.completion.decode import draft_tokens

ROOT = Path(__file__).resolve().parents[2]


def test_longest_latest_match_is_continued():
    seq = np.array([5, 1, 2, 9, 9, 7, 1, 2, 3, 4, 8, 1, 2], dtype=np.int64)
    # [1, 2] recurs at 1-2 and 6-7; the latest one continues with 3, 4, 8.
    assert draft_tokens(seq, 3).tolist() == [3, 4, 8]
    assert draft_tokens(seq, 10).tolist() == [3, 4, 8, 1, 2]
    # A longer match beats a later, shorter one: [7, 1, 2] occurs once before the end.
    seq2 = np.array([7, 1, 2, 6, 0, 1, 2, 5, 7, 1, 2], dtype=np.int64)
    assert draft_tokens(seq2, 2).tolist() == [6, 0]


def test_no_draft_without_a_long_enough_match():
    assert draft_tokens(np.array([1, 2, 3, 4], dtype=np.int64), 4).size == 0
    # Only the last token recurs (a match of one).
    assert draft_tokens(np.array([3, 9, 1, 3], dtype=np.int64), 4).size == 0
    assert draft_tokens(np.array([1, 2, 1, 2], dtype=np.int64), 0).size == 0
    assert draft_tokens(np.array([4], dtype=np.int64), 3).size == 0
    # A match at the very start of the sequence.
    assert draft_tokens(np.array([1, 2, 8, 1, 2], dtype=np.int64), 5).tolist() == [8, 1, 2]


class _Model:
    """A model that records prefills (what drafting runs), batching or not."""

    def __init__(self, batching: bool):
        self.batching = batching
        self.max_context = 100
        self.prefilled: list[list[int]] = []

    def is_cached(self, tokens) -> bool:
        return False

    def prefill(self, tokens, cancelled=None) -> bool:
        self.prefilled.append(list(tokens))
        return True


@pytest.mark.parametrize("batching", [False, True])
def test_no_drafts_while_steps_run_in_batches(batching):
    """Beside other jobs, a step batched with theirs costs less than draft tokens run in a
    forward of the job's own (the drafts would also hold the others back)."""
    from midword.completion.decode import Generation, _Drafter

    model = _Model(batching)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7]  # "5 6 7" recurs: "8 9" is the draft
    drafter = _Drafter(model, prompt, 4)
    gen = Generation(tokens=[])
    drafter.before_step(gen)
    if batching:
        assert model.prefilled == [] and gen.drafted == 0
    else:
        assert model.prefilled == [prompt + [8, 9, 5, 6]] and gen.drafted == 4


def _cuts():
    """Cursor positions inside lines of real files of this checkout."""
    out = []
    for rel in ("completion/decode.py", "engine/limits.py", "midword/bench/model.py"):
        path = ROOT / rel
        if not path.exists():
            continue
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        for frac in (0.35, 0.7):
            i = int(len(lines) * frac)
            while i < len(lines) and len(lines[i].strip()) < 12:
                i += 1
            line = lines[i]
            cut = len(line) - len(line.lstrip()) + max(3, len(line.strip()) // 3)
            out.append((rel, "".join(lines[:i]) + line[:cut]))
    return out


@pytest.mark.slow
def test_drafts_give_the_same_completions():
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest

    eng = CompletionEngine("gemma3")
    eng.load()
    cuts = _cuts()
    assert len(cuts) >= 6
    drafted = accepted = 0
    for rel, prefix in cuts:
        for mode, multiline in (("cpc", "never"), ("naive", "always")):
            texts = []
            for k in (8, 0):
                # Plain decoding must not find the drafted run's positions in the cache.
                if k == 0:
                    eng.model.reset()
                eng.draft_tokens = k
                r = eng.complete(
                    CompletionRequest(
                        prefix=prefix,
                        language="python",
                        mode=mode,
                        max_tokens=24,
                        multiline=multiline,
                        time_budget_s=60,
                    )
                )
                texts.append(r.text)
                if k:
                    drafted += r.timings.tokens_drafted
                    accepted += r.timings.drafts_accepted
                else:
                    assert r.timings.tokens_drafted == 0
            assert texts[0] == texts[1], (rel, mode, prefix[-60:])
    print(f"draft tokens {drafted}, accepted {accepted} ({accepted / max(1, drafted):.0%})")
    # The drafts were exercised, and some were taken.
    assert drafted > 0 and 0 < accepted <= drafted
