"""The server's settings (section `midword`) and their validation.

Clients send settings in `initializationOptions` and `workspace/didChangeConfiguration`,
either as the section itself or wrapped as `{"midword": {...}}`. Each key is checked on
its own: a bad value is reported with the key, what was given and what is allowed,
and the previous value stays, so one typo never disables the rest (or the server).

| key | type | default | meaning |
|---|---|---|---|
| `enable` | bool | true | answer completion requests at all |
| `model` | string | `gemma3` | the model the engine loads |
| `maxTokens` | int 1..1024 | 48 | tokens per completion |
| `temperature` | number 0..2 | 0 | 0 = greedy |
| `mode` | `cpc`/`heal1`/`naive`/`align` | `cpc` | how a word cut by the cursor is handled |
| `grammars` | object | {} | glob or languageId -> grammar file (see `server.grammar_choice`) |
| `prefetch` | bool | true | complete the accepted text ahead while the user is idle |
| `prefetchDelayMs` | int 0..10000 | 250 | idle time before a prefetch |
| `timeBudgetMs` | int 10..60000 | 2000 | wall-clock budget of one completion, after prefilling a new prompt |
| `multiline` | `auto`/`never`/`always` | `auto` | inline completions: a block after a block opener or on an empty line (`auto`), one line (`never`), a block (`always`) |
| `contextTokens` | int 0..8192 | 1024 | prompt tokens for other open documents and recent edits (0: none) |
| `startOnKeystroke` | bool | true | start the model at an edit, before the editor asks (its answer is ready sooner) |
| `firstAnswerMs` | int 0..60000 | 100 | this long after the keystroke a request is answered with the whole words decoded so far; the rest comes on the next keystroke |
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, cast

from midword.completion.types import DEFAULT_CONTEXT_TOKENS, MODES, MULTILINE, Mode

SECTION = "midword"
_GRAMMAR_KINDS = ("auto", "none", "json")


@dataclass(frozen=True)
class Settings:
    enable: bool = True
    model: str = "gemma3"
    max_tokens: int = 48
    temperature: float = 0.0
    mode: Mode = "cpc"
    # (pattern, grammar) pairs in the order the user wrote them; the first match wins.
    grammars: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    prefetch: bool = True
    prefetch_delay_ms: int = 250
    time_budget_ms: int = 2000
    multiline: str = "auto"
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    start_on_keystroke: bool = True
    first_answer_ms: int = 100


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{SECTION}.{key} must be true or false, got {_show(value)}")


def _int(lo: int, hi: int):
    def check(key: str, value: Any) -> int:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or int(value) != value
        ):
            raise ValueError(f"{SECTION}.{key} must be an integer from {lo} to {hi}, got {_show(value)}")
        if not lo <= value <= hi:
            raise ValueError(f"{SECTION}.{key} must be from {lo} to {hi}, got {_show(value)}")
        return int(value)

    return check


def _temperature(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{SECTION}.{key} must be a number from 0 to 2, got {_show(value)}")
    if not 0 <= value <= 2:
        raise ValueError(f"{SECTION}.{key} must be from 0 to 2, got {_show(value)}")
    return float(value)


def _model(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{SECTION}.{key} must be a non-empty model name, got {_show(value)}")
    return value.strip()


def _mode(key: str, value: Any) -> Mode:
    if value not in MODES:
        raise ValueError(f"{SECTION}.{key} must be one of {', '.join(MODES)}, got {_show(value)}")
    return cast(Mode, value)


def _multiline(key: str, value: Any) -> str:
    if value not in MULTILINE:
        raise ValueError(f"{SECTION}.{key} must be one of {', '.join(MULTILINE)}, got {_show(value)}")
    return value


def _grammars(key: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ValueError(
            f"{SECTION}.{key} must be an object mapping a glob or languageId to a grammar file, "
            f'e.g. {{"*.toml": "grammars/toml.lark"}}, got {_show(value)}'
        )
    pairs = []
    for pattern, grammar in value.items():
        if not isinstance(grammar, str) or not grammar.strip():
            raise ValueError(
                f"{SECTION}.{key}[{_show(pattern)}] must be a grammar file path (.lark, .json schema, "
                f".regex) or one of {', '.join(_GRAMMAR_KINDS)}, got {_show(grammar)}"
            )
        if not pattern.strip():
            raise ValueError(f"{SECTION}.{key} has an empty pattern")
        pairs.append((pattern.strip(), grammar.strip()))
    return tuple(pairs)


# camelCase key as clients send it -> (field, checker)
_KEYS = {
    "enable": ("enable", _bool),
    "model": ("model", _model),
    "maxTokens": ("max_tokens", _int(1, 1024)),
    "temperature": ("temperature", _temperature),
    "mode": ("mode", _mode),
    "grammars": ("grammars", _grammars),
    "prefetch": ("prefetch", _bool),
    "prefetchDelayMs": ("prefetch_delay_ms", _int(0, 10_000)),
    "timeBudgetMs": ("time_budget_ms", _int(10, 60_000)),
    "multiline": ("multiline", _multiline),
    "contextTokens": ("context_tokens", _int(0, 8192)),
    "startOnKeystroke": ("start_on_keystroke", _bool),
    "firstAnswerMs": ("first_answer_ms", _int(0, 60_000)),
}


def section_of(raw: Any) -> Any:
    """The `midword` section of what a client sent (the section itself or wrapped)."""
    if isinstance(raw, dict) and isinstance(raw.get(SECTION), dict):
        return raw[SECTION]
    return raw


def parse_settings(
    raw: Any, previous: Settings | None = None, defaults: Settings | None = None
) -> tuple[Settings, list[str]]:
    """Settings from a client's JSON and one message per problem.

    A client sends the whole section each time, so a key left out or `null` takes its
    value from `defaults` (the server's own, e.g. `--model`; `Settings()` if none); a
    key with a bad value keeps its `previous` value (the default if none). `None`
    (nothing sent) keeps `previous`. Unknown keys are reported, not fatal.
    """
    defaults = defaults or Settings()
    previous = previous or defaults
    raw = section_of(raw)
    if raw is None:
        return previous, []
    if not isinstance(raw, dict):
        return previous, [f"{SECTION} settings must be an object, got {_show(raw)}"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        if key not in _KEYS:
            problems.append(f"{SECTION}.{key} is not a setting (known: {', '.join(_KEYS)})")
            continue
        if value is None:  # VS Code sends null for a setting that is unset
            continue
        name, check = _KEYS[key]
        try:
            changes[name] = check(key, value)
        except ValueError as e:
            changes[name] = getattr(previous, name)
            problems.append(f"{e}; keeping {_show(_camel_value(changes[name]))}")
    return replace(defaults, **changes), problems


def _camel_value(value: Any) -> Any:
    if isinstance(value, tuple):  # the grammars pairs, shown as the object the user wrote
        return dict(value)
    return value
