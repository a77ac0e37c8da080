"""Normalisation: schema documents ($ref, $id, anchors) to the IR."""

from __future__ import annotations

import math
import time
import urllib.parse
from decimal import Decimal
from fractions import Fraction
from typing import Any, Mapping

from ..limits import (
    BUDGET_ERRORS,
    CompileTimeExceeded,
    GrammarError,
    GrammarLimitExceeded,
    LimitExceeded,
    Limits,
    check_compile_budget,
)
from ..regex import MAX_REPEAT_COUNT, ExprSet, LazyDFA
from ..regex import term as T
from ..regex.term import Term
from .ir import (
    _BOOL,
    _NULL,
    ANY,
    ANY_PARTS_IN_ORDER,
    NOTHING,
    _apart,
    _Arr,
    _BoolT,
    _Const,
    _Counted,
    _elem,
    _kind,
    _make_arr,
    _make_num,
    _make_obj,
    _make_str,
    _min_opt,
    _Node,
    _NotRef,
    _NullT,
    _Num,
    _Obj,
    _Ref,
    _Str,
    _str_within_excluded,
    _Union,
    _union,
    contains_entry,
    stable_order,
    witness_bounds,
)
from .keywords import (
    _ALL_KINDS,
    _APPLICATORS,
    _FORMAT_PATTERNS,
    _SUBSCHEMA_SHAPE,
    _TYPE_KEYWORDS,
    _TYPE_KIND,
    _TYPES,
    RELAXED_KEYWORDS,
    SUPPORTED_FORMATS,
    UNSUPPORTED_KEYWORDS,
)
from .numeric import _num_regex
from .patterns import pattern_to_regex
from .pointers import (
    _canon,
    _decode_pointer,
    _json_equal,
    _json_str,
    _ptr,
    _value_key,
    _Where,
)
from .strings import _string_body, quoted

# unevaluatedProperties beside anyOf, oneOf and if: at most this many combinations of
# branches an instance may match, each its own object schema in a union; anyOf asks for
# every set of its branches, so at most this many of them.
MAX_EVALUATIONS = 64
MAX_ANY_OF_EVALUATED = 5

# A way of evaluating (`_Compiler._evaluations`) that evaluates nothing, and one that
# only asks for a condition.
_NO_EVALUATION = (ANY, (), (), False, 0, False, ())


def _condition(cond: _Node) -> tuple:
    return (cond, (), (), False, 0, False, ())


# How deep a complement may descend before a reference in it is complemented lazily
# (`_NotRef`): a recursive schema would otherwise descend until `negate` gives up.
LAZY_COMPLEMENT_DEPTH = 4

# How many members an object schema may ask for besides its own (`_Obj.some`): the
# grammar tracks which are met, a chain of member states per set of them (four for
# two). One is what an object schema's complement asks; two, a oneOf branch beside
# the complements of two others.
MAX_OBJECT_WITNESSES = 2

# --------------------------------------------------------------------------------------
# Compiler: schema documents -> IR
# --------------------------------------------------------------------------------------


def _numbered_draft(schema_uri: Any) -> int | None:
    """3, 4, 6 or 7 for a `$schema` naming draft-03 to draft-07; None for the drafts
    named by year (2019-09, 2020-12) and for a schema that names none."""
    if isinstance(schema_uri, str):
        for n in (3, 4, 6, 7):
            if f"draft-0{n}" in schema_uri:
                return n
    return None


# Keywords a subschema rarely holds, looked for in one set test: refused ones and
# $dynamicRef.
_RARE_KEYWORDS = UNSUPPORTED_KEYWORDS | {"$dynamicRef"}

# Calls of `_Compiler._tick` between two looks at the clock.
_TICKS = 256

# Meets `_Compiler.intersect` keeps per compilation before it starts over.
_MAX_MEETS_KEPT = 100_000


class NeedsDynamicScope(Exception):
    """A $dynamicRef met by a compiler that does not track the dynamic scope: the caller
    compiles again with `dynamic_scope=True`."""


def bundled_metaschema(uri: str) -> Any | None:
    """The metaschema of a JSON Schema draft, or a vocabulary of one, by its URI, from
    the jsonschema-specifications package (offline: these are what schemas `$ref` by
    a json-schema.org URI); None for any other URI."""
    from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]

    resource = REGISTRY.get(uri)
    return None if resource is None else resource.contents


def _join(base: str, ref: str) -> str:
    """`ref` resolved against the base URI `base`. A fragment alone joins any base:
    urllib joins only schemes it knows to be hierarchical, and a `urn:` $id is not."""
    if ref.startswith("#"):
        return base.split("#", 1)[0] + ref
    return urllib.parse.urljoin(base, ref)


class _Compiler:
    def __init__(
        self,
        schema: Any,
        *,
        strict: bool,
        limits: Limits,
        lenient: bool = False,
        formats: str = "assert",
        one_of: str = "exact",
        dynamic_scope: bool = False,
        documents: Mapping[str, Any] | None = None,
        members_asked: bool = True,
        lazy_complements: bool = True,
    ):
        self.doc = schema
        # Whether a reference's complement may be worked out when unfolded (`_NotRef`),
        # which is what recursive schemas need; off for a second try where a schema that
        # made one is refused (`compile_json_schema`): a oneOf then falls back as before.
        self.lazy_complements = lazy_complements
        self.made_lazy_complements = False
        # Whether object schemas may ask for a member (`_Obj.some`, the complement of a
        # closed object): the grammar writes them with keys in any order only.
        self.members_asked = members_asked
        # Other schema documents by URI, for references beyond this one.
        self.documents = documents or {}
        self.strict = strict
        self.lenient = lenient
        self.one_of = one_of
        self.formats = formats
        self.limits = limits
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        # Base reference name -> (schema value, base URI, path).
        self.targets: dict[str, tuple[Any, str, tuple]] = {}
        self.bodies: dict[str | tuple, _Node] = {}
        self.in_progress: set[str] = set()
        self.unfolding: set = set()
        self.synthetic: dict[frozenset, _Node] = {}
        self.depth = 0
        self.steps = 0
        self.validating = 0
        self._exprs = None
        # A term, or a pair of terms (a pair's first item is a tuple, a term's a str).
        self._empty_cache: dict[Term | tuple[Term, Term], bool] = {}
        # Meets of reference-free nodes: the complements of overlapping oneOf branches
        # meet the same pairs of subschemas many times over.
        self._meets: dict[tuple[_Node, _Node], _Node] = {}
        self._dfas: dict[str, Any] = {}
        schema_uri = schema.get("$schema", "") if isinstance(schema, dict) else ""
        draft = _numbered_draft(schema_uri)
        self.honor_id = not isinstance(schema_uri, str) or draft in (3, 4)
        # Up to draft-07 a `$ref` stands for the whole schema object: its siblings are
        # ignored ("All other properties in a $ref object MUST be ignored"); from
        # 2019-09 on `$ref` is one applicator beside the others.
        self.ref_overrides_siblings = draft is not None
        # Before draft-06 an integer is spelled without a fraction: `1.0` is not one.
        self.zero_fraction_integers = draft not in (3, 4)
        # Resource URIs (no fragment) and anchors -> (schema, base, path).
        self.resources: dict[str, tuple[Any, str, tuple]] = {}
        self.anchors: dict[str, tuple[Any, str, tuple]] = {}
        self.base_of: dict[tuple, str] = {}
        root_base = self._own_id(schema, "") if isinstance(schema, dict) else ""
        self.root_base = root_base
        self.resources[root_base] = (schema, root_base, ())
        self.resources.setdefault("", (schema, root_base, ()))
        # Indexed at the first $ref: most schemas have none, and until then normalisation
        # works out each subschema's base on its way down, as the index would.
        self._indexed = False
        # $dynamicRef: a compiler that meets one without tracking the dynamic scope asks
        # for a fresh one that does (`NeedsDynamicScope`), so schemas without pay nothing.
        # The scope is kept as what a $dynamicRef reads of it: per $dynamicAnchor name,
        # the outermost resource in scope that defines it (its target's name); every name,
        # since a document indexed later (a remote, a metaschema) may refer to it. A
        # reference compiled under a scope carries it in its name, so one target has a
        # body per scope it is met in.
        self.dynamic_scope = dynamic_scope
        self._ticks = _TICKS
        self._deadline = time.monotonic() + limits.max_compile_seconds
        self.dyn: tuple[tuple[str, str], ...] = ()
        self.ref_scopes: dict[str, tuple[tuple[str, str], ...]] = {}
        self.dynamic_anchors: dict[str, dict[str, tuple[Any, str, tuple]]] = {}
        if dynamic_scope:
            self._indexed = True
            self._index(self.doc, self.root_base, ())
            # Every subschema enters its resource: schemas without $dynamicRef keep the
            # plain `norm`, untouched by the scope.
            self.norm = self._norm_in_scope  # type: ignore[method-assign]

    def exprs(self):
        """The process-wide expression set the lexer will use (regex.ExprSet.shared)."""
        if self._exprs is None:
            self._exprs = ExprSet.shared(self.limits)
        return self._exprs

    def regex_empty(self, regex: Term, refuse: str = "") -> bool:
        """Whether a regex term denotes the empty language. Unsure (past
        Limits.max_emptiness_states): False, or with `refuse` (what the regex is for) a
        refusal: the lexer would face the same search at the first mask."""
        hit = self._empty_cache.get(regex)
        if hit is not None:
            return hit
        exprs = self.exprs()
        bound = self.limits.max_emptiness_states
        try:
            empty = exprs.is_empty(exprs.build(regex), bound)
        except BUDGET_ERRORS:
            raise
        except LimitExceeded:
            if refuse:
                raise GrammarLimitExceeded(
                    "max_emptiness_states", bound, f"{refuse}: too large to decide whether any string fits"
                ) from None
            empty = False
        self._empty_cache[regex] = empty
        return empty

    def note_has_a_string(self, regex: Term) -> None:
        """Tells the expression set the lexer will use that `regex` surely has a string
        (the caller found one without a search), so the lexer need not search for one."""
        exprs = self.exprs()
        try:
            exprs.note_not_empty(exprs.build(regex))
        except BUDGET_ERRORS:
            raise
        except (LimitExceeded, GrammarError):
            pass  # the lexer builds it again and says what went wrong, in its lexeme

    def regexes_disjoint(self, a: Term, b: Term) -> bool:
        """Whether two regex terms share no string (unsure: False): the emptiness of
        `a & b`, with each side built on its own (oneOf compares every pair of
        branches)."""
        key = (a, b)
        hit = self._empty_cache.get(key)
        if hit is not None:
            return hit
        exprs = self.exprs()
        try:
            empty = exprs.is_empty(
                exprs.and_(exprs.build(a), exprs.build(b)),
                self.limits.max_emptiness_states,
            )
        except BUDGET_ERRORS:
            raise
        except LimitExceeded:
            empty = False
        self._empty_cache[key] = empty
        return empty

    def pattern_matches(self, pattern: str, text: str) -> bool:
        """Whether a (translated) pattern finds a match in `text`, in linear time."""
        pr = pattern_to_regex(pattern)
        if pr.expr is None:
            return False
        if pr.literals is not None:
            return pr.matches_literally(text)
        dfa = self._dfas.get(pattern)
        if dfa is None:
            exprs = self.exprs()
            dfa = self._dfas[pattern] = LazyDFA(exprs, exprs.build(pr.expr))
        return dfa.matches(_json_str(text)[1:-1].encode("utf-8"))

    # Warnings --------------------------------------------------------------------
    def union(self, parts) -> _Node:
        r = _union(parts)
        if isinstance(r, _Union):
            merged = self._merge_objects(r.parts)
            if merged is not None:
                r = _union(merged)
        if isinstance(r, _Union) and len(r.parts) > self.limits.max_union_parts:
            raise LimitExceeded(
                "max_union_parts", self.limits.max_union_parts, "anyOf/allOf expansion has too many alternatives"
            )
        return r

    def _merge_objects(self, parts: tuple) -> list[_Node] | None:
        """`parts` with every two objects that differ only in one listed property's
        schema made one, that property's schema their union; None where none do.
        Exact: such objects agree on every other member, so an instance is in either
        exactly when that property, where present, is in one of the two schemas. The
        complements a oneOf of objects without required keys needs (an address per
        country, none required) distribute into thousands of objects that differ one
        property at a time; merged as they are made, they stay a few."""
        # Only objects listing the same names can merge, and most unions have none such:
        # told cheaply by their number and their first and last names.
        outlines: set[tuple] = set()
        for p in parts:
            if isinstance(p, _Obj) and p.props:
                outline = (len(p.props), p.props[0][0], p.props[-1][0])
                if outline in outlines:
                    break
                outlines.add(outline)
        else:
            return None
        work: list[_Node | None] = list(parts)
        merged = True
        while merged:
            # A pass merges what it can; an object merged into is stale for the rest of
            # the pass (its index keys name its old schemas), so the next pass sees it.
            merged = False
            seen: dict[tuple, int] = {}
            stale: set[int] = set()
            for at, p in enumerate(work):
                if not isinstance(p, _Obj) or not p.props or at in stale:
                    continue
                names = tuple(k for k, _ in p.props)
                if len(set(names)) != len(names):
                    continue
                shape = hash((names, p.patterns, p.additional, p.required, p.min_props, p.max_props, p.names, p.some))
                values = [v for _, v in p.props]
                # Per property i, a hash of the other properties' schemas, from running
                # hashes of the prefixes and suffixes (linear in the properties, where
                # tuples of the others would be quadratic); a hit is checked whole.
                n = len(values)
                before = [0] * (n + 1)
                after = [0] * (n + 1)
                for j in range(n):
                    before[j + 1] = hash((before[j], values[j]))
                    after[n - 1 - j] = hash((values[n - 1 - j], after[n - j]))
                keys = [(shape, i, before[i], after[i + 1]) for i in range(n)]
                hit = None
                for i, k in enumerate(keys):
                    other = seen.get(k)
                    if other is not None and other not in stale:
                        q = work[other]
                        assert isinstance(q, _Obj)
                        same_others = (q.props[:i], q.props[i + 1 :]) == (p.props[:i], p.props[i + 1 :])
                        if same_others and q.props[i][0] == names[i] and _same_frame(p, q):
                            hit = i, other, q
                            break
                if hit is None:
                    # Registered only now: an object merged away leaves no key behind.
                    for k in keys:
                        seen[k] = at
                    continue
                i, other, q = hit
                props = list(q.props)
                props[i] = (names[i], self.union([q.props[i][1], values[i]]))
                work[other] = _make_obj(
                    tuple(props), p.patterns, p.additional, p.required, p.min_props, p.max_props, p.names, p.some
                )
                work[at] = None
                stale.add(other)
                merged = True
        kept = [p for p in work if p is not None]
        return kept if len(kept) != len(work) else None

    def make_arr(self, prefix, items, lo, hi, contains=(), unique: bool = False) -> _Node:
        return _make_arr(prefix, items, lo, hi, contains, max_contains=self.limits.max_contains, unique=unique)

    def finite_values(self, node: _Node, depth: int = 0) -> list[Any] | None:
        """The JSON values `node` admits when they are few (at most
        Limits.max_unique_values), else None: constants, booleans, null."""
        if depth > 16:
            return None
        if isinstance(node, _Ref):
            try:
                node = self.unfold(node)
            except BUDGET_ERRORS:
                raise
            except GrammarError:
                return None  # a reference still being unfolded: not known here
            return self.finite_values(node, depth + 1)
        if isinstance(node, _Const):
            return [node.value]
        if isinstance(node, _BoolT):
            return [False, True]
        if isinstance(node, _NullT):
            return [None]
        if isinstance(node, _Union):
            found: dict = {}
            for part in node.parts:
                values = self.finite_values(part, depth + 1)
                if values is None:
                    return None
                for v in values:
                    found.setdefault(_value_key(v), v)
                if len(found) > self.limits.max_unique_values:
                    return None
            return list(found.values())
        return None

    def note(self, msg: str) -> None:
        """A warning about a stricter-than-asked choice (it never accepts more), so one
        that strict mode lets through."""
        if msg not in self._warned:
            self._warned.add(msg)
            self.warnings.append(msg)

    def relax(self, keyword: str, path: tuple, detail: str = "") -> None:
        msg = f"{keyword} at {_ptr(path)}: {detail or RELAXED_KEYWORDS[keyword]}"
        if self.strict:
            raise GrammarError(f"{msg} (strict mode)")
        if msg not in self._warned:
            self._warned.add(msg)
            self.warnings.append(msg)

    # $id / $ref -------------------------------------------------------------------
    def _own_id(self, s: dict, base: str) -> str:
        ident = s.get("$id")
        if not isinstance(ident, str) and self.honor_id and isinstance(s.get("id"), str):
            ident = s.get("id")
        if not isinstance(ident, str) or ident.startswith("#"):
            return base
        return _join(base, ident).split("#", 1)[0] if base else ident.split("#", 1)[0]

    def _index(self, s: Any, base: str, path: tuple, depth: int = 0) -> None:
        """Record the base URI of every subschema, its `$id`s and anchors."""
        if depth > self.limits.max_schema_depth:
            raise LimitExceeded(
                "max_schema_depth", self.limits.max_schema_depth, f"schema nested too deeply at {_ptr(path)}"
            )
        if not isinstance(s, dict):
            return
        new_base = self._own_id(s, base)
        if new_base != base:
            self.resources.setdefault(new_base, (s, new_base, path))
        base = new_base
        self.base_of[path] = base
        for key in ("$id", "id") if self.honor_id else ("$id",):
            v = s.get(key)
            if isinstance(v, str) and v.startswith("#") and len(v) > 1:
                self.anchors.setdefault(base + v, (s, base, path))
        # A $dynamicAnchor is also a plain-name fragment that $ref resolves as it would
        # an $anchor; only $dynamicRef resolves it by the dynamic scope.
        for key in ("$anchor", "$dynamicAnchor"):
            anchor = s.get(key)
            if isinstance(anchor, str):
                self.anchors.setdefault(base + "#" + anchor, (s, base, path))
                if key == "$dynamicAnchor" and self.dynamic_scope:
                    # Only a compile that tracks the dynamic scope reads these.
                    self.dynamic_anchors.setdefault(base, {}).setdefault(anchor, (s, base, path))
        for key, v in s.items():
            shape = _SUBSCHEMA_SHAPE.get(key)
            if shape is None:
                continue
            if shape == "map":
                if isinstance(v, dict):
                    for k2, v2 in v.items():
                        self._index(v2, base, path + (key, k2), depth + 1)
            elif shape == "list" and isinstance(v, list):
                for i, v2 in enumerate(v):
                    self._index(v2, base, path + (key, i), depth + 1)
            else:
                self._index(v, base, path + (key,), depth + 1)

    def _resolve(self, ref: str, base: str, path: tuple) -> str:
        """The reference name for `$ref` (registering its target)."""
        if not self._indexed:
            self._indexed = True
            self._index(self.doc, self.root_base, ())
        where = _ptr(path)
        absolute = _join(base, ref) if base else ref
        uri, _, fragment = absolute.partition("#")
        fragment = urllib.parse.unquote(fragment)
        target = None
        if fragment and not fragment.startswith("/"):
            target = self.anchors.get(uri + "#" + fragment)
            if target is None and uri not in self.resources and self._bundled(uri) is not None:
                target = self.anchors.get(uri + "#" + fragment)
            if target is None:
                raise GrammarError(f"$ref {ref!r} at {where}: anchor {fragment!r} not found")
            doc, doc_base, doc_path = target
            name = _ptr(doc_path)
            self.targets.setdefault(name, (doc, doc_base, doc_path))
            return name
        res = self.resources.get(uri)
        if res is None:
            if uri in ("", self.root_base) or not urllib.parse.urlparse(ref).netloc and ref.startswith("#"):
                res = self.resources[self.root_base]
            else:
                res = self._bundled(uri)
            if res is None:
                raise GrammarError(
                    f"$ref {ref!r} at {where}: cannot resolve {uri!r} "
                    "(only references into this document, the documents given and the JSON Schema metaschemas are "
                    "supported)"
                )
        pointer = _decode_pointer(fragment, where)
        found = self._follow(res, pointer)
        if found is None and res[2] != ():
            # Fall back to the document root (common in schemas with decorative ids).
            found = self._follow(self.resources[self.root_base], pointer)
        if found is None:
            raise GrammarError(f"$ref {ref!r} at {where}: {fragment or '#'} not found in the document")
        node, doc_path = found
        name = _ptr(doc_path)
        self.targets.setdefault(name, (node, self.base_of.get(doc_path, res[1]), doc_path))
        return name

    def _bundled(self, uri: str) -> tuple[Any, str, tuple] | None:
        """The resource of a document the caller gave at `uri`, or of a metaschema (or
        one of its vocabularies), indexed under a path of its own; None for any other
        URI (nothing is fetched)."""
        doc = self.documents.get(uri)
        if doc is None:
            doc = bundled_metaschema(uri)
        if doc is None:
            return None
        path = (f"<{uri}>",)
        res = self.resources[uri] = (doc, uri, path)
        self._index(doc, uri, path)
        return res

    def _dynamic_target(self, ref: Any, base: str, path: tuple) -> str:
        """The reference name a `$dynamicRef` stands for here: resolved as `$ref` would,
        then, where that lands on a `$dynamicAnchor` of the fragment's name, on the one
        of the outermost resource in the dynamic scope that defines the name."""
        if not self.dynamic_scope:
            raise NeedsDynamicScope()
        if not isinstance(ref, str):
            raise GrammarError(f"$dynamicRef at {_ptr(path)} must be a string")
        name = self._resolve(ref, base, path)
        fragment = urllib.parse.unquote(ref.partition("#")[2])
        if fragment and not fragment.startswith("/"):
            schema = self.targets[name][0]
            if isinstance(schema, dict) and schema.get("$dynamicAnchor") == fragment:
                return dict(self.dyn).get(fragment, name)
        return name

    @staticmethod
    def _follow(res: tuple, pointer: tuple):
        node, _, doc_path = res
        for tok in pointer:
            if isinstance(node, dict) and tok in node:
                node = node[tok]
            elif isinstance(node, list) and tok.isdigit() and int(tok) < len(node):
                tok = int(tok)
                node = node[tok]
            else:
                return None
            doc_path = doc_path + (tok,)
        return node, doc_path

    def body(self, name: str) -> _Node:
        b = self.bodies.get(name)
        if b is not None:
            return b
        if name in self.in_progress:
            raise GrammarError(f"circular $ref: {name} refers to itself without any structure in between")
        schema, base, path = self.targets[name]
        self.in_progress.add(name)
        outer = self.dyn
        self.dyn = self.ref_scopes.get(name, ())
        try:
            b = self.norm(schema, base, path)
        finally:
            self.dyn = outer
            self.in_progress.discard(name)
        self.bodies[name] = b
        return b

    def unfold(self, r: _Ref) -> _Node:
        """The IR a reference stands for (computed once per reference)."""
        b = self.bodies.get(r.key)
        if b is not None:
            return b
        if r.key in self.unfolding:
            raise GrammarError(
                f"circular $ref: {', '.join(sorted(a for a in r.atoms if isinstance(a, str)))} "
                "refers to itself without any structure in between"
            )
        self.unfolding.add(r.key)
        try:
            acc = self._unfold_atoms(r)
        finally:
            self.unfolding.discard(r.key)
        self.bodies[r.key] = acc
        return acc

    def _unfold_atoms(self, r: _Ref) -> _Node:
        acc: _Node = ANY
        # Named references first, in name order, then nodes in a stable order, so the
        # result does not depend on set order.
        for atom in sorted(r.atoms, key=lambda a: (0, a) if isinstance(a, str) else (1, stable_order(a))):
            if isinstance(atom, str):
                part = self.body(atom)
            elif isinstance(atom, _NotRef):
                part = self.negate(self.body(atom.name), f"the complement of {atom.name}")
            else:
                part = atom
            acc = self.intersect(acc, part)
        return acc

    def root(self) -> _Node:
        return self.norm(self.doc, self.root_base, ())

    # Normalisation -------------------------------------------------------------------
    def norm(self, s: Any, base: str, path: tuple) -> _Node:
        self.depth += 1
        try:
            if self.depth > self.limits.max_schema_depth:
                raise LimitExceeded(
                    "max_schema_depth", self.limits.max_schema_depth, f"schema nested too deeply at {_ptr(path)}"
                )
            return self._norm(s, base, path)
        except RecursionError:
            # Python's stack ran out before max_schema_depth did (each level takes
            # several frames): the same refusal, with the place.
            raise GrammarLimitExceeded(
                "max_schema_depth", self.limits.max_schema_depth, f"schema nested too deeply at {_ptr(path)}"
            ) from None
        except LimitExceeded as e:
            # The innermost subschema names the place (the limits deep inside know none).
            if not isinstance(e, GrammarError) and getattr(e, "schema_path", None) is None:
                e.schema_path = _ptr(path)
            raise
        finally:
            self.depth -= 1

    def _norm_in_scope(self, s: Any, base: str, path: tuple) -> _Node:
        """`norm` where the dynamic scope is tracked: inside `s`'s resource, and back
        out of it after."""
        outer = self.dyn
        try:
            if isinstance(s, dict):
                known = self.base_of.get(path)
                self._entered(known if known is not None else self._own_id(s, base))
            return _Compiler.norm(self, s, base, path)
        finally:
            self.dyn = outer

    def _entered(self, base: str) -> None:
        """The dynamic scope once evaluation is inside the resource `base`: its dynamic
        anchors for the names no outer resource in scope defines."""
        anchors = self.dynamic_anchors.get(base)
        if not anchors:
            return
        have = {n for n, _ in self.dyn}
        added = []
        for anchor, target in anchors.items():
            if anchor not in have:
                name = _ptr(target[2])
                self.targets.setdefault(name, target)
                added.append((anchor, name))
        if added:
            self.dyn = tuple(sorted(self.dyn + tuple(added)))

    def _scoped(self, name: str) -> str:
        """The reference name for target `name` met under the current dynamic scope."""
        if not self.dyn:
            return name
        scoped = name + " (dynamic scope: " + ", ".join(f"{a} -> {t}" for a, t in self.dyn) + ")"
        if scoped not in self.ref_scopes:
            if len(self.ref_scopes) >= self.limits.max_synthetic_refs:
                raise GrammarLimitExceeded(
                    "max_synthetic_refs", self.limits.max_synthetic_refs, "$dynamicRef: too many dynamic scopes"
                )
            self.ref_scopes[scoped] = self.dyn
            self.targets.setdefault(scoped, self.targets[name])
        return scoped

    def _tick(self) -> None:
        """Every _TICKS new meets (`intersect` counts down), the caller's CompileBudget and
        the compile's own clock (Limits.max_compile_seconds): a schema compiled outside
        any budget is bounded too, for the price of a countdown."""
        self._ticks = _TICKS
        check_compile_budget()
        if time.monotonic() > self._deadline:
            seconds = self.limits.max_compile_seconds
            raise CompileTimeExceeded("max_compile_seconds", seconds, f"compilation took longer than {seconds:g} s")

    def _norm(self, s: Any, base: str, path: tuple) -> _Node:
        check_compile_budget()
        if s is True:
            return ANY
        if s is False:
            return NOTHING
        if not isinstance(s, dict):
            raise GrammarError(f"schema at {_ptr(path)} must be an object or a boolean, not {type(s).__name__}")
        known = self.base_of.get(path)
        base = known if known is not None else self._own_id(s, base)
        s = self._in_force(s)
        dynamic_ref = False
        if not _RARE_KEYWORDS.isdisjoint(s):
            for key in s:
                if key in UNSUPPORTED_KEYWORDS:
                    raise GrammarError(f"unsupported keyword {key!r} at {_ptr(path)}")
            dynamic_ref = "$dynamicRef" in s
        closed: _Node | None = None
        for key in ("unevaluatedProperties", "unevaluatedItems"):
            if key not in s or s[key] is True:
                continue
            applicators = [k for k in _APPLICATORS if k in s]
            if applicators:
                part = self._closed_beside_applicators(s, base, path, key)
                if part is None:
                    raise GrammarError(
                        f"unsupported keyword {key!r} at {_ptr(path)} (not beside dependentSchemas or "
                        f"$dynamicRef, nor where its applicators ({', '.join(applicators)}) combine their "
                        f"branches in more than {MAX_EVALUATIONS} ways or meet patternProperties twice)"
                    )
                closed = part if closed is None else self.intersect(closed, part)
                s = {k: v for k, v in s.items() if k != key}

        node = self._typed(s, base, path)
        if closed is not None:
            node = self.intersect(node, closed)
        if "enum" in s or "const" in s:
            values = []
            if "enum" in s:
                if not isinstance(s["enum"], list):
                    raise GrammarError(f"enum at {_ptr(path)} must be an array")
                values = list(s["enum"])
            self._check_value_count(values, s.get("const"), path)
            if "const" in s:
                values = [v for v in values if _json_equal(v, s["const"])] if "enum" in s else [s["const"]]
            kept = []
            seen = set()
            for v in values:
                key = _value_key(v)
                if key not in seen and self.accepts(node, v):
                    seen.add(key)
                    kept.append(v)
            node = self.union(_Const(v) for v in kept)
        if "$ref" in s:
            ref = s["$ref"]
            if not isinstance(ref, str):
                raise GrammarError(f"$ref at {_ptr(path)} must be a string")
            name = self._resolve(ref, base, path)
            node = self.intersect(node, _Ref(frozenset([self._scoped(name) if self.dyn else name])))
        if dynamic_ref:
            node = self.intersect(
                node, _Ref(frozenset([self._scoped(self._dynamic_target(s["$dynamicRef"], base, path))]))
            )
        if "allOf" in s:
            for i, sub in enumerate(self._schema_list(s, "allOf", path)):
                node = self.intersect(node, self.norm(sub, base, path + ("allOf", i)))
        if "anyOf" in s:
            subs = self._schema_list(s, "anyOf", path)
            node = self.intersect(
                node, self.union(self.norm(sub, base, path + ("anyOf", i)) for i, sub in enumerate(subs))
            )
        if "not" in s:
            inner = self.norm(s["not"], base, path + ("not",))
            node = self.intersect(node, self.negate(inner, _ptr(path + ("not",))))
        if "if" in s and ("then" in s or "else" in s):
            # if/then/else == (if AND then) OR (NOT if AND else)
            cond = self.norm(s["if"], base, path + ("if",))
            then = self.norm(s.get("then", True), base, path + ("then",))
            other = self.norm(s.get("else", True), base, path + ("else",))
            otherwise = self.intersect(self.negate(cond, _ptr(path + ("if",))), other)
            alt = self.union([self.intersect(cond, then), otherwise])
            node = self.intersect(node, alt)
        node = self._dependencies(s, node, base, path)
        if "oneOf" in s:
            subs = self._schema_list(s, "oneOf", path)
            raw = [self.norm(sub, base, path + ("oneOf", i)) for i, sub in enumerate(subs)]
            node = self._one_of(node, raw, path)
        return node

    def _closed_beside_applicators(self, s: dict, base: str, path: tuple, key: str) -> _Node | None:
        """unevaluatedProperties (or unevaluatedItems, `key`) beside in-place
        applicators: an object's properties outside every name and pattern that `s` and
        the subschemas it applies in place evaluate must pass it (an array's items past
        every prefix they evaluate, that no `contains` of theirs matches). What anyOf,
        oneOf and if evaluate depends on the branches an instance matches, so the
        constraint is a union over those combinations (`_evaluations`), each under the
        condition that its branches match: exact, as the instance's own combination
        evaluates the most. None where that is not followed (dependentSchemas,
        $dynamicRef, past MAX_EVALUATIONS combinations)."""
        ways = self._evaluations(s, base, path, (), own=True)
        if ways is None:
            return None
        rest = self.norm(s[key], base, path + (key,))
        try:
            parts = (
                self._unevaluated_parts(ways, rest)
                if key == "unevaluatedProperties"
                else self._unevaluated_items(ways, rest)
            )
        except BUDGET_ERRORS:
            raise
        except GrammarError:
            return None  # a condition that cannot meet its closed object (both with patterns)
        kind = _Obj if key == "unevaluatedProperties" else _Arr
        others = [p for p in ANY_PARTS_IN_ORDER if not isinstance(p, kind)]
        return self.union(others + parts)

    def _unevaluated_parts(self, ways: list[tuple], rest: _Node) -> list[_Node]:
        """Per way of evaluating, the objects whose other properties pass `rest`."""
        parts: list[_Node] = []
        for cond, names, patterns, every, *_ in ways:
            obj: _Node
            if every:
                obj = _Obj()
            elif rest is NOTHING:
                # No other key at all (the usual `false`): a key schema, which meets the
                # subschemas' own patternProperties where a second set of patterns could not.
                keys: list[_Node] = [_Const(name) for name in dict.fromkeys(names)]
                keys += [_make_str(0, None, (p,)) for p in dict.fromkeys(patterns)]
                obj = _make_obj((), (), ANY, (), 0, None, self.union(keys))
            else:
                listed = tuple((name, ANY) for name in dict.fromkeys(names))
                obj = _make_obj(listed, tuple((p, ANY) for p in dict.fromkeys(patterns)), rest, (), 0, None)
            parts.append(obj if cond is ANY else self.intersect(cond, obj))
        return parts

    def _unevaluated_items(self, ways: list[tuple], rest: _Node) -> list[_Node]:
        """Per way of evaluating, the arrays whose items past the prefix evaluated pass
        `rest` or a `contains` (which evaluates the items it matches)."""
        parts: list[_Node] = []
        for cond, _, _, _, prefix, every, contains in ways:
            arr = _Arr() if every else self.make_arr((ANY,) * prefix, self.union([rest, *contains]), 0, None)
            parts.append(arr if cond is ANY else self.intersect(cond, arr))
        return parts

    def _evaluations(self, s: Any, base: str, path: tuple, stack: tuple, own: bool = False) -> list[tuple] | None:
        """How subschema `s`, applied in place, evaluates an object's properties and an
        array's items: one (condition, names, patterns, every property, prefix, every
        item, contains schemas) per combination of the branches of its anyOf, oneOf and
        if that an instance may match, the condition being that it matches them. `own`: `s` is the schema whose unevaluatedProperties is asked
        about, which does not count. None where not followed here."""
        if s is True:
            return [_NO_EVALUATION]
        if s is False or not isinstance(s, dict):
            return [] if s is False else None
        if path in stack or len(stack) > self.limits.max_schema_depth:
            return [_NO_EVALUATION]  # in place again: it evaluates what it did
        stack = stack + (path,)
        known = self.base_of.get(path)
        base = known if known is not None else self._own_id(s, base)
        s = self._in_force(s)
        if "$dynamicRef" in s or "dependentSchemas" in s or "dependencies" in s:
            return None
        props = s.get("properties", {})
        pats = s.get("patternProperties", {})
        if not isinstance(props, dict) or not isinstance(pats, dict):
            return None  # the keyword's own check names the error
        # additionalProperties evaluates every property; so does unevaluatedProperties,
        # of a subschema, over its own scope.
        every = "additionalProperties" in s or (not own and "unevaluatedProperties" in s)
        # Items: a prefix (prefixItems, or a draft's array of items), all of them (items
        # beside it, additionalItems, a subschema's unevaluatedItems), those `contains`
        # matches.
        items = s.get("items")
        prefix = s.get("prefixItems", items if isinstance(items, list) else [])
        if not isinstance(prefix, list):
            return None
        every_item = (
            ("items" in s and not isinstance(items, list))
            or (isinstance(items, list) and "additionalItems" in s)
            or (not own and "unevaluatedItems" in s)
        )
        contains = (self.norm(s["contains"], base, path + ("contains",)),) if "contains" in s else ()
        ways: list[tuple] | None = [(ANY, tuple(props), tuple(pats), every, len(prefix), every_item, contains)]
        subs: list[tuple[Any, str, tuple]] = []
        if "allOf" in s:
            subs += [(b, base, path + ("allOf", i)) for i, b in enumerate(self._schema_list(s, "allOf", path))]
        if "$ref" in s:
            if not isinstance(s["$ref"], str):
                return None
            subs.append(self.targets[self._resolve(s["$ref"], base, path)])
        for sub, sub_base, sub_path in subs:
            ways = self._ways_meet(ways, self._evaluations(sub, sub_base, sub_path, stack))
        if "anyOf" in s:
            branches = self._branch_ways(s, "anyOf", base, path, stack)
            if branches is None or len(branches) > MAX_ANY_OF_EVALUATED:
                return None
            # Every set of branches matched, each with what it evaluates.
            options: list[tuple] | None = []
            for mask in range(1, 1 << len(branches)):
                chosen: list[tuple] | None = [_NO_EVALUATION]
                for i, branch in enumerate(branches):
                    if mask >> i & 1:
                        chosen = self._ways_meet(chosen, branch)
                options = None if chosen is None or options is None else options + chosen
            ways = self._ways_meet(ways, options)
        if "oneOf" in s:
            branches = self._branch_ways(s, "oneOf", base, path, stack)
            ways = self._ways_meet(ways, None if branches is None else [w for b in branches for w in b])
        if "if" in s:
            cond = self.norm(s["if"], base, path + ("if",))
            try:
                otherwise = self.negate(cond, _ptr(path + ("if",)))
            except GrammarError:
                return None
            matched = self._ways_meet(
                self._evaluations(s["if"], base, path + ("if",), stack),
                self._evaluations(s.get("then", True), base, path + ("then",), stack),
            )
            failed = self._evaluations(s.get("else", True), base, path + ("else",), stack)
            if matched is None or failed is None:
                return None
            when_matched = self._ways_meet([_condition(cond)], matched)
            when_failed = self._ways_meet([_condition(otherwise)], failed)
            if when_matched is None or when_failed is None:
                return None
            ways = self._ways_meet(ways, when_matched + when_failed)
        # `not` evaluates nothing: its subschema's annotations are dropped.
        return ways

    def _branch_ways(self, s: dict, key: str, base: str, path: tuple, stack: tuple) -> list[list[tuple]] | None:
        """Per branch of s[key], its evaluations, each under the condition that the
        branch matches."""
        out = []
        for i, branch in enumerate(self._schema_list(s, key, path)):
            sub_path = path + (key, i)
            ways = self._evaluations(branch, base, sub_path, stack)
            if ways is None:
                return None
            cond = self.norm(branch, base, sub_path)
            out.append(self._ways_meet([_condition(cond)], ways) or [])
        return out

    def _ways_meet(self, a: list[tuple] | None, b: list[tuple] | None) -> list[tuple] | None:
        """Both evaluations at once: each pair of ways, conditions met together."""
        if a is None or b is None:
            return None
        out = []
        for cond_a, names_a, pats_a, every_a, prefix_a, items_a, contains_a in a:
            for cond_b, names_b, pats_b, every_b, prefix_b, items_b, contains_b in b:
                cond = cond_a if cond_b is ANY else cond_b if cond_a is ANY else self.intersect(cond_a, cond_b)
                if cond is not NOTHING:
                    out.append(
                        (
                            cond,
                            names_a + names_b,
                            pats_a + pats_b,
                            every_a or every_b,
                            max(prefix_a, prefix_b),
                            items_a or items_b,
                            contains_a + contains_b,
                        )
                    )
        return out if len(out) <= MAX_EVALUATIONS else None

    def _dependencies(self, s: dict, node: _Node, base: str, path: tuple) -> _Node:
        """dependentRequired / dependentSchemas / draft-04..07 dependencies: for each
        trigger key, (key absent) OR (key present AND the dependency)."""
        deps: list[tuple[str, Any, tuple]] = []
        for key in ("dependencies", "dependentRequired", "dependentSchemas"):
            if key not in s:
                continue
            if not isinstance(s[key], dict):
                raise GrammarError(f"{key} at {_ptr(path + (key,))} must be an object")
            for trigger, dep in s[key].items():
                deps.append((trigger, dep, path + (key, trigger)))
        for trigger, dep, dpath in deps:
            if isinstance(dep, list) and dpath[-2] != "dependentSchemas":
                if not all(isinstance(x, str) for x in dep):
                    raise GrammarError(f"dependency at {_ptr(dpath)} must be an array of property names")
                then: _Node = _Obj(required=tuple(dict.fromkeys([trigger] + dep)))
            elif dpath[-2] == "dependentRequired":
                raise GrammarError(f"dependentRequired at {_ptr(dpath)} must be an array of property names")
            else:
                then = self.intersect(_Obj(required=(trigger,)), self.norm(dep, base, dpath))
            absent = _Obj(props=((trigger, NOTHING),))
            others = self.union(p for p in ANY_PARTS_IN_ORDER if not isinstance(p, _Obj))
            node = self.intersect(node, self.union([others, absent, then]))
        return node

    def _one_of(self, node: _Node, raw: list[_Node], path: tuple) -> _Node:
        """`node` AND oneOf(raw) as a union: directly when the branches are provably
        disjoint, else as the union of (branch i AND NOT each overlapping branch j),
        where those complements can be expressed; where not, refused, or with
        one_of="any_of" the union of the branches (a relaxation, warned of)."""
        where = _ptr(path)
        pairs = [(self.intersect(node, r), r) for r in raw]
        pairs = [(b, r) for b, r in pairs if b is not NOTHING]
        live = [b for b, _ in pairs]
        n = len(live)
        overlap = [[False] * n for _ in range(n)]
        exclusive = True
        for i in range(n):
            for j in range(i + 1, n):
                if not self.disjoint(live[i], live[j], 0):
                    overlap[i][j] = overlap[j][i] = True
                    exclusive = False
        if exclusive:
            return self.union(live)
        try:
            negs: dict[int, _Node] = {}
            out = []
            for i in range(n):
                acc = live[i]
                for j in range(n):
                    if j != i and overlap[i][j]:
                        if j not in negs:
                            # node AND b_i AND NOT (node AND b_j) == node AND b_i AND NOT b_j
                            negs[j] = self.negate(pairs[j][1], where)
                        acc = self.intersect(acc, negs[j])
                out.append(acc)
            return self.union(out)
        except BUDGET_ERRORS:
            raise
        except (GrammarError, LimitExceeded) as e:
            reason = (
                "cannot prove its branches exclusive (different types, constants, or a required property with "
                f"disjoint values) nor build their complement ({e})"
            )
            if self.one_of != "any_of":
                raise GrammarError(
                    f"oneOf at {where}: {reason} (one_of='any_of' compiles it as anyOf, and says so in the warnings)"
                ) from None
            self.relax("oneOf", path, f"compiled as anyOf, an instance matching two branches accepted: {reason}")
            return self.union(live)

    def _atom_busy(self, atom: Any) -> bool:
        """Whether a reference atom stands for a schema still being built."""
        if isinstance(atom, _NotRef):
            atom = atom.name
        return isinstance(atom, str) and atom in self.in_progress

    # Complement ---------------------------------------------------------------------------
    def negate(self, node: _Node, where: str, depth: int = 0) -> _Node:
        """The IR of NOT node, where it is expressible; a GrammarError naming `where` otherwise."""
        if depth > 16:
            raise GrammarError(f"not at {where}: cannot complement a recursive schema")
        if node is ANY:
            return NOTHING
        if node is NOTHING:
            return ANY
        if isinstance(node, _Ref):
            if len(node.atoms) == 1:
                (atom,) = node.atoms
                if isinstance(atom, _NotRef):
                    return _Ref(frozenset([atom.name]))
            lazy = depth > LAZY_COMPLEMENT_DEPTH or any(self._atom_busy(x) for x in node.atoms)
            if lazy and not self.lazy_complements:
                raise GrammarError(f"not at {where}: cannot complement a recursive schema")
            if lazy:
                self.made_lazy_complements = True
                # A reference being built, or one met again this deep (a recursive
                # schema): its complement is worked out when unfolded, atom by atom
                # (NOT (a AND b) == NOT a OR NOT b).
                parts: list[_Node] = []
                for x in node.atoms:
                    if isinstance(x, str):
                        parts.append(_Ref(frozenset([_NotRef(x)])))
                    elif isinstance(x, _NotRef):
                        parts.append(_Ref(frozenset([x.name])))
                    else:
                        parts.append(self.negate(x, where, depth + 1))
                return self.union(parts)
            return self.negate(self.unfold(node), where, depth + 1)
        if isinstance(node, _Union):
            acc: _Node = ANY
            for p in node.parts:
                acc = self.intersect(acc, self.negate(p, where, depth))
            return acc
        kind = _kind(node)
        others = [p for p in ANY_PARTS_IN_ORDER if _kind(p) != kind]
        return self.union(others + [self._negate_within(node, kind, where, depth)])

    def _negate_within(self, node: _Node, kind: str, where: str, depth: int) -> _Node:
        """Values of the same kind as `node` that `node` rejects."""

        def unsupported(what: str) -> GrammarError:
            return GrammarError(f"not at {where}: cannot express the complement of {what}")

        if isinstance(node, _Const):
            v = node.value
            if v is None:
                return NOTHING
            if isinstance(v, bool):
                return _Const(not v)
            if isinstance(v, str):
                return _Str(excluded=(node,))
            if isinstance(v, (int, float)) and not (isinstance(v, float) and not math.isfinite(v)):
                d = Decimal(v) if isinstance(v, int) else Decimal(repr(v))
                return _Num(excluded=(d.normalize() if d else Decimal(0),))
            # An array or object constant is the schema of exactly it: so many items, each
            # equal to its own; these keys and no other, each value equal to its own.
            if isinstance(v, list):
                items = tuple(_Const(x) for x in v)
                exact = self.make_arr(items, NOTHING, len(items), len(items))
                return self._negate_within(exact, kind, where, depth + 1)
            if isinstance(v, dict) and all(isinstance(k, str) for k in v):
                props = tuple((k, _Const(x)) for k, x in v.items())
                exact = _make_obj(props, (), NOTHING, tuple(v), 0, None)
                return self._negate_within(exact, kind, where, depth + 1)
            raise unsupported(f"the constant {_canon(v)[:40]}")
        if kind in ("null", "bool"):
            return NOTHING
        if isinstance(node, _Str):
            return _Str(excluded=(node,))
        if isinstance(node, _Num):
            parts: list[_Node] = []
            if node.lo is not None:
                parts.append(_Num(hi=node.lo, hix=not node.lox))
            if node.hi is not None:
                parts.append(_Num(lo=node.hi, lox=not node.hix))
            if node.integer:
                parts.append(_Num(fractional=True))
            if node.fractional:
                parts.append(_Num(integer=True))
            if node.mult is not None:
                if Fraction(node.mult).denominator != 1:
                    parts.append(_make_num(False, None, False, None, False, None, where, not_mult=(node.mult,)))
                else:
                    parts += [_Num(fractional=True), _Num(integer=True, not_mult=(node.mult,))]
            for k in node.not_mult:
                parts.append(_make_num(False, None, False, None, False, k, where))
            for x in node.excluded:
                parts.append(_Const(int(x) if x == x.to_integral_value() else float(x)))
            return self.union(parts)
        if isinstance(node, _Arr):
            if node.unique:
                raise unsupported("uniqueItems")
            p = len(node.prefix)
            parts = []
            if node.min_items > 0:
                parts.append(_Arr(max_items=node.min_items - 1))
            if node.max_items is not None:
                parts.append(_Arr(min_items=node.max_items + 1))
            for i, sub in enumerate(node.prefix):
                parts.append(self.make_arr((ANY,) * i + (self.negate(sub, where, depth + 1),), ANY, i + 1, None))
            if node.items is not ANY:
                parts.append(self.make_arr((ANY,) * p, ANY, p + 1, None, (self.negate(node.items, where, depth + 1),)))
            for c in node.contains:
                if isinstance(c, _Counted):
                    # Fewer matches than asked, or more.
                    fewer = contains_entry(c.node, 0, c.lo - 1) if c.lo > 0 else None
                    more = contains_entry(c.node, c.hi + 1, None) if c.hi is not None else None
                    parts += [self.make_arr((ANY,) * p, ANY, 0, None, (e,)) for e in (fewer, more) if e is not None]
                    continue
                parts.append(self.make_arr((ANY,) * p, self.negate(c, where, depth + 1), 0, None))
            return self.union(parts)
        if isinstance(node, _Obj):
            if node.some:
                raise unsupported("an object schema that asks for some member (a complement of a complement)")
            parts = []
            for k in node.required:
                parts.append(_Obj(props=((k, NOTHING),)))
            listed = list(dict.fromkeys(k for k, _ in node.props))
            for k in listed:
                # The whole schema of a listed member: its own, its patterns', and none at
                # all where propertyNames rejects the key.
                v = self.value_schema(node, k) if node.names is ANY or self.accepts(node.names, k) else NOTHING
                nv = self.negate(v, where, depth + 1)
                if nv is not NOTHING:
                    parts.append(_make_obj(((k, nv),), (), ANY, (k,), 0, None))
            parts += self._members_rejected(node, listed, where, depth)
            if node.min_props > 0:
                parts.append(_Obj(max_props=node.min_props - 1))
            if node.max_props is not None:
                parts.append(_Obj(min_props=node.max_props + 1))
            return self.union(parts)
        raise AssertionError(node)

    def _members_rejected(self, node: _Obj, listed: list[str], where: str, depth: int) -> list[_Node]:
        """Objects failing `node` through a member whose key it does not list: a key of a
        pattern with a value that pattern rejects, another key with a value
        additionalProperties rejects, or a key propertyNames rejects. Each is an object
        asking for such a member (`_Obj.some`), the others free."""
        unlisted = _Str(excluded=tuple(_Const(k) for k in listed)) if listed else _Str()
        out: list[_Node] = []
        for pattern, value in node.patterns:
            rejected = self.negate(value, where, depth + 1)
            keys = self.intersect(_make_str(0, None, (pattern,)), unlisted)
            out.append(_make_obj((), (), ANY, (), 0, None, ANY, ((keys, rejected),)))
        rejected = self.negate(node.additional, where, depth + 1)
        if rejected is not NOTHING:
            keys = unlisted
            for pattern, _ in node.patterns:
                keys = self.intersect(keys, _Str(excluded=(_make_str(0, None, (pattern,)),)))
            out.append(_make_obj((), (), ANY, (), 0, None, ANY, ((keys, rejected),)))
        if node.names is not ANY:
            keys = self.intersect(self.negate(node.names, where, depth + 1), _Str())
            out.append(_make_obj((), (), ANY, (), 0, None, ANY, ((keys, ANY),)))
        out = [o for o in out if o is not NOTHING]
        if out and not self.members_asked:
            raise GrammarError(
                f"not at {where}: cannot express the complement of patternProperties/additionalProperties/"
                "propertyNames with key_order='schema' (with keys in any order it can)"
            )
        return out

    def kinds(self, node: _Node, depth: int = 0) -> frozenset:
        """Kinds of values a node may accept (an over-approximation)."""
        if node is ANY or depth > 32:
            return _ALL_KINDS
        if isinstance(node, _Union):
            out: set = set()
            for p in node.parts:
                out |= self.kinds(p, depth)
            return frozenset(out)
        if isinstance(node, _Ref):
            acc = _ALL_KINDS
            for a in node.atoms:
                if isinstance(a, _NotRef):
                    continue  # a complement: any kind, as far as is known here
                if isinstance(a, str):
                    if a in self.bodies:
                        acc &= self.kinds(self.bodies[a], depth + 1)
                    else:
                        schema, _, _ = self.targets[a]
                        acc &= self._raw_kinds(schema, set())
                else:
                    acc &= self.kinds(a, depth + 1)
            return acc
        return frozenset([_kind(node)])

    def _in_force(self, s: dict) -> dict:
        """The keywords of schema object `s` that apply: its `$ref` alone where the dialect
        says a `$ref` stands for its whole object (up to draft-07)."""
        if self.ref_overrides_siblings and isinstance(s.get("$ref"), str) and len(s) > 1:
            return {"$ref": s["$ref"]}
        return s

    def _raw_kinds(self, s: Any, seen: set) -> frozenset:
        """Kinds of a schema read off its type/enum/const/$ref/allOf/anyOf/oneOf (over-approximation)."""
        if s is False:
            return frozenset()
        if not isinstance(s, dict) or id(s) in seen or len(seen) > 200:
            return _ALL_KINDS
        seen.add(id(s))
        s = self._in_force(s)
        acc = _ALL_KINDS
        t = s.get("type")
        if isinstance(t, str):
            t = [t]
        if isinstance(t, list):
            acc &= frozenset(_TYPE_KIND.get(x, "") for x in t)
        if isinstance(s.get("enum"), list):
            acc &= frozenset(_kind(_Const(v)) for v in s["enum"])
        if "const" in s:
            acc &= frozenset([_kind(_Const(s["const"]))])
        ref = s.get("$ref")
        if isinstance(ref, str):
            try:
                name = self._resolve(ref, self.root_base, ())
                acc &= self._raw_kinds(self.targets[name][0], seen)
            except GrammarError:
                pass
        for sub in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
            acc &= self._raw_kinds(sub, seen)
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list):
                u: set = set()
                for sub in s[key]:
                    u |= self._raw_kinds(sub, seen)
                acc &= frozenset(u)
        return acc

    def _schema_list(self, s: dict, key: str, path: tuple) -> list:
        v = s[key]
        if not isinstance(v, list) or not v:
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be a non-empty array")
        return v

    # Keyword value checks ----------------------------------------------------------
    def _count(self, s: dict, key: str, path: tuple) -> int | None:
        v = s.get(key)
        if v is None:
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be a non-negative integer")
        return v

    def _number(self, v: Any, key: str, path: tuple) -> Decimal:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be a number")
        if isinstance(v, float) and not math.isfinite(v):
            raise GrammarError(f"{key} at {_ptr(path + (key,))} must be finite")
        return Decimal(v) if isinstance(v, int) else Decimal(repr(v))

    def _typed(self, s: dict, base: str, path: tuple) -> _Node:
        """The conjunction of `type` and the type-specific keywords of one schema."""
        t = s.get("type")
        if t is None:
            if _TYPE_KEYWORDS.isdisjoint(s):
                # Every type unconstrained: the union below would come out as ANY.
                return ANY
            types = None
        else:
            tl = [t] if isinstance(t, str) else t
            if not isinstance(tl, list) or not all(isinstance(x, str) for x in tl):
                raise GrammarError(f"type at {_ptr(path)} must be a string or an array of strings")
            for x in tl:
                if x not in _TYPES:
                    raise GrammarError(f"unknown type {x!r} at {_ptr(path)}")
            types = set(tl)
        parts: list[_Node] = []

        def want(name: str) -> bool:
            return types is None or name in types

        if want("null"):
            parts.append(_NULL)
        if want("boolean"):
            parts.append(_BOOL)
        if want("number") or want("integer"):
            integer = types is not None and "integer" in types and "number" not in types
            parts.append(self._num(s, path, integer))
        if want("string"):
            parts.append(self._str(s, path))
        if want("array"):
            parts.append(self._arr(s, base, path))
        elif "uniqueItems" in s and not isinstance(s["uniqueItems"], bool):
            raise GrammarError(f"uniqueItems at {_ptr(path)} must be a boolean")
        if want("object"):
            parts.append(self._obj(s, base, path))
        return parts[0] if len(parts) == 1 else self.union(parts)

    def _num(self, s: dict, path: tuple, integer: bool) -> _Node:
        where = _Where(path)
        lo = hi = None
        lox = hix = False
        if "minimum" in s:
            lo = self._number(s["minimum"], "minimum", path)
        if "maximum" in s:
            hi = self._number(s["maximum"], "maximum", path)
        for key, is_lo in (("exclusiveMinimum", True), ("exclusiveMaximum", False)):
            if key not in s:
                continue
            v = s[key]
            if isinstance(v, bool):  # draft-04: modifies minimum/maximum
                if v and is_lo:
                    lox = lo is not None
                elif v:
                    hix = hi is not None
                continue
            d = self._number(v, key, path)
            if is_lo and (lo is None or d >= lo):
                lo, lox = d, True
            elif not is_lo and (hi is None or d <= hi):
                hi, hix = d, True
        mult = None
        if "multipleOf" in s:
            m = self._number(s["multipleOf"], "multipleOf", path)
            if m <= 0:
                raise GrammarError(f"multipleOf at {where} must be positive")
            mult = m
        n = _make_num(integer, lo, lox, hi, hix, mult, where)
        if isinstance(n, _Num):
            self._check_num(n, where)
        return n

    def _check_num(self, n: _Num, where: str | _Where) -> None:
        """Fail early (with the pointer) where a number lexeme cannot be built."""
        _num_regex(n, where, self.limits, self.zero_fraction_integers)

    def _check_value_count(self, values: list, const: Any, path: tuple) -> None:
        """Refuse (before building anything) an enum/const bigger than Limits allow: the
        grammar spells every value out."""
        cap = self.limits.max_const_values
        if len(values) > cap:
            raise GrammarLimitExceeded("max_const_values", cap, f"enum at {_ptr(path)} has {len(values)} values")
        stack = list(values) + [const]
        count = 0
        while stack:
            v = stack.pop()
            count += 1
            if count > cap:
                raise GrammarLimitExceeded(
                    "max_const_values", cap, f"enum/const at {_ptr(path)} holds more JSON values"
                )
            if isinstance(v, dict):
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)

    def _str(self, s: dict, path: tuple) -> _Node:
        lo = self._count(s, "minLength", path) or 0
        hi = self._count(s, "maxLength", path)
        if lo > MAX_REPEAT_COUNT:
            raise GrammarLimitExceeded("max_repeat_count", MAX_REPEAT_COUNT, f"minLength at {_ptr(path)} is {lo}")
        if hi is not None and hi > MAX_REPEAT_COUNT:
            # No document in memory is that long: the bound cannot reject anything.
            self.note(f"maxLength {hi} at {_ptr(path)} is past {MAX_REPEAT_COUNT} characters: no bound")
            hi = None
        patterns: list[str] = []
        if "pattern" in s:
            p = s["pattern"]
            if not isinstance(p, str):
                raise GrammarError(f"pattern at {_ptr(path)} must be a string")
            pattern_to_regex(p, _Where(path + ("pattern",)), self.limits)
            patterns.append(p)
        if "format" in s and self.formats == "assert":
            f = s["format"]
            if not isinstance(f, str):
                raise GrammarError(f"format at {_ptr(path)} must be a string")
            if f in _FORMAT_PATTERNS:
                patterns.append(_FORMAT_PATTERNS[f])
            else:
                known = ", ".join(sorted(SUPPORTED_FORMATS))
                self.relax("format", path, f"format {f!r} is not enforced (not one of {known})")
        return _make_str(lo, hi, tuple(patterns))

    def _arr(self, s: dict, base: str, path: tuple) -> _Node:
        prefix: list[_Node] = []
        items: _Node = ANY
        if "prefixItems" in s:
            if not isinstance(s["prefixItems"], list):
                raise GrammarError(f"prefixItems at {_ptr(path)} must be an array")
            if isinstance(s.get("items"), list):
                raise GrammarError(f"items at {_ptr(path)} must be a schema when prefixItems is present")
            prefix = [self.norm(x, base, path + ("prefixItems", i)) for i, x in enumerate(s["prefixItems"])]
        if "items" in s:
            v = s["items"]
            if isinstance(v, list):  # draft-04..2019: tuple form
                prefix = [self.norm(x, base, path + ("items", i)) for i, x in enumerate(v)]
                if "additionalItems" in s:
                    items = self.norm(s["additionalItems"], base, path + ("additionalItems",))
            else:
                items = self.norm(v, base, path + ("items",))
        elif "unevaluatedItems" in s:
            items = self.norm(s["unevaluatedItems"], base, path + ("unevaluatedItems",))
            if "contains" in s:
                # An item `contains` matches is evaluated by it (whatever minContains
                # asks), so only the others must pass unevaluatedItems.
                items = self.union([items, self.norm(s["contains"], base, path + ("contains",))])
        lo = self._count(s, "minItems", path) or 0
        hi = self._count(s, "maxItems", path)
        self._within_counted_items(path, minItems=lo, maxItems=hi)
        unique = False
        if "uniqueItems" in s:
            u = s["uniqueItems"]
            if not isinstance(u, bool):
                raise GrammarError(f"uniqueItems at {_ptr(path)} must be a boolean")
            if u and (hi is None or hi > 1):
                if "contains" not in s and all(
                    self.finite_values(x) is not None for x in prefix + ([items] if items is not NOTHING else [])
                ):
                    unique = True  # few values: a grammar can tell the elements apart
                elif not self.lenient:
                    raise GrammarError(
                        f"uniqueItems at {_ptr(path + ('uniqueItems',))}: a grammar cannot check that array items "
                        f"differ where they take more than {self.limits.max_unique_values} values, so the schema is "
                        "refused (lenient=True compiles it without the check, and says so in the warnings)"
                    )
                else:
                    self.relax("uniqueItems", path)
        arr = self.make_arr(tuple(prefix), items, lo, hi, unique=unique)
        if "contains" in s:
            min_c = self._count(s, "minContains", path)
            max_c = self._count(s, "maxContains", path)
            witness = self.norm(s["contains"], base, path + ("contains",))
            entry = contains_entry(witness, 1 if min_c is None else min_c, max_c)
            if isinstance(entry, _Counted):
                self._within_counted_items(path, minContains=entry.lo, maxContains=entry.hi)
                if prefix:
                    # A count over the prefix positions too would need each position's
                    # match and miss apart: a union growing with their subsets.
                    raise GrammarError(
                        f"minContains/maxContains at {_ptr(path)}: not supported beside prefixItems "
                        "(only a count of 'at least one')"
                    )
                arr = self.intersect(arr, self.make_arr((), ANY, 0, None, (entry,)))
            elif entry is NOTHING:
                arr = NOTHING
            elif entry is not None:
                arr = self.intersect(arr, self._contains(entry, len(prefix)))
        return arr

    def _within_counted_items(self, path: tuple, **counts: int | None) -> None:
        """The grammar spells a bounded repetition or count out, one rule or state per
        element: each bound past Limits.max_counted_items is refused, by keyword."""
        cap = self.limits.max_counted_items
        for key, v in counts.items():
            if v is not None and v > cap:
                raise GrammarLimitExceeded("max_counted_items", cap, f"{key} {v} at {_ptr(path)}")

    def _contains(self, c: _Node, p: int) -> _Node:
        """Arrays (with p prefix positions) having some element that satisfies c."""
        parts = [self.make_arr((ANY,) * i + (c,), ANY, i + 1, None) for i in range(p)]
        parts.append(self.make_arr((ANY,) * p, ANY, 0, None, (c,)))
        return self.union(parts)

    def _align(self, a: _Arr, n: int) -> _Node:
        """`a` as a union of arrays with n prefix positions: each `contains` witness is
        met at one of the new positions or after them."""
        p = len(a.prefix)
        if p >= n:
            return a
        prefix = a.prefix + (a.items,) * (n - p)
        options: list[_Node] = [self.make_arr(prefix, a.items, a.min_items, a.max_items, unique=a.unique)]
        for c in a.contains:
            if isinstance(c, _Counted):
                raise GrammarError("allOf: cannot combine minContains/maxContains with prefixItems")
            grown: list[_Node] = []
            for o in options:
                if not isinstance(o, _Arr):
                    continue
                for i in range(p, n):
                    pre = o.prefix[:i] + (self.intersect(o.prefix[i], c),) + o.prefix[i + 1 :]
                    grown.append(self.make_arr(pre, o.items, max(o.min_items, i + 1), o.max_items, o.contains))
                grown.append(self.make_arr(o.prefix, o.items, o.min_items, o.max_items, o.contains + (c,)))
            options = grown
        return self.union(options)

    def _obj(self, s: dict, base: str, path: tuple) -> _Node:
        props: list[tuple[str, _Node]] = []
        if "properties" in s:
            if not isinstance(s["properties"], dict):
                raise GrammarError(f"properties at {_ptr(path)} must be an object")
            for k, v in s["properties"].items():
                props.append((k, self.norm(v, base, path + ("properties", k))))
        patterns: list[tuple[str, _Node]] = []
        if "patternProperties" in s:
            if not isinstance(s["patternProperties"], dict):
                raise GrammarError(f"patternProperties at {_ptr(path)} must be an object")
            for k, v in s["patternProperties"].items():
                pattern_to_regex(k, _Where(path + ("patternProperties", k)), self.limits)
                patterns.append((k, self.norm(v, base, path + ("patternProperties", k))))
        additional: _Node = ANY
        if "additionalProperties" in s:
            additional = self.norm(s["additionalProperties"], base, path + ("additionalProperties",))
        elif "unevaluatedProperties" in s:
            additional = self.norm(s["unevaluatedProperties"], base, path + ("unevaluatedProperties",))
        required: list[str] = []
        if "required" in s and s["required"] is not False:
            r = s["required"]
            if r is True:
                raise GrammarError(f"unsupported keyword 'required': true (draft-03) at {_ptr(path)}")
            if not isinstance(r, list) or not all(isinstance(x, str) for x in r):
                raise GrammarError(f"required at {_ptr(path)} must be an array of strings")
            for x in r:
                if x not in required:
                    required.append(x)
        lo = self._count(s, "minProperties", path) or 0
        hi = self._count(s, "maxProperties", path)
        names: _Node = ANY
        if "propertyNames" in s:
            # Keys are strings: only the string part of the schema matters.
            names = self.intersect(_Str(), self.norm(s["propertyNames"], base, path + ("propertyNames",)))
            if names == _Str():
                names = ANY
        return _make_obj(tuple(props), tuple(patterns), additional, tuple(required), lo, hi, names)

    # Intersection ----------------------------------------------------------------------
    def intersect(self, a: _Node, b: _Node) -> _Node:
        self.depth += 1
        try:
            if self.depth > self.limits.max_schema_depth:
                raise LimitExceeded(
                    "max_schema_depth", self.limits.max_schema_depth, "allOf/$ref intersection nested too deeply"
                )
            if isinstance(a, _Ref) or isinstance(b, _Ref):
                # A reference's meet depends on which references are being unfolded.
                return self._intersect(a, b)
            key = (a, b)
            met = self._meets.get(key)
            if met is None:
                # Meets multiply where allOf branches share wide objects: a schema can
                # spend its whole time on new ones without a new subschema to normalise.
                self._ticks -= 1
                if self._ticks <= 0:
                    self._tick()
                met = self._intersect(a, b)
                if len(self._meets) >= _MAX_MEETS_KEPT:
                    self._meets.clear()
                self._meets[key] = met
            return met
        finally:
            self.depth -= 1

    def _intersect(self, a: _Node, b: _Node) -> _Node:
        if a is ANY or a == b:
            return b
        if b is ANY:
            return a
        if a is NOTHING or b is NOTHING:
            return NOTHING
        if isinstance(a, _Union) or isinstance(b, _Union):
            ap = a.parts if isinstance(a, _Union) else (a,)
            bp = b.parts if isinstance(b, _Union) else (b,)
            if len(ap) * len(bp) > self.limits.max_union_parts:
                raise LimitExceeded(
                    "max_union_parts", self.limits.max_union_parts, "allOf/anyOf expansion has too many alternatives"
                )
            return self.union(self.intersect(x, y) for x in ap for y in bp)
        if isinstance(a, _Ref) or isinstance(b, _Ref):
            if isinstance(b, _Ref) and not isinstance(a, _Ref):
                a, b = b, a
            assert isinstance(a, _Ref)
            busy = any(self._atom_busy(x) for x in a.atoms)
            if isinstance(b, _Const) and not busy:
                return b if self.accepts(a, b.value) else NOTHING
            if isinstance(b, _Ref) or busy:
                atoms = a.atoms | (b.atoms if isinstance(b, _Ref) else frozenset([b]))
                if len(self.synthetic) > self.limits.max_synthetic_refs:
                    raise LimitExceeded(
                        "max_synthetic_refs", self.limits.max_synthetic_refs, "too many $ref intersections"
                    )
                r = self.synthetic.get(atoms)
                if r is None:
                    r = self.synthetic[atoms] = _Ref(atoms)
                return r
            return self.intersect(self.unfold(a), b)
        if isinstance(a, _Const) or isinstance(b, _Const):
            c, other = (a, b) if isinstance(a, _Const) else (b, a)
            assert isinstance(c, _Const)
            return c if self.accepts(other, c.value) else NOTHING
        ka, kb = _kind(a), _kind(b)
        if ka != kb:
            return NOTHING
        if ka in ("null", "bool"):
            return a
        # Same kind and neither a constant: the same node class.
        if isinstance(a, _Num) and isinstance(b, _Num):
            return self._meet_num(a, b)
        if isinstance(a, _Str) and isinstance(b, _Str):
            pats = a.patterns + tuple(p for p in b.patterns if p not in a.patterns)
            excl = a.excluded + tuple(x for x in b.excluded if x not in a.excluded)
            hi = _min_opt(a.max_len, b.max_len)
            return _make_str(max(a.min_len, b.min_len), hi, pats, excl)
        if isinstance(a, _Arr) and isinstance(b, _Arr):
            n = max(len(a.prefix), len(b.prefix))
            if (a.contains and len(a.prefix) < n) or (b.contains and len(b.prefix) < n):
                return self.intersect(self._align(a, n), self._align(b, n))
            prefix = tuple(self.intersect(_elem(a, i), _elem(b, i)) for i in range(n))
            hi = _min_opt(a.max_items, b.max_items)
            contains = a.contains + tuple(c for c in b.contains if c not in a.contains)
            # Meeting an array of few values keeps them few: the uniqueness stays exact.
            return self.make_arr(
                prefix,
                self.intersect(a.items, b.items),
                max(a.min_items, b.min_items),
                hi,
                contains,
                unique=a.unique or b.unique,
            )
        assert isinstance(a, _Obj) and isinstance(b, _Obj)
        return self._meet_obj(a, b)

    def _meet_num(self, a: _Num, b: _Num) -> _Node:
        lo, lox = a.lo, a.lox
        if b.lo is not None and (lo is None or b.lo > lo or (b.lo == lo and b.lox)):
            lo, lox = b.lo, b.lox
        hi, hix = a.hi, a.hix
        if b.hi is not None and (hi is None or b.hi < hi or (b.hi == hi and b.hix)):
            hi, hix = b.hi, b.hix
        mult = a.mult
        if b.mult is not None:
            if mult is None:
                mult = b.mult
            else:
                fa, fb = Fraction(mult), Fraction(b.mult)
                # lcm of two rationals: lcm(numerators) / gcd(denominators)
                num = fa.numerator * fb.numerator // math.gcd(fa.numerator, fb.numerator)
                den = math.gcd(fa.denominator, fb.denominator)
                f = Fraction(num, den)
                mult = Decimal(f.numerator) / Decimal(f.denominator) if f.denominator != 1 else Decimal(f.numerator)
                if Fraction(mult) != f:
                    raise GrammarError(f"allOf: cannot combine multipleOf {a.mult} and {b.mult} exactly")
        not_mult = a.not_mult + tuple(k for k in b.not_mult if k not in a.not_mult)
        excluded = a.excluded + tuple(x for x in b.excluded if x not in a.excluded)
        n = _make_num(
            a.integer or b.integer, lo, lox, hi, hix, mult, "allOf", a.fractional or b.fractional, not_mult, excluded
        )
        if isinstance(n, _Num):
            _num_regex(n, "allOf", self.limits, self.zero_fraction_integers)
        return n

    def _meet_obj(self, a: _Obj, b: _Obj) -> _Node:
        names = [k for k, _ in a.props] + [k for k, _ in b.props if a.prop(k) is None]
        props = tuple((k, self.intersect(self.value_schema(a, k), self.value_schema(b, k))) for k in names)
        if a.patterns and b.patterns and (a.additional is not ANY or b.additional is not ANY):
            raise GrammarError(
                "allOf: cannot merge two object schemas that both have patternProperties "
                "and one has additionalProperties"
            )
        pats = tuple((p, self.intersect(v, b.additional) if not b.patterns else v) for p, v in a.patterns)
        pats += tuple((p, self.intersect(v, a.additional) if not a.patterns else v) for p, v in b.patterns)
        additional = self.intersect(a.additional, b.additional)
        required = a.required + tuple(r for r in b.required if r not in a.required)
        hi = _min_opt(a.max_props, b.max_props)
        names_schema = self.intersect(a.names, b.names)
        some = a.some + tuple(w for w in b.some if w not in a.some)
        if len(some) > MAX_OBJECT_WITNESSES:
            raise GrammarError(
                f"allOf: cannot combine the complements of more than {MAX_OBJECT_WITNESSES} object schemas, "
                "each asking for a member (a key it does not allow, or a value it rejects)"
            )
        return _make_obj(props, pats, additional, required, max(a.min_props, b.min_props), hi, names_schema, some)

    def value_schema(self, o: _Obj, key: str) -> _Node:
        """The schema a member named `key` must satisfy in object schema `o`."""
        node = o.prop(key)
        matched = [v for p, v in o.patterns if self.pattern_matches(p, key)]
        if node is None and not matched:
            return o.additional
        acc = ANY if node is None else node
        for v in matched:
            acc = self.intersect(acc, v)
        return acc

    # Validation of constants -------------------------------------------------------------
    def accepts(self, node: _Node, v: Any) -> bool:
        """Whether the JSON value v satisfies node (used on constants, keys and by
        schema_ordered); each outermost call gets its own work budget."""
        outer = self.validating == 0
        if outer:
            self.steps = 0
        self.validating += 1
        try:
            return self._accepts(node, v, 0)
        finally:
            self.validating -= 1

    def _accepts(self, node: _Node, v: Any, depth: int) -> bool:
        self.steps += 1
        if self.steps > self.limits.max_validation_steps:
            raise LimitExceeded("max_validation_steps", self.limits.max_validation_steps, "checking enum/const values")
        if depth > self.limits.max_schema_depth:
            raise LimitExceeded("max_schema_depth", self.limits.max_schema_depth, "value nested too deeply")
        d1 = depth + 1
        if node is ANY:
            return True
        if isinstance(node, _Union):
            return any(self._accepts(p, v, d1) for p in node.parts)
        if isinstance(node, _Ref):
            return self._accepts(self.unfold(node), v, d1)
        if isinstance(node, _Const):
            return _json_equal(node.value, v)
        if isinstance(node, _NullT):
            return v is None
        if isinstance(node, _BoolT):
            return isinstance(v, bool)
        if isinstance(node, _Num):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return False
            if isinstance(v, float) and not math.isfinite(v):
                return False
            d = Decimal(v) if isinstance(v, int) else Decimal(repr(v))
            if node.integer and d != d.to_integral_value():
                return False
            if node.lo is not None and (d < node.lo or (node.lox and d == node.lo)):
                return False
            if node.hi is not None and (d > node.hi or (node.hix and d == node.hi)):
                return False
            if node.fractional and d == d.to_integral_value():
                return False
            if node.mult is not None and Fraction(d) % Fraction(node.mult) != 0:
                return False
            if any(Fraction(d) % Fraction(k) == 0 for k in node.not_mult):
                return False
            if any(d == x for x in node.excluded):
                return False
            return True
        if isinstance(node, _Str):
            if not isinstance(v, str) or len(v) < node.min_len or (node.max_len is not None and len(v) > node.max_len):
                return False
            return all(self.pattern_matches(p, v) for p in node.patterns) and not any(
                self._accepts(x, v, d1) for x in node.excluded
            )
        if isinstance(node, _Arr):
            if not isinstance(v, list) or len(v) < node.min_items:
                return False
            if node.max_items is not None and len(v) > node.max_items:
                return False
            tail = v[len(node.prefix) :]
            if not all(self._accepts(_elem(node, i), x, d1) for i, x in enumerate(v)):
                return False
            if node.unique and len({_value_key(x) for x in v}) < len(v):
                return False
            for c in node.contains:
                w, lo, hi = witness_bounds(c)
                matches = sum(1 for x in tail if self._accepts(w, x, d1))
                if matches < lo or (hi is not None and matches > hi):
                    return False
            return True
        if isinstance(node, _Obj):
            if not isinstance(v, dict) or len(v) < node.min_props:
                return False
            if node.max_props is not None and len(v) > node.max_props:
                return False
            if any(r not in v for r in node.required):
                return False
            if node.names is not ANY and not all(self._accepts(node.names, k, d1) for k in v):
                return False
            for key, value in node.some:
                if not any(self._accepts(key, k, d1) and self._accepts(value, x, d1) for k, x in v.items()):
                    return False
            return all(self._accepts(self.value_schema(node, k), x, d1) for k, x in v.items())
        raise AssertionError(node)

    def reorder(self, node: _Node, v: Any, depth: int) -> Any:
        if depth > self.limits.max_schema_depth:
            return v
        if isinstance(node, _Ref):
            return self.reorder(self.unfold(node), v, depth + 1)
        if isinstance(node, _Union):
            for p in node.parts:
                if self.accepts(p, v):
                    return self.reorder(p, v, depth + 1)
            return v
        if isinstance(node, _Obj) and isinstance(v, dict):
            order = [k for k, _ in node.props] + [r for r in node.required if node.prop(r) is None]
            keys = [k for k in order if k in v] + [k for k in v if k not in order]
            return {k: self.reorder(self.value_schema(node, k), v[k], depth + 1) for k in keys}
        if isinstance(node, _Arr) and isinstance(v, list):
            return [self.reorder(_elem(node, i), x, depth + 1) for i, x in enumerate(v)]
        return v

    # oneOf: provable disjointness ---------------------------------------------------------
    def disjoint(self, a: _Node, b: _Node, depth: int) -> bool:
        """True only if no JSON value satisfies both (False: disjoint or unknown)."""
        if a is NOTHING or b is NOTHING:
            return True
        if a is ANY or b is ANY or depth > 8:
            return False
        if not (self.kinds(a) & self.kinds(b)):
            return True
        if isinstance(a, _Ref) or isinstance(b, _Ref):
            refs = [r for r in (a, b) if isinstance(r, _Ref)]
            if any(self._atom_busy(x) for r in refs for x in r.atoms):
                return False
            a = self.unfold(a) if isinstance(a, _Ref) else a
            b = self.unfold(b) if isinstance(b, _Ref) else b
            return self.disjoint(a, b, depth + 1)
        if isinstance(a, _Union) or isinstance(b, _Union):
            ap = a.parts if isinstance(a, _Union) else (a,)
            bp = b.parts if isinstance(b, _Union) else (b,)
            return all(self.disjoint(x, y, depth) for x in ap for y in bp)
        if isinstance(a, _Const) and isinstance(b, _Const):
            return not _json_equal(a.value, b.value)
        if isinstance(a, _Const) or isinstance(b, _Const):
            c, other = (a, b) if isinstance(a, _Const) else (b, a)
            assert isinstance(c, _Const)
            return not self.accepts(other, c.value)
        if _kind(a) != _kind(b):
            return True
        if isinstance(a, _Num) and isinstance(b, _Num):
            if a.hi is not None and b.lo is not None and (a.hi < b.lo or (a.hi == b.lo and (a.hix or b.lox))):
                return True
            if b.hi is not None and a.lo is not None and (b.hi < a.lo or (b.hi == a.lo and (b.hix or a.lox))):
                return True
            return False
        if isinstance(a, _Str) and isinstance(b, _Str):
            if _apart(a.min_len, a.max_len, b.min_len, b.max_len):
                return True
            if _str_within_excluded(a, b) or _str_within_excluded(b, a):
                return True
            if a.patterns or b.patterns or a.excluded or b.excluded:
                ra, rb = _string_body(a), _string_body(b)
                if ra is None or rb is None:
                    return True
                return self.regexes_disjoint(quoted(ra[0]), quoted(rb[0]))
            return False
        if isinstance(a, _Arr) and isinstance(b, _Arr):
            if _apart(a.min_items, a.max_items, b.min_items, b.max_items):
                return True
            for i in range(min(a.min_items, b.min_items)):
                if self.disjoint(_elem(a, i), _elem(b, i), depth + 1):
                    return True
            return False
        if isinstance(a, _Obj) and isinstance(b, _Obj):
            if _apart(a.min_props, a.max_props, b.min_props, b.max_props):
                return True
            for x, y in ((a, b), (b, a)):
                for k in x.required:
                    vy = self.value_schema(y, k)
                    if vy is NOTHING:
                        return True
                    # x requires k, so a common value has k and y constrains it too.
                    if self.disjoint(self.value_schema(x, k), vy, depth + 1):
                        return True
            if a.required or b.required or a.min_props or b.min_props:
                # A common value has a member, whose key both must allow (closed objects
                # told apart by their key patterns: `^[0-9]+x$` keys or `^[a-z]{2}$` ones).
                keys_a, keys_b = self._key_language(a), self._key_language(b)
                if keys_a is not None and keys_b is not None and self.regexes_disjoint(keys_a, keys_b):
                    return True
            return False
        return False

    def _key_language(self, o: _Obj) -> Term | None:
        """A regex term (quotes included, JSON-escaped) holding every key a member of `o`
        may have, or None where that is every string or not known: the listed names
        and the patterns of an object without other keys, within its propertyNames."""
        names: Term | None = None
        if o.names is not ANY:
            alts = []
            for part in o.names.parts if isinstance(o.names, _Union) else (o.names,):
                if isinstance(part, _Const) and isinstance(part.value, str):
                    alts.append(T.lit(_json_str(part.value).encode("utf-8")))
                    continue
                body = _string_body(part) if isinstance(part, _Str) else None
                if body is None:
                    return None
                alts.append(quoted(body[0]))
            names = T.alt(*alts) if alts else T.NOTHING
        if o.additional is not NOTHING:
            return names
        alts = [T.lit(_json_str(k).encode("utf-8")) for k, v in o.props if v is not NOTHING]
        for pattern, v in o.patterns:
            if v is NOTHING:
                continue
            expr = pattern_to_regex(pattern).expr
            if expr is None:
                return names
            alts.append(quoted(expr))
        listed = T.alt(*alts) if alts else T.NOTHING
        return listed if names is None else T.and_(listed, names)


def _same_frame(a: _Obj, b: _Obj) -> bool:
    """Whether two objects agree on everything but their listed properties' schemas."""
    return (
        a.patterns == b.patterns
        and a.additional == b.additional
        and a.required == b.required
        and a.min_props == b.min_props
        and a.max_props == b.max_props
        and a.names == b.names
        and a.some == b.some
    )
