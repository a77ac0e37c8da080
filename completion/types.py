"""The completion layer's public data: what a caller asks for and what it gets back.

The server, the CLI and the headless API all speak these types; they carry no model
or LSP objects, so every front end can build them from its own input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["naive", "heal1", "align", "cpc"]
MODES: tuple[str, ...] = ("naive", "heal1", "align", "cpc")
ChunkKind = Literal["document", "edit", "definition", "snippet"]
CHUNK_KINDS: tuple[str, ...] = ("document", "edit", "definition", "snippet")
Multiline = Literal["never", "auto", "always"]
MULTILINE: tuple[str, ...] = ("never", "auto", "always")
DEFAULT_CONTEXT_TOKENS = 1024


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
class ContextChunk:
    """Text from outside the document being completed that the prompt may show the model.

    text: the code itself (a whole file, a region, a definition).
    path: the file it comes from, as the user would name it (workspace-relative is best);
      shown in the prompt's file header, and used to group and order chunks.
    time: when it was last edited or opened, in seconds (any clock, larger is more recent);
      None for "unknown". Recency is part of the ranking.
    kind: "document" (a whole open file: split into pieces at top-level definitions and
      ranked piece by piece), "edit" (a region the user recently edited), "definition"
      (a definition of a name near the cursor, found by the caller), "snippet" (anything
      else, e.g. llama.cpp's `input_extra` or Tabby's `relevant_snippets_from_changed_files`).

    Front ends build these from their own input, e.g. for llama.cpp's `input_extra` items
    `ContextChunk(item["text"], path=item.get("filename"))`, for Tabby's `declarations`
    `ContextChunk(d["body"], path=d["filepath"], kind="definition")`.
    """

    text: str
    path: str | None = None
    time: float | None = None
    kind: ChunkKind = "snippet"

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise TypeError(f"ContextChunk.text must be a string, got {type(self.text).__name__}")
        if self.path is not None and not isinstance(self.path, str):
            raise TypeError(f"ContextChunk.path must be a string or None, got {type(self.path).__name__}")
        if self.time is not None and (
            isinstance(self.time, bool) or not isinstance(self.time, (int, float)) or self.time != self.time
        ):
            raise TypeError(f"ContextChunk.time must be a number or None, got {self.time!r}")
        if self.kind not in CHUNK_KINDS:
            raise ValueError(f"ContextChunk.kind must be one of {', '.join(CHUNK_KINDS)}, got {self.kind!r}")


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
    # Workspace context (completion/context.py): chunks from other files, ranked and cut
    # to `context_tokens` tokens of prompt, shown before the document.
    context: tuple[ContextChunk, ...] = ()
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    path: str | None = None  # the document's own path, for its file header
    repo: str | None = None  # the repository's name, for models trained with one
    # Lines: "never" completes as `single_line` says; "auto" completes a block after a
    # block opener or on an empty line and one line elsewhere; "always" completes a block.
    # A block stops at the first line indented less than it (completion/multiline.py).
    multiline: Multiline = "never"
    # Who asks (an editor's document URI): a grammar still compiling for it is cancelled
    # when it asks for another one or closes (CompletionEngine.release_document).
    document: str | None = None
    # Seconds to wait for the grammar when it is still compiling (a new schema or grammar
    # file): past that the completion runs unconstrained and says so in its note. None
    # waits for the compile (a one-shot completion wants the grammar).
    grammar_wait_s: float | None = None


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
    tokens_drafted: int = 0  # prompt-lookup draft tokens run ahead of their steps
    drafts_accepted: int = 0  # of those, tokens the decoding took
    prompt_tokens: int = 0  # tokens the model read before the completion
    context_tokens: int = 0  # of those, tokens of workspace context (other files, the suffix)
    cached_tokens: int = 0  # of those, tokens whose keys and values were already cached
    cpc_search: dict = field(default_factory=dict)  # what the cover search cost (cpc.SearchStats)
    # where a completion waited for other concurrent ones (ms): "lock" to start, "window" in
    # the step batcher for other jobs' steps, "baton" to resume after a batched step
    waits: dict = field(default_factory=dict)


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
        return prefix[self.replace_start :]

    def insert_text(self, prefix: str) -> str:
        typed = self.typed(prefix)
        return self.text[len(typed) :] if self.text.startswith(typed) else self.text
