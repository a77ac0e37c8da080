"""The wire formats of the HTTP front end: reading request bodies, parsing FIM
templates back into prefix and suffix, and shaping answers the way each client
reads them. Plain functions over plain values (no Starlette, no model), so each is
tested alone; `server.http` wires them to routes.

Field names and shapes follow what the clients really send and read:
llama.cpp's `/infill` and `/completion` (llama.vscode, llama.vim, Tabby's and
Continue's llama.cpp backends), OpenAI's `/v1/completions` (Continue, Tabby's
`openai/completion` backend, minuet-ai, Zed) and Tabby's own `/v1/completions`
(tabby-agent). Requests are read leniently (unknown fields are ignored) but a
known field of the wrong type is a 400 naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, overload

from midword.completion.types import ChunkKind, ContextChunk

_MISSING = object()


class BadRequest(ValueError):
    """A request the server will not run; `status` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------------------
# reading fields


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; BadRequest naming the problem otherwise."""
    if not raw.strip():
        raise BadRequest("the request body is empty: expected a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(f"the request body is not UTF-8 (byte {e.start})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRequest(f"the request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise BadRequest("the request body nests too deeply") from None
    if not isinstance(value, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type_name(value)}")
    return value


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def normalize_newlines(text: str) -> str:
    """CRLF and lone CR become LF: the engine and its answers speak `\\n` only."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def get_str(body: dict, name: str, default: Any = _MISSING, *, where: str = "") -> Any:
    """A string field (null counts as absent); CRLF normalised."""
    value = body.get(name)
    if value is None:
        if default is _MISSING:
            raise BadRequest(f'"{where}{name}" is required')
        return default
    if not isinstance(value, str):
        raise BadRequest(f'"{where}{name}" must be a string, got {type_name(value)}')
    return normalize_newlines(value)


@overload
def get_int(
    body: dict, name: str, default: int, *, lo: int | None = None, hi: int | None = None, where: str = ""
) -> int: ...
@overload
def get_int(
    body: dict, name: str, default: None, *, lo: int | None = None, hi: int | None = None, where: str = ""
) -> int | None: ...
def get_int(
    body: dict, name: str, default: int | None, *, lo: int | None = None, hi: int | None = None, where: str = ""
) -> int | None:
    """An integer field (a float with no fraction counts); clamped into [lo, hi]."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f'"{where}{name}" must be an integer, got {type_name(value)}')
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise BadRequest(f'"{where}{name}" must be an integer, got {value!r}')
        value = int(value)
    if lo is not None:
        value = max(lo, value)
    if hi is not None:
        value = min(hi, value)
    return value


@overload
def get_number(
    body: dict, name: str, default: float, *, lo: float | None = None, hi: float | None = None, where: str = ""
) -> float: ...
@overload
def get_number(
    body: dict, name: str, default: None, *, lo: float | None = None, hi: float | None = None, where: str = ""
) -> float | None: ...
def get_number(
    body: dict, name: str, default: float | None, *, lo: float | None = None, hi: float | None = None, where: str = ""
) -> float | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f'"{where}{name}" must be a number, got {type_name(value)}')
    value = float(value)
    if lo is not None:
        value = max(lo, value)
    if hi is not None:
        value = min(hi, value)
    return value


def get_bool(body: dict, name: str, default: bool, *, where: str = "") -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f'"{where}{name}" must be true or false, got {type_name(value)}')
    return value


def get_stop(body: dict, name: str = "stop", *, where: str = "") -> list[str]:
    """Stop strings: a string, an array of strings, or null (OpenAI accepts both)."""
    value = body.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise BadRequest(f'"{where}{name}" must be a string or an array of strings')
    return [normalize_newlines(s) for s in value if s]


def get_object(body: dict, name: str, *, where: str = "") -> dict | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest(f'"{where}{name}" must be an object, got {type_name(value)}')
    return value


def get_list(body: dict, name: str, *, where: str = "") -> list:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f'"{where}{name}" must be an array, got {type_name(value)}')
    return value


# --------------------------------------------------------------------------------------
# context chunks


def infill_extra(body: dict) -> list[ContextChunk]:
    """llama.cpp's `input_extra`: `[{text, filename?, time?}]`. `time` is whatever the
    client keeps (a number, a string, llama.vim's `reltime()` list) and is not used."""
    chunks = []
    for i, item in enumerate(get_list(body, "input_extra")):
        if not isinstance(item, dict):
            raise BadRequest(f'"input_extra[{i}]" must be an object with "text", got {type_name(item)}')
        text = get_str(item, "text", where=f"input_extra[{i}].")
        filename = get_str(item, "filename", None, where=f"input_extra[{i}].")
        chunks.append(ContextChunk(text, path=filename))
    return chunks


def tabby_snippets(segments: dict) -> list[ContextChunk]:
    """Tabby's declarations and relevant snippets, each `{filepath, body}`."""
    chunks = []
    kinds: dict[str, ChunkKind] = {
        "declarations": "definition",
        "relevant_snippets_from_changed_files": "edit",
        "relevant_snippets_from_recently_opened_files": "snippet",
    }
    for key, kind in kinds.items():
        for i, item in enumerate(get_list(segments, key, where="segments.")):
            where = f"segments.{key}[{i}]."
            if not isinstance(item, dict):
                raise BadRequest(f'"{where[:-1]}" must be an object with "body"')
            chunks.append(
                ContextChunk(
                    get_str(item, "body", where=where), path=get_str(item, "filepath", None, where=where), kind=kind
                )
            )
    return chunks


# --------------------------------------------------------------------------------------
# FIM templates


@dataclass(frozen=True)
class FimPrompt:
    prefix: str
    suffix: str
    context: list[ContextChunk]
    filename: str | None = None
    family: str = "plain"


# Each family: its markers as (prefix, suffix, middle) in the order they appear.
_PSM_FAMILIES = (
    # StarCoder, StarCoder2, SantaCoder: <fim_prefix>P<fim_suffix>S<fim_middle>
    ("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>", "<repo_name>"),
    # Qwen2.5-Coder, CodeGemma: <|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>
    ("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>"),
    # DeepSeek-Coder: <｜fim▁begin｜>P<｜fim▁hole｜>S<｜fim▁end｜>
    (
        "deepseek",
        "<\uff5cfim\u2581begin\uff5c>",
        "<\uff5cfim\u2581hole\uff5c>",
        "<\uff5cfim\u2581end\uff5c>",
        None,
        None,
    ),
)
TABBY_FIM = "<|FIM|>"
# Every marker any family uses: none may reach an answer.
FIM_MARKERS = tuple(
    sorted(
        {m for fam in _PSM_FAMILIES for m in fam[1:] if m}
        | {
            "<PRE>",
            "<SUF>",
            "<MID>",
            "<EOT>",
            "[PREFIX]",
            "[SUFFIX]",
            "[MIDDLE]",
            "<|endoftext|>",
            "<|fim_pad|>",
            "<fim_pad>",
            "<filename>",
            "<gh_stars>",
            "<\uff5cend\u2581of\u2581sentence\uff5c>",
            "<|file_separator|>",
            TABBY_FIM,
        },
        key=len,
        reverse=True,
    )
)


def parse_fim_prompt(prompt: str, suffix: str | None = None) -> FimPrompt:
    """Prefix, suffix and context of a possibly FIM-templated prompt.

    A prompt without markers is all prefix (with `suffix` as the suffix, OpenAI's
    field). Repository context before the prefix marker (`<|repo_name|>`,
    `<|file_sep|>path\\ncode` parts) becomes context chunks; the last file header
    right before the prefix marker names the file being edited."""
    prompt = normalize_newlines(prompt)
    given_suffix = normalize_newlines(suffix) if suffix else ""
    for family, pre, suf, mid, file_sep, repo_name in _PSM_FAMILIES:
        p = prompt.find(pre)
        if p < 0:
            continue
        s = prompt.find(suf, p + len(pre))
        if s < 0:
            continue
        m = prompt.find(mid, s + len(suf))
        head, prefix = prompt[:p], prompt[p + len(pre) : s]
        fim_suffix = prompt[s + len(suf) : m if m >= 0 else len(prompt)]
        context, filename = _repo_context(head, file_sep, repo_name)
        return FimPrompt(prefix, fim_suffix + given_suffix, context, filename, family)
    # CodeLlama: "<PRE> {prefix} <SUF>{suffix} <MID>"
    p = prompt.find("<PRE>")
    if p >= 0:
        s = prompt.find("<SUF>", p)
        if s >= 0:
            m = prompt.find("<MID>", s)
            prefix = prompt[p + len("<PRE>") : s]
            prefix = prefix[1:] if prefix.startswith(" ") else prefix
            prefix = prefix[:-1] if prefix.endswith(" ") else prefix
            fim_suffix = prompt[s + len("<SUF>") : m if m >= 0 else len(prompt)]
            fim_suffix = fim_suffix[:-1] if m >= 0 and fim_suffix.endswith(" ") else fim_suffix
            head = prompt[:p]
            context = [ContextChunk(head)] if head.strip() else []
            return FimPrompt(prefix, fim_suffix + given_suffix, context, None, "codellama")
    # Tabby's FIM_TEMPLATE for its openai/completion backend: "{prefix}<|FIM|>{suffix}"
    if TABBY_FIM in prompt:
        prefix, _, fim_suffix = prompt.partition(TABBY_FIM)
        return FimPrompt(prefix, fim_suffix + given_suffix, [], None, "tabby")
    # Codestral: "[SUFFIX]{suffix}[PREFIX]{prefix}"
    s = prompt.find("[SUFFIX]")
    if s >= 0:
        p = prompt.find("[PREFIX]", s)
        if p >= 0:
            head = prompt[:s]
            context = [ContextChunk(head)] if head.strip() else []
            return FimPrompt(
                prompt[p + len("[PREFIX]") :],
                prompt[s + len("[SUFFIX]") : p] + given_suffix,
                context,
                None,
                "codestral",
            )
    return FimPrompt(prompt, given_suffix, [], None, "plain")


def _repo_context(head: str, file_sep: str | None, repo_name: str | None) -> tuple[list[ContextChunk], str | None]:
    if not head.strip():
        return [], None
    if file_sep is None or file_sep not in head:
        text = head.split(repo_name, 1)[-1].split("\n", 1)[-1] if repo_name and head.startswith(repo_name) else head
        return ([ContextChunk(text)] if text.strip() else []), None
    parts = head.split(file_sep)
    chunks, filename = [], None
    for part in parts[1:]:
        header, _, code = part.partition("\n")
        name = header.strip() or None
        if code.strip():
            chunks.append(ContextChunk(code, path=name))
            filename = None
        else:  # a header with no code yet: the file being completed
            filename = name
    return chunks, filename


def strip_markers(text: str) -> str:
    """The text up to the first FIM marker in it, if any: a model that emits one has
    ended its answer there, and a client must never see one."""
    cut = len(text)
    for marker in FIM_MARKERS:
        i = text.find(marker)
        if 0 <= i < cut:
            cut = i
    return text[:cut]


# --------------------------------------------------------------------------------------
# cutting an answer


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """The text before the first stop string, and which one stopped it."""
    best, word = len(text), None
    for s in stops:
        i = text.find(s)
        if 0 <= i < best:
            best, word = i, s
    return text[:best], word


def cut_at_indent(text: str, n_indent: int) -> str:
    """llama.cpp's `n_indent`: the answer ends before the first generated line (after
    the first) whose indentation is less than `n_indent`; blank lines do not count."""
    if n_indent <= 0 or "\n" not in text:
        return text
    lines = text.split("\n")
    kept = [lines[0]]
    for line in lines[1:]:
        if line.strip():
            indent = len(line) - len(line.lstrip(" \t"))
            if indent < n_indent:
                # llama.cpp keeps the newline that ends the last kept line
                return "\n".join(kept) + "\n"
        kept.append(line)
    return text


# --------------------------------------------------------------------------------------
# answers


def compact_json(value: Any) -> str:
    """One line, no spaces after separators: llama.vim checks `"content":"` literally."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse_event(value: Any) -> bytes:
    return b"data: " + compact_json(value).encode("utf-8") + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def select_fields(response: dict, fields: list) -> dict:
    """llama.cpp's `response_fields`: only the listed paths, each under its literal key
    (`"timings/prompt_n"` stays a key with a slash). A path that names nothing is
    left out, so `[""]` gives `{}`."""
    out: dict[str, Any] = {}
    for path in fields:
        if not isinstance(path, str) or not path:
            continue
        node: Any = response
        for part in path.split("/"):
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                node = _MISSING
                break
        if node is not _MISSING:
            out[path] = node
    return out


def llama_timings(prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float) -> dict[str, Any]:
    """llama.cpp's `timings` object."""
    prompt_ms = max(prompt_ms, 0.0)
    predicted_ms = max(predicted_ms, 0.0)
    return {
        "prompt_n": prompt_n,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / prompt_n, 3) if prompt_n else 0.0,
        "prompt_per_second": round(prompt_n * 1000.0 / prompt_ms, 3) if prompt_ms > 0 and prompt_n else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / predicted_n, 3) if predicted_n else 0.0,
        "predicted_per_second": round(predicted_n * 1000.0 / predicted_ms, 3)
        if predicted_ms > 0 and predicted_n
        else 0.0,
    }


def error_body(status: int, message: str) -> dict[str, Any]:
    """llama.cpp's and OpenAI's error shape."""
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "invalid_request_error",
        503: "unavailable_error",
    }.get(status, "server_error")
    return {"error": {"code": status, "message": message, "type": kind}}
