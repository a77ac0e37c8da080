"""A completion engine whose model runs in a vLLM server (OpenAI API over HTTP).

Many midword front ends can share one vLLM deployment: this engine keeps only the
tokenizer and the grammar engine locally. Per request it does what needs no model:
picks the grammar, backs the prompt off the word being typed (CPC's back-off: stable
token ids plus the typed bytes to re-spell), appends the tokens the grammar forces at the
cursor, and builds a `%midword` spec (vllm_plugin.py). vLLM then decodes under that spec
with midword's constraint as its structured-output grammar: the typed bytes re-spelled
first, then the grammar, EOS only where both allow it.

The prompt goes as token ids (vLLM adds no BOS to token ids, so it is included here);
the answer streams back token by token and the stop rules of the local loop (end of
line, the text after the cursor, max tokens, time budget) are checked on each chunk.
Stopping early, or a cancel, closes the stream, which makes vLLM abort the request.

What differs from the local engine: the typed bytes are re-spelled greedily (or sampled)
token by token under the mask, as vLLM decodes; the local engine's CPC cover search, which
weighs whole covers of the typed text by the model's probability, needs log-probabilities
of thousands of candidates per request, which vLLM's API does not return.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import urllib.parse
from dataclasses import dataclass

from .constraint import ConstraintError, DecodeState
from .cpc import backoff
from .decode import Generation, StopRules, _stop_reason, _trim
from .engine import _IDENT_TAIL, JSON_LANGUAGES, CompletionEngine, _complete_utf8, _open_context
from .model import ModelUnavailable
from .types import MODES, Completion, CompletionRequest, Timings
from .vllm_plugin import build_spec

# vLLM's API server checks a new %midword grammar on its event loop (compiling it, once per
# grammar text), which can hold other requests for seconds: wait that long, not forever.
CONNECT_TIMEOUT_S = 60.0
POLL_S = 0.05  # how often a waiting request looks at its cancel callback


class VllmError(RuntimeError):
    """The vLLM server cannot be reached or refused a request; the message says which and why."""


@dataclass
class _Remote:
    """What CompletionEngine needs of its model object when the model is remote."""

    name: str
    tokenizer: object


class VllmCompletionEngine(CompletionEngine):
    """CompletionEngine's contract (load, complete, ready, tokenizer) over a vLLM server."""

    def __init__(
        self,
        model: str = "gemma3",
        *,
        url: str,
        served_model: str | None = None,
        max_tokens: int = 48,
        temperature: float = 0.0,
        mode: str = "cpc",
        request_timeout_s: float = 60.0,
        **_ignored,
    ):
        super().__init__(model, max_tokens=max_tokens, temperature=temperature, mode=mode, weights="float32")
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"--vllm-url must look like http://HOST:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self._parsed = parsed
        self.served_model = served_model
        self.request_timeout_s = request_timeout_s
        # Completions may run concurrently: only the cached document grammar state is shared.
        self._doc_lock = threading.Lock()
        self.max_model_len: int | None = None  # the server's context, read at load()

    # Connection ----------------------------------------------------------------------------
    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._parsed.scheme == "https" else http.client.HTTPConnection
        host = self._parsed.hostname
        assert host is not None  # checked in __init__
        return cls(host, self._parsed.port, timeout=timeout)

    def _path(self, tail: str) -> str:
        return (self._parsed.path.rstrip("/") or "") + tail

    def _get_json(self, tail: str):
        conn = self._connection(CONNECT_TIMEOUT_S)
        try:
            conn.request("GET", self._path(tail))
            resp = conn.getresponse()
            body = resp.read()
        except OSError as exc:
            raise VllmError(f"cannot reach the vLLM server at {self.url}: {exc}") from None
        finally:
            conn.close()
        if resp.status != 200:
            raise VllmError(f"vLLM server at {self.url}: GET {tail} answered {resp.status}: {body[:300]!r}")
        return json.loads(body)

    def load(self, progress=None) -> None:
        """Loads the tokenizer and asks the server which model it serves."""
        if self._model is not None:
            return
        from midword.engine import Tokenizer

        if progress is not None:
            progress("loading tokenizer", 0.0)
        try:
            tokenizer = Tokenizer.from_pretrained(self.model_name)
        except (ValueError, OSError, ImportError) as exc:
            raise ModelUnavailable(f"cannot load the tokenizer of {self.model_name!r}: {exc}") from exc
        if progress is not None:
            progress("asking the vLLM server", 0.5)
        models = [m for m in self._get_json("/v1/models").get("data") or [] if isinstance(m, dict)]
        names = [m["id"] for m in models if isinstance(m.get("id"), str)]
        if self.served_model is None:
            if not names:
                raise VllmError(f"the vLLM server at {self.url} serves no model")
            self.served_model = names[0]
        elif self.served_model not in names:
            raise VllmError(f"the vLLM server at {self.url} serves {names}, not {self.served_model!r}")
        served = next(m for m in models if m.get("id") == self.served_model)
        self.max_model_len = served.get("max_model_len") if isinstance(served.get("max_model_len"), int) else None
        self._model = _Remote(self.served_model, tokenizer)
        self.warm_up()
        if progress is not None:
            progress("ready", 1.0)

    # Completion -----------------------------------------------------------------------------
    def complete(self, request: CompletionRequest, *, cancelled=None, partial=None) -> Completion:
        # No engine-wide lock: the server batches concurrent requests.
        return self._complete(request, cancelled, partial)

    def _grammar_state(self, constraint, grammar, prefix: bytes):
        with self._doc_lock:
            return super()._grammar_state(constraint, grammar, prefix)

    def grammar_for(self, request):
        with self._doc_lock:
            return super().grammar_for(request)

    def _constraint(self, grammar):
        with self._doc_lock:
            return super()._constraint(grammar)

    def spec_grammar(self, request: CompletionRequest, whole_document: bool):
        """The spec's (kind, value) for the grammar `grammar_for` chose, or None."""
        spec = request.grammar
        language = (request.language or "").lower().lstrip(".")
        if spec.kind == "none":
            return None
        if spec.kind in ("lark", "regex"):
            return (spec.kind, spec.source or "")
        if spec.kind == "json_schema":
            return ("json_schema", json.loads(spec.source or "{}"))
        if language in JSON_LANGUAGES:
            from midword.grammars import read_grammar

            return ("lark", read_grammar("json.lark"))
        return ("code_brackets", {"open": _open_context(request, language), "language": language or None})

    def prepare(self, request: CompletionRequest):
        """(prompt token ids, %midword spec, typed bytes, forced tokens, note) for a request."""
        if request.mode not in MODES:
            raise ValueError(f"unknown mode {request.mode!r}: expected one of {', '.join(MODES)}")
        tok = self.tokenizer
        prefix = request.prefix.encode("utf-8")
        grammar, whole_document, note = self.grammar_for(request)
        constraint = self._constraint(grammar)
        back = backoff(tok, prefix, request.mode)
        spec_grammar = self.spec_grammar(request, whole_document) if grammar is not None else None
        grammar_prefix = prefix if whole_document else b""
        try:
            if grammar is not None and whole_document:
                state = DecodeState(typed=back.typed, grammar=self._grammar_state(constraint, grammar, prefix))
            else:
                state = constraint.initial(back.typed)
        except ConstraintError as err:
            note = f"grammar not used: {err}"
            constraint, spec_grammar, grammar_prefix = self._constraint(None), None, b""
            state = constraint.initial(back.typed)
        # Text the grammar forces at the cursor goes into the prompt: vLLM then reads it
        # as prompt (cached across keystrokes) instead of sampling it token by token.
        forced = constraint.forced(state)
        if forced and spec_grammar is not None:
            grammar_prefix = grammar_prefix + tok.decode(forced)
        prompt = self._prompt(back.stable) + forced
        if self.max_model_len is not None:
            # The server refuses a prompt that leaves no room for the completion: keep
            # the BOS and the end of the prompt, nearest the cursor.
            room = self.max_model_len - request.max_tokens
            if len(prompt) > room > 1 and prompt[:1] == [tok.bos_token_id]:
                prompt = prompt[:1] + prompt[len(prompt) - room + 1 :]
        spec = build_spec(tok.vocab_fingerprint(), back.typed, spec_grammar, grammar_prefix)
        return prompt, spec, back.typed, forced, note

    def _complete(self, request: CompletionRequest, cancelled, partial=None) -> Completion:
        started = time.perf_counter()
        timings = Timings()
        tok = self.tokenizer
        prompt, spec, typed, forced, note = self.prepare(request)
        word_match = _IDENT_TAIL.search(request.prefix)
        assert word_match is not None  # the pattern matches the empty string at the end
        word = word_match.group(0)
        replace_start = len(request.prefix) - len(word)
        rules = StopRules(
            max_tokens=request.max_tokens,
            single_line=request.single_line,
            suffix_line=request.suffix.split("\n", 1)[0].strip(),
            time_budget_s=request.time_budget_s,
            cancelled=cancelled,
        )
        gen = Generation(tokens=list(forced), forced_tokens=len(forced))
        gen.inserted = tok.decode(forced)
        body = {
            "model": self.served_model,
            "prompt": prompt,
            "max_tokens": max(1, request.max_tokens - len(forced)),
            "temperature": float(request.temperature),
            "stream": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "structured_outputs": {"grammar": spec},
        }
        if request.seed is not None:
            body["seed"] = int(request.seed)
        generated: list[int] = []
        first_chunk = None
        # As in the local engine, the time budget counts from the first token: the prompt's
        # prefill and a new grammar's compilation are not the completion's to pay for.
        budget: list[float | None] = [None]

        def stop_now() -> bool:
            if budget[0] is None:
                return bool(cancelled is not None and cancelled())
            return _stop_reason(gen, rules, budget[0]) != ""

        for token_ids, finish in self.stream(body, cancelled=stop_now):
            if first_chunk is None:
                first_chunk = budget[0] = time.perf_counter()
                timings.prefill_ms = (first_chunk - started) * 1e3
            generated.extend(token_ids)
            out = [t for t in generated if t not in tok.eos_token_ids]
            gen.tokens = list(forced) + out
            spelled = tok.decode(out)
            gen.inserted = (
                tok.decode(forced) + spelled[len(typed) :] if len(spelled) >= len(typed) else tok.decode(forced)
            )
            if partial is not None:
                partial(word + _complete_utf8(gen.inserted), replace_start)
            if finish is not None:
                gen.stop_reason = "eos" if finish == "stop" else ("max_tokens" if finish == "length" else finish)
        reason = _stop_reason(gen, rules, budget[0] if budget[0] is not None else time.perf_counter())
        if reason:
            gen.stop_reason = reason
        inserted = _complete_utf8(_trim(gen.inserted, rules, gen))
        timings.tokens_generated = len(gen.tokens)
        timings.tokens_forced = gen.forced_tokens
        timings.forward_passes = len(generated)
        timings.total_ms = (time.perf_counter() - started) * 1e3
        timings.decode_ms = timings.total_ms - timings.prefill_ms
        return Completion(
            text=word + inserted,
            replace_start=replace_start,
            stop_reason=gen.stop_reason or "done",
            timings=timings,
            note=note,
        )

    # Streaming ------------------------------------------------------------------------------
    def stream(self, body: dict, *, cancelled=None):
        """Yields (new token ids, finish_reason or None) per streamed chunk of /v1/completions.

        A reader thread parses the server-sent events; this generator polls `cancelled()`
        while it waits and, when it says so or the caller stops iterating, closes the
        connection, which aborts the request in vLLM."""
        conn = self._connection(self.request_timeout_s)
        payload = json.dumps(body).encode("utf-8")
        try:
            conn.request(
                "POST",
                self._path("/v1/completions"),
                body=payload,
                headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
            )
            resp = conn.getresponse()
        except OSError as exc:
            conn.close()
            raise VllmError(f"cannot reach the vLLM server at {self.url}: {exc}") from None
        if resp.status != 200:
            detail = resp.read()[:2000]
            conn.close()
            try:
                message = json.loads(detail).get("error", {}).get("message") or detail.decode("utf-8", "replace")
            except (ValueError, AttributeError):
                message = detail.decode("utf-8", "replace")
            raise VllmError(f"vLLM refused the request ({resp.status}): {message}")
        events: queue.Queue = queue.Queue()

        def read():
            try:
                for raw in resp:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    events.put(("data", data))
            except (OSError, ValueError, http.client.HTTPException) as exc:
                events.put(("error", exc))
            finally:
                events.put(("end", None))

        reader = threading.Thread(target=read, name="midword-vllm-stream", daemon=True)
        reader.start()
        try:
            while True:
                try:
                    kind, data = events.get(timeout=POLL_S)
                except queue.Empty:
                    if cancelled is not None and cancelled():
                        return
                    continue
                if kind == "end":
                    return
                if kind == "error":
                    raise VllmError(f"the stream from {self.url} broke: {data}")
                chunk = json.loads(data)
                if "error" in chunk:
                    raise VllmError(f"vLLM failed the request: {chunk['error']}")
                for choice in chunk.get("choices") or []:
                    yield list(choice.get("token_ids") or []), choice.get("finish_reason")
                if cancelled is not None and cancelled():
                    return
        finally:
            # Closing the socket ends the HTTP stream; vLLM aborts the request when it notices.
            try:
                if conn.sock is not None:
                    import socket

                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
            reader.join(timeout=5.0)


def vllm_engine_factory(url: str, served_model: str | None = None):
    """A factory with the server's contract (`factory(model=...)`) for `--backend vllm`."""

    def factory(model: str | None = None, **kwargs):
        return VllmCompletionEngine(model or "gemma3", url=url, served_model=served_model, **kwargs)

    return factory


__all__ = ["VllmCompletionEngine", "VllmError", "vllm_engine_factory"]
