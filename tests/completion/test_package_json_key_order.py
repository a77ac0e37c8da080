"""A package.json whose keys are in the author's order, not the bundled schema's, keeps
its schema constraint in the editor (issue #30's LSP target): the engine's grammar
takes the document above the cursor, and the mask there is the schema's."""

from __future__ import annotations

from importlib import resources

import pytest

from midword.completion.engine import CompletionEngine
from midword.completion.types import CompletionRequest, GrammarSpec
from midword.engine import Matcher
from midword.engine.matcher import mask_to_ids

SCHEMA = resources.files("midword.grammars").joinpath("schemas", "package.json").read_text(encoding="utf-8")

# Schema order is name, version, description, ..., scripts, dependencies, ..., private:
# here scripts first, version before name, private after dependencies.
PREFIX = (
    "{\n"
    '  "scripts": {"test": "jest", "build": "tsc"},\n'
    '  "version": "1.0.0",\n'
    '  "description": "demo",\n'
    '  "name": "pkg",\n'
    '  "dependencies": {"left-pad": "^1.3.0"},\n'
    '  "private": '
)


def request(max_tokens: int = 0) -> CompletionRequest:
    return CompletionRequest(
        prefix=PREFIX,
        suffix="\n}\n",
        language="json",
        grammar=GrammarSpec(kind="json_schema", source=SCHEMA),
        max_tokens=max_tokens,
    )


def test_the_schema_grammar_takes_the_authors_key_order_and_constrains_the_value(llama3):
    grammar, whole_document, note = CompletionEngine().grammar_for(request())
    assert grammar is not None and whole_document
    assert not note.startswith("grammar not used"), note
    m = Matcher(llama3, grammar)
    m.consume_bytes(PREFIX.encode())  # refused (MatcherError) if the key order were enforced
    texts = {llama3.token_bytes(int(t)).strip() for t in mask_to_ids(m.compute_mask(), llama3.vocab_size)}
    texts.discard(b"")
    # "private" is a boolean in the schema: only the start of true or false may come.
    assert texts and all(b"true".startswith(t) or b"false".startswith(t) for t in texts if not t.isspace()), sorted(
        texts
    )[:10]


@pytest.mark.slow
def test_the_engine_completes_the_value_under_the_schema():
    engine = CompletionEngine()
    engine.load()
    done = engine.complete(request(max_tokens=4))
    assert "grammar not used" not in done.note and "grammar constrains" not in done.note, done.note
    assert done.text.lstrip().startswith(("true", "false")), done.text
