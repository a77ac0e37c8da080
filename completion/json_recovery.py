"""Keeping a JSON Schema constraint when the document above the cursor breaks it.

A document being edited is rarely valid: a value of the wrong type ten lines up, a key
the schema forbids. The document's grammar then rejects the text before the cursor, and
dropping the constraint for the whole file would leave the completion unconstrained
exactly where the schema knows best what belongs. Instead the constraint re-anchors at
a value that encloses the cursor: the text from that value's first byte is checked
against the sub-schema that governs it, found by walking the schema along the value's
JSON pointer. Anchors are tried from the innermost outwards, so the constraint covers
as much of the document as still matches.

Finding the anchors needs a parse that never fails: `open_values` reads any prefix of
JSON (or JSON with comments), broken or not, and reports the values still open at its
end with their pointers. Walking the schema (`subschema_at`) follows `$ref` within the
document, `properties`, `patternProperties`, `additionalProperties`, `items` and
`prefixItems`, and the branches of `allOf`/`anyOf`/`oneOf`; where it cannot tell which
sub-schema applies, it reports none and that anchor is skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Keys of the root schema a re-anchored schema keeps, so `$ref`s into the document's
# definitions still resolve; everything else about the root is what re-anchoring drops.
_ROOT_KEYS = ("$schema", "$id", "definitions", "$defs")
ANCHOR_DEF = "midword-anchor"

PathToken = str | int


@dataclass(frozen=True)
class OpenValue:
    """A JSON value that starts before the cursor and is not finished at it."""

    start: int  # byte offset of the value's first byte
    path: tuple[PathToken, ...]  # from the document's root

    @property
    def pointer(self) -> str:
        """The value's JSON pointer (RFC 6901); the root is `""`."""
        return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in self.path)


_KEY, _COLON, _VALUE, _AFTER = range(4)  # where an object or array frame stands
_OBJECT, _ARRAY = 0x7B, 0x5B


@dataclass
class _Frame:
    kind: int  # _OBJECT or _ARRAY
    start: int
    path: tuple[PathToken, ...]
    phase: int
    key: str | None = None  # object: the key whose value comes next
    index: int = 0  # array: the index of the element that comes next


def open_values(text: bytes, max_depth: int) -> list[OpenValue]:
    """The values open at the end of `text`, outermost first.

    Tolerant by design: unknown bytes and closers that match nothing open are skipped,
    a missing comma is assumed, and `//` and `/* */` comments are ignored. A scalar
    being typed at the end (a string not closed yet, a number, `tru`) is the innermost
    open value. Containers nested deeper than `max_depth` are counted, not kept, so the
    work and memory stay linear in the text whatever its nesting.
    """
    stack: list[_Frame] = []
    overflow = 0  # containers open beyond max_depth, or where no value may start
    root_seen = False
    i, n = 0, len(text)

    def value_path() -> tuple[PathToken, ...] | None:
        """Where a value starting now sits, or None where none may start."""
        if overflow:
            return None
        if not stack:
            return None if root_seen else ()
        top = stack[-1]
        if top.phase != _VALUE:
            return None
        if top.kind == _OBJECT:
            assert top.key is not None  # an object's value phase comes after its key
            return top.path + (top.key,)
        return top.path + (top.index,)

    def value_started() -> None:
        nonlocal root_seen
        if stack and not overflow:
            stack[-1].phase = _AFTER
        root_seen = True

    while i < n:
        c = text[i]
        if c in b" \t\r\n":
            i += 1
            continue
        if c == 0x2F and i + 1 < n and text[i + 1] in b"/*":  # a comment (JSONC)
            if text[i + 1] == 0x2F:
                end = text.find(b"\n", i + 2)
                i = n if end < 0 else end + 1
            else:
                end = text.find(b"*/", i + 2)
                i = n if end < 0 else end + 2
            continue
        if c == _OBJECT or c == _ARRAY:
            path = value_path()
            value_started()
            if path is None or overflow or len(stack) >= max_depth:
                overflow += 1
            else:
                stack.append(_Frame(kind=c, start=i, path=path, phase=_KEY if c == _OBJECT else _VALUE))
            i += 1
            continue
        if c in b"}]":
            if overflow:
                overflow -= 1
            elif stack and stack[-1].kind == c - 2:  # '}' closes '{', ']' closes '['
                stack.pop()
            i += 1  # a closer that matches nothing open is a typo: skipped
            continue
        top = stack[-1] if stack and not overflow else None
        if c == 0x22:  # a string: a key, or a value
            str_end = _string_end(text, i)
            if top is not None and top.kind == _OBJECT and top.phase in (_KEY, _AFTER):
                if str_end is None:  # the cursor is inside a key
                    break
                top.key, top.phase = _decode_key(text[i + 1 : str_end - 1]), _COLON
                i = str_end
                continue
            path = value_path()
            if str_end is None:  # the text ends inside this string value
                return _result(stack, overflow, OpenValue(i, path) if path is not None else None)
            value_started()
            i = str_end
            continue
        if c == 0x3A:  # ':'
            if top is not None and top.kind == _OBJECT and top.phase == _COLON:
                top.phase = _VALUE
            i += 1
            continue
        if c == 0x2C:  # ','
            if top is not None:
                if top.kind == _OBJECT:
                    top.key, top.phase = None, _KEY
                else:
                    top.index, top.phase = top.index + 1, _VALUE
            i += 1
            continue
        # a number or a literal: it runs to the next delimiter
        j = i
        while j < n and text[j] not in b' \t\r\n,:]}[{"/':
            j += 1
        if j == n:
            path = value_path()
            return _result(stack, overflow, OpenValue(i, path) if path is not None else None)
        value_started()
        i = j
    return _result(stack, overflow, None)


def _result(stack: list[_Frame], overflow: int, scalar: OpenValue | None) -> list[OpenValue]:
    values = [OpenValue(f.start, f.path) for f in stack]
    if scalar is not None and not overflow:
        values.append(scalar)
    return values


def _string_end(text: bytes, start: int) -> int | None:
    """Offset just past the string that opens at `start`, or None if it is not closed."""
    i, n = start + 1, len(text)
    while i < n:
        c = text[i]
        if c == 0x5C:
            i += 2
            continue
        if c == 0x22:
            return i + 1
        if c == 0x0A:  # a line break ends a broken string: don't swallow the document
            return i
        i += 1
    return None


def _decode_key(raw: bytes) -> str:
    try:
        return json.loads(b'"' + raw + b'"')
    except ValueError:
        return raw.decode("utf-8", "replace")


# -- the schema along a pointer ---------------------------------------------------------


def subschema_at(root: Any, path: tuple[PathToken, ...], max_refs: int = 64) -> Any | None:
    """The schema that governs the value at `path`, or None where it cannot be told.

    The result may be a combination (`{"allOf": [...]}`, `{"anyOf": [...]}`) of every
    sub-schema that applies there; `$ref`s inside it still point into `root`.
    """
    node: Any = root
    for token in path:
        node = _child(root, node, token, max_refs)
        if node is None:
            return None
    return node


def _deref(root: Any, node: Any, max_refs: int) -> Any | None:
    """`node` with its `$ref` chain followed (local references only)."""
    for _ in range(max_refs):
        if not isinstance(node, dict) or "$ref" not in node:
            return node
        target = _pointer_target(root, node["$ref"])
        if target is None:
            return None
        others = {k: v for k, v in node.items() if k != "$ref"}
        if any(k not in ("description", "title", "$comment", "default", "examples") for k in others):
            return {"allOf": [target, others]}  # 2019-09+: $ref applies beside its siblings
        node = target
    return None  # a reference cycle, or a chain longer than anyone writes


def _pointer_target(root: Any, ref: Any) -> Any | None:
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None  # another document: never fetched
    node = root
    pointer = ref[1:]
    if not pointer:
        return node
    if not pointer.startswith("/"):
        return None  # a named anchor: not followed here
    for part in pointer[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _child(root: Any, node: Any, token: PathToken, max_refs: int) -> Any | None:
    node = _deref(root, node, max_refs)
    if node is True or node == {}:
        return {}
    if not isinstance(node, dict):
        return None
    parts: list[Any] = []
    own = _own_child(node, token)
    if own is not None:
        parts.append(own)
    for branch in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
        sub = _child(root, branch, token, max_refs)
        if sub is not None and sub != {}:
            parts.append(sub)
    alternatives = []
    for keyword in ("anyOf", "oneOf"):
        branches = node.get(keyword)
        if isinstance(branches, list):
            for branch in branches:
                sub = _child(root, branch, token, max_refs)
                if sub is not None:
                    alternatives.append(sub)
    if alternatives:
        parts.append(alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives})
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"allOf": parts}


def _own_child(node: dict, token: PathToken) -> Any | None:
    if isinstance(token, str):
        props = node.get("properties")
        if isinstance(props, dict) and token in props:
            return props[token]
        matched = []
        patterns = node.get("patternProperties")
        if isinstance(patterns, dict):
            for pattern, sub in patterns.items():
                try:
                    if re.search(pattern, token):
                        matched.append(sub)
                except re.error:
                    return None  # a pattern Python cannot read: which applies is unknown
        if matched:
            return matched[0] if len(matched) == 1 else {"allOf": matched}
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) or extra is True:
            return {} if extra is True else extra
        return None
    prefix = node.get("prefixItems")
    items = node.get("items")
    if isinstance(prefix, list):
        if token < len(prefix):
            return prefix[token]
        return items if isinstance(items, (dict, bool)) and items is not False else None
    if isinstance(items, list):  # draft 4-7 tuple form
        if token < len(items):
            return items[token]
        extra = node.get("additionalItems")
        return extra if isinstance(extra, dict) else ({} if extra is True else None)
    if isinstance(items, dict) or items is True:
        return {} if items is True else items
    return None


def anchored_schema(root: Any, sub: Any) -> dict:
    """A schema for one value inside `root`'s documents: `sub`, with the root's
    definitions beside it so its `$ref`s still resolve."""
    anchored: dict = {k: root[k] for k in _ROOT_KEYS if isinstance(root, dict) and k in root}
    defs = dict(anchored.get("$defs") or {})
    defs[ANCHOR_DEF] = sub
    anchored["$defs"] = defs
    anchored["$ref"] = f"#/$defs/{ANCHOR_DEF}"
    return anchored


def anchors(root: Any, prefix: bytes, *, max_depth: int, max_anchors: int) -> Iterator[tuple[OpenValue, dict]]:
    """(open value, schema for it) for the values enclosing the end of `prefix` whose
    sub-schema is known, innermost first, at most `max_anchors` of them. The root value
    is not among them: it is the document's own grammar, which the caller tried."""
    tried = 0
    for value in reversed(open_values(prefix, max_depth)):
        if not value.path or tried >= max_anchors:
            break
        sub = subschema_at(root, value.path)
        if sub is None or sub is False:
            continue
        tried += 1
        yield value, anchored_schema(root, sub)
