"""midword: code completion that conditions on the characters typed so far and keeps output grammatical.

The headless API is `midword.complete(prefix, suffix="", ...)`; the engine underneath
(`midword.completion.engine.CompletionEngine`) loads the default model on first use.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from midword.completion.types import Mode

__version__ = "0.1.0"

_engine = None
_engine_lock = threading.Lock()


def complete(
    prefix: str,
    suffix: str = "",
    *,
    language: str | None = None,
    grammar=None,
    max_tokens: int = 48,
    mode: Mode = "cpc",
    temperature: float = 0.0,
    single_line: bool = True,
    model: str = "gemma3",
    time_budget_s: float = 5.0,
):
    """Completes the text at the cursor (between `prefix` and `suffix`).

    `grammar` is None (chosen from the language: JSON, or balanced brackets for code), a
    `midword.completion.types.GrammarSpec`, or a Lark grammar as a string. Returns a
    `Completion` whose `text` replaces `prefix[completion.replace_start:]` (the typed
    part of the word at the cursor), with `stop_reason` and `timings`.
    """
    global _engine
    from midword.completion.engine import CompletionEngine
    from midword.completion.types import MODES, CompletionRequest, GrammarSpec

    _check_text("prefix", prefix)
    _check_text("suffix", suffix)
    if language is not None and not isinstance(language, str):
        raise TypeError(f"language must be a string or None, got {type(language).__name__}")
    if grammar is not None and not isinstance(grammar, (str, GrammarSpec)):
        raise TypeError(f"grammar must be None, a Lark grammar string or a GrammarSpec, got {type(grammar).__name__}")
    _check_number("max_tokens", max_tokens, 1, 4096, integer=True)
    _check_number("temperature", temperature, 0.0, 2.0)
    _check_number("time_budget_s", time_budget_s, 0.001, 3600.0)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not isinstance(single_line, bool):
        raise TypeError(f"single_line must be a bool, got {type(single_line).__name__}")
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a non-empty string, got {model!r}")

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
    request = CompletionRequest(
        prefix=prefix,
        suffix=suffix,
        language=language,
        grammar=spec,
        max_tokens=max_tokens,
        mode=mode,
        temperature=temperature,
        single_line=single_line,
        time_budget_s=time_budget_s,
    )
    return engine.complete(request)


def _check_text(name: str, value) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"{name} has a lone surrogate at index {e.start} (not valid text)") from None


def _check_number(name: str, value, lo: float, hi: float, *, integer: bool = False) -> None:
    import math

    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__}")
    if not math.isfinite(value) or not lo <= value <= hi:
        raise ValueError(f"{name} must be from {lo:g} to {hi:g}, got {value!r}")
