"""Workspace context with the real default model: a name defined in another open
document, and used nowhere in this one, is completed once that document is context."""

from __future__ import annotations

import pytest

from midword.completion.types import CompletionRequest, ContextChunk, GrammarSpec

pytestmark = pytest.mark.slow

UTIL = '''"""Widget helpers."""


def frobnicate_widget_count(widget_registry, *, include_hidden=False):
    """How many widgets the registry holds."""
    return sum(1 for w in widget_registry if include_hidden or not w.hidden)


class WidgetRegistry:
    def __init__(self):
        self.items = []
'''
PREFIX = "import util\n\n\ndef report(registry):\n    n = util.frob"


@pytest.fixture(scope="module")
def engine():
    from midword.completion.engine import CompletionEngine
    from midword.completion.model import ModelUnavailable

    eng = CompletionEngine("gemma3")
    try:
        eng.load()
    except ModelUnavailable as err:
        pytest.skip(str(err))
    return eng


def _complete(engine, context):
    return engine.complete(
        CompletionRequest(
            prefix=PREFIX,
            language="python",
            grammar=GrammarSpec(kind="none"),
            max_tokens=12,
            time_budget_s=120.0,
            context=context,
            path="pkg/report.py",
        )
    )


def test_a_definition_in_another_document_completes_the_word(engine):
    without = _complete(engine, ())
    with_ctx = _complete(engine, (ContextChunk(UTIL, path="pkg/util.py", kind="document"),))
    assert without.timings.context_tokens == 0 and with_ctx.timings.context_tokens > 0
    assert with_ctx.text.startswith("frobnicate_widget_count")
    assert not without.text.startswith("frobnicate_widget_count")
