"""Keyword tables and the fixed regexes of JSON values: what the compiler enforces, what
it ignores and what it refuses, `format` patterns, JSON string characters and numbers."""

from __future__ import annotations

# --------------------------------------------------------------------------------------
# Keyword tables
# --------------------------------------------------------------------------------------

# Keywords the compiler enforces exactly (draft-04 to 2020-12 spellings).
SUPPORTED_KEYWORDS = frozenset(
    """type enum const properties required additionalProperties patternProperties items
    prefixItems additionalItems minItems maxItems anyOf oneOf allOf $ref minLength maxLength
    pattern format minimum maximum exclusiveMinimum exclusiveMaximum multipleOf
    minProperties maxProperties unevaluatedProperties unevaluatedItems not if then else
    dependentRequired dependentSchemas dependencies propertyNames contains minContains maxContains""".split()
)

# Annotations and containers: they describe or hold subschemas, never constrain. Other
# unknown keywords (x-*, markdownDescription, ...) are ignored too, as the spec says.
ANNOTATION_KEYWORDS = frozenset(
    """title description examples example default $comment $schema $id id deprecated readOnly
    writeOnly contentMediaType contentEncoding discriminator $anchor $dynamicAnchor
    $recursiveAnchor $vocabulary definitions $defs contentSchema""".split()
)

# JSON Schema vocabulary this compiler does not enforce. Meeting one is an error, so
# the grammar never accepts more than the schema.
UNSUPPORTED_KEYWORDS = frozenset("""$recursiveRef extends disallow divisibleBy""".split())

# Keywords that are deliberately *not* enforced. Every use adds a line to the grammar's
# `warnings`; `strict=True` turns each into a GrammarError instead.
RELAXED_KEYWORDS: dict[str, str] = {
    "uniqueItems": "uniqueItems: true is not enforced (a context-free grammar cannot check that array items "
    "differ; only with lenient=True, refused otherwise)",
    "format": "format values not in SUPPORTED_FORMATS are not enforced "
    "(JSON Schema makes format an annotation by default)",
    "oneOf": "a oneOf whose branches can be neither proved exclusive nor complemented is compiled as anyOf "
    "(only with one_of='any_of', refused otherwise)",
}

# `format` values turned into regexes (ECMA-262 syntax, applied like `pattern`).
# Approximations are noted; each accepts only strings of the right shape.
# Month lengths are checked; February always allows the 29th (leap years are not).
_DATE = (
    r"[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-9]))"
)
# RFC 3339 full-time; a leap second (:60) is allowed at any minute.
_TIME = (
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_FORMAT_PATTERNS: dict[str, str] = {
    "date": rf"^{_DATE}$",
    "time": rf"^{_TIME}$",
    "date-time": rf"^{_DATE}[Tt]{_TIME}$",
    # ISO 8601 durations as in RFC 3339 appendix A (exact).
    "duration": (
        rf"^P(?:(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{_DUR_TIME})?"
        rf"|{_DUR_TIME}|[0-9]+W)$"
    ),
    # A subset of RFC 5321: dot-atom local part, hostname domain (no quoted locals, no IP literals).
    "email": rf"^{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})*$",
    # RFC 1123 labels; the 253-character total is not checked.
    "hostname": rf"^{_LABEL}(?:\.{_LABEL})*$",
    "ipv4": rf"^{_IPV4}$",
    # RFC 4291 text forms incl. embedded IPv4; no zone index.
    "ipv6": (
        rf"^(?:(?:{_H16}:){{7}}{_H16}|(?:{_H16}:){{1,7}}:|(?:{_H16}:){{1,6}}:{_H16}"
        rf"|(?:{_H16}:){{1,5}}(?::{_H16}){{1,2}}|(?:{_H16}:){{1,4}}(?::{_H16}){{1,3}}"
        rf"|(?:{_H16}:){{1,3}}(?::{_H16}){{1,4}}|(?:{_H16}:){{1,2}}(?::{_H16}){{1,5}}"
        rf"|{_H16}:(?::{_H16}){{1,6}}|:(?:(?::{_H16}){{1,7}}|:)"
        rf"|(?:{_H16}:){{6}}{_IPV4}|(?:{_H16}:){{0,5}}:{_IPV4}|::(?:{_H16}:){{0,5}}{_IPV4})$"
    ),
    "uuid": r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$",
    # RFC 3986 shape: a scheme, then URI characters and %-escapes; the component
    # structure after the scheme is not checked.
    "uri": r"^[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9._~!$&'()*+,;=:@/?#\[\]-]|%[0-9A-Fa-f]{2})*$",
}
SUPPORTED_FORMATS = frozenset(_FORMAT_PATTERNS)

_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# In-place applicators: beside them, unevaluated* would depend on which subschemas matched.
_APPLICATORS = ("allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "not", "if", "dependentSchemas", "dependencies")
_TYPE_KIND = {
    "null": "null",
    "boolean": "bool",
    "integer": "num",
    "number": "num",
    "string": "str",
    "array": "arr",
    "object": "obj",
}
_ALL_KINDS = frozenset(_TYPE_KIND.values())
# Every keyword that _typed (and the per-type methods under it) reads besides `type`.
_TYPE_KEYWORDS = frozenset(
    """minimum maximum exclusiveMinimum exclusiveMaximum multipleOf minLength maxLength pattern format
    prefixItems items additionalItems unevaluatedItems minItems maxItems uniqueItems contains minContains
    maxContains properties patternProperties additionalProperties unevaluatedProperties required
    minProperties maxProperties propertyNames""".split()
)

# Keywords holding subschemas, by shape: "map" (name -> schema), "list" (a schema or a
# list of them), "one" (a schema).
_SUBSCHEMA_SHAPE = {
    **dict.fromkeys(
        ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"), "map"
    ),
    **dict.fromkeys(("items", "prefixItems", "allOf", "anyOf", "oneOf"), "list"),
    **dict.fromkeys(
        (
            "additionalProperties",
            "additionalItems",
            "not",
            "if",
            "then",
            "else",
            "contains",
            "propertyNames",
            "unevaluatedProperties",
            "unevaluatedItems",
            "contentSchema",
        ),
        "one",
    ),
}

# A union with more string constants than this gets them as one lexeme.
ENUM_LEXEME_THRESHOLD = 16

# JSON string characters as regexes over the encoded text. GENERAL: any escape JSON
# allows (surrogate escapes only as a valid pair, so a pair counts as one character).
# CANON: the one spelling `json.dumps(ensure_ascii=False)` produces.
CANON_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))'
GENERAL_CHAR = (
    r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CeEfF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}'
    r"|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}))"
)
NUMBER_REGEX = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
INTEGER_REGEX = r"-?(?:0|[1-9][0-9]*)"
_WHITESPACE = r"[ \t\n\r]+"
