"""Which grammar constrains the completions in a document.

In order, the first that applies:

1. The user's associations (setting `midword.grammars`): a key with a glob character
   (`* ? [`), a `/` or a `.` is a glob on the file (on its name when the glob has no
   `/`, else on its path relative to the workspace root); any other key is a
   languageId. The value is a grammar file, its kind taken from its extension
   (`.lark` Lark, `.json` JSON Schema, `.regex`/`.re` a regex), a path relative to
   the workspace root (or absolute, or `~/...`), or the name of a grammar midword
   ships (`json.lark`, `schemas/package.json`); or `none`, `auto`, `json`.
2. JSON documents (languageId `json`/`jsonc`, or a `.json` file): the top-level
   `$schema` of the document when it names a local file (relative to the document)
   or a SchemaStore URL midword bundles a schema for (`grammars/schemas/`); else a
   bundled schema by file name (package.json, tsconfig.json); else plain JSON
   (`json.lark`). Remote schemas are never fetched: the choice falls back to plain
   JSON and says why. A JSON-with-comments document that contains a comment gets
   the code grammar, since neither JSON grammar admits comments.
3. Anything else: `GrammarSpec(kind="auto")`, the engine's code-brackets grammar for
   the document's language.

A choice that falls back carries a `note` for the log. Grammar files are read from
disk once per change (keyed on size and mtime), never per keystroke, and only when
they are regular files inside the workspace folders (a document's `$schema` or a
setting must not read `/dev/zero`, a FIFO or a secret elsewhere on disk); a refusal
names the path, never the content.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import posixpath
import re
import stat
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence
from urllib.parse import unquote, urljoin, urlparse
from urllib.request import url2pathname

from midword.completion.types import GrammarSpec
from midword.engine.jsonschema import bundled_metaschema
from midword.grammars import read_grammar

from .settings import Settings

JSON_LANGUAGES = frozenset({"json", "jsonc"})
_GRAMMAR_KINDS: dict[str, Literal["lark", "json_schema", "regex"]] = {
    ".lark": "lark",
    ".json": "json_schema",
    ".regex": "regex",
    ".re": "regex",
}

# File name -> bundled schema (grammars/schemas/<file>).
_BUNDLED_BY_NAME = (
    (re.compile(r"package\.json\Z"), "package.json"),
    (re.compile(r"(tsconfig(\..+)?|jsconfig)\.json\Z"), "tsconfig.json"),
)
# SchemaStore URLs (scheme and a trailing ".json" ignored) -> bundled schema.
_BUNDLED_BY_URL = {
    "json.schemastore.org/package": "package.json",
    "json.schemastore.org/tsconfig": "tsconfig.json",
    "json.schemastore.org/jsconfig": "tsconfig.json",
}

MAX_GRAMMAR_FILE_BYTES = 4 * 1024 * 1024
# Files a workspace schema's `$ref`s may bring in (transitively), embedded in it.
MAX_SCHEMA_FILES = 32
# The `$defs` key prefix under which those files are embedded.
_EMBEDDED_KEY = "midword:file"


@dataclass(frozen=True)
class Choice:
    spec: GrammarSpec
    origin: str  # what decided it, for logs: "association *.toml", "$schema ./s.json", ...
    note: str | None = None  # why a preferred grammar could not be used


@functools.lru_cache(maxsize=None)
def plain_json() -> GrammarSpec:
    return GrammarSpec(kind="lark", source=read_grammar("json.lark"))


@functools.lru_cache(maxsize=16)
def bundled_schema(name: str) -> str:
    """Text of a schema shipped in grammars/schemas/."""
    return resources.files("midword.grammars").joinpath("schemas", name).read_text(encoding="utf-8")


def fallback_grammar(language_id: str | None, path: str | None) -> GrammarSpec:
    """The grammar a document gets when its chosen one cannot be used: plain JSON for
    JSON documents, else the engine's code grammar."""
    return plain_json() if is_json_document(language_id, path) else GrammarSpec(kind="auto")


def document_language(language_id: str | None, path: str | None) -> str | None:
    """The language a request names: the LSP languageId, else the file extension."""
    if language_id:
        return language_id
    if path:
        ext = os.path.splitext(path)[1].lstrip(".").lower()
        return ext or None
    return None


def is_json_document(language_id: str | None, path: str | None) -> bool:
    if language_id:
        return language_id.lower() in JSON_LANGUAGES
    return path is not None and path.lower().endswith((".json", ".jsonc"))


# --------------------------------------------------------------------------------------
# $schema


# A JSON token, loosely: strings (possibly unterminated at the end), punctuation,
# comments (for JSON with comments). Anything else (numbers, literals) is skipped.
_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|[{}\[\]:,]|//[^\n]*|/\*.*?(?:\*/|\Z)', re.S)
_CLOSED_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def schema_reference(text: str) -> str | None:
    """The value of the top-level `"$schema"` key of a (possibly unfinished) JSON text,
    or None. Nested `$schema` keys (inside values) are ignored."""
    if '"$schema"' not in text:  # the common case costs one substring search
        return None
    depth = 0
    expect_key = False  # the next string at depth 1 is a key
    pending_key = None  # "$schema" read, waiting for ':' then the value
    for m in _JSON_TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        if c == "/":
            continue
        if c in "{[":
            if depth == 0 and c == "[":
                return None  # a top-level array has no $schema
            depth += 1
            expect_key = depth == 1
            pending_key = None if depth > 1 else pending_key
        elif c in "}]":
            depth -= 1
            if depth <= 0:
                return None  # the top-level value closed without one
        elif c == ",":
            expect_key = depth == 1
            pending_key = None
        elif c == ":":
            expect_key = False
        elif c == '"' and depth == 1:
            if pending_key == "key" and not expect_key:
                if not _CLOSED_STRING.fullmatch(tok):
                    return None  # the value is still being typed
                try:
                    value = json.loads(tok)
                except json.JSONDecodeError:
                    return None
                return value if isinstance(value, str) else None
            if expect_key:
                pending_key = "key" if tok == '"$schema"' else None
                expect_key = False
            else:
                pending_key = None
    return None


def _bundled_for_url(url: str) -> str | None:
    parsed = urlparse(url)
    key = (parsed.netloc + parsed.path).rstrip("/")
    if key.endswith(".json"):
        key = key[: -len(".json")]
    return _BUNDLED_BY_URL.get(key.lower())


def _bundled_for_name(path: str | None) -> str | None:
    if not path:
        return None
    name = os.path.basename(path)
    for pattern, schema in _BUNDLED_BY_NAME:
        if pattern.match(name):
            return schema
    return None


def _has_comment(text: str) -> bool:
    if "/" not in text:
        return False
    return any(m.group().startswith("/") for m in _JSON_TOKEN.finditer(text))


# --------------------------------------------------------------------------------------
# associations


def _is_glob(key: str) -> bool:
    return any(c in key for c in "*?[/.")


def _glob_matches(pattern: str, path: str | None, root: str | None) -> bool:
    if not path:
        return False
    candidates = [os.path.basename(path)] if "/" not in pattern else []
    if "/" in pattern:
        full = path.replace(os.sep, "/")
        candidates.append(full)
        if root:
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if not rel.startswith("../"):
                candidates.append(rel)
    patterns = [pattern]
    if pattern.startswith("**/"):
        patterns.append(pattern[3:])
    return any(fnmatch.fnmatchcase(c, p) for c in candidates for p in patterns)


class GrammarResolver:
    """Chooses grammars for documents; caches the grammar files it reads."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[int, int, str]] = {}

    def read(self, path: str, allowed: Sequence[str] | None = None) -> str:
        """Text of a grammar or schema file (cached until its size or mtime changes).

        Only a regular file is read (never a device, FIFO or socket: their size says
        nothing and reading them may never end), at most `MAX_GRAMMAR_FILE_BYTES` of it
        whatever its size claims, and, with `allowed`, only when its real path (links
        resolved) lies inside one of those folders. Raises OSError/ValueError with a
        message naming the file and never its content."""
        real = os.path.realpath(path)
        if allowed is not None and not _inside(real, allowed):
            raise ValueError(
                f"{path} is outside the workspace folders; midword reads grammar and schema "
                f"files only from the workspace and its bundled schemas"
            )
        # O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one forever.
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{path} is not a regular file")
            if st.st_size > MAX_GRAMMAR_FILE_BYTES:
                raise ValueError(f"{path} is {st.st_size} bytes; grammar files are limited to {MAX_GRAMMAR_FILE_BYTES}")
            hit = self._files.get(real)
            if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
                return hit[2]
            chunks, got = [], 0
            while got <= MAX_GRAMMAR_FILE_BYTES:  # st_size may lie (it grows, or /proc says 0)
                chunk = os.read(fd, min(1 << 20, MAX_GRAMMAR_FILE_BYTES + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        finally:
            os.close(fd)
        if got > MAX_GRAMMAR_FILE_BYTES:
            raise ValueError(f"{path} is over {MAX_GRAMMAR_FILE_BYTES} bytes; grammar files are limited to that")
        try:
            text = b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} is not UTF-8 text (byte {e.start})") from None
        if len(self._files) >= 64:  # a long session naming many files: forget, at worst read again
            self._files.clear()
        self._files[real] = (st.st_mtime_ns, st.st_size, text)
        return text

    def choose(
        self,
        *,
        path: str | None,
        language_id: str | None,
        text: str,
        settings: Settings,
        root: str | None = None,
        roots: Sequence[str] | None = None,
    ) -> Choice:
        """The grammar for a document. Files are read only inside `roots` (the workspace
        folders), else inside `root`, else, with no workspace at all, inside the
        document's own folder."""
        allowed = [r for r in (roots or ()) if r] or ([root] if root else [])
        if not allowed and path:
            allowed = [os.path.dirname(path)]
        allowed = [os.path.realpath(r) for r in allowed]
        notes = []
        for key, value in settings.grammars:
            hit = _glob_matches(key, path, root) if _is_glob(key) else (language_id or "").lower() == key.lower()
            if not hit:
                continue
            try:
                return Choice(self._grammar_value(value, root, path, allowed), f"association {key} -> {value}")
            except (OSError, ValueError) as e:
                notes.append(f"grammar association {key!r} -> {value!r} unusable ({e})")
                break
        choice = self._default(path, language_id, text, allowed)
        if notes:
            note = "; ".join(filter(None, notes + [choice.note]))
            return Choice(choice.spec, choice.origin, note)
        return choice

    def _grammar_value(self, value: str, root: str | None, doc_path: str | None, allowed: Sequence[str]) -> GrammarSpec:
        low = value.lower()
        if low == "none":
            return GrammarSpec(kind="none")
        if low == "auto":
            return GrammarSpec(kind="auto")
        if low == "json":
            return plain_json()
        ext = os.path.splitext(low)[1]
        kind = _GRAMMAR_KINDS.get(ext)
        if kind is None:
            raise ValueError(f"unknown grammar file type {ext or '(none)'}: use .lark, .json (JSON Schema) or .regex")
        path = os.path.expanduser(value)
        if not os.path.isabs(path):
            base = root or (os.path.dirname(doc_path) if doc_path else None)
            path = os.path.join(base, path) if base else path
        if os.path.lexists(path):
            source = self.read(path, allowed)
        else:
            shipped = self._shipped(value)
            if shipped is None:
                raise ValueError(f"{path} does not exist and is not a grammar midword ships")
            source = shipped
        if kind == "regex":
            source = source.strip()
        if kind == "json_schema":
            _check_schema_text(source, path)
            if os.path.lexists(path):
                source, _ = self._with_referenced_files(source, path, allowed)
        return GrammarSpec(kind=kind, source=source)

    @staticmethod
    def _shipped(name: str) -> str | None:
        name = name.replace("\\", "/")
        if name.startswith("/") or ".." in name.split("/"):
            return None
        try:
            if name.startswith("schemas/"):
                return bundled_schema(name[len("schemas/") :])
            return read_grammar(name)
        except (FileNotFoundError, IsADirectoryError, OSError):
            return None

    def _default(self, path: str | None, language_id: str | None, text: str, allowed: Sequence[str]) -> Choice:
        if not is_json_document(language_id, path):
            return Choice(GrammarSpec(kind="auto"), "code")
        if (language_id or "").lower() == "jsonc" or (path or "").lower().endswith(".jsonc"):
            if _has_comment(text):
                return Choice(GrammarSpec(kind="auto"), "JSON with comments (code grammar)")
        ref = schema_reference(text)
        if ref is not None:
            spec, origin, note = self._schema_from_reference(ref, path, allowed)
            if spec is not None:
                return Choice(spec, origin, note)
            return Choice(plain_json(), "plain JSON", note)
        bundled = _bundled_for_name(path)
        if bundled is not None:
            return Choice(GrammarSpec(kind="json_schema", source=bundled_schema(bundled)), f"bundled {bundled}")
        return Choice(plain_json(), "plain JSON")

    def _schema_from_reference(
        self, ref: str, doc_path: str | None, allowed: Sequence[str]
    ) -> tuple[GrammarSpec | None, str, str | None]:
        parsed = urlparse(ref)
        scheme = parsed.scheme.lower()
        if scheme in ("http", "https"):
            bundled = _bundled_for_url(ref)
            if bundled is not None:
                return (
                    GrammarSpec(kind="json_schema", source=bundled_schema(bundled)),
                    f"bundled {bundled} for {ref}",
                    None,
                )
            if bundled_metaschema(ref.partition("#")[0]) is not None:
                # A JSON Schema file: the draft's metaschema, which the engine bundles.
                source = json.dumps({"$schema": ref, "$ref": ref})
                return GrammarSpec(kind="json_schema", source=source), f"the JSON Schema metaschema {ref}", None
            return None, "", f"$schema {ref} is remote and midword never fetches schemas; using plain JSON"
        if scheme == "file":
            path = unquote(parsed.path)
        elif scheme and len(scheme) > 1:
            return None, "", f"$schema {ref}: unsupported scheme {scheme!r}; using plain JSON"
        else:  # a path (a one-letter "scheme" is a Windows drive)
            path = os.path.expanduser(ref)
            if not os.path.isabs(path):
                if not doc_path:
                    return None, "", f"$schema {ref} is relative but the document has no path; using plain JSON"
                path = os.path.normpath(os.path.join(os.path.dirname(doc_path), path))
        try:
            source = self.read(path, allowed)
            _check_schema_text(source, path)
        except (OSError, ValueError) as e:
            return None, "", f"$schema {ref}: {e}; using plain JSON"
        source, unread = self._with_referenced_files(source, path, allowed)
        note = f"$schema {ref} refers to files midword cannot read: {'; '.join(unread)}" if unread else None
        return GrammarSpec(kind="json_schema", source=source), f"$schema {ref}", note

    def _with_referenced_files(self, source: str, path: str, allowed: Sequence[str]) -> tuple[str, list[str]]:
        """The schema text with the files its `$ref`s name (relative paths or `file:`
        URIs, and theirs in turn) embedded as resources of their own, `$id` their file
        URI, the way JSON Schema bundles a compound document: the engine reads no files.
        Each is read as a schema file is (inside the workspace, a regular file, bounded),
        at most MAX_SCHEMA_FILES of them; returns the text and why any was not read. A
        schema whose `$id` is not a file URI is left alone (its references name URLs)."""
        if not _refers_beyond(source):
            return source, []  # nearly every schema: answered from a cache per text
        root = _parsed(source)
        if not isinstance(root, dict):
            return source, []
        own = root.get("$id")
        if own is None:
            own = Path(os.path.abspath(path)).as_uri()
        elif not isinstance(own, str) or not own.startswith("file:"):
            return source, []
        embedded: dict[str, Any] = {}
        unread: list[str] = []
        pending = [(own, root)]
        seen = {own.partition("#")[0]}
        while pending:
            base, doc = pending.pop()
            for ref in _refs_in(doc):
                target = urljoin(base, ref).partition("#")[0]
                if not target.startswith("file:") or target in seen:
                    continue
                seen.add(target)
                if len(embedded) >= MAX_SCHEMA_FILES:
                    unread.append(f"{target}: more than {MAX_SCHEMA_FILES} files")
                    continue
                try:
                    text = self.read(url2pathname(urlparse(target).path), allowed)
                    value = _parsed(text)
                except (OSError, ValueError, RecursionError) as e:
                    unread.append(str(e) if not isinstance(e, json.JSONDecodeError) else f"{target} is not valid JSON")
                    continue
                if isinstance(value, dict):
                    # Its own relative references are to files beside it, whatever its $id says.
                    value = {**value, "$id": target}
                    embedded[target] = value
                    pending.append((target, value))
        if not embedded:
            return source, unread
        own_defs = root.get("$defs")
        defs: dict[str, Any] = dict(own_defs) if isinstance(own_defs, dict) else {}
        defs.update((f"{_EMBEDDED_KEY} {i}", doc) for i, doc in enumerate(embedded.values()))
        return json.dumps({**root, "$id": own, "$defs": defs}), unread


# Keywords whose values are JSON data, not schemas: a "$ref" inside one is no reference.
_VALUE_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


@functools.lru_cache(maxsize=32)
def _refers_beyond(source: str) -> bool:
    """Whether some `$ref` in the schema text names another document (not only a
    fragment). Cached, as `_schema_problem` is: the same text comes back on every
    keystroke."""
    return any(not ref.startswith("#") for ref in _refs_in(_parsed(source)))


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> Any:
    """A schema file's JSON, parsed once per text (callers copy before changing it)."""
    return json.loads(text)


def _refs_in(value: Any) -> Iterator[str]:
    """Every `$ref` and `$dynamicRef` string in a schema document, depth first, bounded
    by the document's own size (it was parsed, so it is finite)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, item in node.items():
                if key in ("$ref", "$dynamicRef") and isinstance(item, str):
                    yield item
                elif isinstance(item, (dict, list)) and key not in _VALUE_KEYWORDS:
                    stack.append(item)
        elif isinstance(node, list):
            stack.extend(item for item in node if isinstance(item, (dict, list)))


def _inside(real: str, folders: Sequence[str]) -> bool:
    """Whether the resolved path `real` is one of `folders` (resolved) or below one."""
    for folder in folders:
        if real == folder or real.startswith(folder.rstrip(os.sep) + os.sep):
            return True
    return False


def _check_schema_text(source: str, path: str) -> None:
    problem = _schema_problem(source)
    if problem is not None:
        raise ValueError(f"{path} {problem}")


@functools.lru_cache(maxsize=32)
def _schema_problem(source: str) -> str | None:
    """Why `source` is no JSON Schema, or None. Cached: the same file text comes back
    on every keystroke (and its hash is cached on the string)."""
    try:
        value = json.loads(source)
    except json.JSONDecodeError as e:
        return f"is not valid JSON ({e.msg} at line {e.lineno}:{e.colno})"
    except RecursionError:
        return "is nested too deeply to read"
    if not isinstance(value, (dict, bool)):
        return "is not a JSON Schema (an object or a boolean)"
    return None


def uri_to_path(uri: str) -> str | None:
    """The file system path of a file: URI, else None (untitled buffers, other schemes)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if os.name == "nt" and re.match(r"/[A-Za-z]:", path):
        path = path[1:]
    return posixpath.normpath(path) if os.name != "nt" else os.path.normpath(path)
