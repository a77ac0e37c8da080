"""Grammar engines behind one small interface, so MaskBench drives them all with one loop.

An adapter wraps one engine: compile a JSON Schema, make a matcher, fill the next-token
mask, consume a token, say whether the text so far is a complete instance, and list the
forced (fast-forward) tokens. Masks come back as uint32 words where bit `t % 32` of word
`t // 32` set means token `t` is allowed; llguidance, xgrammar and midword all use that
layout, so the harness checks a token the same way whatever engine produced the mask.

Every engine loads the same tokenizer.json (`TokenizerSpec.path`) and treats the same
token ids as end of sequence. Peers are optional: building an adapter whose package is
missing raises `EngineUnavailable`, and the harness skips that engine with a note.

How each peer is driven, and why:

- llguidance: `LLMatcher.grammar_from_json_schema` with default options (flexible
  whitespace, JSON Schema semantics); the grammar is really compiled by the `LLMatcher`
  constructor, whose failures come back as an error state rather than an exception.
  The mask is written with `unsafe_compute_mask_ptr` into one preallocated buffer: the
  call `llguidance.numpy.fill_next_token_bitmask` makes, minus its per-call argument
  checks, and the fastest of the documented ways (`compute_bitmask` and
  `compute_logit_bias` allocate a fresh `bytes` each step). Forced tokens come from
  `compute_ff_tokens`, which already trims tokens a longer token could span (token
  healing, docs/design/fast-forward.md).
- xgrammar: `compile_json_schema(any_whitespace=True, strict_mode=False)`, the
  "compliant" configuration MaskBench uses, because instances are `json.dumps` output
  (spaces after `,` and `:`) and may carry properties a schema does not list. One
  compiler thread and no compile cache, so every TTFM includes a real compile. The mask
  is filled into a preallocated int32 array (numpy through DLPack, torch where an older
  xgrammar wants a tensor). xgrammar has no forced tokens, only a jump-forward *string*;
  it is tokenized on its own with the reference tokenizer, which is what a caller without
  token healing would do, so its non-canonical count shows what healing is worth.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np


class EngineUnavailable(RuntimeError):
    """The engine's package is not installed (or cannot load here); the harness skips it."""


class CompileFailed(Exception):
    """The engine refused the schema: an unsupported keyword, an invalid schema, a limit.

    Counted as a compile error, not a crash: it is the engine being upfront about what it
    cannot do.
    """


@dataclass(frozen=True)
class TokenizerSpec:
    """The one tokenizer every engine in a run uses.

    `name` is what the user asked for (midword resolves it itself, and the result must be
    the same file), `path` is the tokenizer.json handed to the peers and to the reference
    encoder, `eos_ids` are the end-of-sequence tokens all engines must allow at the end.
    """

    name: str
    path: str
    eos_ids: tuple[int, ...]


def token_allowed(mask: np.ndarray, token: int) -> bool:
    word = token >> 5
    if token < 0 or word >= mask.shape[0]:
        return False
    return bool((int(mask[word]) >> (token & 31)) & 1)


def reference_tokenizer(spec: TokenizerSpec):
    """The HF `tokenizers` reading of the tokenizer file: the canonical tokenization."""
    import tokenizers

    return tokenizers.Tokenizer.from_file(spec.path)


def hf_fast_tokenizer(spec: TokenizerSpec):
    """A transformers fast tokenizer over the same file, which is what the peers' loaders take."""
    try:
        import transformers
    except ImportError as e:
        raise EngineUnavailable(f"transformers is not installed ({e})") from e
    # No eos_token here: both peers are handed spec.eos_ids explicitly.
    return transformers.PreTrainedTokenizerFast(tokenizer_file=spec.path)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


class EngineAdapter(ABC):
    """One grammar engine as MaskBench sees it.

    `compile` and `new_matcher` raise `CompileFailed` for schemas the engine rejects; any
    other exception is an engine error. `fill_mask` may return the same buffer every
    time: the harness reads it before the next call. `ff_tokens` returns None when the
    engine has no notion of forced tokens.
    """

    name: str = ""

    @abstractmethod
    def describe(self) -> str:
        """Engine, version and configuration, for the report."""

    @abstractmethod
    def compile(self, schema: Any) -> Any:
        """Compile a JSON Schema (a dict or a bool) into whatever `new_matcher` takes."""

    @abstractmethod
    def new_matcher(self, compiled: Any) -> Any:
        """A fresh matcher at the start of the text."""

    @abstractmethod
    def fill_mask(self, matcher: Any) -> np.ndarray:
        """The allowed-token bitmask for the next position, as uint32 words."""

    def mask_sliced(self, matcher: Any) -> bool | None:
        """Whether the last mask OR-ed in precomputed slices; None when the engine does not say."""
        return None

    def vocab_size(self) -> int | None:
        """Tokens a mask covers, for the category table (with `mask_sliced`)."""
        return None

    @abstractmethod
    def consume(self, matcher: Any, token: int) -> bool:
        """Advance by one token; False when the engine rejects it."""

    @abstractmethod
    def is_accepting(self, matcher: Any) -> bool:
        """Whether the text consumed so far is a complete instance."""

    @abstractmethod
    def ff_tokens(self, matcher: Any) -> list[int] | None:
        """Tokens the grammar forces from here on (possibly none), or None if unsupported."""

    def end_file(self, compiled: Any) -> None:  # noqa: B027 (an optional hook: most engines keep nothing)
        """The file whose schema compiled to `compiled` is done, and no later file uses
        it: an engine that keeps compiled grammars beyond their matchers lets it go
        here, outside the timed calls, as engines without such a cache do when the
        file's objects are dropped."""

    def encode(self, text: str) -> list[int] | None:
        """The engine's own tokenization of `text`, when it has one worth cross-checking."""
        return None


class LlguidanceAdapter(EngineAdapter):
    name = "llguidance"

    def __init__(self, spec: TokenizerSpec):
        try:
            import llguidance
            import llguidance.hf
        except ImportError as e:
            raise EngineUnavailable(f"llguidance is not installed ({e})") from e
        self._llg = llguidance
        self._tok = llguidance.hf.from_tokenizer(hf_fast_tokenizer(spec), eos_token=list(spec.eos_ids))
        self._mask = np.zeros((self._tok.vocab_size + 31) // 32, dtype=np.uint32)
        self._ptr = self._mask.ctypes.data
        self._nbytes = self._mask.nbytes

    def describe(self) -> str:
        return f"llguidance {_version('llguidance')} (default JSON options, mask by pointer)"

    def compile(self, schema: Any) -> str:
        try:
            return self._llg.LLMatcher.grammar_from_json_schema(schema)
        except (ValueError, TypeError) as e:
            raise CompileFailed(str(e)) from e

    def new_matcher(self, compiled: str):
        m = self._llg.LLMatcher(self._tok, compiled, log_level=0)
        if m.is_error():
            raise CompileFailed(m.get_error())
        return m

    def fill_mask(self, matcher) -> np.ndarray:
        matcher.unsafe_compute_mask_ptr(self._ptr, self._nbytes)
        return self._mask

    def consume(self, matcher, token: int) -> bool:
        return bool(matcher.consume_token(token))

    def is_accepting(self, matcher) -> bool:
        return bool(matcher.is_accepting())

    def ff_tokens(self, matcher) -> list[int]:
        return list(matcher.compute_ff_tokens())


class XgrammarAdapter(EngineAdapter):
    name = "xgrammar"

    def __init__(self, spec: TokenizerSpec):
        try:
            import xgrammar
        except ImportError as e:
            raise EngineUnavailable(f"xgrammar is not installed ({e})") from e
        self._xgr = xgrammar
        self._ref = reference_tokenizer(spec)
        self._info = xgrammar.TokenizerInfo.from_huggingface(hf_fast_tokenizer(spec), stop_token_ids=list(spec.eos_ids))
        self._compiler = xgrammar.GrammarCompiler(self._info, max_threads=1, cache_enabled=False)
        words = (self._info.vocab_size + 31) // 32
        self._buffer: Any = np.zeros((1, words), dtype=np.int32)
        self._mask = self._buffer[0].view(np.uint32)
        self._pick_buffer()

    def _pick_buffer(self) -> None:
        # Recent xgrammar fills any DLPack array; older releases insist on a torch tensor.
        probe = self._xgr.GrammarMatcher(self._compiler.compile_builtin_json_grammar())
        try:
            probe.fill_next_token_bitmask(self._buffer)
        except (TypeError, RuntimeError, ValueError):
            import torch

            self._buffer = torch.zeros(self._buffer.shape, dtype=torch.int32)
            self._mask = self._buffer.numpy()[0].view(np.uint32)
            probe.fill_next_token_bitmask(self._buffer)

    def describe(self) -> str:
        kind = "numpy" if isinstance(self._buffer, np.ndarray) else "torch"
        return (
            f"xgrammar {_version('xgrammar')} (any_whitespace, non-strict, 1 thread, no cache, "
            f"{kind} bitmask, ff = jump-forward string tokenized alone)"
        )

    def compile(self, schema: Any):
        try:
            return self._compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=False)
        except (RuntimeError, ValueError, TypeError) as e:
            raise CompileFailed(str(e)) from e

    def new_matcher(self, compiled):
        return self._xgr.GrammarMatcher(compiled)

    def fill_mask(self, matcher) -> np.ndarray:
        matcher.fill_next_token_bitmask(self._buffer)
        return self._mask

    def consume(self, matcher, token: int) -> bool:
        return bool(matcher.accept_token(token))

    def is_accepting(self, matcher) -> bool:
        if hasattr(matcher, "is_completed"):
            return bool(matcher.is_completed())
        # Releases without is_completed: complete exactly when a stop token is allowed.
        mask = self.fill_mask(matcher)
        return any(token_allowed(mask, t) for t in self._info.stop_token_ids)

    def ff_tokens(self, matcher) -> list[int] | None:
        if not hasattr(matcher, "find_jump_forward_string"):
            return None
        text = matcher.find_jump_forward_string()
        if not text:
            return []
        return self._ref.encode(text, add_special_tokens=False).ids
