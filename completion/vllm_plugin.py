"""midword's decoding constraint inside vLLM: a `vllm.general_plugins` entry point.

vLLM's structured outputs pick a backend by a closed name, so there is no registry a
third party can join. vLLM does run every `vllm.general_plugins` entry point in each of
its processes (API server, engine core, workers) before it builds anything, and this one
wraps two functions of its llguidance backend: `GuidanceBackend.compile_grammar` (engine
core, in vLLM's grammar thread pool) and `validate_guidance_grammar` (the front end, before
a request is queued). A `structured_outputs.grammar` that starts with `%midword ` is
midword's; every other grammar goes to llguidance unchanged. Deploy vLLM with
`--structured-outputs-config '{"backend":"guidance"}'` so such grammars reach that backend.

The spec is `%midword ` followed by JSON:

    {"v": 1,
     "prefix_b64": <base64 of the typed bytes the output must re-spell first>,
     "grammar": {"lark": text} | {"json_schema": schema} | {"regex": text}
                | {"code_brackets": {"open": ..., "language": ...}} | null,
     "grammar_prefix_b64": <base64 of text the grammar reads before the output> (optional),
     "tokenizer": <vocab fingerprint of the tokenizer the client tokenized with>}

The grammar object is `Constraint` (constraint.py) behind vLLM's interface: a stack of
immutable `DecodeState`s, so `rollback` pops and `validate_tokens` walks a copy. Masks are
written straight into vLLM's int32 bitmask row. End tokens (the tokenizer's EOS and the
request's stop tokens) are allowed exactly when the typed bytes are spelled and the grammar
accepts.

Only vLLM 0.32.x and 0.33.x are patched (their internals were read for this); on any other
version the plugin logs one line and does nothing, so a midword spec gets vLLM's own 400.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .constraint import Constraint

SPEC_PREFIX = "%midword "
SPEC_VERSION = 1
SUPPORTED_VLLM = ("0.32.", "0.33.")
GRAMMAR_KINDS = ("lark", "json_schema", "regex", "code_brackets")
MAX_SPEC_CHARS = 4 << 20  # a spec carries a grammar and some document text, never megabytes of it
_CACHE_SIZE = 64
# Where `midword bench vllm` asks each vLLM process to log the time of every mask it fills.
MASK_LOG_ENV = "MIDWORD_VLLM_MASK_LOG"

logger = logging.getLogger("midword.vllm")


class SpecError(ValueError):
    """A `%midword` spec that cannot be used: malformed, a bad grammar, another tokenizer."""


# ---------------------------------------------------------------------------------------
# The spec (no vLLM needed: the client side builds it with the same code)


@dataclass(frozen=True)
class MidwordSpec:
    typed: bytes
    grammar_kind: str | None
    grammar_source: str | None  # Lark/regex text, the schema as JSON text, or code_brackets' JSON
    grammar_prefix: bytes
    tokenizer: str

    def grammar_key(self) -> tuple:
        return (self.grammar_kind, self.grammar_source)


def is_midword_spec(text) -> bool:
    return isinstance(text, str) and text.startswith(SPEC_PREFIX)


def build_spec(
    tokenizer_fingerprint: str,
    typed: bytes = b"",
    grammar: tuple[str, object] | None = None,
    grammar_prefix: bytes = b"",
) -> str:
    """The `structured_outputs.grammar` string for a request. `grammar` is (kind, value):
    ("lark", text), ("regex", text), ("json_schema", schema dict or JSON text) or
    ("code_brackets", {"open": ..., "language": ...})."""
    body: dict = {"v": SPEC_VERSION, "prefix_b64": base64.b64encode(bytes(typed)).decode("ascii")}
    if grammar is None:
        body["grammar"] = None
    else:
        kind, value = grammar
        if kind not in GRAMMAR_KINDS:
            raise SpecError(f"unknown grammar kind {kind!r}: expected one of {', '.join(GRAMMAR_KINDS)}")
        if kind == "json_schema" and isinstance(value, str):
            value = json.loads(value)
        body["grammar"] = {kind: value}
    if grammar_prefix:
        body["grammar_prefix_b64"] = base64.b64encode(bytes(grammar_prefix)).decode("ascii")
    body["tokenizer"] = tokenizer_fingerprint
    return SPEC_PREFIX + json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _b64(body: dict, key: str) -> bytes:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise SpecError(f"%midword spec: {key!r} must be a base64 string, not {type(value).__name__}")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise SpecError(f"%midword spec: {key!r} is not valid base64: {exc}") from None


def parse_spec(text: str) -> MidwordSpec:
    if not is_midword_spec(text):
        raise SpecError(f"not a midword spec: it must start with {SPEC_PREFIX!r}")
    if len(text) > MAX_SPEC_CHARS:
        raise SpecError(f"%midword spec is {len(text)} characters long; the limit is {MAX_SPEC_CHARS}")
    try:
        body = json.loads(text[len(SPEC_PREFIX) :])
    except ValueError as exc:
        raise SpecError(f"%midword spec: the text after {SPEC_PREFIX.strip()!r} is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise SpecError("%midword spec: expected a JSON object")
    unknown = set(body) - {"v", "prefix_b64", "grammar", "grammar_prefix_b64", "tokenizer"}
    if unknown:
        raise SpecError(f"%midword spec: unknown field(s) {', '.join(sorted(unknown))}")
    if body.get("v") != SPEC_VERSION:
        raise SpecError(
            f"%midword spec: version {body.get('v')!r} is not supported (this midword reads v{SPEC_VERSION})"
        )
    tokenizer = body.get("tokenizer")
    if not isinstance(tokenizer, str) or not tokenizer:
        raise SpecError("%midword spec: 'tokenizer' (the client's vocabulary fingerprint) is missing")
    grammar = body.get("grammar")
    kind = source = None
    if grammar is not None:
        if not isinstance(grammar, dict) or len(grammar) != 1:
            raise SpecError(
                f"%midword spec: 'grammar' must be null or an object with one of {', '.join(GRAMMAR_KINDS)}"
            )
        ((kind, value),) = grammar.items()
        if kind not in GRAMMAR_KINDS:
            raise SpecError(
                f"%midword spec: unknown grammar kind {kind!r} (expected one of {', '.join(GRAMMAR_KINDS)})"
            )
        if kind in ("lark", "regex"):
            if not isinstance(value, str):
                raise SpecError(f"%midword spec: grammar {kind!r} must be a string")
            source = value
        elif kind == "json_schema":
            if not isinstance(value, (dict, bool)):
                raise SpecError("%midword spec: grammar 'json_schema' must be a JSON object")
            source = json.dumps(value, separators=(",", ":"))  # property order shapes the grammar
        else:
            if (
                not isinstance(value, dict)
                or not isinstance(value.get("open", ""), str)
                or not isinstance(value.get("language"), (str, type(None)))
            ):
                raise SpecError('%midword spec: grammar \'code_brackets\' must be {"open": str, "language": str|null}')
            source = json.dumps({"open": value.get("open", ""), "language": value.get("language")}, sort_keys=True)
    return MidwordSpec(
        typed=_b64(body, "prefix_b64"),
        grammar_kind=kind,
        grammar_source=source,
        grammar_prefix=_b64(body, "grammar_prefix_b64"),
        tokenizer=tokenizer,
    )


def compile_spec_grammar(kind: str | None, source: str | None):
    """midword's Grammar for a spec's grammar (None for none); SpecError when it is bad."""
    from midword.engine.grammar import Grammar
    from midword.engine.limits import GrammarError, LimitExceeded

    if kind is None:
        return None
    if source is None:
        raise SpecError(f"%midword spec: the {kind} grammar has no source")
    try:
        if kind == "lark":
            return Grammar.from_lark(source)
        if kind == "regex":
            return Grammar.from_regex(source)
        if kind == "json_schema":
            return Grammar.from_json_schema(json.loads(source))
        from midword.engine.brackets import code_brackets_grammar

        args = json.loads(source)
        return code_brackets_grammar(args["open"], language=args["language"])
    except (GrammarError, LimitExceeded, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise SpecError(f"%midword spec: bad {kind} grammar: {exc}") from None


# ---------------------------------------------------------------------------------------
# Compiled constraints, shared by the requests of one process


class ConstraintCache:
    """Constraints by (tokenizer, grammar) text, so a grammar is compiled once per process.

    vLLM compiles grammars in a thread pool: one lock guards the table; two threads that
    miss on the same text at once may both compile, and the first stored wins."""

    def __init__(self, size: int = _CACHE_SIZE):
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple, Constraint] = OrderedDict()
        self.compiled = 0

    def get(self, tokenizer, kind: str | None, source: str | None):
        from midword.engine.limits import GrammarError, LimitExceeded

        from .constraint import Constraint

        key = (tokenizer.vocab_fingerprint(), kind, source)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        grammar = compile_spec_grammar(kind, source)
        if grammar is not None and kind != "code_brackets":
            # Output may open with whitespace the grammar skips, as in a document.
            import dataclasses

            grammar = dataclasses.replace(grammar, allow_initial_skip=True)
        try:
            # Lexemes are compiled here (a bad regex inside a grammar shows up now).
            constraint = Constraint(tokenizer, grammar)
        except (GrammarError, LimitExceeded, ValueError, RecursionError) as exc:
            raise SpecError(f"%midword spec: bad {kind} grammar: {exc}") from None
        with self._lock:
            self.compiled += 1
            constraint = self._items.setdefault(key, constraint)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return constraint


CONSTRAINTS = ConstraintCache()


def initial_state(spec: MidwordSpec, tokenizer, constraint):
    """The constraint's state at the start of the output, or SpecError (also for a
    tokenizer other than the client's)."""
    from .constraint import ConstraintError

    if spec.tokenizer != tokenizer.vocab_fingerprint():
        raise SpecError(
            f"%midword spec: tokenizer mismatch: the client tokenized with vocabulary {spec.tokenizer[:16]}..., "
            f"this server's model uses {tokenizer.vocab_fingerprint()[:16]}... ({tokenizer.name})"
        )
    try:
        return constraint.initial(spec.typed, spec.grammar_prefix)
    except ConstraintError as exc:
        raise SpecError(f"%midword spec: {exc}") from None


def prepare(spec_text: str, tokenizer):
    """(constraint, initial state) for a spec, compiled or from the cache; SpecError if unusable."""
    spec = parse_spec(spec_text)
    if spec.tokenizer != tokenizer.vocab_fingerprint():
        initial_state(spec, tokenizer, None)  # raises the mismatch
    constraint = CONSTRAINTS.get(tokenizer, spec.grammar_kind, spec.grammar_source)
    return constraint, initial_state(spec, tokenizer, constraint)


# ---------------------------------------------------------------------------------------
# vLLM's StructuredOutputGrammar interface


class MidwordGrammar:
    """One request's constraint state, with vLLM's StructuredOutputGrammar methods.

    vLLM calls one request's grammar from one thread at a time (masks of a large batch
    are filled in parallel, but each row by its own grammar); the shared `Constraint`
    takes its own lock around the recognizer it shares with other requests."""

    def __init__(self, constraint, initial, end_tokens=(), vocab_size: int | None = None):
        self.constraint = constraint
        self.initial = initial
        self.ends = frozenset(int(t) for t in end_tokens) | constraint.eos
        self.vocab_size = vocab_size
        self._states = [initial]
        self._end_bits = np.zeros(constraint._words, dtype=np.uint32)
        for t in self.ends:
            if t < 32 * constraint._words:
                self._end_bits[t >> 5] |= np.uint32(1 << (t & 31))

    # stepping ----------------------------------------------------------------------
    def _next(self, state, token: int):
        """The state after `token`, or None when the constraint refuses it."""
        from dataclasses import replace

        from .constraint import ConstraintError

        if state.done:
            return None
        if token in self.ends:
            return replace(state, done=True) if self.constraint.is_accepting(state) else None
        if not 0 <= token < self.constraint.tokenizer.vocab_size:
            return None
        try:
            return self.constraint.advance(state, token)
        except ConstraintError:
            return None

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advances over `tokens`; False (and no change) when one is refused."""
        if self.is_terminated():
            return True  # as llguidance's backend: tokens after the end are vLLM's to drop
        states = []
        state = self._states[-1]
        for t in tokens:
            state = self._next(state, int(t))
            if state is None:
                logger.warning("midword: request %s: token %s refused by its constraint", request_id, t)
                return False
            states.append(state)
            if state.done:
                break
        self._states.extend(states)
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest accepted prefix of `tokens`; the state does not move."""
        out: list[int] = []
        state = self._states[-1]
        for t in tokens:
            t = int(t)
            if t < 0:
                break  # speculative padding
            state = self._next(state, t)
            if state is None:
                break
            out.append(t)
            if state.done:
                break
        return out

    def rollback(self, num_tokens: int) -> None:
        n = min(int(num_tokens), len(self._states) - 1)
        if n > 0:
            del self._states[-n:]

    def is_terminated(self) -> bool:
        return self._states[-1].done

    def reset(self) -> None:
        del self._states[1:]

    def mask(self) -> np.ndarray:
        """uint32 words: bit t allows token t (end tokens exactly when the output may end)."""
        state = self._states[-1]
        if state.done:
            return self._end_bits  # as llguidance: a finished request may only end again
        allowed = self.constraint.allowed(state)
        accepting = self.constraint.is_accepting(state)
        if not accepting and not (self.ends - self.constraint.eos):
            return allowed
        out = np.array(allowed, dtype=np.uint32, copy=True)
        if accepting:
            out |= self._end_bits
        else:
            out &= ~self._end_bits
        return out

    def fill_bitmask(self, bitmask, idx: int) -> None:
        mask = self.mask().view(np.int32)
        row = bitmask[idx]
        width = int(row.shape[0])
        n = min(width, mask.shape[0])
        if row.device.type == "cpu":
            view = row.numpy()
            view[:n] = mask[:n]
            view[n:] = 0  # ids past midword's vocabulary (padding rows of the head) stay masked
        else:
            import torch

            full = np.zeros(width, dtype=np.int32)
            full[:n] = mask[:n]
            row.copy_(torch.from_numpy(full))


# ---------------------------------------------------------------------------------------
# Hooking into vLLM


_TOKENIZERS: dict[str, tuple] = {}
_TOKENIZERS_LOCK = threading.Lock()
_INSTALLED = False


def midword_tokenizer(hf_tokenizer, source: str | None = None):
    """midword's Tokenizer for vLLM's: from the model folder's tokenizer.json when there is
    one (the same bytes the client read), else from the loaded tokenizer object."""
    from pathlib import Path

    from midword.engine import Tokenizer

    key = source if source and (Path(source) / "tokenizer.json").is_file() else f"id:{id(hf_tokenizer)}"
    with _TOKENIZERS_LOCK:
        hit = _TOKENIZERS.get(key)
        if hit is not None:
            return hit[1]
    tok = Tokenizer.from_pretrained(source) if not key.startswith("id:") else Tokenizer.from_hf(hf_tokenizer)
    tok.vocab_fingerprint()
    with _TOKENIZERS_LOCK:
        # The HF object is kept with it, so that its id is not reused by another.
        return _TOKENIZERS.setdefault(key, (hf_tokenizer, tok))[1]


def _tokenizer_source(vllm_config) -> str | None:
    try:
        return str(vllm_config.model_config.tokenizer)
    except AttributeError:
        return None


def register() -> None:
    """The `vllm.general_plugins` entry point: patch vLLM once per process."""
    global _INSTALLED
    import vllm

    version = getattr(vllm, "__version__", "?")
    if not version.startswith(SUPPORTED_VLLM):
        logger.warning(
            "midword: vLLM %s is not one this plugin supports (%s); %%midword grammars stay off",
            version,
            ", ".join(v + "x" for v in SUPPORTED_VLLM),
        )
        return
    if _INSTALLED:
        return
    _INSTALLED = True
    _patch_backend()
    _patch_validation()
    if os.environ.get(MASK_LOG_ENV):
        _time_masks(os.environ[MASK_LOG_ENV])
    logger.info("midword: %%midword grammars enabled on vLLM %s (structured outputs backend guidance)", version)


def _vllm_grammar_class():
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

    return type("MidwordVllmGrammar", (MidwordGrammar, StructuredOutputGrammar), {})


def _patch_backend() -> None:
    """Engine core: compile `%midword` grammars; any other goes to llguidance as before."""
    from vllm.v1.structured_output import backend_guidance
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    grammar_class = _vllm_grammar_class()
    cls = backend_guidance.GuidanceBackend
    original = cls.compile_grammar

    def compile_grammar(self, request_type, grammar_spec, stop_token_ids=None, *args, **kwargs):
        if request_type == StructuredOutputOptions.GRAMMAR and is_midword_spec(grammar_spec):
            tok = midword_tokenizer(self.tokenizer, _tokenizer_source(self.vllm_config))
            constraint, state = prepare(grammar_spec, tok)
            return grammar_class(constraint, state, set(stop_token_ids or ()), self.vocab_size)
        return original(self, request_type, grammar_spec, stop_token_ids, *args, **kwargs)

    compile_grammar.__wrapped__ = original  # type: ignore[attr-defined]  # a function attribute
    cls.compile_grammar = compile_grammar


def _patch_validation() -> None:
    """Front end: a `%midword` spec is checked in full before the request is queued
    (malformed, bad grammar, text the grammar rejects, another tokenizer: a 400 saying
    which), and it always goes to the guidance backend."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output import backend_guidance

    original_check = SamplingParams._validate_structured_outputs

    def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer, *args, **kwargs):
        so = self.structured_outputs
        if structured_outputs_config is None or so is None or not is_midword_spec(getattr(so, "grammar", None)):
            return original_check(self, model_config, structured_outputs_config, tokenizer, *args, **kwargs)
        backend = structured_outputs_config.backend
        if backend not in ("guidance", "auto"):
            raise VLLMValidationError(
                f"%midword grammars run in the guidance structured-outputs backend; this server uses {backend!r} "
                '(start vLLM with --structured-outputs-config \'{"backend":"guidance"}\')'
            )
        if tokenizer is None:
            raise VLLMValidationError("%midword grammars need the server's tokenizer (not --skip-tokenizer-init)")
        try:
            prepare(so.grammar, midword_tokenizer(tokenizer, getattr(model_config, "tokenizer", None)))
        except SpecError as exc:
            raise VLLMValidationError(str(exc)) from None
        so._backend = "guidance"
        so._backend_was_auto = backend == "auto"
        so.__post_init__()

    _validate_structured_outputs.__wrapped__ = original_check  # type: ignore[attr-defined]  # a function attribute
    SamplingParams._validate_structured_outputs = _validate_structured_outputs

    # A second line for callers that validate with the function alone: parse the spec
    # instead of handing it to llguidance's Lark parser.
    original = backend_guidance.validate_guidance_grammar

    def validate_guidance_grammar(sampling_params, tokenizer=None, *args, **kwargs):
        so = sampling_params.structured_outputs
        grammar = getattr(so, "grammar", None) if so is not None else None
        if is_midword_spec(grammar):
            try:
                spec = parse_spec(grammar)
                compile_spec_grammar(spec.grammar_kind, spec.grammar_source)
            except SpecError as exc:
                raise VLLMValidationError(str(exc)) from None
            return None
        return original(sampling_params, tokenizer, *args, **kwargs)

    validate_guidance_grammar.__wrapped__ = original  # type: ignore[attr-defined]  # a function attribute
    backend_guidance.validate_guidance_grammar = validate_guidance_grammar


def _time_masks(path: str) -> None:
    """Logs `<backend> <ns>` per mask row filled, midword's and llguidance's alike, to
    `path.<pid>` (one file per vLLM process): `midword bench vllm` compares them."""
    from vllm.v1.structured_output import backend_guidance

    out = open(f"{path}.{os.getpid()}", "a", buffering=1, encoding="ascii")  # open for the life of the process
    lock = threading.Lock()

    def timed(cls, name: str) -> None:
        fill = cls.fill_bitmask

        def fill_bitmask(self, bitmask, idx: int) -> None:
            t0 = time.perf_counter_ns()
            fill(self, bitmask, idx)
            elapsed = time.perf_counter_ns() - t0
            with lock:
                out.write(f"{name} {elapsed}\n")

        fill_bitmask.__wrapped__ = fill  # type: ignore[attr-defined]  # a function attribute
        cls.fill_bitmask = fill_bitmask

    timed(MidwordGrammar, "midword")
    timed(backend_guidance.GuidanceGrammar, "llguidance")
