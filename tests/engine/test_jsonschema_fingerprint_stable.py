"""A schema's grammar is the same in every process.

`Grammar.fingerprint()` promises a hash for keys that outlive the process, and two
processes serving the same schema (two `midword serve`, vLLM's workers) should build
the same grammar. Sets of IR nodes iterate in an order that follows string hashing,
which PYTHONHASHSEED changes from one process to the next; the grammar built from a
schema must not follow it. The schemas below are the shapes that did:
`oneOf` over objects (MaskBench dev Github_trivial---o60129), `dependentRequired`, `not`,
and `allOf` of references and in-place schemas."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCHEMAS = [
    {
        "type": "array",
        "items": {
            "type": "object",
            "oneOf": [
                {
                    "properties": {"error": {"type": "string"}, "reason": {"type": "string"}},
                    "required": ["error", "reason"],
                },
                {"properties": {"ok": {"type": "boolean"}, "rev": {"type": "string"}}, "required": ["ok"]},
            ],
        },
    },
    {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "dependentRequired": {"a": ["b"]}},
    {"not": {"type": "string", "maxLength": 3}},
    {
        "$defs": {"n": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "allOf": [{"$ref": "#/$defs/n"}, {"required": ["x"]}, {"properties": {"y": {"not": {"type": "null"}}}}],
    },
]

PROGRAM = """
import json, sys
from midword.engine import Grammar
schemas = json.loads(sys.stdin.read())
print(json.dumps([Grammar.from_json_schema(s).fingerprint() for s in schemas]))
"""


def _fingerprints(seed: int) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        input=json.dumps(SCHEMAS),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": str(seed)},
        timeout=300,
        check=True,
    )
    return json.loads(run.stdout)


def test_the_grammar_of_a_schema_does_not_depend_on_string_hashing():
    first = _fingerprints(1)
    assert len(set(first)) == len(SCHEMAS)
    for seed in (2, 3, 4):
        assert _fingerprints(seed) == first, f"PYTHONHASHSEED={seed}"
