"""midword: code completion that conditions on the characters typed so far and keeps output grammatical.

The headless API is `midword.complete(prefix, suffix="", ...)`; the engine underneath
(`midword.completion.engine.CompletionEngine`) loads the default model on first use.
"""

from __future__ import annotations

import threading

__version__ = "0.1.0"

_engine = None
_engine_lock = threading.Lock()


def complete(prefix: str, suffix: str = "", *, language: str | None = None, grammar=None, max_tokens: int = 48,
             mode: str = "cpc", temperature: float = 0.0, single_line: bool = True, model: str = "gemma3",
             time_budget_s: float = 5.0):
    """Completes the text at the cursor (between `prefix` and `suffix`).

    `grammar` is None (chosen from the language: JSON, or balanced brackets for code), a
    `midword.completion.types.GrammarSpec`, or a Lark grammar as a string. Returns a
    `Completion` whose `text` replaces `prefix[completion.replace_start:]` (the typed
    part of the word at the cursor), with `stop_reason` and `timings`.
    """
    global _engine
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import CompletionRequest, GrammarSpec

    with _engine_lock:
        if _engine is None or _engine.model_name != model:
            engine = CompletionEngine(model)
            engine.load()
            _engine = engine
        engine = _engine
    if grammar is None:
        spec = GrammarSpec()
    elif isinstance(grammar, str):
        spec = GrammarSpec(kind="lark", source=grammar)
    else:
        spec = grammar
    request = CompletionRequest(prefix=prefix, suffix=suffix, language=language, grammar=spec, max_tokens=max_tokens,
                                mode=mode, temperature=temperature, single_line=single_line,
                                time_budget_s=time_budget_s)
    return engine.complete(request)
