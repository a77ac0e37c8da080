"""The grammar every front end compiles to: lexemes (regular expressions) below, a CFG above.

This is the lexer/parser split of docs/design/engine.md. Lexemes are regular
expressions over bytes, matched greedily by the derivative lexer; rules are plain
BNF over lexemes and nonterminals, parsed by the Earley parser. Front ends (Lark
text, a single regex, JSON Schema) desugar their own operators (`*`, `+`, `?`,
`{m,n}`, groups) into BNF with fresh nonterminals and hand over this flat form.

Symbols are plain ints so the parser can keep them in numpy arrays: a nonterminal
is its index (>= 0); lexeme `i` is the symbol `~i` (-1 - i, always negative).

This module is the IR only: every front end imports it to build its grammars, so it
imports none of them. Its constructors (`Grammar.from_lark`, `from_json_schema`) call
the front end the package's `__init__` bound in frontends.py.
"""

from __future__ import annotations

import hashlib
import marshal
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat as repeated
from typing import Iterable, NamedTuple, Sequence

from .frontends import front_end
from .limits import DEFAULT_LIMITS, GrammarError, LimitExceeded, Limits, check_compile_budget
from .regex import regex_escape_bytes
from .regex.term import Term, render


def lexeme_symbol(lexeme_id: int) -> int:
    return ~lexeme_id


def is_lexeme(symbol: int) -> bool:
    return symbol < 0


def lexeme_of(symbol: int) -> int:
    return ~symbol


class Lexeme:
    """A terminal of the grammar.

    `regex` uses midword's regex syntax (Python `re` syntax without backreferences,
    lookaround or anchors, plus `&` and `~`); `literal` is set when the lexeme is an
    exact byte string, which lets fast-forward and error messages show it plainly.
    `expr`, when set, is the lexeme itself as a regex term (`regex.term`): a front end
    that parsed its patterns already builds the expression from the parse, and `regex`
    is then only its rendering, for reading.

    Immutable. `name` and `regex` may be given as None where `literal` or `expr` says
    it all; they are then spelled out when first read: a schema makes thousands of
    keys, and nothing on the way to its first mask reads their names or regexes.
    """

    __slots__ = ("_name", "_regex", "literal", "flags", "expr", "role")
    _name: str | None
    _regex: str | None
    literal: bytes | None
    flags: str
    expr: Term | None
    # Set on the lexemes of unique-member objects (GrammarBuilder.object_open and the
    # three after it): ("open",), ("close", required keys), ("more", keys) or ("key",
    # key text).
    role: tuple | None

    def __init__(
        self,
        name: str | None,
        regex: str | None,
        literal: bytes | None = None,
        flags: str = "",
        expr: Term | None = None,
        role: tuple | None = None,
    ):
        if regex is None and literal is None and expr is None:
            raise ValueError("a lexeme needs a regex, a literal or a regex term")
        if name is None and literal is None:
            raise ValueError("a lexeme without a literal needs a name")
        setter = object.__setattr__
        setter(self, "_name", name)
        setter(self, "_regex", regex)
        setter(self, "literal", literal)
        setter(self, "flags", flags)
        setter(self, "expr", expr)
        setter(self, "role", role)

    @property
    def name(self) -> str:
        name = self._name
        if name is None:
            assert self.literal is not None  # checked when made
            name = _literal_name(self.literal)
            object.__setattr__(self, "_name", name)
        return name

    @property
    def regex(self) -> str:
        regex = self._regex
        if regex is None:
            regex = render(self.expr) if self.expr is not None else regex_escape_bytes(self.literal or b"")
            object.__setattr__(self, "_regex", regex)
        return regex

    def _fields(self) -> tuple:
        return (self.name, self.regex, self.literal, self.flags, self.expr, self.role)

    def __setattr__(self, attr: str, value) -> None:
        raise AttributeError(f"a Lexeme is immutable: cannot set {attr}")

    def __delattr__(self, attr: str) -> None:
        raise AttributeError(f"a Lexeme is immutable: cannot delete {attr}")

    def __eq__(self, other) -> bool:
        if other.__class__ is not Lexeme:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        name, regex, literal, flags, expr, role = self._fields()
        return f"Lexeme(name={name!r}, regex={regex!r}, literal={literal!r}, flags={flags!r}, expr={expr!r}, role={role!r})"

    def __reduce__(self):
        return (Lexeme, (self._name, self._regex, self.literal, self.flags, self.expr, self.role))

    def content(self) -> tuple:
        """What the lexeme matches, and its role, as a tuple for grammar keys: without
        the name, and without the regex where the literal or the term gives it."""
        regex = self._regex if self.expr is None and self.literal is None else None
        return (regex, self.literal, self.flags, self.expr, self.role)


class Rule(NamedTuple):
    # A named tuple, not a dataclass: grammars hold tens of thousands of rules, built,
    # hashed and deduplicated at every compile, and tuples of ints are cheap for all
    # of that (and for the garbage collector, which stops tracking them).
    lhs: int
    rhs: tuple[int, ...]


# Makes a Rule without the named tuple's __new__, a Python-level call.
_new_rule = tuple.__new__


@dataclass
class Grammar:
    lexemes: list[Lexeme]
    nonterminals: list[str]
    rules: list[Rule]
    start: int
    # Regexes skipped between lexemes (Lark's %ignore), joined as one alternation.
    ignore: list[str] = field(default_factory=list)
    # Whether %ignore'd text may precede the first lexeme. Off by default, as in
    # llguidance: generated output then starts with real content.
    allow_initial_skip: bool = False
    # What a front end relaxed or approximated (e.g. JSON Schema `uniqueItems`); not part
    # of the language, so not part of the fingerprint.
    warnings: list[str] = field(default_factory=list, compare=False)
    # Set by a front end that already dropped every rule naming a nonterminal that
    # derives no finite string (the JSON Schema compiler prunes so): the parser then
    # skips that analysis, a third of its set-up time.
    all_productive: bool = field(default=False, compare=False)
    # The rules as `analysis.flatten_rules` makes them (left sides, right-side lengths,
    # right sides end to end), where the front end already made them for an analysis of
    # its own (the JSON Schema compiler's pruning): the parser then reads them instead
    # of flattening every rule again in the grammar's time to first mask.
    flat_rules: tuple | None = field(default=None, compare=False, repr=False)

    # Front ends ---------------------------------------------------------------
    @classmethod
    def from_lark(cls, text: str, *, start: str = "start") -> "Grammar":
        """A Lark grammar (lark.py)."""
        return front_end("lark")(text, start=start)

    @classmethod
    def from_json_schema(cls, schema, **options) -> "Grammar":
        """A JSON Schema, as a dict or JSON text (jsonschema.py)."""
        return front_end("json_schema")(schema, **options)

    @classmethod
    def from_regex(cls, regex: str, *, flags: str = "") -> "Grammar":
        """One regex in midword's syntax, matched whole."""
        b = GrammarBuilder()
        start = b.nonterminal("start")
        b.rule(start, [b.lexeme("REGEX", regex, flags=flags)])
        return b.build(start)

    # Introspection ------------------------------------------------------------
    def symbol_name(self, symbol: int) -> str:
        if is_lexeme(symbol):
            return self.lexemes[lexeme_of(symbol)].name
        return self.nonterminals[symbol]

    def size(self) -> int:
        return sum(1 + len(r.rhs) for r in self.rules)

    def fingerprint(self) -> str:
        """A stable hash of the grammar's content, for keys that must be short or
        outlive the process (in-process caches use content_key(), which is cheaper).
        Computed once per object; a grammar is not changed after it is built."""
        return self._fingerprint

    def content_key(self) -> tuple:
        """The grammar's content as one hashable tuple, equal exactly when fingerprint()
        is: the key of in-process caches of compiled grammars. Building and hashing it
        costs a third of fingerprint()'s serialisation and SHA-256, which every new
        grammar would pay in its time to first mask. Computed once per object."""
        return self._content_key

    @cached_property
    def _fingerprint(self) -> str:
        # One serialisation of everything, hashed once; marshal is five times faster
        # than repr. Format 2 has no back-references, so equal content gives equal
        # bytes whatever objects it shares. The format may change between Python
        # versions, which would only matter to caches on disk (grammars have none).
        content = (
            [lx.content() for lx in self.lexemes],
            [(r.lhs, r.rhs) for r in self.rules],
            self.start,
            list(self.ignore),
            self.allow_initial_skip,
        )
        return hashlib.sha256(marshal.dumps(content, 2)).hexdigest()

    @cached_property
    def _content_key(self) -> tuple:
        return (
            tuple([lx.content() for lx in self.lexemes]),
            tuple(self.rules),
            self.start,
            tuple(self.ignore),
            self.allow_initial_skip,
        )

    def __str__(self) -> str:
        lines = []
        for r in self.rules:
            rhs = " ".join(self.symbol_name(s) for s in r.rhs) or "ε"
            lines.append(f"{self.nonterminals[r.lhs]} -> {rhs}")
        for lx in self.lexemes:
            lines.append(f"{lx.name} = /{lx.regex}/{lx.flags}")
        for ig in self.ignore:
            lines.append(f"%ignore /{ig}/")
        return "\n".join(lines)


class GrammarBuilder:
    """Collects lexemes and rules; deduplicates identical lexemes."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS):
        self.limits = limits
        self.lexemes: list[Lexeme] = []
        self._lexeme_index: dict[tuple, int] = {}
        self._literal_index: dict[bytes | str, int] = {}
        self.nonterminals: list[str] = []
        self._nonterminal_index: dict[str, int] = {}
        self.rules: list[Rule] = []
        self._rule_set: set[Rule] = set()
        self.ignore: list[str] = []
        self.allow_initial_skip = False
        self._fresh_counter: dict[str, int] = {}
        self._size = 0

    def lexeme(self, name: str, regex: str, *, literal: bytes | None = None, flags: str = "") -> int:
        """Symbol for a lexeme; the same regex (and flags) always yields the same symbol."""
        key = (regex, flags)
        idx = self._lexeme_index.get(key)
        if idx is None:
            idx = len(self.lexemes)
            self.lexemes.append(Lexeme(name, regex, literal, flags))
            self._lexeme_index[key] = idx
        return lexeme_symbol(idx)

    def lexeme_expr(self, name: str, expr: Term) -> int:
        """Symbol for a lexeme given as a regex term; the same term always yields the
        same symbol (terms compare by structure, so equal expressions share it)."""
        key = ("term", expr)
        idx = self._lexeme_index.get(key)
        if idx is None:
            idx = len(self.lexemes)
            self.lexemes.append(Lexeme(name, None, None, "", expr))
            self._lexeme_index[key] = idx
        return lexeme_symbol(idx)

    def literal(self, data: bytes | str, name: str | None = None) -> int:
        # Front ends ask for the same punctuation and keys over and over; the lexeme a
        # byte string maps to never changes, so it is looked up before it is escaped.
        if not isinstance(data, (str, bytes)):
            data = bytes(data)  # a bytearray or memoryview: hashable from here on
        sym = self._literal_index.get(data)
        if sym is not None:
            return sym
        raw = data.encode("utf-8") if isinstance(data, str) else data
        sym = self.lexeme(name or _literal_name(raw), regex_escape_bytes(raw), literal=raw)
        self._literal_index[data] = sym
        return sym

    # Unique-member objects ---------------------------------------------------------
    # An object whose members may come in any order, each key at most once, with some
    # keys required, written as a linear grammar over three kinds of lexeme with roles:
    #
    #     object := OPEN CLOSE_R | OPEN member (SEP member)* CLOSE_R
    #     member := KEY_k COLON value_k | (members of unlisted keys)
    #
    # The parser enforces the rest as a side condition (parser.KeySets): a KEY_k the
    # innermost open object has written is not expected again, CLOSE_R only once every
    # key of R is written, and SEP (object_separator, where no unlisted key may come)
    # only while a key is left. So grammar size and row size stay linear in the keys,
    # whatever their number. Every `{` and `}` of such a grammar must be made here (the
    # parser's object stack follows them); the condition follows JSON's bracket nesting,
    # so it is for JSON grammars (the JSON Schema front end) only.
    def object_open(self) -> int:
        return self._role_lexeme("{", ("open",))

    def object_close(self, required: Iterable[str] = ()) -> int:
        """`}`, allowed once the innermost open object has written every key in `required`."""
        return self._role_lexeme("}", ("close", tuple(sorted(set(required)))))

    def object_separator(self, keys: Iterable[str]) -> int:
        """`,` before a member of an object whose members are `keys` only: allowed while
        one of them is not written yet (a comma with nothing to follow is a dead end)."""
        return self._role_lexeme(",", ("more", tuple(sorted(set(keys)))))

    def member_key(self, key: str, text: str) -> int:
        """The key `key`, spelled `text` (its JSON string), at most once per object."""
        return self._role_lexeme(text, ("key", key))

    def _role_lexeme(self, text: str, role: tuple) -> int:
        key = ("role", role)
        idx = self._lexeme_index.get(key)
        if idx is None:
            raw = text.encode("utf-8")
            idx = len(self.lexemes)
            self.lexemes.append(Lexeme(None, None, raw, "", None, role))
            self._lexeme_index[key] = idx
        return lexeme_symbol(idx)

    def nonterminal(self, name: str, *, fresh: bool = False) -> int:
        """Symbol for a nonterminal; `fresh=True` makes a new one even if the name exists."""
        if not fresh and name in self._nonterminal_index:
            return self._nonterminal_index[name]
        if name in self._nonterminal_index:
            # A counter per base name keeps fresh names O(1), not a probe per use.
            base = name
            n = self._fresh_counter.get(base, 1)
            while name in self._nonterminal_index:
                n += 1
                name = f"{base}#{n}"
            self._fresh_counter[base] = n
        idx = len(self.nonterminals)
        self.nonterminals.append(name)
        self._nonterminal_index[name] = idx
        return idx

    def has_nonterminal(self, name: str) -> bool:
        return name in self._nonterminal_index

    def rule(self, lhs: int, rhs: Sequence[int]) -> None:
        if lhs < 0:
            raise ValueError("the left-hand side of a rule must be a nonterminal")
        rule = _new_rule(Rule, (lhs, tuple(rhs)))
        # One hash of the rule, not two (`in`, then `add`): rules are built by the
        # hundred thousand, and tuples do not cache their hash.
        seen = self._rule_set
        before = len(seen)
        seen.add(rule)
        if len(seen) == before:
            return
        self.rules.append(rule)
        self._size += 1 + len(rule.rhs)
        check_compile_budget()
        if self._size > self.limits.max_grammar_size:
            raise LimitExceeded("max_grammar_size", self.limits.max_grammar_size, "grammar too large after desugaring")

    def optional_chain(self, symbol: int, names: Sequence[str]) -> int:
        """Nonterminals t_1 .. t_n named `names` (fresh), t_1 → symbol | ε and
        t_j → symbol t_{j-1} | ε: t_n is at most n symbols. The same rules as `rule`
        makes one by one, in one pass: a `maxItems` of 1,000 is a thousand of them, and
        per rule the checks cost more than the rule. Returns t_n."""
        n = len(names)
        if n == 0:
            raise ValueError("an optional chain needs at least one nonterminal")
        # 1 + len(rhs) per rule: t_1's two rules add 3, every later t_j's two add 4.
        size = self._size + 4 * n - 1
        if size > self.limits.max_grammar_size:
            raise LimitExceeded("max_grammar_size", self.limits.max_grammar_size, "grammar too large after desugaring")
        check_compile_budget()
        index, nonterminals = self._nonterminal_index, self.nonterminals
        ids: Sequence[int]
        if index.keys().isdisjoint(names):
            first = len(nonterminals)
            ids = range(first, first + n)
            nonterminals.extend(names)
            index.update(zip(names, ids, strict=True))
        else:  # a name is taken: each is numbered past what it meets, one by one
            ids = [self.nonterminal(name, fresh=True) for name in names]
        # Fresh left sides: no rule can be a duplicate. In `rule`'s order, each t_j's
        # step then its stop.
        rhss = [(symbol,)] + [(symbol, t) for t in ids[:-1]]
        made: list = [None] * (2 * n)
        made[0::2] = map(_new_rule, repeated(Rule, n), zip(ids, rhss, strict=True))
        made[1::2] = map(_new_rule, repeated(Rule, n), zip(ids, repeated((), n), strict=True))
        self.rules.extend(made)
        self._rule_set.update(made)
        self._size = size
        return ids[-1]

    def add_ignore(self, regex: str) -> None:
        if regex not in self.ignore:
            self.ignore.append(regex)

    # Desugaring helpers shared by the front ends --------------------------------
    def sequence_rule(self, name: str, alternatives: Iterable[Sequence[int]]) -> int:
        nt = self.nonterminal(name, fresh=True)
        for alt in alternatives:
            self.rule(nt, alt)
        return nt

    def optional(self, symbol: int, name: str = "opt") -> int:
        return self.sequence_rule(name, [[symbol], []])

    def star(self, symbol: int, name: str = "star") -> int:
        # Left recursion: Earley handles it in linear space, right recursion does not.
        nt = self.nonterminal(name, fresh=True)
        self.rule(nt, [])
        self.rule(nt, [nt, symbol])
        return nt

    def plus(self, symbol: int, name: str = "plus") -> int:
        nt = self.nonterminal(name, fresh=True)
        self.rule(nt, [symbol])
        self.rule(nt, [nt, symbol])
        return nt

    def repeat(self, symbol: int, lo: int, hi: int | None, name: str = "rep") -> int:
        """`symbol{lo,hi}` (hi=None: unbounded) as BNF of size O(lo + hi)."""
        if lo < 0 or (hi is not None and hi < lo):
            raise GrammarError(f"bad repetition bounds {{{lo},{hi}}}")
        parts: list[int] = [symbol] * lo
        if hi is None:
            parts.append(self.star(symbol, name))
        else:
            # Nested optionals: a (a (a)?)? keeps the grammar linear in hi - lo.
            tail: int | None = None
            for _ in range(hi - lo):
                inner = [symbol] if tail is None else [symbol, tail]
                tail = self.sequence_rule(name, [inner, []])
            if tail is not None:
                parts.append(tail)
        return self.sequence_rule(name, [parts])

    def build(self, start: int) -> Grammar:
        g = Grammar(
            list(self.lexemes),
            list(self.nonterminals),
            list(self.rules),
            start,
            list(self.ignore),
            self.allow_initial_skip,
        )
        validate(g)
        return g


def _literal_name(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = repr(data)
    return '"' + text + '"'


def validate(g: Grammar) -> None:
    """Checks that every nonterminal has a rule and is reachable; names the culprit."""
    if not (0 <= g.start < len(g.nonterminals)):
        raise GrammarError("grammar has no start symbol")
    has_rule = [False] * len(g.nonterminals)
    for r in g.rules:
        has_rule[r.lhs] = True
        for s in r.rhs:
            if is_lexeme(s):
                if not (0 <= lexeme_of(s) < len(g.lexemes)):
                    raise GrammarError(f"rule for {g.nonterminals[r.lhs]} names unknown lexeme {lexeme_of(s)}")
            elif not (0 <= s < len(g.nonterminals)):
                raise GrammarError(f"rule for {g.nonterminals[r.lhs]} names unknown nonterminal {s}")
    for r in g.rules:
        for s in r.rhs:
            if not is_lexeme(s) and not has_rule[s]:
                raise GrammarError(f"nonterminal {g.nonterminals[s]!r} (used by {g.nonterminals[r.lhs]!r}) has no rule")
    if not has_rule[g.start]:
        raise GrammarError(f"start symbol {g.nonterminals[g.start]!r} has no rule")
