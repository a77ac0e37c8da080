"""KV cache slots (completion/kv_slots.py) over tiny randomly initialised Gemma 3 models,
both backends: two documents completed in turn each keep their own cache, so a document
whose turn comes back prefills only what changed, and the logits stay those of an
uncached forward."""

from __future__ import annotations

import numpy as np
import pytest
from byte_tokenizer import byte_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from midword.completion.gemma3_lean import LeanGemma3  # noqa: E402
from midword.completion.kv_slots import KVSlots  # noqa: E402
from midword.completion.model_transformers import TransformersModel  # noqa: E402

TOL = 1e-4
DOC_A = "# file a\ndef fibonacci(n):\n    if n <= 1:\n        return n\n    return fib"
DOC_B = "# file b\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y"


def tiny_gemma(seed=0):
    cfg = transformers.Gemma3TextConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=512,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
        },
    )
    hf = transformers.AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return hf.eval()


@pytest.fixture(scope="module")
def models():
    hf = tiny_gemma()
    tm = TransformersModel(hf, byte_tokenizer(), name="tiny")
    lean = LeanGemma3.from_transformers(TransformersModel(hf, byte_tokenizer(), name="tiny"), capacity=16)
    return hf, {"transformers": tm, "lean": lean}


def fresh_logits(hf, tokens) -> np.ndarray:
    with torch.inference_mode():
        return hf(input_ids=torch.tensor([list(tokens)]), use_cache=False).logits[0, -1].float().numpy()


@pytest.mark.parametrize("backend", ["transformers", "lean"])
def test_reset_state_sets_only_the_swapped_fields(models, backend):
    # swap_state moves STATE_FIELDS as the model's state: a field _reset_state sets
    # beside them would stay behind and mix two documents' caches.
    _, ms = models
    m = ms[backend]
    m.reset()
    before = {k: id(v) for k, v in vars(m).items()}
    m._reset_state()
    changed = {k for k, v in vars(m).items() if before.get(k) != id(v)}
    assert changed and changed <= set(m.STATE_FIELDS), changed - set(m.STATE_FIELDS)


@pytest.mark.parametrize("backend", ["transformers", "lean"])
def test_swap_state_round_trip(models, backend):
    hf, ms = models
    m = ms[backend]
    m.reset()
    a, b = m.encode_prompt(DOC_A), m.encode_prompt(DOC_B)
    m.prefill(a)
    parked = m.swap_state()
    assert m.cached_tokens == () and tuple(parked.tokens.tolist()) == tuple(a) and parked.nbytes > 0
    m.prefill(b)
    parked_b = m.swap_state(parked)
    assert m.cached_tokens == tuple(a) and tuple(parked_b.tokens.tolist()) == tuple(b)
    m.stats.reset()
    np.testing.assert_allclose(m.next_logits(a), fresh_logits(hf, a), atol=TOL)
    assert m.stats.tokens_prefilled == 0  # all of it came back with the slot
    m.swap_state(parked_b)
    np.testing.assert_allclose(m.next_logits(b), fresh_logits(hf, b), atol=TOL)
    assert m.stats.tokens_prefilled == 0


@pytest.mark.parametrize("backend", ["transformers", "lean"])
def test_documents_in_turn_prefill_only_what_changed(models, backend):
    hf, ms = models
    m = ms[backend]
    m.reset()
    slots = KVSlots(m, max_slots=4)
    prefilled = []
    for step in range(3):
        for doc in (DOC_A, DOC_B):
            toks = m.encode_prompt(doc + "x" * step)  # the user typed on
            m.stats.reset()
            reused = slots.use(toks)
            np.testing.assert_allclose(m.next_logits(toks), fresh_logits(hf, toks), atol=TOL)
            assert reused + m.stats.tokens_prefilled == len(toks)
            prefilled.append(m.stats.tokens_prefilled)
    first_a, first_b = prefilled[:2]
    assert first_a > 30 and first_b > 30
    assert all(n == 1 for n in prefilled[2:]), prefilled  # one typed character each turn
    assert len(slots) == 2 and slots.stats.switches == 4 and slots.stats.created == 1

    # one slot: the old behaviour, every turn prefills the document again
    m.reset()
    single = KVSlots(m, max_slots=1)
    again = []
    for doc in (DOC_A, DOC_B, DOC_A):
        toks = m.encode_prompt(doc)
        m.stats.reset()
        single.use(toks)
        m.next_logits(toks)
        again.append(m.stats.tokens_prefilled)
    assert min(again) > 30


def test_slots_are_bounded_by_count_and_memory(models):
    _, ms = models
    m = ms["transformers"]
    m.reset()
    docs = [f"# file {k}\nvalue_{k} = compute({k})\n" for k in range(5)]
    slots = KVSlots(m, max_slots=3)
    for d in docs:
        slots.use(m.encode_prompt(d))
        m.prefill(m.encode_prompt(d))
    assert len(slots) == 3 and slots.stats.evicted == 2
    # the two most recent parked documents come back without a prefill; the oldest does not
    kept = [d for d in docs[-3:-1]]
    for d in kept:
        toks = m.encode_prompt(d)
        assert slots.use(toks) == len(toks)
    assert slots.use(m.encode_prompt(docs[0])) < 0.5 * len(m.encode_prompt(docs[0]))

    m.reset()
    no_memory = KVSlots(m, max_slots=8, max_bytes=0)
    for d in docs[:3]:
        no_memory.use(m.encode_prompt(d))
        m.prefill(m.encode_prompt(d))
    assert len(no_memory) == 1 and no_memory.stats.parked_bytes == 0


def test_a_prompt_extending_the_cache_keeps_its_slot(models):
    _, ms = models
    m = ms["transformers"]
    m.reset()
    slots = KVSlots(m, max_slots=4)
    toks = m.encode_prompt(DOC_A)
    assert slots.use(toks[:5]) == 0  # empty cache: nothing to park
    m.prefill(toks[:5])
    assert slots.use(toks) == 5 and len(slots) == 1 and slots.stats.created == 0


@pytest.mark.parametrize("backend", ["transformers", "lean"])
def test_a_prefill_cut_short_goes_on_at_the_next_checkout(models, backend):
    """A job's prefill cancelled by a keystroke leaves a slot holding a start of the prompt,
    far under half of it; the next job's checkout takes that slot and prefills only the
    rest (from zero each time, a long prompt cancelled at every keystroke never ends)."""
    _, ms = models
    m = ms[backend]
    m.reset()
    slots = KVSlots(m, max_slots=4)
    toks = m.encode_prompt(DOC_A * 3)
    view = slots.checkout(toks)
    assert view.cached == 0
    view.prefill(toks[:4])
    slots.checkin(view)
    assert 4 < slots.min_shared * len(toks)
    again = slots.checkout(toks)
    assert again.cached == 4 and again.is_cached(toks[:4])
    again.prefill(toks)
    np.testing.assert_allclose(again.next_logits(toks), fresh_logits(models[0], toks), atol=1e-4)
    slots.checkin(again)


def test_a_slot_checked_in_while_others_run_is_kept(models):
    """Several clients: a document's slot parked while more jobs than `max_slots` run (a
    superseded job of the same document among them) serves its next keystroke whole."""
    _, ms = models
    m = ms["transformers"]
    m.reset()
    slots = KVSlots(m, max_slots=2)
    docs = [m.encode_prompt(f"# file {k}\nvalue_{k} = compute({k})\n") for k in range(3)]
    views = [slots.checkout(toks) for toks in docs]
    for view, toks in zip(views, docs, strict=True):
        view.prefill(toks)
    slots.checkin(views[0])  # the two others still run
    assert slots.stats.evicted == 0
    again = slots.checkout(docs[0])
    assert again.cached == len(docs[0])
    for view in (again, *views[1:]):
        slots.checkin(view)
    assert len(slots) == 2  # then the count bound holds again


def test_bad_bounds_are_refused(models):
    _, ms = models
    for kwargs, word in (({"max_slots": 0}, "max_slots"), ({"max_bytes": -1}, "max_bytes"), ({"min_shared": 2}, "min")):
        with pytest.raises(ValueError, match=word):
            KVSlots(ms["transformers"], **kwargs)


def test_engine_brings_back_each_documents_slot(models):
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest

    _, ms = models
    m = ms["lean"]
    m.reset()
    engine = CompletionEngine("tiny", model_object=m, mode="naive")
    timings = []
    for step in range(2):
        for doc in (DOC_A, DOC_B):
            request = CompletionRequest(prefix=doc + " " * step, language="python", max_tokens=2, mode="naive")
            timings.append(engine.complete(request).timings)
    assert [t.cached_tokens for t in timings[:2]] == [0, 0]
    for t in timings[2:]:  # the other document's turn left its slot parked, not overwritten
        assert t.cached_tokens >= t.prompt_tokens - 2 > 30, (t.cached_tokens, t.prompt_tokens)
    count, stats = engine.slot_stats
    assert count == 2 and stats.switches == 2
