"""The completion layer's public data: what a caller asks for and what it gets back.

The server, the CLI and the headless API all speak these types; they carry no model
or LSP objects, so every front end can build them from its own input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["naive", "heal1", "align", "cpc"]
MODES: tuple[str, ...] = ("naive", "heal1", "align", "cpc")


@dataclass(frozen=True)
class GrammarSpec:
    """Which grammar constrains a completion.

    kind: "auto" (chosen from the language: JSON Schema for JSON with `$schema`, plain
    JSON for JSON, code brackets for code), "none", "lark", "json_schema", "regex".
    `source` is the grammar text (Lark/regex) or the schema as JSON text.
    """

    kind: Literal["auto", "none", "lark", "json_schema", "regex"] = "auto"
    source: str | None = None


@dataclass(frozen=True)
class CompletionRequest:
    prefix: str  # document text before the cursor
    suffix: str = ""  # document text after the cursor
    language: str | None = None  # LSP languageId or a file extension ("python", "json", ...)
    grammar: GrammarSpec = GrammarSpec()
    max_tokens: int = 48
    temperature: float = 0.0  # 0 = greedy
    mode: Mode = "cpc"
    single_line: bool = True
    # Seconds of completing once the prompt is in the model's KV cache. Prefilling a new
    # prompt is not counted: it is cancellable and kept for the next request, and a first
    # request in a large file would otherwise spend its whole budget there.
    time_budget_s: float = 2.0
    seed: int | None = None


@dataclass
class Timings:
    total_ms: float = 0.0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    mask_ms: float = 0.0
    cpc_ms: float = 0.0
    forward_passes: int = 0
    tokens_generated: int = 0
    tokens_forced: int = 0


@dataclass
class Completion:
    """A completion of the document at the cursor.

    The editor replaces prefix[replace_start:] (the typed part of the current word,
    `len(prefix) - replace_start` characters before the cursor) with `text`. So `text`
    starts with the typed characters when the cursor sits mid-word: `userNa|` may
    complete to text="userName", replace_start=len(prefix)-6.
    `insert_text` is what gets added after the cursor (text minus the typed part).
    """

    text: str
    replace_start: int  # offset into prefix (in str characters)
    stop_reason: str = ""  # "eos", "newline", "suffix", "max_tokens", "time", "grammar", "cancelled"
    timings: Timings = field(default_factory=Timings)
    note: str = ""  # e.g. why the grammar was not used

    def typed(self, prefix: str) -> str:
        return prefix[self.replace_start:]

    def insert_text(self, prefix: str) -> str:
        typed = self.typed(prefix)
        return self.text[len(typed):] if self.text.startswith(typed) else self.text
