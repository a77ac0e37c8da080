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

# `format` values turned into regexes (ECMA-262 syntax, applied like `pattern`), read
# off the RFCs' grammars; where one is approximated, the comment says how. The official
# suite's optional format tests check them (tests/engine/test_jsonschema_formats.py).
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
# RFC 3339 full-date, months' lengths and leap years (the Gregorian rule) included.
_DATE = (
    r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    rf"|{_LEAP_YEAR}-02-29)"
)
# RFC 3339 full-time. A leap second (:60) is allowed at any minute: only 23:59:60 UTC is
# one, and with an offset that is a local time per offset (thousands of literals).
_TIME = (
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
# RFC 4291 / RFC 3986 IPv6address, every form of `::` (no zone index).
_IPV6 = (
    rf"(?:(?:{_H16}:){{6}}{_LS32}|::(?:{_H16}:){{5}}{_LS32}|(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}"
    rf"|(?:(?:{_H16}:)?{_H16})?::(?:{_H16}:){{3}}{_LS32}|(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}"
    rf"|(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}|(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}"
    rf"|(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}|(?:(?:{_H16}:){{0,6}}{_H16})?::)"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
# RFC 3987: the characters an IRI adds to a URI's unreserved ones, and to its query.
_UCSCHAR = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    + "".join(f"{chr(plane << 16)}-{chr((plane << 16) | 0xFFFD)}" for plane in range(1, 14))
    + "\U000e1000-\U000efffd"
)
_IPRIVATE = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"


def _uri_patterns(ucschar: str = "", iprivate: str = "") -> tuple[str, str]:
    """(URI, URI-reference) of RFC 3986, or with the characters of RFC 3987 the IRI and
    IRI-reference: exact, IP literals included."""
    # Inside a class, before its closing "-".
    unreserved = f"A-Za-z0-9._~{ucschar}"
    sub_delims = "!$&'()*+,;="
    pct = "%[0-9A-Fa-f]{2}"
    pchar = f"(?:[{unreserved}{sub_delims}:@-]|{pct})"
    segment_nz = f"{pchar}+"
    segments = f"(?:/{pchar}*)*"
    # An IPv4 address is also a reg-name (digits and dots), so it needs no branch here.
    # ABNF strings ignore case: "v" and "IPv6:" are either case.
    ip_literal = rf"\[(?:{_IPV6}|[Vv][0-9A-Fa-f]+\.[A-Za-z0-9._~{sub_delims}:-]+)\]"
    host = f"(?:{ip_literal}|(?:[{unreserved}{sub_delims}-]|{pct})*)"
    authority = f"(?:(?:[{unreserved}{sub_delims}:-]|{pct})*@)?{host}(?::[0-9]*)?"
    path_absolute = f"/(?:{segment_nz}{segments})?"
    tail = rf"(?:\?(?:{pchar}|[/?{iprivate}])*)?(?:#(?:{pchar}|[/?])*)?"
    absolute = f"[A-Za-z][A-Za-z0-9+.-]*:(?://{authority}{segments}|{path_absolute}|{segment_nz}{segments})?{tail}"
    no_scheme = f"(?:[{unreserved}{sub_delims}@-]|{pct})+{segments}"
    relative = f"(?://{authority}{segments}|{path_absolute}|{no_scheme})?{tail}"
    return f"^{absolute}$", f"^(?:{absolute}|{relative})$"


_URI, _URI_REFERENCE = _uri_patterns()
_IRI, _IRI_REFERENCE = _uri_patterns(_UCSCHAR, _IPRIVATE)
_JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
# RFC 6570 level 4. Its literals leave out `'`; an erratum (and the suite) puts it back.
_VARCHAR = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE = (
    rf"^(?:[!#$&'(-;=?@A-Z\[\]_a-z~{_UCSCHAR}{_IPRIVATE}]|%[0-9A-Fa-f]{{2}}"
    rf"|\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}})*$"
)
_NON_ASCII = "\u0080-\U0010ffff"


def _email_pattern(non_ascii: str = "") -> str:
    """RFC 5321 mailboxes with a dot-atom local part and a hostname domain or an IPv4
    address literal. Quoted local parts and IPv6 literals, valid but rare, are
    rejected: with a `"` in the pattern (an escape in JSON text) or an IPv6 address, the
    analysis of a `maxLength` beside it walks many times the states, once per schema,
    inside a mask. With `non_ascii`, RFC 6531's: those
    characters in the local part and in domain labels, whose IDNA rules (and length
    once encoded) are not checked."""
    atext = rf"[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~{non_ascii}-]"
    if non_ascii:
        label = rf"[A-Za-z0-9{non_ascii}](?:[A-Za-z0-9{non_ascii}-]*[A-Za-z0-9{non_ascii}])?"
    else:
        label = _LABEL
    return rf"^{atext}+(?:\.{atext}+)*@(?:{label}(?:\.{label})*|\[{_IPV4}\])$"


_FORMAT_PATTERNS: dict[str, str] = {
    "date": rf"^{_DATE}$",
    "time": rf"^{_TIME}$",
    "date-time": rf"^{_DATE}[Tt]{_TIME}$",
    # ISO 8601 durations as in RFC 3339 appendix A (exact).
    "duration": (
        rf"^P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{_DUR_TIME})?"
        rf"|{_DUR_TIME}|[0-9]+W)$"
    ),
    "email": _email_pattern(),
    "idn-email": _email_pattern(_NON_ASCII),
    # RFC 1123 labels. Not checked: the 253-character total (a length limit makes a
    # lexer state per count, and a product of them beside another format in a oneOf)
    # and A-labels (xn--), whose Punycode and IDNA rules need decoding.
    "hostname": rf"^{_LABEL}(?:\.{_LABEL})*$",
    "ipv4": rf"^{_IPV4}$",
    "ipv6": rf"^{_IPV6}$",
    "uuid": r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$",
    "uri": _URI,
    "uri-reference": _URI_REFERENCE,
    "iri": _IRI,
    "iri-reference": _IRI_REFERENCE,
    "uri-template": _URI_TEMPLATE,
    # RFC 6901, and the relative pointers of draft-bhutton-relative-json-pointer-00.
    "json-pointer": rf"^{_JSON_POINTER}$",
    "relative-json-pointer": rf"^(?:0|[1-9][0-9]*)(?:#|{_JSON_POINTER})$",
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
