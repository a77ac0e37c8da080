"""JSON Schema to grammar: completions that stay valid against the schema a file declares.

The compiler works in two stages, like llguidance's JSON front end.

1. *Normalise* (`compiler`). Every subschema becomes a small immutable IR (`ir`): a
   union of typed parts (`_Str`, `_Num`, `_Arr`, `_Obj`, `_Const`, ...) with all the
   keywords of one type folded into one node. Keywords at one level are a
   conjunction, so `allOf`, `$ref` siblings, `enum`, `anyOf`, `not`,
   `if`/`then`/`else` and `dependencies` are *intersected* into that form (types
   intersect, bounds tighten, properties merge). The root's `$schema` decides two
   rules: up to draft-07 a `$ref` stands for its whole object (its siblings are
   ignored), and in draft-03 and draft-04 an integer has no fraction part (`1.0` is
   one from draft-06 on). `not` uses the IR's complement where it can be expressed.
   `$ref` stays a lazy reference, so recursive schemas become recursive
   nonterminals; besides the document's own resources it reaches the drafts'
   metaschemas (bundled, never fetched), and `$dynamicRef` follows the dynamic scope. `oneOf` equals `anyOf` where its branches are provably disjoint (by
   type, constants, a required discriminator, string regexes); otherwise it is
   compiled exactly as the union of "branch i and no other branch" where those
   complements exist, and is an error where they do not (or, with one_of="any_of",
   the relaxation the editor takes: anyOf, warned of).
2. *Generate* (`generate`). The lexical parts become lexemes, with every constraint on
   a string folded into ONE lexeme regex (`strings`): `"` + body + `"`, where the body
   is the intersection (`&`, the lexer's extended syntax, flag `E`) of the length
   bound `(?:char){m,n}` and each `pattern`/`format`, read by the regex layer's ECMA
   dialect and written over the *JSON-encoded* text (`patterns`). Numbers and
   integers are lexemes too, with `minimum`/`maximum` compiled into exact digit-range
   regexes and `multipleOf` of any decimal k/10^c into a residue automaton for k's
   factor prime to 10 met (`&`) with the endings its other factor allows (`numeric`).
   Structure (objects, arrays, alternatives) becomes CFG rules; object members come
   in schema order with commas threaded through a small state machine that also
   counts members for minProperties/maxProperties (and array elements and each
   `contains` witness's matches, for minContains/maxContains), or, with key_order
   "any", in any order: a linear
   `{ member (, member)* }` whose key and close lexemes carry roles, and the parser
   refuses a key the object has written and a close before its required keys
   (`_Generator.object_any_order`, `parser.KeySets`). Grammar and rows stay linear in
   the keys; only a maxProperties/minProperties count past
   `Limits.max_object_states` is refused. Keys outside the listed ones fall in one
   class per set of pairwise overlapping patternProperties they may match, each its
   own key lexeme (patterns told apart by a literal prefix make one class each).

Output is valid JSON by construction. Strings whose content is constrained
(`pattern`, `format`, `enum`, exclusions, object keys) are produced in the
canonical encoding of `json.dumps(..., ensure_ascii=False)`, so a pattern is
checked on exactly one spelling of each string; unconstrained strings accept
every JSON escape. Where the schema asks for something a grammar cannot express
exactly, compilation fails with a `GrammarError` naming the keyword and its JSON
pointer, never silently accepting more than the schema allows. The only
relaxations are listed in `RELAXED_KEYWORDS`; each use is reported in the
grammar's `warnings` list. Bounds on the work come from `Limits`.

Stricter-than-schema choices (valid instances a grammar may still reject, never
the reverse): with key_order "schema", properties in schema order (`schema_ordered`
reorders an instance); bounded numbers allow exponents only where every digit
choice stays in range (Python's `1e-06` and `1e+16` forms are covered); integers are
written without exponent (`1.0` is the integer 1, `1e0` is refused); integral number
constants match with any zero fraction, others in their `json.dumps` spelling; string
constants and keys in canonical escapes; lone surrogate escapes are rejected.
Looser than the schema in one way, on documents no JSON parser reads alike: with
key_order "any" a key outside the listed properties (additional or pattern
properties) is not tracked, so writing it twice in one object is not refused.
"""

from .compiler import bundled_metaschema
from .entry import compile_json_schema, schema_ordered
from .keywords import (
    ANNOTATION_KEYWORDS,
    CANON_CHAR,
    GENERAL_CHAR,
    INTEGER_REGEX,
    NUMBER_REGEX,
    RELAXED_KEYWORDS,
    SUPPORTED_FORMATS,
    SUPPORTED_KEYWORDS,
    UNSUPPORTED_KEYWORDS,
)
from .numeric import integer_range_regex, multiple_of_regex, number_range_regex
from .patterns import pattern_to_regex
from .pointers import _SPELLING_ENCODER, _canon

__all__ = [
    "compile_json_schema",
    "schema_ordered",
    "bundled_metaschema",
    "SUPPORTED_KEYWORDS",
    "ANNOTATION_KEYWORDS",
    "UNSUPPORTED_KEYWORDS",
    "RELAXED_KEYWORDS",
    "SUPPORTED_FORMATS",
    "CANON_CHAR",
    "GENERAL_CHAR",
    "INTEGER_REGEX",
    "NUMBER_REGEX",
    "integer_range_regex",
    "number_range_regex",
    "multiple_of_regex",
    "pattern_to_regex",
    "_SPELLING_ENCODER",
    "_canon",
]
