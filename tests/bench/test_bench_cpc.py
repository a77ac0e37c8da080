"""`midword bench cpc`: the cut sampler, the metrics, the exact cover enumeration (against
a brute-force walk over every token id with a scripted model), and the command end to
end — with the scripted model, and (slow) with Gemma 3 270M."""

from __future__ import annotations

import argparse
import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest

from midword.bench import cpc as B
from midword.completion.exact import _utf8_text, count_tree_nodes
from midword.completion.model import BranchScore, ModelStats

# ---------------------------------------------------------------------------------------------
# A tiny tokenizer and a scripted model


def _tiny_tokenizer():
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    from midword.engine.tokenizer import Tokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    # overlapping merges: "abcab" has many spellings (a|b|c|a|b, ab|c|ab, abc|ab, a|bc|ab, ...)
    merges = [("a", "b"), ("b", "c"), ("ab", "c"), ("c", "a"), ("ca", "b"), ("d", "e"), ("de", "f")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken("<bos>", special=True), AddedToken("<eos>", special=True)])
    return Tokenizer.from_hf(HFTokenizer.from_str(hf.to_str()), name="tiny-bpe")


@pytest.fixture(scope="module")
def tok():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MIDWORD_NO_DISK_CACHE", "1")  # no trie files for a throwaway vocabulary
        t = _tiny_tokenizer()
        B._Vocab.of(t)  # builds (and keeps) the trie while the variable is set
        yield t


class ScriptedModel:
    """Deterministic pseudo-random next-token distributions (a function of the last three
    tokens and the length), behind the `LanguageModel` protocol."""

    name = "scripted"
    max_branch_nodes = 4096

    def __init__(self, tokenizer, seed: int = 0, scale: float = 2.5):
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self.stats = ModelStats()
        self.seed = seed
        self.scale = scale
        self.calls = 0

    def full_logprobs(self, tokens) -> np.ndarray:
        tokens = [int(t) for t in tokens]
        key = zlib.crc32(np.asarray(tokens[-3:], dtype=np.int64).tobytes()) ^ (len(tokens) * 7919) ^ self.seed
        x = np.random.default_rng(key).normal(size=self.vocab_size) * self.scale
        x -= x.max()
        return x - np.log(np.exp(x).sum())

    def encode_prompt(self, text):
        return [self.tokenizer.bos_token_id] + self.tokenizer.encode(text)

    def prefill(self, tokens, cancelled=None):
        # No cache to fill: every distribution is computed on demand.
        return not (cancelled is not None and cancelled())

    def next_logprobs(self, tokens, allowed=None):
        self.stats.forward_passes += 1
        self.stats.tokens_prefilled += 1
        lp = self.full_logprobs(tokens)
        return lp if allowed is None else lp[np.asarray(allowed, dtype=np.int64)]

    def next_logits(self, tokens, allowed=None):
        return self.next_logprobs(tokens, allowed).astype(np.float32)

    def score_branches(self, prefix, branches, allowed=None):
        self.stats.forward_passes += 1
        self.stats.tokens_prefilled += len({tuple(br[:k]) for br in branches for k in range(1, len(br) + 1)})
        self.calls += 1
        out = []
        for j, br in enumerate(branches):
            seq = [int(t) for t in prefix]
            lps = []
            for t in br:
                lps.append(self.full_logprobs(seq)[int(t)])
                seq.append(int(t))
            nxt = self.full_logprobs(seq)
            ids = None if allowed is None or allowed[j] is None else np.asarray(allowed[j], dtype=np.int64)
            out.append(
                BranchScore(
                    tuple(int(t) for t in br), np.asarray(lps, dtype=np.float64), nxt if ids is None else nxt[ids], ids
                )
            )
        return out

    def logprobs(self, tokens, start=1):
        return np.asarray([self.full_logprobs(tokens[:i])[tokens[i]] for i in range(start, len(tokens))])

    def reset(self):
        pass


@pytest.fixture(scope="module")
def model(tok):
    return ScriptedModel(tok)


# ---------------------------------------------------------------------------------------------
# Brute force: walk every token id, no trie


def _free_ids(tok):
    return [t for t in range(tok.vocab_size) if t not in tok.special_token_ids and tok.token_bytes(t)]


def brute_events(model, prompt, typed: bytes, local: bool = False) -> dict[tuple[int, ...], float]:
    """Every first-free-token event after `prompt` for the typed bytes, with its log weight."""
    tok = model.tokenizer
    free = _free_ids(tok)
    n = len(typed)
    events: dict[tuple[int, ...], float] = {}

    def walk(seq, text, logw, depth=0):
        assert depth <= n
        lp = model.full_logprobs(prompt + seq)
        if len(text) == n:
            for t in free:
                events[tuple(seq) + (t,)] = logw + lp[t]
            return
        rest = typed[len(text) :]
        ok = [t for t in free if rest.startswith(tok.token_bytes(t)) or tok.token_bytes(t).startswith(rest)]
        mass = float(np.logaddexp.reduce(lp[ok])) if local else 0.0
        for t in ok:
            b = tok.token_bytes(t)
            if rest.startswith(b):
                walk(seq + [t], text + b, logw + lp[t] - mass, depth + 1)
            else:
                events[tuple(seq) + (t,)] = logw + lp[t] - mass

    walk([], b"", 0.0)
    return events


def _lse(values) -> float:
    values = list(values)
    return float(np.logaddexp.reduce(np.asarray(values, dtype=np.float64))) if values else -math.inf


def _text_past(tok, tokens, n) -> bytes:
    return tok.decode(list(tokens))[n:]


PROMPT_TEXT = "x = dab\ny = ab"


@pytest.fixture(scope="module")
def prompt(model):
    return model.encode_prompt(PROMPT_TEXT)


@pytest.mark.parametrize("typed", [b"abcab", b"cab", b"ab", b"d"])
def test_exact_tree_matches_brute_force(model, prompt, typed):
    tok = model.tokenizer
    brute = brute_events(model, prompt, typed)
    tree = B.expand_covers(model, prompt, typed, weighting="global", want_best=True)
    assert tree.complete and not tree.best_first and tree.nodes == tree.total_nodes
    assert tree.log_total == pytest.approx(_lse(brute.values()), abs=1e-9)
    # groups by the text the first free token adds past the typed bytes
    groups: dict[bytes, list[float]] = {}
    for tokens, w in brute.items():
        groups.setdefault(_text_past(tok, tokens, len(typed)), []).append(w)
    totals = {k: _lse(v) for k, v in groups.items()}
    best_text = max(totals, key=totals.get)
    assert tree.best_text == best_text
    assert tree.log_best == pytest.approx(totals[best_text], abs=1e-9)
    in_group = {t: w for t, w in brute.items() if _text_past(tok, t, len(typed)) == best_text}
    assert tree.best.tokens == max(in_group, key=in_group.get)
    assert tree.best.logw == pytest.approx(max(in_group.values()), abs=1e-9)
    assert tok.decode(list(tree.best.tokens)).startswith(typed)


def test_spellings_count(model, prompt):
    # a|b|c|a|b ... : every spelling of every prefix, with the empty one
    trie = B._Vocab.of(model.tokenizer).trie
    n = count_tree_nodes(trie, b"abcab", 10**6)
    tree = B.expand_covers(model, prompt, b"abcab")
    assert n == tree.nodes
    brute_nodes = {t[:k] for t in brute_events(model, prompt, b"abcab") for k in range(len(t))}
    assert n == len(brute_nodes)


@pytest.mark.parametrize("typed,head", [(b"abcab", b"cab = 1"), (b"cab", b"x"), (b"ab", b"cdef")])
def test_agreeing_events_and_logprob_match_brute_force(model, prompt, typed, head):
    tok = model.tokenizer
    target = typed + head
    brute = brute_events(model, prompt, typed)
    agreeing = {
        t: w
        for t, w in brute.items()
        if target.startswith(tok.decode(list(t))) or tok.decode(list(t)).startswith(target)
    }
    tree = B.expand_covers(model, prompt, typed, target=target, want_best=False)
    got = {e.tokens: e.logw for e in tree.consistent}
    assert set(got) == set(agreeing)
    for k in got:
        assert got[k] == pytest.approx(agreeing[k], abs=1e-9)
        assert next(e for e in tree.consistent if e.tokens == k).end == len(tok.decode(list(k)))

    # log Σ_e P(e) P(encode(rest) | e) / Z, every event kept
    def cont(tokens):
        end = len(tok.decode(list(tokens)))
        rest = tok.encode(target[end:]) if end < len(target) else []
        seq = list(prompt) + list(tokens)
        total = 0.0
        for t in rest:
            total += model.full_logprobs(seq)[t]
            seq.append(t)
        return total

    want = _lse(w + cont(t) for t, w in agreeing.items()) - _lse(brute.values())
    got_lp = B.continuation_logprob(model, prompt, tree.consistent, target, tree.log_total, keep=10**6)
    assert got_lp == pytest.approx(want, abs=1e-9)
    assert got_lp < 0


def test_local_weighting_matches_the_constrained_decoder(model, prompt):
    typed, target = b"abcab", b"abcabde"
    brute = brute_events(model, prompt, typed, local=True)
    tree = B.expand_covers(model, prompt, typed, weighting="local", target=target, want_best=False)
    assert tree.log_total == pytest.approx(_lse(brute.values()), abs=1e-9)
    # the constrained process spells the typed bytes with certainty: its events sum to one,
    # less the special tokens' share after the nodes that spelled everything
    assert -0.2 < tree.log_total <= 1e-9
    got = {e.tokens: e.logw for e in tree.consistent}
    for k, w in got.items():
        assert w == pytest.approx(brute[k], abs=1e-9)
    # renormalising makes the re-spelling more likely than under the plain model
    plain = B.expand_covers(model, prompt, typed, weighting="global", target=target, want_best=False)
    assert _lse(got.values()) > _lse(e.logw for e in plain.consistent)


def test_best_first_equals_full_enumeration(model, prompt):
    typed = b"abcab"
    full = B.expand_covers(model, prompt, typed)
    every = B.expand_covers(model, prompt, typed, enumerate_all=False, want_best=False, tolerance=1e-300)
    assert every.best_first and every.complete and every.stop == "complete"
    assert every.log_total == pytest.approx(full.log_total, abs=1e-9)
    # certified early stop: same argmax, fewer nodes, and the unscored weight bounds the gap
    early = B.expand_covers(model, prompt, typed, enumerate_all=False, want_best=True)
    assert early.best_text == full.best_text
    assert early.best.tokens == full.best.tokens
    if not early.complete:
        assert early.stop == "certified" and early.certified
        assert math.exp(early.log_frontier) >= math.exp(full.log_total) - math.exp(early.log_total) - 1e-12


@pytest.mark.parametrize("max_nodes", [1, 2, 3, 5, 8])
def test_capped_expansion_is_honest(model, prompt, max_nodes):
    typed = b"abcab"
    full = B.expand_covers(model, prompt, typed)
    capped = B.expand_covers(model, prompt, typed, enumerate_all=False, want_best=True, max_nodes=max_nodes)
    assert capped.nodes <= max_nodes
    # these caps stop the search before it can certify its best: it must say so
    assert not capped.complete and not capped.certified
    # what is left unscored bounds what is missing from the total
    missing = math.exp(full.log_total) - math.exp(capped.log_total)
    assert math.exp(capped.log_frontier) >= missing - 1e-12


@pytest.mark.parametrize(("typed", "max_nodes"), [(b"abcab", 10), (b"cab", 3), (b"dab", 4), (b"abc", 3), (b"ab", 1)])
def test_capped_expansion_that_certifies_picks_the_exact_best(model, prompt, typed, max_nodes):
    full = B.expand_covers(model, prompt, typed)
    capped = B.expand_covers(model, prompt, typed, enumerate_all=False, want_best=True, max_nodes=max_nodes)
    # stopped early, yet certain: the unscored weight cannot overturn the best found
    assert capped.certified and not capped.complete and capped.nodes < full.nodes
    assert capped.best_text == full.best_text
    assert math.exp(capped.log_frontier) >= math.exp(full.log_total) - math.exp(capped.log_total) - 1e-12


def test_count_is_bounded(tok):
    trie = B._Vocab.of(tok).trie
    assert count_tree_nodes(trie, b"a" * 200, 50) == 51


def test_exact_complete_continues_after_the_heaviest_event(model, tok):
    prefix = "abc = 1\nq = abcab"
    target = b"cab = 2"
    res = B.exact_complete(model, prefix, max_tokens=6, target=target)
    assert res.typed and prefix.encode().endswith(res.typed)
    assert res.prompt == [tok.bos_token_id] + tok.tokenize_partial(prefix.encode())[0]
    brute = brute_events(model, res.prompt, res.typed)
    groups: dict[bytes, float] = {}
    for tokens, w in brute.items():
        key = _text_past(tok, tokens, len(res.typed))
        groups[key] = float(np.logaddexp(groups.get(key, -math.inf), w))
    best_text = max(groups, key=groups.get)
    assert res.tree.best_text == best_text
    # then plain greedy decoding from the chosen event, one line, six tokens in all
    tokens = list(res.tree.best.tokens)
    allowed = _free_ids(tok) + sorted(tok.eos_token_ids)
    while len(tokens) < 6 and b"\n" not in tok.decode(tokens)[len(res.typed) :]:
        lp = model.full_logprobs(list(res.prompt) + tokens)
        pick = max(allowed, key=lambda t: lp[t])
        if pick in tok.eos_token_ids:
            break
        tokens.append(pick)
    want = tok.decode(tokens)[len(res.typed) :].split(b"\n")[0]
    assert res.inserted == _utf8_text(want)  # less a character cut in half at the end
    assert want.startswith(best_text.split(b"\n")[0])


def test_mode_logprob_naive_is_the_plain_model(model, tok):
    prefix, head = "y = ab", b"c + 1"
    got = B.mode_logprob(model, "naive", prefix, head, keep=10**6)
    prompt = [tok.bos_token_id] + tok.encode(prefix)
    free = _free_ids(tok)
    lp0 = model.full_logprobs(prompt)
    terms = []
    for t in free:
        b = tok.token_bytes(t)
        if head.startswith(b) or b.startswith(head):
            seq = prompt + [t]
            total = lp0[t]
            for u in tok.encode(head[len(b) :]) if len(b) < len(head) else []:
                total += model.full_logprobs(seq)[u]
                seq.append(u)
            terms.append(total)
    assert got == pytest.approx(_lse(terms), abs=1e-9)
    assert math.isnan(B.mode_logprob(model, "naive", prefix, b""))


@pytest.mark.parametrize("mode", ["heal1", "align", "cpc", "exact"])
def test_mode_logprob_is_a_probability(model, mode):
    lp = B.mode_logprob(model, mode, "q = abcab", b"cab = 2", keep=10**6)
    assert -200 < lp < 0


def test_cpc_events_are_canonical_and_agree(model, tok):
    from midword.completion.cpc import backoff, is_canonical

    prefix = "q = abcab"
    back = backoff(tok, prefix.encode(), "cpc")
    prompt = B.make_prompt(tok, back.stable)
    target = back.typed + b"c"
    events, log_norm = B.cpc_events(model, prompt, back.stable, back.typed, target)
    assert events and math.isfinite(log_norm)
    for e in events:
        text = tok.decode(list(e.tokens))
        assert target.startswith(text) or text.startswith(target)
        assert e.logw <= log_norm + 1e-9
    # every agreeing event is canonical for its own text
    for e in events:
        left_text = tok.decode(list(e.tokens[:-1]))
        assert is_canonical(tok, back.stable[-8:], list(e.tokens[:-1]), e.tokens[-1], left_text)


# ---------------------------------------------------------------------------------------------
# Cases: the cut sampler and the JSONL reader

SOURCE = '''"""Docstring with words_inside."""
import os

MAX_VALUE = 0x1F + 1_000 + 3.14  # comment_word
name = "string_word"


class UserStore:
    def find_user(self, user_name):
        return self.users.get(user_name, None)
'''


def test_word_spans_are_identifiers_and_plain_numbers():
    words = [SOURCE[s:e] for s, e in B.word_spans(SOURCE)]
    assert "UserStore" in words and "find_user" in words and "user_name" in words and "MAX_VALUE" in words
    assert "0x1F" in words and "1_000" in words
    for w in ("words_inside", "comment_word", "string_word", "class", "def", "return", "None", "3", "14"):
        assert w not in words, w
    assert all(len(w) >= 2 for w in words)
    # broken Python gives nothing rather than words from inside a broken string
    assert B.word_spans("def broken(:\n  'unterminated") == []
    assert B.word_spans("a = $bcd\n") == []
    # other languages: plain word runs
    c = "int x1 = foo_bar(7);"
    assert [c[s:e] for s, e in B.word_spans(c, python=False)] == ["int", "x1", "foo_bar"]


def test_cut_case_context_and_truth():
    text = "aaa\nbbb\nccc userName = 1\nnext line\n"
    cut = text.index("userName") + 4
    case = B.cut_case(text, cut, "f.py:3:8", context_chars=10)
    assert case.prefix == "ccc user"  # the first line start within 10 characters
    assert B.cut_case(text, cut, "f.py:3:8", context_chars=6).prefix == "c user"  # no line start that near
    assert B.cut_case(text, cut, "f.py:3:8", context_chars=1000).prefix == text[:cut]
    assert case.truth == text[cut:]
    assert case.line_truth == "Name = 1"
    assert case.suffix == ""
    assert case.typed_word == "user" and case.truth_word == "userName"
    long_line = "x" * 50 + " value"
    c2 = B.cut_case(long_line, len(long_line) - 2, "g", context_chars=10)
    assert c2.prefix == long_line[-12:-2]  # one long line: cut mid-line


def _write_corpus(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "store.py").write_text(SOURCE, encoding="utf-8")
    (root / "calc.py").write_text(
        "def total_price(items, tax_rate):\n    subtotal = sum(item.price for item in items)\n"
        "    return subtotal * (1 + tax_rate)\n\n\nprice = total_price(cart_items, 20)\n",
        encoding="utf-8",
    )
    (root / "site-packages").mkdir()
    (root / "site-packages" / "third_party.py").write_text("vendored_identifier = 1\n", encoding="utf-8")
    (root / "notes.txt").write_text("not python\n", encoding="utf-8")
    (root / "empty.py").write_text("# nothing here\n", encoding="utf-8")
    return root


def test_sampler_cuts_strictly_inside_words_deterministically(tmp_path):
    root = _write_corpus(tmp_path / "corpus")
    files = B.corpus_files(root)
    assert [p.relative_to(root).as_posix() for p in files] == ["calc.py", "empty.py", "pkg/store.py"]
    first = list(_take(B.sample_corpus(root, seed=7), 25))
    again = list(_take(B.sample_corpus(root, seed=7), 10))
    assert again == first[:10]  # the first N cases do not depend on N
    other = list(_take(B.sample_corpus(root, seed=8), 25))
    assert other != first
    assert len({c.name for c in first}) == len(first)  # no cut drawn twice
    for case in first:
        path, line, col = case.name.rsplit(":", 2)
        text = (root / path).read_text(encoding="utf-8")
        lines = text.split("\n")
        cut = sum(len(x) + 1 for x in lines[: int(line) - 1]) + int(col)
        assert text[:cut].endswith(case.prefix) and text[cut:] == case.truth
        spans = B.word_spans(text)
        assert any(s < cut < e for s, e in spans), case.name
        assert case.typed_word and case.truth[:1].isalnum() or case.truth[:1] == "_"
        assert case.truth_word == next(text[s:e] for s, e in spans if s < cut < e)
        assert "vendored" not in case.truth_word


def _take(it, n):
    for k, x in enumerate(it):
        if k >= n:
            return
        yield x


def test_sampler_errors(tmp_path):
    with pytest.raises(B.BenchError, match="not a directory"):
        B.corpus_files(tmp_path / "missing")
    (tmp_path / "a.txt").write_text("x", encoding="utf-8")
    with pytest.raises(B.BenchError, match="no files match"):
        B.corpus_files(tmp_path)
    (tmp_path / "b.py").write_text("# only a comment\n", encoding="utf-8")
    assert list(B.sample_corpus(tmp_path, 0)) == []  # nothing to cut: the stream ends


def test_read_jsonl(tmp_path):
    f = tmp_path / "cases.jsonl"
    rows = [
        {"task_id": "T/0", "prompt": "def f(x):\n    return x.up", "canonical_solution": "per()", "suffix": "\n"},
        {
            "task_id": "T/1",
            "prompt": "def g(a, b):\n",
            "canonical_solution": "    c = a + b\n    return c\n",
            "suffix": "\ndef h(): pass\n",
        },
        {"task_id": "T/2", "prompt": "y = len(it", "canonical_solution": "ems", "suffix": ") + 1\n"},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    cases = list(B.read_jsonl(f))
    assert [c.name for c in cases] == ["T/0", "T/1", "T/2"]
    assert cases[0].truth == "per()\n" and cases[0].line_truth == "per()" and cases[0].truth_word == "upper"
    assert cases[1].line_truth == "    c = a + b" and cases[1].typed_word == ""
    assert cases[2].line_truth == "ems" and cases[2].suffix == ") + 1\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(B.BenchError, match=r"bad.jsonl:2:"):
        list(B.read_jsonl(bad))
    bad.write_text(json.dumps({"prompt": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(B.BenchError, match="canonical_solution"):
        list(B.read_jsonl(bad))


# ---------------------------------------------------------------------------------------------
# Metrics


def test_word_and_line_match():
    case = B.cut_case("x = self.userName + 1\n", len("x = self.userNa"), "t")
    assert B.word_match(case, "me + 1")
    assert B.word_match(case, "me")
    assert not B.word_match(case, "mes + 1")
    assert not B.word_match(case, "")
    assert not B.word_match(case, "m")
    assert B.line_match(case, "me + 1")
    assert B.line_match(case, "me + 1   ")
    assert B.line_match(case, "me + 1\nmore")
    assert not B.line_match(case, "me + 2")
    assert B.completed_word("a = fo", "o_bar(1)") == "foo_bar"
    assert B.completed_word("a = ", "(x)") == ""


def test_truth_head_and_percentile():
    assert B.truth_head("abc") == b"abc"
    assert B.truth_head("0123456789abcdefXYZ") == b"0123456789abcdef"
    assert B.truth_head("0123456789abcd" + "é" + "é") == "0123456789abcdé".encode()  # 16 bytes
    assert B.truth_head("0123456789abcde" + "é") == b"0123456789abcde"  # never half a character
    xs = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    for q in (0, 50, 95, 100):
        assert B.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert math.isnan(B.percentile([], 50))


def test_summary_and_table():
    R = B.ModeResult
    records = [
        {"naive": R("a", True, False, 10.0, 3, logprob=-2.0), "cpc": R("b", True, True, 20.0, 2, logprob=-1.0)},
        {"naive": R("c", False, False, 30.0, 5, logprob=-math.inf), "cpc": R("d", True, False, 40.0, 4, logprob=-3.0)},
    ]
    summary, notes = B.summarize(records, ["naive", "cpc"])
    assert summary["naive"]["em_word"] == 0.5 and summary["cpc"]["em_word"] == 1.0
    assert summary["cpc"]["em_line"] == 0.5 and summary["naive"]["em_line"] == 0.0
    assert summary["naive"]["logprob"] == -2.0 and summary["cpc"]["logprob"] == -2.0
    assert summary["cpc"]["latency_p50_ms"] == 30.0 and summary["cpc"]["latency_p95_ms"] == pytest.approx(39.0)
    assert summary["naive"]["forwards"] == 4.0 and summary["cpc"]["positions"] == 0.0
    assert any("naive: 1 case" in n for n in notes)
    table = B.format_table({"cases": 2, "modes": summary, "notes": notes})
    rows = table.splitlines()
    assert rows[0].split() == [
        "mode",
        "em_word",
        "em_line",
        "logprob",
        "p50",
        "ms",
        "p95",
        "ms",
        "forwards",
        "positions",
    ]
    assert rows[1].split()[:3] == ["naive", "0.500", "0.000"]
    assert len({len(r) for r in rows[:3]}) == 1  # aligned


# ---------------------------------------------------------------------------------------------
# The command, with the scripted model behind the real engine


def _parse(argv):
    p = argparse.ArgumentParser()
    B.add_cpc_arguments(p)
    return p.parse_args(argv)


@pytest.fixture(scope="module")
def scripted_engine(tok):
    from midword.completion.engine import CompletionEngine

    return CompletionEngine("scripted", model_object=ScriptedModel(tok, seed=3))


def test_run_cpc_json(tmp_path, scripted_engine, capsys):
    root = _write_corpus(tmp_path / "corpus")
    dump = tmp_path / "cases.jsonl"
    args = _parse(
        ["--corpus", str(root), "--limit", "3", "--json", "--quiet", "--max-tokens", "6", "--dump", str(dump)]
    )
    assert B.run_cpc(args, engine=scripted_engine) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cases"] == 3
    assert list(out["modes"]) == list(B.ALL_MODES)
    searches = {}
    for mode, s in out["modes"].items():
        searches[mode] = s.pop("cover_search", None)
        assert (searches[mode] is not None) == (mode == "cpc")  # every cut is mid-word: cpc searches covers
        assert set(s) == {"em_word", "em_line", "logprob", "latency_p50_ms", "latency_p95_ms", "forwards", "positions"}
        assert 0.0 <= s["em_word"] <= 1.0 and 0.0 <= s["em_line"] <= 1.0
        assert s["latency_p95_ms"] >= s["latency_p50_ms"] > 0
        assert s["forwards"] >= 1
        assert s["logprob"] is None or s["logprob"] < 0
    assert searches["cpc"]["searches"] == 3 and searches["cpc"]["cpc_p95_ms"] >= searches["cpc"]["cpc_p50_ms"] > 0
    records = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    assert len(records) == 3 and set(records[0]["modes"]) == set(B.ALL_MODES)
    for r in records:
        c = r["modes"]["cpc"]["cover_search"]
        # every split is weighed, bounded, pruned or has no candidate
        assert c["scored"] + c["bounded"] + c["pruned"] + c["empty"] == c["splits"] >= 1
        assert c["model_calls"] >= 1 and r["modes"]["cpc"]["cpc_ms"] > 0
    for r in records:
        for res in r["modes"].values():
            word = r["typed_word"] + B._WORD_HEAD.match(res["inserted"]).group(0)
            assert res["em_word"] == (word == r["truth_word"])


def test_run_cpc_table_and_modes(tmp_path, scripted_engine, capsys):
    root = _write_corpus(tmp_path / "corpus")
    args = _parse(
        ["--corpus", str(root), "--limit", "2", "--modes", "naive,cpc", "--no-logprob", "--quiet", "--max-tokens", "4"]
    )
    assert B.run_cpc(args, engine=scripted_engine) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("character prefix conditioning: 2 cases")
    assert out[1].split()[0] == "mode"
    assert [line.split()[0] for line in out[2:4]] == ["naive", "cpc"]
    assert out[2].split()[3] == "-"  # no log-prob asked for


def test_run_cpc_input_errors(tmp_path, scripted_engine, capsys):
    assert B.run_cpc(_parse(["--corpus", str(tmp_path / "nope")]), engine=scripted_engine) == 2
    assert "not a directory" in capsys.readouterr().err
    root = _write_corpus(tmp_path / "corpus")
    assert B.run_cpc(_parse(["--corpus", str(root), "--modes", "naive,bogus"]), engine=scripted_engine) == 2
    assert "bogus" in capsys.readouterr().err
    assert B.run_cpc(_parse(["--corpus", str(root), "--limit", "0"]), engine=scripted_engine) == 2
    with pytest.raises(SystemExit):
        _parse(["--corpus", "a", "--jsonl", "b"])


def test_light_import():
    import subprocess
    import sys

    code = "import sys, midword.bench.cpc; print('numpy' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ---------------------------------------------------------------------------------------------
# The real model


@pytest.fixture(scope="module")
def gemma_engine():
    from midword.completion.engine import CompletionEngine

    eng = CompletionEngine("gemma3")
    eng.load()
    return eng


REPEATED = """class Inventory:
    def __init__(self):
        self.item_count = 0
        self.item_names = []

    def add(self, name):
        self.item_names.append(name)
        self.item_count += 1

    def size(self):
        return self.item_count
"""


@pytest.mark.slow
def test_real_model_benchmark(tmp_path, gemma_engine):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "inventory.py").write_text(REPEATED, encoding="utf-8")
    cut = REPEATED.rindex("item_count") + len("item_co")
    easy = B.cut_case(REPEATED, cut, "inventory.py:11:27")
    cases = [easy] + list(_take(B.sample_corpus(root, seed=1), 2))
    result = B.run_benchmark(gemma_engine, cases, B.ALL_MODES, B.Options(max_tokens=8))
    assert result["cases"] == 3
    for mode, s in result["modes"].items():
        assert s["forwards"] >= 1 and s["latency_p50_ms"] > 0
        assert s["logprob"] is not None and -60 < s["logprob"] < 0, (mode, s)
    # the easy case alone: the identifier is spelled out three lines above
    one = B.run_case(gemma_engine, easy, B.ALL_MODES, B.Options(max_tokens=8))
    for mode in ("cpc", "exact", "align"):
        assert one[mode].em_word, (mode, one[mode].inserted)
        assert one[mode].em_line, (mode, one[mode].inserted)
    # the conditional distributions put the truth far above the naive prompt's
    assert one["exact"].logprob > one["naive"].logprob
    assert one["cpc"].logprob >= one["exact"].logprob - 1.0
