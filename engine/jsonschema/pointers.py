"""JSON pointers, and JSON values compared and spelled as JSON Schema sees them."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from ..limits import GrammarError

# --------------------------------------------------------------------------------------
# JSON pointers
# --------------------------------------------------------------------------------------


def _ptr(path: tuple) -> str:
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


class _Where:
    """The pointer of `path`, spelled only if an error message formats it: most
    subschemas raise nothing, and spelling every pointer costs a share of a compile."""

    __slots__ = ("path",)

    def __init__(self, path: tuple):
        self.path = path

    def __str__(self) -> str:
        return _ptr(self.path)


def _decode_pointer(fragment: str, where: str) -> tuple:
    if fragment == "":
        return ()
    if not fragment.startswith("/"):
        raise GrammarError(f"$ref fragment {fragment!r} at {where} is not a JSON pointer")
    return tuple(p.replace("~1", "/").replace("~0", "~") for p in fragment[1:].split("/"))


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema sees it: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=False))
    return type(a) is type(b) and a == b


def _value_key(v: Any):
    """A hashable key equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, (int, float)):
        d = Decimal(v) if isinstance(v, int) else Decimal(repr(v))
        return ("num", d.normalize() if d else Decimal(0))
    if isinstance(v, list):
        return ("list", tuple(_value_key(x) for x in v))
    if isinstance(v, dict):
        return ("dict", frozenset((k, _value_key(x)) for k, x in v.items()))
    return ("other", repr(v))


# A string's `json.dumps(s, ensure_ascii=False)` spelling, without the encoder object
# json.dumps sets up per call (keys are spelled by the thousand).
_json_str = json.encoder.encode_basestring


# json.dumps builds an encoder per call unless every option is the default; enums of
# thousands of values are spelled one by one, so the encoders are made once.
_CANON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_SPELLING_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _canon(value: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, separators=(",", ":"))`."""
    return _CANON_ENCODER.encode(value)
