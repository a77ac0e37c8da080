"""The completion engine: document text and cursor in, a valid completion out.

It picks the grammar for the document, backs the prompt off the word being typed,
searches covers of the typed characters (character prefix conditioning), then runs the
constrained decoding loop. It owns one model and caches what repeats across keystrokes:
the model's KV cache (inside the backend), compiled grammars, and the grammar state of
a document prefix that the next keystroke merely extends.

This is what the LSP server, the CLI and `midword.complete` call; it knows nothing of
any of them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict

import numpy as np

from midword.engine.grammar import Grammar
from midword.engine.limits import GrammarError, LimitExceeded
from midword.engine.recognizer import Recognizer

from .baton import Baton
from .constraint import Constraint, ConstraintError
from .context import assemble, piece_key
from .cpc import backoff, search_covers
from .decode import DRAFT_TOKENS, StopRules, generate
from .fim import template_for
from .grammar_compiler import GrammarCompiler
from .json_recovery import anchors
from .kv_slots import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, KVSlots
from .multiline import first_line
from .multiline import plan as plan_lines
from .types import MODES, Completion, CompletionRequest, GrammarSpec, Timings

log = logging.getLogger(__name__)

# Decode steps stream the weights from memory; int8 reads a quarter of float32's bytes
# (see quantized.py for what it costs in accuracy: nothing measurable on completions).
DEFAULT_WEIGHTS = "int8"
MAX_PROMPT_TOKENS = 1536
PROMPT_CUT_STEP = 256  # the prompt's start moves in steps, so consecutive keystrokes share a KV prefix
# Characters of the prefix tokenized for the prompt (code averages 3 to 5 a token), and
# the step its start moves in; the open brackets are read from the same window.
PROMPT_WINDOW_CHARS = MAX_PROMPT_TOKENS * 6
PROMPT_WINDOW_STEP = 2048
_IDENT_TAIL = re.compile(r"[\w]*\Z")
JSON_LANGUAGES = {"json", "jsonc", "json5"}
# A document's schema: where it asks for what no grammar checks (uniqueItems) or what
# this one cannot build exactly (an overlapping oneOf), a looser constraint with a note
# beats none for the whole file.
EDITOR_SCHEMA_OPTIONS = {"lenient": True, "one_of": "any_of"}
# Grammar kinds compiled from text on the compile thread; "auto" (the code grammar of the
# open brackets, a small cached build per keystroke) and "none" stay on the model thread.
OFF_THREAD_KINDS = frozenset({"json_schema", "lark", "regex"})
# Re-anchoring a schema's constraint inside a document that breaks it (json_recovery.py):
# containers tracked by the tolerant parse, and sub-schemas compiled and tried per request.
RECOVERY_MAX_DEPTH = 256
RECOVERY_MAX_ANCHORS = 4


def _stopped(request: CompletionRequest, timings: Timings) -> Completion:
    """The answer of a completion cancelled before it produced anything."""
    return Completion(text="", replace_start=len(request.prefix), stop_reason="cancelled", timings=timings)


def _warm_up_constraint(tokenizer) -> Constraint:
    """The grammar engine's first steps of a completion: a code grammar's constraint over
    `tokenizer`, a re-spelling mask, the candidates after a typed byte."""
    from midword.engine.brackets import code_brackets_grammar

    c = Constraint(tokenizer, code_brackets_grammar("(", language="python"))
    state = c.initial(typed=b"va")
    c.allowed(state)
    c.candidates_after(state.grammar, b"a")
    return c


def _grammar_kernels_cached() -> bool:
    """Whether numba's disk cache holds the mask walk, the grammar kernel a first mask
    compiles last. With a warm cache the grammar's warm-up is a fraction of a second and
    a thread for it only adds a memory arena, so `load` starts one only when this is False."""
    from midword.engine import mask

    try:
        index = mask.walk_packed_jit._cache._cache_file._index_path
    except AttributeError:  # the plain-Python twin, or a numba that keeps its cache elsewhere
        return True
    return os.path.exists(index)


def _warm_grammar_beside(tokenizer) -> threading.Thread:
    """Starts the grammar side of the warm-up (`_warm_up_constraint`: the token trie and
    slice tries from their disk caches, the engine's kernels from numba's, or compiled
    after a fresh install) on a thread, while the model's weights load.

    The thread uses the tokenizer's table only, never its BPE, and imports nothing of its
    own (its modules are imported here, on the caller's thread): a tokenizer load beside
    the model load once raced transformers' lazy imports."""
    import platformdirs  # noqa: F401 - imported before the thread runs (the disk caches' folder)

    import midword.engine.brackets  # noqa: F401
    import midword.engine.slicer  # noqa: F401
    import midword.grammars  # noqa: F401

    def run() -> None:
        try:
            _warm_up_constraint(tokenizer)
        except Exception:  # noqa: BLE001 - only a head start: warm_up does what is missing
            log.debug("warming the grammar engine ahead failed", exc_info=True)

    thread = threading.Thread(target=run, name="midword-warm-grammar", daemon=True)
    thread.start()
    return thread


def _warm_first_request_kernels(model) -> None:
    """Runs the lean model's kernels a completion needs besides the decode step and the
    restricted head (which the model's own warm-up loads): the prefill's dequantisation
    and the few-row products, once, so that numba compiles them now rather than inside the
    first completion: after a fresh install that completion would otherwise compile them,
    or wait on numba's compile lock for a batched step compiling beside it."""
    probe = model.probe_sets()[-1]  # the longest probe: its prefill takes the matrix path
    model.probe([probe])


def _compile_batched_step_beside(engine: "CompletionEngine") -> threading.Thread:
    """Compiles the batched decode step on a thread; until it is done `engine.batcher` is
    None (completions take turns, each with the model's own step), and if it fails the
    engine stays so."""
    from . import lean_batch

    model = engine.model

    def run() -> None:
        try:
            lean_batch.warm_up(model, in_child=True)
        except Exception:  # noqa: BLE001 - completions then run one at a time, as without batching
            log.warning("compiling the batched decode step failed; completions run one at a time", exc_info=True)
            engine.batch_steps = False

    thread = threading.Thread(target=run, name="midword-compile-batch", daemon=True)
    thread.start()
    return thread


class CompletionEngine:
    def __init__(
        self,
        model: str = "gemma3",
        *,
        max_tokens: int = 48,
        temperature: float = 0.0,
        mode: str = "cpc",
        weights: str = DEFAULT_WEIGHTS,
        model_object=None,
        kv_slots: int = DEFAULT_SLOTS,
        kv_slot_bytes: int = DEFAULT_SLOT_BYTES,
    ):
        """`weights`: "int8" (default: int8 weights, float32 activations, see quantized.py),
        "float32" (the converted weights as they are) or "bfloat16". `kv_slots`: KV caches
        kept for documents completed in turn (kv_slots.py), the parked ones in at most
        `kv_slot_bytes`; 1 keeps a single cache."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
        from .model_store import WEIGHT_FORMATS

        if weights not in WEIGHT_FORMATS:
            raise ValueError(f"unknown weights {weights!r}: expected one of {', '.join(WEIGHT_FORMATS)}")
        self.weights = weights
        self.model_name = model
        self.defaults = {"max_tokens": max_tokens, "temperature": temperature, "mode": mode}
        self._model = model_object
        self._slot_bounds = (int(kv_slots), int(kv_slot_bytes))
        self._slots: KVSlots | None = None
        # Prompt-lookup draft tokens per model step (decode.py; 0: none, same output).
        self.draft_tokens = DRAFT_TOKENS
        # One completion's engine work at a time, in turn (the batcher lets go of it; baton.py).
        self._lock = Baton()
        # Decode steps of completions running at once in one forward (lean_batch.py).
        self.batch_steps = True
        self._batcher = None
        # The batched step compiling after a fresh install (see warm_up): no batcher till it ends.
        self._batch_compile: threading.Thread | None = None
        self._job = threading.local()  # the running completion's checked-out slots, per thread
        self._grammars: OrderedDict[tuple, tuple[Grammar | None, bool, str]] = OrderedDict()
        self._compiler: GrammarCompiler | None = None
        self._compiler_lock = threading.Lock()
        self._constraints: OrderedDict[str, Constraint] = OrderedDict()
        self._doc_state: tuple | None = None  # (grammar fingerprint, prefix bytes, recognizer state)
        # (schema text, JSON pointer) -> the anchored sub-schema's grammar, or the error it gave
        self._anchored: OrderedDict[tuple[str, str], Grammar | str] = OrderedDict()
        self._fim = False  # the FIM template, looked up on first use
        self._shown: OrderedDict[str | None, frozenset] = OrderedDict()  # context pieces last shown, per path
        # Show a model without FIM the text after the cursor before the document
        # (context.py). Off: `midword bench cpc --repo` measured it (see the report).
        self.suffix_context = False
        # The running (or last) completion's timings, filled in as its stages end: a server
        # that answers with part of a completion reads where its time went so far.
        self.running_timings: Timings | None = None
        self.warm_up_seconds: dict[str, float] = {}

    # Model ------------------------------------------------------------------------------
    def load(self, progress=None) -> None:
        """Loads the model (blocking, seconds; minutes the very first time)."""
        beside: list[threading.Thread] = []

        def on_tokenizer(tokenizer) -> None:
            # Once: a damaged cache's rebuild loads the tokenizer again.
            if not beside and not _grammar_kernels_cached():
                beside.append(_warm_grammar_beside(tokenizer))

        if self._model is None:
            from .model import load_model

            self._model = load_model(self.model_name, progress=progress, dtype=self.weights, on_tokenizer=on_tokenizer)
        for thread in beside:
            thread.join()
        self.warm_up()

    def warm_up(self) -> None:
        """Pays the one-time costs before the first keystroke does: the model's compiled
        decode step, the tokenizer's merge tables, the token trie and slice tries (from the
        disk cache), compiled walks."""
        # Seconds of each step, for `midword bench start`.
        took = self.warm_up_seconds = {}
        t = time.perf_counter()

        def mark(step: str) -> None:
            nonlocal t
            now = time.perf_counter()
            took[step] = now - t
            t = now

        tok = self.tokenizer
        tok.encode("warm up")
        mark("encode")
        tok.tokenize_partial(b"def warm_up(self):\n    return self.va")
        mark("tokenize_partial")
        from midword.engine.brackets import code_brackets_grammar

        c = self._constraint(code_brackets_grammar("(", language="python"))
        mark("constraint")
        state = c.initial(typed=b"va")
        c.allowed(state)
        c.candidates_after(state.grammar, b"a")
        mark("first_mask")
        # A JSON Schema's object (keys in any order: the parser's key sets) takes kernels a
        # code grammar does not; compiled after a fresh install, they would make the first
        # schema completion outlast its wait for the grammar.
        from midword.engine.grammar import Grammar

        schema = {
            "type": "object",
            "properties": {"kind": {"enum": ["a", "b"]}},
            "required": ["kind"],
            "additionalProperties": False,
        }
        js = self._constraint(Grammar.from_json_schema(schema))
        js_state = js.initial(grammar_prefix=b'{"kind": "')
        js.allowed(js_state)
        # Text the schema forces (the rest of the only key) goes through token healing's
        # suffix search, compiled code of its own.
        js.forced(js.initial(grammar_prefix=b'{"'))
        mark("json_mask")
        wait_compiled = getattr(self.model, "wait_compiled", None)
        if wait_compiled is not None:
            wait_compiled()
        mark("wait_compiled")
        if self.batcher is not None:
            from . import lean_batch

            # Only completions running at once use it: the first batch loads it from numba's
            # disk cache (a fraction of a second). Without it in the cache (a fresh install)
            # compiling it takes longer than all the rest of the start, so it compiles on a
            # thread after ready while completions take turns; the kernels a completion
            # needs are compiled first, here, so that none waits on numba's compile lock.
            if not lean_batch.cached():
                _warm_first_request_kernels(self.model)
                mark("first_request_kernels")
                self._batch_compile = _compile_batched_step_beside(self)
            mark("batched_step")

    def wait_batched_step(self, timeout: float | None = None) -> bool:
        """Waits for the batched step's compile that warm_up left running (after a fresh
        install); True when none is running any more."""
        compiling = self._batch_compile
        if compiling is not None:
            compiling.join(timeout)
            return not compiling.is_alive()
        return True

    @property
    def ready(self) -> bool:
        return self._model is not None

    @property
    def model(self):
        if self._model is None:
            raise RuntimeError("the model is not loaded yet: call load() first")
        return self._model

    @property
    def slots(self) -> KVSlots:
        """The model's KV cache slots (one per document completed in turn)."""
        if self._slots is None or self._slots.model is not self.model:
            count, nbytes = self._slot_bounds
            self._slots = KVSlots(self.model, max_slots=count, max_bytes=nbytes)
        return self._slots

    @property
    def slot_stats(self):
        """(KV cache slots held, their SlotStats); None before the first completion."""
        slots = self._slots
        return None if slots is None else (len(slots), slots.stats)

    @property
    def tokenizer(self):
        return self.model.tokenizer

    # Grammars ----------------------------------------------------------------------------
    def grammar_for(self, request: CompletionRequest, cancelled=None) -> tuple[Grammar | None, bool, str]:
        """(grammar, whether it reads the document from its start, note).

        Grammars from text (JSON Schema, Lark, regex) are compiled on the compile thread
        (grammar_compiler.py), never on the model thread: when the compile is not done
        within `request.grammar_wait_s`, this completion goes unconstrained, says so in
        its note, and a later keystroke finds the grammar compiled."""
        spec = request.grammar
        language = (request.language or "").lower().lstrip(".")
        key = (
            spec.kind,
            spec.source,
            language if spec.kind == "auto" else None,
            _open_context(request, language) if spec.kind == "auto" and language not in JSON_LANGUAGES else None,
            spec.kind == "json_schema" and _names_its_schema(request.prefix),
        )
        off_thread = spec.kind in OFF_THREAD_KINDS
        if key in self._grammars:
            self._grammars.move_to_end(key)
            g, whole, note = self._grammars[key]
            if off_thread and request.document is not None:
                self.compiler.release(request.document)  # its grammar is this one now
            return g, whole, note
        if off_thread:
            result = self.compiler.result(
                key,
                lambda: self._compile(spec, language, request),
                owner=request.document,
                wait_s=float("inf") if request.grammar_wait_s is None else request.grammar_wait_s,
                cancelled=cancelled,
            )
            if result is None:
                what = {"json_schema": "JSON Schema", "lark": "Lark grammar", "regex": "regex"}[spec.kind]
                return None, False, f"the {what} is still compiling: this completion is not constrained by it"
            g, whole, note = result
        else:
            if request.document is not None:
                self.compiler.release(request.document)
            g, whole, note = self._compile(spec, language, request)
        self._grammars[key] = (g, whole, note)
        while len(self._grammars) > 64:
            _, (dropped, _, _) = self._grammars.popitem(last=False)
            self._release(dropped)
        return g, whole, note

    @property
    def compiler(self) -> GrammarCompiler:
        """The compile executor (started on first use)."""
        if self._compiler is None:
            with self._compiler_lock:
                if self._compiler is None:
                    self._compiler = GrammarCompiler()
        return self._compiler

    def release_document(self, document: str) -> None:
        """`document` closed: a grammar still compiling for it alone is cancelled. Safe
        from any thread (the model thread may be busy with another document)."""
        if self._compiler is not None:
            self._compiler.release(document)

    def close(self) -> None:
        if self._compiler is not None:
            self._compiler.close()

    def _release(self, grammar: Grammar | None) -> None:
        """Frees a dropped grammar's shared recognizer (its tables can reach hundreds of
        MiB in a long session) now rather than when 64 other grammars have pushed it out
        of the recognizer cache; kept while another cached entry has the same content."""
        if grammar is None:
            return
        fingerprint = grammar.fingerprint()
        if not any(g is not None and g.fingerprint() == fingerprint for g, _, _ in self._grammars.values()):
            Recognizer.release(grammar)

    def _compile(self, spec: GrammarSpec, language: str, request: CompletionRequest):
        try:
            if spec.kind == "none":
                return None, False, ""
            if spec.kind == "lark":
                return _document_grammar(Grammar.from_lark(spec.source or "")), True, ""
            if spec.kind == "regex":
                return _document_grammar(Grammar.from_regex(spec.source or "")), True, ""
            if spec.kind == "json_schema":
                schema = json.loads(spec.source or "{}")
                if _names_its_schema(request.prefix):
                    schema = _with_schema_key(schema)
                grammar = Grammar.from_json_schema(schema, **EDITOR_SCHEMA_OPTIONS)
                return _document_grammar(grammar), True, _relaxed_note(grammar)
            if language in JSON_LANGUAGES:
                from midword.grammars import read_grammar

                return _document_grammar(Grammar.from_lark(read_grammar("json.lark"))), True, ""
            from midword.engine.brackets import code_brackets_grammar

            return code_brackets_grammar(_open_context(request, language), language=language or None), False, ""
        except (GrammarError, LimitExceeded, ValueError) as err:
            return None, False, f"grammar not used: {err}"
        except RecursionError:
            return None, False, "grammar not used: it is nested too deeply to read"

    def _constraint(self, grammar: Grammar | None) -> Constraint:
        key = grammar.fingerprint() if grammar is not None else ""
        c = self._constraints.get(key)
        if c is None:
            c = Constraint(self.tokenizer, grammar)
            if self.fim_template is not None:  # the tokens a FIM model ends its middle with
                c.eos = c.eos | self.fim_template.stop
            self._constraints[key] = c
            while len(self._constraints) > 16:
                self._constraints.popitem(last=False)
        else:
            self._constraints.move_to_end(key)
        return c

    def _grammar_state(self, constraint: Constraint, grammar: Grammar, prefix: bytes):
        """Recognizer state after the document prefix, extended from the last keystroke's."""
        fp = grammar.fingerprint()
        rec = constraint.automaton
        assert rec is not None  # the constraint was made for `grammar`
        start, done = rec.initial(), b""
        if self._doc_state is not None:
            gfp, old_prefix, old_state = self._doc_state
            if gfp == fp and prefix.startswith(old_prefix):
                start, done = old_state, old_prefix
        state = rec.step_bytes(start, prefix[len(done) :])
        if state is None:
            raise ConstraintError("the grammar rejects the document before the cursor")
        self._doc_state = (fp, prefix, state)
        return state

    def _reanchor(self, request: CompletionRequest, prefix: bytes, typed: bytes):
        """(constraint, decode state, JSON pointer) for the innermost value around the
        cursor whose sub-schema accepts the document from the value's start, when the
        schema's grammar rejects the whole document; None if no such value."""
        spec = request.grammar
        if spec.kind != "json_schema" or not spec.source:
            return None
        try:
            schema = json.loads(spec.source)
        except ValueError:
            return None
        from .constraint import DecodeState

        for value, sub in anchors(schema, prefix, max_depth=RECOVERY_MAX_DEPTH, max_anchors=RECOVERY_MAX_ANCHORS):
            grammar = self._anchored_grammar(spec.source, value.pointer, sub)
            if grammar is None:
                continue
            constraint = self._constraint(grammar)
            try:
                gstate = self._grammar_state(constraint, grammar, prefix[value.start :])
            except ConstraintError:
                continue
            return constraint, DecodeState(typed=typed, grammar=gstate), value.pointer
        return None

    def _anchored_grammar(self, source: str, pointer: str, sub: dict) -> Grammar | None:
        key = (source, pointer)
        cached = self._anchored.get(key)
        if cached is None:
            try:
                cached = _document_grammar(Grammar.from_json_schema(sub, **EDITOR_SCHEMA_OPTIONS))
            except (GrammarError, LimitExceeded, ValueError, RecursionError) as err:
                cached = str(err)
            self._anchored[key] = cached
            while len(self._anchored) > 64:
                _, dropped = self._anchored.popitem(last=False)
                if isinstance(dropped, Grammar):
                    self._release(dropped)
        else:
            self._anchored.move_to_end(key)
        return cached if isinstance(cached, Grammar) else None

    # Completion ----------------------------------------------------------------------------
    def complete(self, request: CompletionRequest, *, cancelled=None, partial=None) -> Completion:
        """Complete `request`. `cancelled()` is polled between model calls; `partial(text,
        replace_start)` hears the completion so far after every decoding step (a server
        uses it to decide whether work the user has typed past is still worth finishing)."""
        arriving = self.batcher
        if arriving is not None:
            arriving.arrive()
        queued = time.perf_counter()
        with self._lock:
            lock_ms = (time.perf_counter() - queued) * 1e3
            if arriving is not None:
                arriving.arrived()
            # Completions running at once take turns here; their decode steps meet in the
            # batcher, which lets go of the lock while a step waits (lean_batch.py).
            batcher = self.batcher
            views: list = []
            if batcher is not None:
                batcher.enter()
            self._job.views = views if batcher is not None else None
            if batcher is not None:
                batcher.take_waits()  # (what an earlier completion on this thread left)
            try:
                completion = self._complete(request, cancelled, partial)
                waits = batcher.take_waits() if batcher is not None else {}
                completion.timings.waits = {"lock": lock_ms, **waits}
                return completion
            finally:
                self._job.views = None
                for view in views:
                    self.slots.checkin(view)
                if batcher is not None:
                    batcher.leave()

    @property
    def batcher(self):
        """The decode-step batcher of a model that runs several sequences' steps in one
        forward (lean_batch.py), or None (then one completion runs at a time)."""
        model = self._model
        if not self.batch_steps or model is None or not self.slots.enabled:
            return None
        compiling = self._batch_compile
        if compiling is not None:
            if compiling.is_alive():
                return None
            self._batch_compile = None
            if not self.batch_steps:  # its compile failed
                return None
        if self._batcher is None or self._batcher.model is not model:
            from . import lean_batch

            self._batcher = lean_batch.StepBatcher(model, self._lock) if lean_batch.supports(model) else None
        return self._batcher

    def _slot_model(self, prompt: list[int]):
        """(the model as this completion sees it, prompt tokens already cached): its own KV
        cache slot when completions may run beside each other, else the shared model with
        the best slot brought in."""
        slots = self.slots
        views = getattr(self._job, "views", None)
        if views is None or self.batcher is None:
            return self.model, slots.use(prompt)
        view = slots.checkout(prompt, self.batcher)
        views.append(view)
        return view, view.cached

    def _complete(self, request: CompletionRequest, cancelled, partial=None) -> Completion:
        started = time.perf_counter()
        if request.mode not in MODES:
            raise ValueError(f"unknown mode {request.mode!r}: expected one of {', '.join(MODES)}")
        model, tok = self.model, self.tokenizer
        timings = self.running_timings = Timings()
        grammar, whole_document, note = self.grammar_for(request, cancelled)
        # A newer keystroke's completion waits for this one to stop: each stage checks.
        if cancelled is not None and cancelled():
            return _stopped(request, timings)
        constraint = self._constraint(grammar)
        window = prompt_window(request.prefix)
        back = backoff(tok, window.encode("utf-8"), request.mode)
        if cancelled is not None and cancelled():
            return _stopped(request, timings)
        try:
            gstate = (
                self._grammar_state(constraint, grammar, request.prefix.encode("utf-8"))
                if grammar is not None and whole_document
                else None
            )
            state = constraint.initial(back.typed) if gstate is None else None
            if state is None:
                from .constraint import DecodeState

                state = DecodeState(typed=back.typed, grammar=gstate)
        except ConstraintError as err:
            recovered = (
                self._reanchor(request, request.prefix.encode("utf-8"), back.typed) if grammar is not None else None
            )
            if recovered is None:
                note = f"grammar not used: {err}"
                constraint = self._constraint(None)
                state = constraint.initial(back.typed)
            else:
                constraint, state, pointer = recovered
                note = f"grammar constrains {pointer} only: {err}"
        prompt, tail, context_tokens = self._assemble(request, back)
        timings.prompt_tokens, timings.context_tokens = len(prompt), context_tokens
        # Another document's turn may have left its cache in the model: bring back this
        # prompt's slot first (or a fresh one), so that neither prefills again.
        model, timings.cached_tokens = self._slot_model(prompt)
        rng = np.random.default_rng(request.seed)
        initial: list[int] = []
        t0 = time.perf_counter()
        # A long new prompt (a file just opened) takes seconds: cancellable, and what is
        # prefilled before a cancel stays cached for the next keystroke.
        if not model.prefill(prompt, cancelled) or (cancelled is not None and cancelled()):
            return _stopped(request, timings)
        timings.prefill_ms = (time.perf_counter() - t0) * 1e3
        budget_started = time.perf_counter()
        if request.mode == "cpc" and back.typed:
            t0 = time.perf_counter()
            search = search_covers(
                model,
                tok,
                prompt,
                tail,
                back.typed,
                lambda rest: constraint.candidates_after(state.grammar, rest),
                exhaustive=request.temperature > 0,
                cancelled=cancelled,
            )
            cover = search.pick(tok, request.temperature, rng)
            timings.forward_passes += 1 if search.splits else 0
            timings.cpc_ms = (time.perf_counter() - t0) * 1e3
            timings.cpc_search = search.stats.as_dict()
            if cover is not None:
                initial = cover.left + [cover.token]
                for t in initial:
                    state = constraint.advance(state, t)
        word_match = _IDENT_TAIL.search(window)  # (a search of the whole prefix tries every offset)
        assert word_match is not None  # the pattern matches the empty string at the end
        word = word_match.group(0)
        replace_start = len(request.prefix) - len(word)

        def on_text(inserted: bytes) -> None:
            partial(word + _complete_utf8(inserted), replace_start)

        single_line, block = plan_lines(request.prefix, request.suffix, request.multiline, request.single_line)
        rules = StopRules(
            max_tokens=request.max_tokens,
            single_line=single_line,
            block=block,
            suffix_line=first_line(request.suffix).strip(),
            time_budget_s=request.time_budget_s,
            cancelled=cancelled,
            on_text=on_text if partial is not None else None,
        )
        gen = generate(
            model,
            constraint,
            prompt,
            state,
            rules,
            temperature=request.temperature,
            rng=rng,
            initial_tokens=initial,
            typed_len=len(back.typed),
            started=budget_started,
            draft=self.draft_tokens,
        )
        inserted = _complete_utf8(gen.inserted)
        timings.forward_passes += gen.forward_passes
        timings.tokens_generated = len(gen.tokens)
        timings.tokens_forced = gen.forced_tokens
        timings.tokens_drafted = gen.drafted
        timings.drafts_accepted = gen.draft_accepted
        timings.mask_ms = gen.mask_ms
        timings.decode_ms = gen.model_ms
        timings.total_ms = (time.perf_counter() - started) * 1e3
        return Completion(
            text=word + inserted,
            replace_start=replace_start,
            stop_reason=gen.stop_reason or "done",
            timings=timings,
            note=note,
        )

    def _assemble(self, request: CompletionRequest, back) -> tuple[list[int], list[int], int]:
        """(prompt, the tokens before the cursor in the prompt's last segment, context tokens):
        workspace context, the FIM layout and the suffix around the windowed prefix
        (context.py); the plain prompt when there is none of them."""
        template = self.fim_template
        use_suffix = self.suffix_context and bool(request.suffix.strip())
        if template is None and not use_suffix and (not request.context or request.context_tokens <= 0):
            return self._prompt(back.stable), back.stable, 0
        window = self._prompt(back.stable)
        bos = self.tokenizer.bos_token_id
        body = window[1:] if bos is not None and window[:1] == [bos] else window
        p = assemble(
            self.tokenizer,
            body,
            prefix=request.prefix,
            suffix=request.suffix,
            chunks=request.context,
            budget=request.context_tokens,
            path=request.path,
            language=request.language,
            repo=request.repo,
            template=template,
            suffix_as_context=use_suffix,
            sticky=self._shown.get(request.path, frozenset()),
        )
        self._shown[request.path] = frozenset(piece_key(q) for q in p.pieces)
        self._shown.move_to_end(request.path)
        while len(self._shown) > 64:
            self._shown.popitem(last=False)
        return p.tokens, p.tail, p.context_tokens

    @property
    def fim_template(self):
        """The model's fill-in-the-middle template (fim.py), or None (Gemma 3 has none)."""
        if self._fim is False:
            self._fim = template_for(self.tokenizer)
        return self._fim

    def _prompt(self, stable: list[int]) -> list[int]:
        if len(stable) > MAX_PROMPT_TOKENS:
            drop = len(stable) - MAX_PROMPT_TOKENS
            drop = -(-drop // PROMPT_CUT_STEP) * PROMPT_CUT_STEP
            stable = stable[drop:]
        bos = self.tokenizer.bos_token_id
        return ([bos] if bos is not None else []) + list(stable)


def prompt_window(prefix: str) -> str:
    """The end of `prefix` that can reach the prompt (MAX_PROMPT_TOKENS tokens are
    rarely more characters than this): only it is encoded and tokenized, so a keystroke
    in a large file costs what one in a small file does. Its start moves in steps, at a
    line start, so consecutive keystrokes tokenize the same text and share the KV cache."""
    if len(prefix) <= PROMPT_WINDOW_CHARS:
        return prefix
    cut = (len(prefix) - PROMPT_WINDOW_CHARS) // PROMPT_WINDOW_STEP * PROMPT_WINDOW_STEP
    newline = prefix.find("\n", cut, cut + PROMPT_WINDOW_STEP)
    return prefix[newline + 1 if newline >= 0 else cut :]


def _open_context(request: CompletionRequest, language: str) -> str:
    from midword.engine.brackets import open_context_at

    # The brackets open at the cursor, from the same window as the prompt (at a line
    # start): a scan of the whole prefix would cost every keystroke the file's size.
    return open_context_at(prompt_window(request.prefix), language or None)


def _names_its_schema(prefix: str) -> bool:
    """Whether the document names its schema with a `"$schema"` key (a substring test:
    a nested one only allows a key that is there anyway)."""
    return '"$schema"' in prefix


def _with_schema_key(schema):
    """`schema`, with the document's own top-level `"$schema"` key allowed where the
    schema closes its object (`additionalProperties`/`unevaluatedProperties` false): the
    key that names the schema is never the schema's business, as editors treat it. Only
    for documents that have the key, so a completion never adds one."""
    if not isinstance(schema, dict):
        return schema
    props = schema.get("properties")
    if isinstance(props, dict) and "$schema" in props:
        return schema
    if schema.get("additionalProperties") is not False and schema.get("unevaluatedProperties") is not False:
        return schema
    return {**schema, "properties": {**(props if isinstance(props, dict) else {}), "$schema": {"type": "string"}}}


def _relaxed_note(grammar: Grammar) -> str:
    """What an editor user should know about a schema the grammar enforces only in part
    (`uniqueItems`, which no grammar can check; a oneOf compiled as anyOf)."""
    return f"schema relaxed: {'; '.join(grammar.warnings)}" if grammar.warnings else ""


def _document_grammar(g: Grammar) -> Grammar:
    # A document may start with whitespace before its first lexeme.
    return dataclasses.replace(g, allow_initial_skip=True)


def _complete_utf8(data: bytes) -> str:
    """Text of `data`, dropping an incomplete UTF-8 character at the end."""
    for cut in range(0, 4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="ignore")
