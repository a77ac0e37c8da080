"""End-to-end completions with the real default model (Gemma 3 270M): mid-word, grammar, stop rules."""

import json

import pytest

from midword.completion.engine import CompletionEngine
from midword.completion.types import CompletionRequest, GrammarSpec
from midword.engine import Grammar
from midword.engine.recognizer import grammar_accepts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine():
    eng = CompletionEngine("gemma3")
    eng.load()
    return eng


PY = "class User:\n    def __init__(self, user_name):\n        self.user_name = user_name\n\n    def name(self):\n        return self.user_na"


@pytest.mark.parametrize("mode", ["naive", "heal1", "align", "cpc"])
def test_every_mode_completes_mid_word(engine, mode):
    r = engine.complete(CompletionRequest(prefix=PY, language="python", mode=mode, max_tokens=8))
    assert r.replace_start == len(PY) - len("user_na")
    assert r.text.startswith("user_na")
    assert "\n" not in r.text
    assert r.timings.total_ms > 0


def test_cpc_finishes_the_identifier(engine):
    r = engine.complete(CompletionRequest(prefix=PY, language="python", mode="cpc", max_tokens=8))
    assert r.text.startswith("user_name"), r.text


def test_json_schema_completion_is_valid(engine):
    schema = {
        "type": "object",
        "properties": {"mode": {"enum": ["fast", "careful"]}, "retries": {"type": "integer"}},
        "required": ["mode", "retries"],
        "additionalProperties": False,
    }
    prefix = '{"mode": "ca'
    r = engine.complete(
        CompletionRequest(
            prefix=prefix,
            language="json",
            max_tokens=24,
            single_line=False,
            grammar=GrammarSpec(kind="json_schema", source=json.dumps(schema)),
        )
    )
    assert r.text.startswith("careful"), r.text
    done = prefix[: r.replace_start] + r.text
    # whatever was generated is a prefix of a schema-valid document
    g = Grammar.from_json_schema(schema)
    from midword.engine.recognizer import Recognizer

    rec = Recognizer(g)
    assert rec.step_bytes(rec.initial(), done.encode()) is not None
    if r.stop_reason == "eos":
        assert grammar_accepts(g, done.encode())


def test_suffix_is_not_retyped(engine):
    prefix = "values = [1, 2, 3]\ntotal = sum(val"
    r = engine.complete(CompletionRequest(prefix=prefix, suffix=")\nprint(total)\n", language="python", max_tokens=12))
    assert r.text.startswith("val") and not r.text.rstrip().endswith(")"), r.text


def test_brackets_never_close_what_is_not_open(engine):
    prefix = "def f(x):\n    return (x + 1"
    for _ in range(2):
        r = engine.complete(CompletionRequest(prefix=prefix, language="python", max_tokens=16))
        inserted = r.insert_text(prefix)
        depth = 1
        for ch in inserted:
            depth += {"(": 1, ")": -1}.get(ch, 0)
            assert depth >= 0, inserted
        prefix += " "


def test_kv_cache_is_reused_across_keystrokes(engine):
    base = PY.rsplit("\n", 1)[0] + "\n\n    def greet(self):\n        return 'hi ' + self.us"
    engine.complete(CompletionRequest(prefix=base, language="python", max_tokens=2))
    before = engine.model.stats.tokens_prefilled
    engine.complete(CompletionRequest(prefix=base + "e", language="python", max_tokens=2))
    assert engine.model.stats.tokens_prefilled - before < 40


def test_cancel_stops_quickly(engine):
    r = engine.complete(
        CompletionRequest(prefix=PY, language="python", max_tokens=40, single_line=False), cancelled=lambda: True
    )
    assert r.stop_reason == "cancelled"


def test_unknown_mode_is_a_clear_error(engine):
    with pytest.raises(ValueError, match="unknown mode"):
        engine.complete(CompletionRequest(prefix="x", mode="bogus"))
