"""Generation: the IR to grammar rules and lexemes."""

from __future__ import annotations

from itertools import compress
from typing import TYPE_CHECKING, Any

import numpy as np

from .._jit import compiled_once
from ..grammar import Grammar, GrammarBuilder, Rule, _new_rule
from ..limits import GrammarError, GrammarLimitExceeded, Limits
from ..regex import charset, regex_escape_bytes
from ..regex import term as T
from ._kernels import flatten_rules, grammar_marks_jit
from .ir import (
    ANY,
    NOTHING,
    _Arr,
    _BoolT,
    _Const,
    _Node,
    _NullT,
    _Num,
    _Obj,
    _Ref,
    _Str,
    _Union,
    witness_bounds,
)
from .keywords import (
    _WHITESPACE,
    ENUM_LEXEME_THRESHOLD,
    NUMBER_REGEX,
)
from .numeric import _literal_term, _num_regex
from .patterns import _json_set, pattern_to_regex
from .pointers import _SPELLING_ENCODER, _json_str, _value_key

# --------------------------------------------------------------------------------------
# Generator: IR -> grammar
# --------------------------------------------------------------------------------------
from .strings import CANON_BODY, GENERAL_BODY, _string_body, quoted, surely_has_a_string

if TYPE_CHECKING:
    from .compiler import _Compiler


class _Generator:
    def __init__(self, comp: "_Compiler", limits: Limits, key_order: str = "any"):
        self.c = comp
        self.limits = limits
        self.key_order = key_order
        self.b = GrammarBuilder(limits)
        self.memo: dict[_Node, int] = {}
        self.pending: list[tuple[int, _Ref]] = []
        self.names = 0
        self._any: int | None = None
        self._nothing: int | None = None
        self._name_counts: dict[str, int] = {}

    # The punctuation lexemes (LBRACE, COMMA, ...) are made on first use: a grammar
    # without arrays then has no bracket lexemes for pruning to renumber away.
    _PUNCTUATION = {"LBRACE": "{", "RBRACE": "}", "LBRACK": "[", "RBRACK": "]", "COMMA": ",", "COLON": ":"}

    def __getattr__(self, name: str) -> int:
        text = _Generator._PUNCTUATION.get(name)
        if text is None:
            raise AttributeError(name)
        if self.key_order == "any" and name in ("LBRACE", "RBRACE"):
            # Objects with keys in any order need every brace to carry its role
            # (GrammarBuilder.object_open): the parser's object stack follows them.
            sym = self.b.object_open() if name == "LBRACE" else self.b.object_close()
        else:
            sym = self.b.literal(text)
        setattr(self, name, sym)
        return sym

    def build(self, root: _Node, whitespace: str) -> Grammar:
        b = self.b
        start = b.nonterminal("start")
        b.rule(start, [self.sym(root)])
        while self.pending:
            nt, ref = self.pending.pop()
            b.rule(nt, [self.sym(self.c.unfold(ref))])
        return self._pruned(start, whitespace)

    # Pruning: drop what derives no finite string, then what is unreachable. Part of
    # every schema's compile time, so the analysis is compiled (grammar_marks_py) and,
    # where it drops nothing (nearly always), the builder's rules are the grammar's. The
    # builder's rules are already unique and within the size limit, and what survives is
    # a valid grammar by construction, so the kept rules are renumbered in place instead
    # of going through a second builder and `validate`.
    def _pruned(self, start: int, whitespace: str) -> Grammar:
        b = self.b
        rules = b.rules
        names = b.nonterminals
        lexemes = b.lexemes
        ignore = [_WHITESPACE] if whitespace == "flexible" else []
        flat = flatten_rules(rules)
        productive = np.empty(len(names), dtype=np.bool_)
        reachable = np.empty(len(names), dtype=np.bool_)
        used = np.empty(len(lexemes), dtype=np.bool_)
        kept_flags = np.empty(len(rules), dtype=np.bool_)
        args = (*flat, start, productive, reachable, used, kept_flags)
        n_kept = compiled_once(grammar_marks_jit, args)(*args)
        if not productive[start]:
            raise GrammarError("the schema at # accepts no finite JSON value (its constraints contradict each other)")
        if n_kept == len(rules) and reachable.all() and used.all():
            for array in flat:
                array.flags.writeable = False  # shared with the parser of every matcher
            return Grammar(list(lexemes), list(names), rules, start, ignore, all_productive=True, flat_rules=flat)
        kept = list(compress(rules, kept_flags.tolist()))
        reach = reachable.tolist()
        lx_used = used.tolist()
        n = len(names)
        if all(reach) and all(lx_used):
            out_lexemes, out_names, new_start = list(lexemes), list(names), start
        else:
            # One list maps both kinds of symbol: nonterminal s at index s, lexeme ~j at
            # index -1 - j, which Python's negative indexing places at the end.
            sym_map = [0] * (n + len(lexemes))
            out_names = []
            for i in range(n):
                if reach[i]:
                    sym_map[i] = len(out_names)
                    out_names.append(names[i])
            out_lexemes = []
            for j, lx in enumerate(lexemes):
                if lx_used[j]:
                    sym_map[~j] = ~len(out_lexemes)
                    out_lexemes.append(lx)
            get = sym_map.__getitem__
            kept = [_new_rule(Rule, (get(lhs), tuple(map(get, rhs)))) for lhs, rhs in kept]
            new_start = sym_map[start]
        return Grammar(out_lexemes, out_names, kept, new_start, ignore, all_productive=True)

    # Helpers ------------------------------------------------------------------------
    def nt(self, name: str) -> int:
        # Number the names here: GrammarBuilder probes name#2, name#3, ... one by one.
        k = self._name_counts.get(name, 0) + 1
        self._name_counts[name] = k
        return self.b.nonterminal(name if k == 1 else f"{name}#{k}", fresh=True)

    def names_of(self, name: str, count: int) -> list[str]:
        """The names of `count` calls of `nt(name)`, without making the nonterminals."""
        k = self._name_counts.get(name, 0)
        self._name_counts[name] = k + count
        return [name if j == 1 else f"{name}#{j}" for j in range(k + 1, k + count + 1)]

    def repeat(self, symbol: int, lo: int, hi: int | None) -> int:
        """symbol{lo,hi} as BNF of size O(lo + hi): like GrammarBuilder.repeat, with names
        numbered here so thousands of them stay cheap."""
        b = self.b
        parts = [symbol] * lo
        if hi is None:
            parts.append(self.star(symbol))
        elif hi > lo:
            parts.append(b.optional_chain(symbol, self.names_of("items", hi - lo)))
        nt = self.nt("items")
        b.rule(nt, parts)
        return nt

    def star(self, symbol: int) -> int:
        # Left recursion: Earley handles it in linear space.
        nt = self.nt("star")
        self.b.rule(nt, [])
        self.b.rule(nt, [nt, symbol])
        return nt

    def regex_lexeme(self, name: str, regex: str, extended: bool) -> int:
        return self.b.lexeme(name, regex, flags="E" if extended else "")

    def string_lexeme(self, body: T.Term, name: str) -> int:
        return self.b.lexeme_expr(name, quoted(body))

    def any_value(self) -> int:
        if self._any is not None:
            return self._any
        b = self.b
        value = self.nt("value")
        self._any = value
        string = self.string_lexeme(GENERAL_BODY, "string")
        number = self.regex_lexeme("number", NUMBER_REGEX, False)
        obj = self.nt("object")
        members = self.nt("members")
        pair = self.nt("pair")
        arr = self.nt("array")
        elems = self.nt("elements")
        for alt in ([obj], [arr], [string], [number], [b.literal("true")], [b.literal("false")], [b.literal("null")]):
            b.rule(value, alt)
        b.rule(obj, [self.LBRACE, self.RBRACE])
        b.rule(obj, [self.LBRACE, members, self.RBRACE])
        b.rule(members, [pair])
        b.rule(members, [members, self.COMMA, pair])
        b.rule(pair, [string, self.COLON, value])
        b.rule(arr, [self.LBRACK, self.RBRACK])
        b.rule(arr, [self.LBRACK, elems, self.RBRACK])
        b.rule(elems, [value])
        b.rule(elems, [elems, self.COMMA, value])
        return value

    def nothing(self) -> int:
        # A nonterminal without rules: pruning removes every rule that mentions it.
        if self._nothing is None:
            self._nothing = self.nt("nothing")
        return self._nothing

    # IR -> symbol --------------------------------------------------------------------
    def sym(self, node: _Node) -> int:
        s = self.memo.get(node)
        if s is None:
            s = self._sym(node)
            self.memo[node] = s
        return s

    def _sym(self, node: _Node) -> int:
        b = self.b
        if node is ANY:
            return self.any_value()
        if node is NOTHING:
            return self.nothing()
        if isinstance(node, _Ref):
            names = sorted(a if isinstance(a, str) else "…" for a in node.atoms)
            nt = self.nt("&".join(names))
            self.pending.append((nt, node))
            return nt
        if isinstance(node, _Union):
            nt = self.nt("anyOf")
            parts = list(node.parts)
            words = [p.value for p in parts if isinstance(p, _Const) and isinstance(p.value, str)]
            if len(words) > ENUM_LEXEME_THRESHOLD:
                # One trie-shaped lexeme instead of hundreds of literals: the lexer then
                # follows one expression per byte, not one per value.
                b.rule(nt, [self.b.lexeme_expr("enum", _literal_term(tuple(_json_str(w) for w in words)))])
                parts = [p for p in parts if not (isinstance(p, _Const) and isinstance(p.value, str))]
            for p in parts:
                b.rule(nt, [self.sym(p)])
            return nt
        if isinstance(node, _NullT):
            return b.literal("null")
        if isinstance(node, _BoolT):
            nt = self.nt("boolean")
            b.rule(nt, [b.literal("true")])
            b.rule(nt, [b.literal("false")])
            return nt
        if isinstance(node, _Const):
            return self.const(node.value)
        if isinstance(node, _Num):
            lx = _num_regex(node, "#", self.c.limits, self.c.zero_fraction_integers)
            if lx is None or (lx[1] and self.c.regex_empty(T.src(lx[0]))):
                return self.nothing()
            return self.regex_lexeme("integer" if node.integer else "number", lx[0], lx[1])
        if isinstance(node, _Str):
            return self.string(node)
        if isinstance(node, _Arr):
            return self.array(node)
        if isinstance(node, _Obj):
            return self.object(node)
        raise AssertionError(node)

    def const(self, v: Any) -> int:
        b = self.b
        if isinstance(v, dict):
            if v and self.key_order == "any":
                # JSON Schema compares objects by their members, not their order: each
                # key once, in any order, none other (as a typed object's listed keys).
                listed = [(k, _Const(x), True) for k, x in v.items()]
                obj = self.object_any_order(listed, tuple(v), None, 0, None)
                if obj is not None:
                    return obj
            nt = self.nt("const")
            rhs = [self.LBRACE]
            for i, (k, x) in enumerate(v.items()):
                if i:
                    rhs.append(self.COMMA)
                rhs += [b.literal(_json_str(k)), self.COLON, self.const(x)]
            b.rule(nt, rhs + [self.RBRACE])
            return nt
        if isinstance(v, list):
            nt = self.nt("const")
            rhs = [self.LBRACK]
            for i, x in enumerate(v):
                if i:
                    rhs.append(self.COMMA)
                rhs.append(self.const(x))
            b.rule(nt, rhs + [self.RBRACK])
            return nt
        exact_int = isinstance(v, int) and not isinstance(v, bool)
        if exact_int or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
            # JSON Schema compares numbers by value: 1, 1.0 and 1.00 are one constant. A
            # JSON integer is exact at any size; a float only where its digits are.
            text = str(int(v))
            return self.regex_lexeme("number", regex_escape_bytes(text.encode()) + "(?:\\.0+)?", False)
        return b.literal(_SPELLING_ENCODER.encode(v))

    def string(self, node: _Str) -> int:
        body = _string_body(node)
        if body is None:
            return self.nothing()
        if body[1]:
            if surely_has_a_string(node):
                # Known here at no cost; the lexer would search for it at the first
                # row that expects the lexeme.
                self.c.note_has_a_string(quoted(body[0]))
            elif self.c.regex_empty(quoted(body[0]), _describe_string(node)):
                return self.nothing()
        name = "string" if body[0] == GENERAL_BODY else "string(constrained)"
        return self.string_lexeme(body[0], name)

    def array(self, node: _Arr) -> int:
        if node.unique:
            return self.unique_array(node)
        b = self.b
        prefix = [self.sym(p) for p in node.prefix]
        p = len(prefix)
        lo, hi = node.min_items, node.max_items
        item = None if node.items is NOTHING else self.sym(node.items)
        # _make_arr guarantees lo <= hi, lo <= len(prefix) when no further item fits, and
        # lo > len(prefix) when there are `contains` witnesses.
        comma_item = None
        if item is not None:
            comma_item = self.nt("item")
            b.rule(comma_item, [self.COMMA, item])
        nt = self.nt("array")
        if node.contains:
            tail_start = self.witness_tail(node, item, comma_item)
            if p == 0:
                b.rule(nt, [self.LBRACK, tail_start, self.RBRACK])
                return nt
        # rest[i]: the elements from index i on, each after a comma (None: no element fits).
        rest: list[int | None] = [None] * (p + 1)
        if node.contains:
            rest[p] = tail_start
        elif p > 0 and comma_item is not None and (hi is None or hi > p):
            rest[p] = self.repeat(comma_item, max(0, lo - p), None if hi is None else hi - p)
        for i in range(p - 1, 0, -1):
            if hi is not None and i >= hi:
                continue
            t = self.nt("items")
            after = rest[i + 1]
            if after is not None or i + 1 >= lo:
                b.rule(t, [self.COMMA, prefix[i]] + ([after] if after is not None else []))
            if i >= lo:
                b.rule(t, [])
            rest[i] = t
        if lo == 0:
            b.rule(nt, [self.LBRACK, self.RBRACK])
        first = prefix[0] if prefix else item
        if first is not None and (hi is None or hi >= 1):
            tail = (
                rest[1]
                if p >= 1
                else (
                    self.repeat(comma_item, max(0, lo - 1), None if hi is None else hi - 1)
                    if comma_item is not None and (hi is None or hi > 1)
                    else None
                )
            )
            if tail is not None or lo <= 1:
                b.rule(nt, [self.LBRACK, first] + ([tail] if tail is not None else []) + [self.RBRACK])
        return nt

    def unique_array(self, node: _Arr) -> int:
        """An array whose elements differ, each position admitting few values: a state
        per set of values used so far. The set's size is the count of elements, so it
        also says which prefix position comes next and how many more may."""
        b = self.b
        c = self.c
        p = len(node.prefix)
        keys: dict[Any, int] = {}
        symbols: list[int] = []

        def indices(sch: _Node) -> int:
            """The bit set of the values `sch` admits, numbering new ones."""
            values = c.finite_values(sch)
            assert values is not None  # the compiler enforces uniqueness only where so
            bits = 0
            for v in values:
                key = _value_key(v)
                if key not in keys:
                    if len(keys) >= self.limits.max_unique_values:
                        raise GrammarLimitExceeded(
                            "max_unique_values", self.limits.max_unique_values, "uniqueItems: too many element values"
                        )
                    keys[key] = len(symbols)
                    symbols.append(self.sym(_Const(v)))
                bits |= 1 << keys[key]
            return bits

        at = [indices(x) for x in node.prefix]
        rest = 0 if node.items is NOTHING else indices(node.items)
        lo, hi = node.min_items, node.max_items
        names: dict[int, int] = {}
        todo: list[int] = []

        def state(used: int) -> int:
            nt = names.get(used)
            if nt is None:
                nt = names[used] = self.nt("unique")
                todo.append(used)
                if len(names) > self.limits.max_object_states:
                    raise GrammarLimitExceeded(
                        "max_object_states", self.limits.max_object_states, "uniqueItems: too many sets of values"
                    )
            return nt

        first = state(0)
        while todo:
            used = todo.pop()
            nt = names[used]
            count = used.bit_count()
            if count >= lo:
                b.rule(nt, [])
            if hi is not None and count >= hi:
                continue
            allowed = (at[count] if count < p else rest) & ~used
            sep = [self.COMMA] if count else []
            while allowed:
                bit = allowed & -allowed
                allowed ^= bit
                b.rule(nt, sep + [symbols[bit.bit_length() - 1], state(used | bit)])
        arr = self.nt("array")
        b.rule(arr, [self.LBRACK, first, self.RBRACK])
        return arr

    def witness_tail(self, node: _Arr, item: int | None, comma_item: int | None) -> int:
        """The elements after the prefix when some must satisfy `contains` schemas: a
        state machine over (elements so far, matches of each witness so far)."""
        b = self.b
        c = self.c
        p = len(node.prefix)
        bounds = [witness_bounds(w) for w in node.contains]
        lo_t = max(0, node.min_items - p)
        hi_t = None if node.max_items is None else node.max_items - p
        cap = hi_t if hi_t is not None else max(lo_t, 1)
        # Per witness the counts told apart: up to its least count where nothing bounds
        # it above (more is as good), else up to its greatest.
        tops = [lo if hi is None else hi for _, lo, hi in bounds]
        states = cap + 1
        for top in tops:
            states *= top + 1
        if states > self.limits.max_object_states:
            raise GrammarError(
                f"array with minItems/maxItems {node.min_items}/{node.max_items} and contains needs too many states"
            )
        # One element symbol per set of witnesses it counts for. A witness with a greatest
        # count counts every element it matches, so an element outside the set must not.
        misses: dict[int, _Node] = {}
        for i, (w, _, hi) in enumerate(bounds):
            if hi is not None:
                try:
                    misses[i] = c.negate(w, "maxContains")
                except GrammarError as e:
                    raise GrammarError(f"maxContains: cannot tell the elements its schema rejects ({e})") from None
        claims: list[tuple[int, int]] = []
        for mask in range(1 << len(bounds)):
            sch = node.items
            for i, (w, _, _) in enumerate(bounds):
                if mask >> i & 1:
                    sch = c.intersect(sch, w)
                elif i in misses:
                    sch = c.intersect(sch, misses[i])
            if sch is not NOTHING:
                claims.append((mask, self.sym(sch)))
        unbounded = not misses
        names: dict[tuple[int, tuple[int, ...]], int] = {}
        todo: list[tuple[int, tuple[int, ...]]] = []

        def state(key: tuple[int, tuple[int, ...]]) -> int:
            nt = names.get(key)
            if nt is None:
                nt = names[key] = self.nt("items")
                todo.append(key)
            return nt

        first = state((0, (0,) * len(bounds)))
        while todo:
            cnt, counts = todo.pop()
            nt = names[(cnt, counts)]
            sep = [self.COMMA] if (p > 0 or cnt > 0) else []
            met = all(n >= lo for n, (_, lo, _) in zip(counts, bounds, strict=True))
            if met and unbounded and hi_t is None and cnt == cap and comma_item is not None:
                b.rule(nt, [self.star(comma_item)])
                continue
            if met and cnt >= lo_t:
                b.rule(nt, [])
            if hi_t is not None and cnt >= hi_t:
                continue
            after = cnt + 1 if hi_t is not None else min(cnt + 1, cap)
            for mask, sym in claims:
                grown: list[int] = []
                for i, (n, (_, lo, hi)) in enumerate(zip(counts, bounds, strict=True)):
                    if mask >> i & 1:
                        n += 1
                        if hi is None:
                            n = min(n, lo)
                        elif n > hi:
                            break  # one match too many
                    grown.append(n)
                else:
                    b.rule(nt, sep + [sym, state((after, tuple(grown)))])
        return first

    def object(self, node: _Obj) -> int:
        b = self.b
        c = self.c
        listed: list[tuple[str, _Node, bool]] = []
        names: list[str] = []
        required = set(node.required)
        # value_schema, without its scan of the properties per key (quadratic in their
        # number) where no patternProperties can add to a listed property's schema.
        own: dict[str, _Node] | None = None
        if not node.patterns:
            own = {}
            for k, v in node.props:
                own.setdefault(k, v)
        for k, _ in node.props:
            listed.append((k, own[k] if own is not None else c.value_schema(node, k), k in required))
            names.append(k)
        seen = set(names)
        for r in node.required:
            if r not in seen:
                listed.append((r, c.value_schema(node, r), True))
                names.append(r)
                seen.add(r)
        if node.names is not ANY:
            # A listed key the key schema rejects cannot appear.
            listed = [(k, v if c.accepts(node.names, k) else NOTHING, req) for k, v, req in listed]
        if any(v is NOTHING and req for _, v, req in listed):
            return self.nothing()
        listed = [x for x in listed if x[1] is not NOTHING]
        extra = self.extra_members(node, names)
        lo, hi = node.min_props, node.max_props
        n = len(listed)
        asked: dict[int, int] | None = None
        if node.some:
            if self.key_order != "any":
                raise GrammarError(
                    "an object schema that must hold a member it does not list (the complement of a closed "
                    "object) needs key_order='any'"
                )
            asked = self.asked_members(node, listed, names)
            if asked is None:
                return self.nothing()
        if self.key_order == "any":
            obj = self.object_any_order(listed, node.required, extra, lo, hi, asked)
            if obj is not None:
                return obj
        # Members emitted so far are counted up to `cap`: exactly when maxProperties
        # bounds them, otherwise saturating once minProperties (and "need a comma") is met.
        cap = hi if hi is not None else max(lo, 1)
        if (n + 1) * (cap + 1) > self.limits.max_object_states:
            raise GrammarError(
                f"object schema with {n} properties and minProperties {lo} / maxProperties {hi} "
                "needs too many grammar states"
            )
        keys = [b.literal(_json_str(k)) for k, _, _ in listed]
        values = [self.sym(v) for _, v, _ in listed]

        def bump(cnt: int) -> int:
            return cnt + 1 if hi is not None else min(cnt + 1, cap)

        # state[i][cnt]: the members from listed property i on, after cnt members. Only
        # reachable states are made (the others would be built just for pruning to drop):
        # before property i, at least the required ones and at most i members are written.
        first: list[int] = []
        req = 0
        for i in range(n + 1):
            first.append(min(req, cap))
            if i < n and listed[i][2]:
                req += 1
        state: list[dict[int, int]] = [
            {cnt: self.nt("members") for cnt in range(first[i], (min(i, cap) if i < n else cap) + 1)}
            for i in range(n + 1)
        ]
        for cnt in range(first[n], cap + 1):
            nt = state[n][cnt]
            sep = [self.COMMA] if cnt > 0 else []
            saturated = hi is None and cnt == cap
            if extra is not None and saturated:
                more = self.nt("member")
                b.rule(more, [self.COMMA, extra])
                b.rule(nt, [self.star(more)])
                continue
            if cnt >= lo:
                b.rule(nt, [])
            if extra is not None and (hi is None or cnt < hi):
                b.rule(nt, sep + [extra, state[n][bump(cnt)]])
        for i in range(n - 1, -1, -1):
            for cnt, nt in state[i].items():
                sep = [self.COMMA] if cnt > 0 else []
                if hi is None or cnt < hi:
                    b.rule(nt, sep + [keys[i], self.COLON, values[i], state[i + 1][bump(cnt)]])
                if not listed[i][2]:
                    b.rule(nt, [state[i + 1][cnt]])
        obj = self.nt("object")
        b.rule(obj, [self.LBRACE, state[0][0], self.RBRACE])
        return obj

    def asked_members(self, node: _Obj, listed: list, names: list[str]) -> dict[int, int] | None:
        """For each set of `node.some`'s pairs (a bit mask), a member meeting all of them
        at once, where one can; None where some pair no member meets."""
        some = node.some
        out: dict[int, int] = {}
        for mask in range(1, 1 << len(some)):
            key: _Node = ANY
            value: _Node = ANY
            for i, (k, v) in enumerate(some):
                if mask >> i & 1:
                    key, value = self.c.intersect(key, k), self.c.intersect(value, v)
            member = self.member_meeting(node, listed, names, key, value)
            if member is not None:
                out[mask] = member
        covered = 0
        for mask in out:
            covered |= mask
        return out if covered == (1 << len(some)) - 1 else None

    def member_meeting(self, node: _Obj, listed: list, names: list[str], key: _Node, value: _Node) -> int | None:
        """A member of `node` whose key `key` accepts and whose value `value` does: a
        listed key with both values, or another key of both languages; None where no
        member can."""
        if key is NOTHING or value is NOTHING:
            return None
        b, c = self.b, self.c
        alts = []
        for k, v, _ in listed:
            if c.accepts(key, k):
                sym = self.sym(c.intersect(v, value))
                if sym != self._nothing:
                    alts.append([b.member_key(k, _json_str(k)), self.COLON, sym])
        others = _Obj(
            node.props,
            tuple((p, c.intersect(v, value)) for p, v in node.patterns),
            c.intersect(node.additional, value),
            (),
            0,
            None,
            c.intersect(node.names, key),
        )
        extra = self.extra_members(others, names)
        if extra is not None:
            alts.append([extra])
        if not alts:
            return None
        nt = self.nt("member")
        for alt in alts:
            b.rule(nt, alt)
        return nt

    def object_any_order(
        self,
        listed: list,
        required: tuple,
        extra: int | None,
        lo: int,
        hi: int | None,
        asked: dict[int, int] | None = None,
    ) -> int | None:
        """An object whose members come in any order, each listed key at most once, or
        None where there is nothing to order (no listed key: schema order is the same).

        A unique-member object (GrammarBuilder.object_open): the grammar is linear,
        `{ member (, member)* }` with a member per listed key (its own key lexeme) and
        the extra members (additional/patternProperties), and the parser keeps the keys
        each open object has written, so a listed key is not offered twice, the
        close brace only once every required key is written, and (where no unlisted key
        may come) a comma only while a listed key is left. Exact, with grammar size
        linear in the keys however many there are. minProperties/maxProperties count
        members through a chain of `cap` states, as in schema order: a cap past
        `Limits.max_object_states` is refused. Keys outside the listed ones are not
        tracked: such a key written twice is not caught (a JSON parser keeps one value,
        and each matched the schema)."""
        n = len(listed)
        if n == 0 and asked is None:
            return None
        b = self.b
        cap = hi if hi is not None else max(lo, 1)
        if cap + 1 > self.limits.max_object_states:
            raise GrammarError(
                f"object schema with minProperties {lo} / maxProperties {hi} needs {cap + 1} grammar states, "
                f"past Limits.max_object_states={self.limits.max_object_states}"
            )
        # A key whose value has no instance is no member: the parser must not count on it
        # (a required one makes the object impossible, an optional one is never written).
        values = [(k, self.sym(v), req) for k, v, req in listed]
        if any(req and v == self._nothing for _, v, req in values):
            return self.nothing()
        values = [x for x in values if x[1] != self._nothing]
        if extra is None and lo > len(values):
            # The grammar alone would take more members than the keys allow; the parser
            # would then refuse every way on (a dead end instead of a refusal).
            return self.nothing()
        names = {k for k, _, _ in values}
        member = self.nt("member")
        for k, v, _ in values:
            b.rule(member, [b.member_key(k, _json_str(k)), self.COLON, v])
        if extra is not None:
            b.rule(member, [extra])
        close = b.object_close([k for k in required if k in names])
        # Without unlisted keys a comma needs a listed key left to follow it.
        comma = self.COMMA if extra is not None else b.object_separator(names)
        obj = self.nt("object")
        if lo == 0 and not any(req for _, _, req in listed) and asked is None:
            b.rule(obj, [self.LBRACE, close])
        if hi is not None and hi == 0:
            return obj
        # after[c]: the members after the first c, counted up to `cap` (saturating past
        # minProperties when maxProperties does not bound them).
        after = [0] + [self.nt("members") for _ in range(cap)]
        for c in range(1, cap + 1):
            nt = after[c]
            if hi is None and c == cap:
                # Left recursion: any number more, in constant items per row.
                b.rule(nt, [])
                b.rule(nt, [nt, comma, member])
                continue
            if c >= lo:
                b.rule(nt, [])
            if c < cap:
                b.rule(nt, [comma, member, after[c + 1]])
        if asked is None:
            b.rule(obj, [self.LBRACE, member, after[1], close])
            return obj
        # The members `some` asks for (`asked_members`: one per set of its pairs met at
        # once), each written first or after others: chain[met][c] counts as after[c]
        # does, with the pairs of `met` met so far; once all are, it is after[c].
        full = (1 << max(asked).bit_length()) - 1  # every pair: `asked` covers them all
        chain: dict[int, list[int]] = {full: after}
        for met in range(full):
            chain[met] = [0] + [self.nt("members") for _ in range(cap)]
        others = None
        for met in range(full):
            for c in range(1, cap + 1):
                nt = chain[met][c]
                if hi is None and c == cap:
                    if others is None:
                        others = self.nt("members")
                        b.rule(others, [])
                        b.rule(others, [others, comma, member])
                    for mask, m in asked.items():
                        if mask & ~met:
                            b.rule(nt, [others, comma, m, chain[met | mask][cap]])
                elif c < cap:
                    b.rule(nt, [comma, member, chain[met][c + 1]])
                    for mask, m in asked.items():
                        if mask & ~met:
                            b.rule(nt, [comma, m, chain[met | mask][c + 1]])
        b.rule(obj, [self.LBRACE, member, chain[0][1], close])
        for mask, m in asked.items():
            b.rule(obj, [self.LBRACE, m, chain[mask][1], close])
        return obj

    def disjoint_patterns(self, langs: list[T.Term | None]) -> list[int]:
        """Per pattern group, the bit set of the groups no key can match together with it
        (a group without a language is disjoint from all)."""
        n = len(langs)
        disjoint = [0] * n
        for i in range(n):
            for j in range(i + 1, n):
                a, b = langs[i], langs[j]
                if a is None or b is None or self.c.regex_empty(T.and_(a, b)):
                    disjoint[i] |= 1 << j
                    disjoint[j] |= 1 << i
        return disjoint

    def key_classes(self, disjoint: list[int], langs: list[T.Term | None]) -> list[int]:
        """The sets of pattern groups (bit masks) a key may match at once, no pattern
        first: those whose groups pairwise overlap. Patterns told apart by a literal
        prefix (`^table `, `^view `) are disjoint, so their classes grow with their
        number, not with its power."""
        cap = self.limits.max_key_classes
        classes = [0]

        def grow(mask: int, start: int) -> None:
            for i in range(start, len(langs)):
                if langs[i] is not None and not disjoint[i] & mask:
                    classes.append(mask | 1 << i)
                    if len(classes) > cap:
                        raise GrammarLimitExceeded(
                            "max_key_classes",
                            cap,
                            f"object schema whose {len(langs)} patternProperties overlap in more than {cap} ways",
                        )
                    grow(mask | 1 << i, i + 1)

        grow(0, 0)
        return classes

    def extra_members(self, node: _Obj, listed: list[str]) -> int | None:
        """A member `key : value` for keys not listed, or None when none is allowed."""
        b = self.b
        c = self.c
        # Group patterns with equal value schemas: a key matching several patterns of one
        # group needs that schema once.
        groups: list[tuple[list[str], _Node]] = []
        for p, v in node.patterns:
            for g in groups:
                if g[1] == v:
                    g[0].append(p)
                    break
            else:
                groups.append(([p], v))
        if len(groups) > self.limits.max_pattern_groups:
            raise GrammarLimitExceeded(
                "max_pattern_groups",
                self.limits.max_pattern_groups,
                f"object schema with {len(groups)} patternProperties of different schemas",
            )
        # Key languages as regex terms, the patterns as their parses (`regex.term`).
        names_re = None
        if node.names is not ANY:
            alts = []
            for part in node.names.parts if isinstance(node.names, _Union) else (node.names,):
                if isinstance(part, _Const) and isinstance(part.value, str):
                    alts.append(T.lit(_json_str(part.value).encode()))
                elif isinstance(part, _Str):
                    body = _string_body(part)
                    if body is not None:
                        alts.append(quoted(body[0]))
            if not alts:
                return None
            names_re = T.alt(*alts)
        if not groups and node.additional is NOTHING:
            return None
        exclude = None
        words: list[bytes] = []
        if listed:
            # The listed keys' encoded text, with and without the quotes.
            words = [_json_str(k)[1:-1].encode() for k in listed]
            exclude = T.alt(*[quoted(T.lit(w)) for w in words])
        group_langs: list[T.Term | None] = []
        group_bodies: list[T.Term | None] = []
        # Per group, the characters whose presence is all its patterns ask (see
        # `_Pattern.char_set`), or None.
        group_chars: list[charset.CharSet | None] = []
        for pats, _ in groups:
            langs: list[T.Term] = []
            sets = []
            for translated in map(pattern_to_regex, pats):
                if translated.expr is not None:
                    langs.append(translated.expr)
                    sets.append(translated.char_set)
            group_langs.append(quoted(T.alt(*langs)) if langs else None)
            group_bodies.append(T.alt(*langs) if langs else None)
            known = [c for c in sets if c is not None]
            group_chars.append(
                charset.normalize([r for c in known for r in c]) if known and len(known) == len(sets) else None
            )
        members = []
        if len(groups) > 1:
            disjoint = self.disjoint_patterns(group_langs)
            classes = self.key_classes(disjoint, group_langs)
        else:
            # Most objects: no pattern, or one (its keys, and the others).
            disjoint = [0] * len(groups)
            classes = [0] + [1 for lang in group_langs if lang is not None]
        for mask in classes:
            inside = [i for i in range(len(groups)) if mask >> i & 1]
            if mask == 0:
                value = node.additional
            else:
                value = ANY
                for i in inside:
                    value = c.intersect(value, groups[i][1])
            if value is NOTHING:
                continue
            conj = [quoted(CANON_BODY)] if mask == 0 else []
            conj += [lang for i in inside if (lang := group_langs[i]) is not None]
            # A pattern disjoint from one the key matches needs no exclusion.
            conj += [
                T.not_(lang)
                for i in range(len(groups))
                if i not in inside and not disjoint[i] & mask and (lang := group_langs[i])
            ]
            if exclude is not None:
                conj.append(T.not_(exclude))
            if names_re is not None:
                conj.append(names_re)
            if len(conj) == 1 and mask == 0:
                key = self.string_lexeme(GENERAL_BODY, "string")
            elif len(conj) == 1:
                key = self.b.lexeme_expr("key", conj[0])
            else:
                if mask == 0 and names_re is None:
                    # The same language with the quotes outside the intersection: after the
                    # opening quote the lexeme is `(C* & ~E) "`, a shape the slicer can
                    # prove contains its string slices (docs/design/engine.md).
                    body_of_others, unfolded = _strings_avoiding(group_bodies, group_chars)
                    inner = [body_of_others]
                    inner += [T.not_(body) for body in unfolded]
                    if listed and len(inner) == 1:
                        # The common case, only the listed keys excluded: one exclusion
                        # node, without an alternation of the words to intersect with.
                        regex = quoted(T.excl(body_of_others, words))
                    else:
                        if listed:
                            inner.append(T.not_(T.alt(*map(T.lit, words))))
                        regex = quoted(T.and_(*inner))
                    key = self.b.lexeme_expr("key", regex)
                    m = self.nt("member")
                    b.rule(m, [key, self.COLON, self.sym(value)])
                    members.append(m)
                    continue
                regex = T.and_(*conj)
                # Removing finitely many names from all strings leaves some: only a
                # pattern or propertyNames can make a key language empty.
                if (mask or names_re is not None) and self.c.regex_empty(regex):
                    continue
                key = self.b.lexeme_expr("key", regex)
            m = self.nt("member")
            b.rule(m, [key, self.COLON, self.sym(value)])
            members.append(m)
        if not members:
            return None
        if len(members) == 1:
            return members[0]
        nt = self.nt("member")
        for m in members:
            b.rule(nt, [m])
        return nt


def _describe_string(node: _Str) -> str:
    """A string schema in words, for a refusal (IR nodes do not keep their place)."""
    parts = [f"minLength {node.min_len}"] if node.min_len else []
    if node.max_len is not None:
        parts.append(f"maxLength {node.max_len}")
    parts += [f"pattern {p!r}" for p in node.patterns[:2]]
    if node.excluded:
        parts.append(f"{len(node.excluded)} excluded values")
    return "string schema with " + ", ".join(parts)


def _strings_avoiding(bodies: list[T.Term | None], chars: list[charset.CharSet | None]) -> tuple[T.Term, list[T.Term]]:
    """String bodies none of `bodies` matches, as (a body, the bodies still to exclude
    from it). A pattern that asks only for some character of c (`.+`) is no complement
    but the strings of the other characters: `C* & ~(C*·c·C*)` is `(C - c)*`, since a
    JSON string reads as characters one way only. Its derivatives are plain ones,
    where the complement's each took an emptiness search."""
    avoided: list[tuple[int, int]] = []
    unfolded = []
    for body, c in zip(bodies, chars, strict=True):
        if body is None:
            continue
        if c is None:
            unfolded.append(body)
        else:
            avoided.extend(c)
    if not avoided:
        return CANON_BODY, unfolded
    one = _json_set(charset.complement(charset.normalize(avoided)))
    return (T.rep(one, 0, None) if one is not None else T.EMPTY), unfolded
