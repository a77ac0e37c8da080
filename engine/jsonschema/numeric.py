"""Number regexes: ranges of integers and decimals, `multipleOf`, enumerated numbers."""

from __future__ import annotations

import math
import os
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Sequence

from ..limits import DEFAULT_LIMITS, GrammarLimitExceeded, Limits
from ..regex import charset
from ..regex import term as T
from ..regex.printer import class_regex as _class_regex
from ..regex.printer import escape_cp as _esc_cp
from ..regex.printer import repeat_suffix as _rep_suffix
from .ir import _Num
from .keywords import INTEGER_REGEX, NUMBER_REGEX
from .pointers import _Where

# --------------------------------------------------------------------------------------
# Number regexes
# --------------------------------------------------------------------------------------


def _alt(parts: Sequence[str | None]) -> str | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else "(?:" + "|".join(present) + ")"


# Every ASCII code point `_esc_cp` writes otherwise than as itself, for str.translate:
# a word's run of characters is escaped in one call, not one per character.
_LITERAL_ESCAPES = {cp: _esc_cp(cp, False) for cp in range(0x80) if _esc_cp(cp, False) != chr(cp)}


class _TextTrie:
    """`_literal_trie`'s output as regex text."""

    @staticmethod
    def lit(chars: str) -> str:
        return chars.translate(_LITERAL_ESCAPES)

    @staticmethod
    def one_of(chars: list[str]) -> str:
        if len(chars) == 1:
            return _esc_cp(ord(chars[0]), False)
        return _class_regex(charset.normalize((ord(c), ord(c)) for c in chars))

    @staticmethod
    def seq(head: str, rest: str) -> str:
        return head + rest

    @staticmethod
    def alt(alts: list[str]) -> str:
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    @staticmethod
    def optional(body: str) -> str:
        return "(?:" + body + ")?" if len(body) > 1 else body + "?"


class _TermTrie:
    """`_literal_trie`'s output as a regex term, which the lexer builds without
    parsing: a trie of hundreds of enum values took longer to parse than the rest of
    its schema's lexer."""

    @staticmethod
    def lit(chars: str) -> T.Term:
        return T.lit(chars.encode("utf-8"))

    @staticmethod
    def one_of(chars: list[str]) -> T.Term:
        return T.cls((ord(c), ord(c)) for c in chars)

    @staticmethod
    def seq(head: T.Term, rest: T.Term) -> T.Term:
        return T.seq(head, rest)

    @staticmethod
    def alt(alts: list[T.Term]) -> T.Term:
        return T.alt(*alts)

    @staticmethod
    def optional(body: T.Term) -> T.Term:
        return T.rep(body, 0, 1)


def _literal_regex(words: list[str]) -> str | None:
    """A compact regex for a finite set of strings (see `_literal_trie`)."""
    if not words:
        return None
    r = _literal_trie(words, _TextTrie)
    return r if r else "(?:)"


def _literal_term(words: tuple[str, ...]) -> T.Term:
    """`_literal_regex` as a regex term (`words` not empty); the same words give the
    same term, walked once (a family of schemas shares an enum), whose expression
    `ExprSet.build` then looks up."""
    term = _literal_terms.get(words)
    if term is None:
        if len(_literal_terms) > 64:
            _literal_terms.clear()
        term = _literal_terms[words] = _literal_trie(list(words), _TermTrie)
    return term


_literal_terms: dict[tuple[str, ...], T.Term] = {}


def _literal_trie(words: list[str], out):
    """A trie of a finite set of strings whose sibling branches with equal
    continuations share one character class, written by `out` (`_TextTrie`,
    `_TermTrie`). The trie is walked as groups of suffixes, not built node by node: a
    run of characters that every word of a group shares (most of an enum's trie) is
    one slice and one translate."""

    def go(ws: list[str]):
        # ws: distinct suffixes in the order the words first spell them (the order the
        # alternatives come out in), never empty.
        if len(ws) == 1:
            return out.lit(ws[0])
        if "" not in ws:
            shared = os.path.commonprefix(ws)
            if shared:
                n = len(shared)
                return out.seq(out.lit(shared), go([w[n:] for w in ws]))
        children: dict[str, list[str]] = {}
        end = False
        for w in ws:
            if w:
                children.setdefault(w[0], []).append(w[1:])
            else:
                end = True
        by_rest: dict = {}
        for ch, tails in children.items():
            by_rest.setdefault(go(tails), []).append(ch)
        body = out.alt([out.seq(out.one_of(chars), rest) for rest, chars in by_rest.items()])
        return out.optional(body) if end else body

    return go(list(dict.fromkeys(words)))


def _digit_class(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    if lo == 0 and hi == 9:
        return "[0-9]"
    return f"[{lo}-{hi}]"


def _same_len_range(x: str, y: str) -> str:
    """Digit strings of len(x) == len(y) between x and y (inclusive, x <= y)."""
    if x == y:
        return x
    k = len(x) - 1
    x0, y0 = int(x[0]), int(y[0])
    if x[1:] == "0" * k and y[1:] == "9" * k:
        return _digit_class(x0, y0) + ("[0-9]" + _rep_suffix(k, k) if k > 1 else "[0-9]" * k)
    if x0 == y0:
        return x[0] + _same_len_range(x[1:], y[1:])
    alts = [x[0] + _same_len_range(x[1:], "9" * k)]
    if x0 + 1 <= y0 - 1:
        alts.append(_digit_class(x0 + 1, y0 - 1) + ("[0-9]" + _rep_suffix(k, k) if k > 1 else "[0-9]" * k))
    alts.append(y[0] + _same_len_range("0" * k, y[1:]))
    return "(?:" + "|".join(alts) + ")"


def _nat_range(a: int, b: int | None) -> str | None:
    """Naturals a..b (b None: unbounded) in decimal without leading zeros."""
    if a < 0:
        raise ValueError("negative lower bound")
    if b is not None and b < a:
        return None
    la = len(str(a))
    lb = len(str(b)) if b is not None else la
    alts = []
    for n in range(la, lb + 1):
        lo = max(a, 0 if n == 1 else 10 ** (n - 1))
        hi = 10**n - 1 if (b is None or n < lb) else b
        if lo <= hi:
            alts.append(_same_len_range(str(lo), str(hi)))
    if b is None:
        alts.append("[1-9][0-9]" + _rep_suffix(la, None))
    return _alt(alts)


def integer_range_regex(lo: int | None, hi: int | None) -> str | None:
    """Regex for the JSON integers in [lo, hi] (None: unbounded); None if the range is empty."""
    if lo is None and hi is None:
        return INTEGER_REGEX
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    if hi is None or hi >= 0:
        parts.append(_nat_range(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        top = -1 if hi is None or hi >= 0 else hi
        r = _nat_range(-top, None if lo is None else -lo)
        if r is not None:
            parts.append("-" + r)
    return _alt(parts)


# Fraction languages: (regex for non-empty digit strings or None, whether "no digits" is in).
# A digit string s stands for the value 0.s, so these languages are closed under
# appending zeros; "empty" is the number without a fraction part.


def _frac_full(fr: tuple) -> str | None:
    ne, empty = fr
    if ne is None:
        return "" if empty else None
    return "(?:" + ne + ")?" if empty else "(?:" + ne + ")"


def _frac_ge(a: str, excl: bool) -> tuple:
    if a == "":
        return ("0*[1-9][0-9]*", False) if excl else ("[0-9]+", True)
    d = int(a[0])
    alts = []
    if d < 9:
        alts.append(_digit_class(d + 1, 9) + "[0-9]*")
    t = _frac_full(_frac_ge(a[1:], excl))
    if t is not None:
        alts.append(str(d) + t)
    return (_alt(alts), False)


def _frac_le(b: str, excl: bool) -> tuple:
    if b == "":
        return (None, False) if excl else ("0+", True)
    d = int(b[0])
    alts = []
    if d > 0:
        alts.append(_digit_class(0, d - 1) + "[0-9]*")
    t = _frac_full(_frac_le(b[1:], excl))
    if t is not None:
        alts.append(str(d) + t)
    return (_alt(alts), True)


def _frac_le_pos(b: str, excl: bool) -> tuple:
    """0 < value <= 0.b (< if excl)."""
    if b == "":
        return (None, False)
    d = int(b[0])
    alts = []
    if d > 1:
        alts.append(_digit_class(1, d - 1) + "[0-9]*")
    if d > 0:
        alts.append("0+[1-9][0-9]*")
        t = _frac_full(_frac_le(b[1:], excl))
    else:
        t = _frac_full(_frac_le_pos(b[1:], excl))
    if t is not None:
        alts.append(str(d) + t)
    return (_alt(alts), False)


def _frac_between(a: str, ax: bool, b: str, bx: bool) -> tuple:
    """0.a <= value <= 0.b (strict where ax/bx), given 0.a <= 0.b."""
    if a == "":
        return _frac_le_pos(b, bx) if ax else _frac_le(b, bx)
    da, db = int(a[0]), int(b[0])
    if da == db:
        t = _frac_full(_frac_between(a[1:], ax, b[1:], bx))
        return (str(da) + t if t is not None else None, False)
    alts = []
    t = _frac_full(_frac_ge(a[1:], ax))
    if t is not None:
        alts.append(str(da) + t)
    if da + 1 <= db - 1:
        alts.append(_digit_class(da + 1, db - 1) + "[0-9]*")
    t = _frac_full(_frac_le(b[1:], bx))
    if t is not None:
        alts.append(str(db) + t)
    return (_alt(alts), False)


def _frac_emit(fr: tuple) -> str | None:
    ne, empty = fr
    if ne is None:
        return "" if empty else None
    return "(?:\\.(?:" + ne + "))?" if empty else "\\.(?:" + ne + ")"


def _dec_parts(d: Decimal) -> tuple[int, str]:
    s = format(d, "f")
    i, _, f = s.partition(".")
    return int(i), f.rstrip("0")


def _magnitude_range(lo: Decimal, lox: bool, hi: Decimal | None, hix: bool) -> str | None:
    """Unsigned decimals `I(.F)?` in [lo, hi] (exclusive ends where lox/hix)."""
    if hi is not None and (lo > hi or (lo == hi and (lox or hix))):
        return None
    li, lf = _dec_parts(lo)
    alts: list[str | None] = []
    if hi is None:
        r = _nat_range(li + 1, None)
        assert r is not None  # an unbounded range of naturals is never empty
        alts.append(r + "(?:\\.[0-9]+)?")
        f = _frac_emit(_frac_ge(lf, lox))
        if f is not None:
            alts.append(str(li) + f)
        return _alt([*alts, *_exponent_forms(lo, lox, hi, hix)])
    hi_i, hf = _dec_parts(hi)
    if li == hi_i:
        f = _frac_emit(_frac_between(lf, lox, hf, hix))
        alts.append(None if f is None else str(li) + f)
        return _alt([*alts, *_exponent_forms(lo, lox, hi, hix)])
    f = _frac_emit(_frac_ge(lf, lox))
    if f is not None:
        alts.append(str(li) + f)
    r = _nat_range(li + 1, hi_i - 1)
    if r is not None:
        alts.append(r + "(?:\\.[0-9]+)?")
    f = _frac_emit(_frac_le(hf, hix))
    if f is not None:
        alts.append(str(hi_i) + f)
    return _alt([*alts, *_exponent_forms(lo, lox, hi, hix)])


def _exponent_forms(lo: Decimal, lox: bool, hi: Decimal | None, hix: bool) -> list[str]:
    """Exponent spellings of magnitudes that lie in [lo, hi] whatever their digits: a
    one-digit mantissa with a negative exponent is in [0, 1), with a positive one in
    [10, inf). These cover what Python's float repr writes (1e-06, 1.5e+16)."""
    out = []
    if lo == 0 and (hi is None or hi >= 1):
        mant = "(?:[1-9](?:\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)" if lox else "[0-9](?:\\.[0-9]+)?"
        out.append(mant + "[eE]-0*[1-9][0-9]*")
    if hi is None and (lo < 10 or (lo == 10 and not lox)):
        out.append("[1-9](?:\\.[0-9]+)?[eE]\\+?0*[1-9][0-9]*")
    return out


def number_range_regex(lo: Decimal | None, lox: bool, hi: Decimal | None, hix: bool) -> str | None:
    """Regex for JSON numbers in a range, exactly: every number it matches is in the range.

    Bounds are any finite decimals; None means unbounded (both None: the full JSON
    number syntax). Plain decimals are matched for every in-range value; exponent
    spellings only where no digit choice can leave the range (see _exponent_forms).
    Returns None for an empty range.
    """
    if lo is None and hi is None:
        return NUMBER_REGEX
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lox or hix))):
        return None
    zero = Decimal(0)
    parts: list[str | None] = []
    if hi is None or hi > 0 or (hi == 0 and not hix):
        low, lowx = (zero, False) if lo is None or lo < 0 else (lo, lox)
        parts.append(_magnitude_range(low, lowx, hi, hix))
    if lo is None or lo < 0:
        mlo, mlox = (zero, True) if hi is None or hi >= 0 else (-hi, hix)
        mhi, mhix = (None, False) if lo is None else (-lo, lox)
        r = _magnitude_range(mlo, mlox, mhi, mhix)
        if r is not None:
            # _alt wraps alternations, so a plain prefix concatenates safely.
            parts.append("-" + r)
    return _alt(parts)


def _dfa_to_regex(
    n: int, start_edges: dict[int, str], edges: dict[tuple[int, int], str], accept: set[int]
) -> str | None:
    """State elimination (Brzozowski–McCluskey) for a DFA whose labels are regex atoms."""
    S, F = n, n + 1
    g: dict[tuple[int, int], str] = dict(edges)
    for t, lab in start_edges.items():
        g[(S, t)] = lab
    for a in accept:
        g[(a, F)] = ""

    def union(x: str | None, y: str) -> str:
        return y if x is None else "(?:" + x + "|" + y + ")"

    merged: dict[tuple[int, int], str] = {}
    for k, v in g.items():
        merged[k] = v
    g = merged
    for q in range(n):
        loop = g.pop((q, q), None)
        ins = [(p, lab) for (p, t), lab in g.items() if t == q]
        outs = [(t, lab) for (p, t), lab in g.items() if p == q]
        for p, _ in ins:
            del g[(p, q)]
        for t, _ in outs:
            del g[(q, t)]
        mid = "" if loop is None else "(?:" + loop + ")*"
        for p, lab_in in ins:
            for t, lab_out in outs:
                g[(p, t)] = union(g.get((p, t)), lab_in + mid + lab_out)
        if sum(len(v) for v in g.values()) > DEFAULT_LIMITS.max_regex_chars:
            return None
    return g.get((S, F))


def multiple_of_regex(k: int, max_states: int = DEFAULT_LIMITS.max_multiple_of_states) -> str | None:
    """Regex for the JSON integers divisible by k (k >= 1), or None if it would be too large:
    a residue automaton of more than `max_states` states is not even built (its regex
    would be far past any size limit, and building it costs O(k))."""
    if k < 1:
        raise ValueError("k must be positive")
    if k == 1:
        return INTEGER_REGEX
    m, d = _split_off_ten(k)
    t = k // m
    ending = None
    if t > 1 and 10**d // t <= 5000:
        # The factor t divides 10^d: the last d digits decide.
        endings = [str(r).zfill(d) for r in range(0, 10**d, t)]
        short = _literal_regex(sorted({e.lstrip("0") or "0" for e in endings}))
        if m == 1:
            small = _literal_regex([str(r) for r in range(t, 10**d, t)])
            nonzero = _alt(["[1-9][0-9]*" + str(_literal_regex(endings))] + ([small] if small else []))
            return "-?(?:0|" + str(nonzero) + ")"
        # Shorter numbers count as zero-padded; JSON writes them without the zeros.
        ending = "-?(?:[0-9]*" + str(_literal_regex(endings)) + "|" + str(short) + ")"
    # The residues of the factor prime to 10 (of all of k where its endings are too many
    # to list) by an automaton over the digits, met with the endings: the product
    # automaton's regex grows far faster than the two apart (30 is 3 and a final 0).
    modulus = m if ending is not None else k
    if modulus > max_states:
        return None
    body = _residue_regex(modulus, first_digits=range(1, 10), point=False)
    if body is None:
        return None
    residues = "-?(?:0|" + body + ")"
    return residues if ending is None else "(?:" + residues + "&" + ending + ")"


def _split_off_ten(k: int) -> tuple[int, int]:
    """(m, d): k = m * t with m prime to 10 and t dividing 10^d, d the least such."""
    a = b = 0
    m = k
    while m % 2 == 0:
        m //= 2
        a += 1
    while m % 5 == 0:
        m //= 5
        b += 1
    return m, max(a, b)


def _residue_regex(m: int, first_digits: range, point: bool) -> str | None:
    """Regex of the digit strings (first digit from `first_digits`) whose value is
    divisible by m, by state elimination over the residues; None past the size limit.
    `point`: a `.` may stand between the digits and changes nothing (for m prime to 10
    a decimal is a multiple of m/10^c exactly when its digits, point left out, are)."""
    start: dict[int, list[int]] = {}
    for dgt in first_digits:
        start.setdefault(dgt % m, []).append(dgt)
    trans: dict[tuple[int, int], list[int]] = {}
    for r in range(m):
        for dgt in range(10):
            trans.setdefault((r, (10 * r + dgt) % m), []).append(dgt)
        if point:
            trans.setdefault((r, r), []).append(-1)

    def label(ds: list[int]) -> str:
        dot = "\\." if -1 in ds else ""
        digits = sorted(x for x in ds if x >= 0)
        if len(digits) + bool(dot) == 1:
            return dot or str(digits[0])
        if len(digits) > 1 and digits == list(range(digits[0], digits[-1] + 1)):
            return f"[{digits[0]}-{digits[-1]}{dot}]"
        return "[" + "".join(map(str, digits)) + dot + "]"

    return _dfa_to_regex(
        m,
        {t: label(ds) for t, ds in start.items()},
        {e: label(ds) for e, ds in trans.items()},
        {0},
    )


def decimal_multiple_regex(mult: Decimal, max_states: int = DEFAULT_LIMITS.max_multiple_of_states) -> str | None:
    """Regex for the exponent-free JSON numbers that are multiples of the decimal
    `mult` > 0, or None where it would be too large.

    A number is a multiple of k/10^c exactly when its decimals past the c-th are zeros
    and the integer its digits spell with c decimals is divisible by k. Of k, the factor
    m prime to 10 is checked by a residue automaton over the digits (the point left
    out: zeros appended change no residue mod m); the factor t dividing a power of 10
    by the integer's last digits, listed for each count j <= c of decimals written (the
    integer then ends in c - j zeros, which take their share of t)."""
    f = Fraction(mult)
    _, c = _split_off_ten(f.denominator)
    k = f.numerator * 10**c // f.denominator
    m, _ = _split_off_ten(k)
    t = k // m
    conj = ["-?[0-9]+" + ("(?:\\.[0-9]{1," + str(c) + "}0*)?" if c else _ZERO_FRACTION)]
    if m > 1:
        if m > max_states:
            return None
        body = _residue_regex(m, first_digits=range(10), point=True)
        if body is None:
            return None
        conj.append("-?(?:" + body + ")")
    if t > 1:
        spellings: list[str] = []
        for j in range(c + 1):
            rest = t // math.gcd(t, 10 ** (c - j))
            _, dj = _split_off_ten(rest)
            if len(spellings) + 10**dj // rest > 5000:
                return None  # as many endings as multiple_of_regex lists at most
            for r in range(0, 10**dj, rest):
                digits = str(r).zfill(dj) if dj else ""
                cut = max(0, dj - j)
                whole, decimals = digits[:cut], digits[cut:]
                ints = "[0-9]+" if not whole else "(?:[0-9]*" + whole + "|" + (whole.lstrip("0") or "0") + ")"
                if j == 0:
                    # No decimals: for an integer multiple (c = 0) a zero fraction may follow.
                    tail = "" if c else _ZERO_FRACTION
                else:
                    # At c decimals, any more are zeros.
                    tail = "\\.[0-9]{" + str(j - len(decimals)) + "}" + decimals + ("0*" if j == c else "")
                spellings.append("-?" + ints + tail)
        conj.append(str(_alt(spellings)))
    return conj[0] if len(conj) == 1 else "(?:" + "&".join("(?:" + x + ")" for x in conj) + ")"


def _num_regex(
    n: _Num, where: str | _Where, limits: Limits = DEFAULT_LIMITS, zero_fraction_integers: bool = True
) -> tuple[str, bool] | None:
    """(regex, extended) of the lexeme for a number schema; None if no number fits.

    `zero_fraction_integers`: whether `1.0` is an integer, as from draft-06 on ("any
    number with a zero fractional part"); draft-03 and draft-04 say an integer has no
    fraction part, so there `{"type": "integer"}` refuses `1.0`. A multiple of an
    integer is a matter of value in every draft: `4.0` is a multiple of 2."""
    key = (n, zero_fraction_integers)
    if key in _num_cache:
        return _num_cache[key]
    bounded = n.lo is not None or n.hi is not None
    conj: list[str] = []
    suffix = ""
    integral = n.integer or (n.mult is not None and Fraction(n.mult).denominator == 1)
    if integral:
        lo = hi = None
        if n.lo is not None:
            c = n.lo.to_integral_value(rounding=ROUND_CEILING)
            lo = int(c + 1 if n.lox and c == n.lo else c)
        if n.hi is not None:
            f = n.hi.to_integral_value(rounding=ROUND_FLOOR)
            hi = int(f - 1 if n.hix and f == n.hi else f)
        k = int(n.mult) if n.mult is not None else 1
        if lo is not None and hi is not None and (hi - lo) // k <= 2000:
            # Few values: list them (exact, and small even where a divisibility regex is not).
            first = -((-lo) // k) * k
            values = [
                v
                for v in range(first, hi + 1, k)
                if not any(v % Fraction(m).numerator == 0 for m in n.not_mult) and Decimal(v) not in n.excluded
            ]
            result = (_enum_numbers(values), False) if values else None
            if result is not None and (zero_fraction_integers or not n.integer):
                # An integer may carry a zero fraction: 1.0 is the integer 1.
                result = (result[0] + _ZERO_FRACTION, False)
            _num_cache[key] = result
            return result
        rng = integer_range_regex(lo, hi) if bounded else INTEGER_REGEX
        if rng is None:
            _num_cache[key] = None
            return None
        conj.append(rng)
        for m in [k] if k != 1 else []:
            mre = multiple_of_regex(m, limits.max_multiple_of_states)
            if mre is None:
                raise GrammarLimitExceeded(
                    *_multiple_of_limit(m, limits),
                    f"multipleOf {m} at {where}: the divisibility regex would be too large "
                    "(bound the range with minimum/maximum to at most 2000 multiples)",
                )
            conj.append(mre)
        # An integer (or an integer multiple) may carry a zero fraction: 1.0 is 1.
        suffix = _ZERO_FRACTION if zero_fraction_integers or not n.integer else ""
    else:
        rng = number_range_regex(n.lo, n.lox, n.hi, n.hix)
        if rng is None:
            _num_cache[key] = None
            return None
        conj.append(rng)
        if n.fractional:
            conj.append(_FRACTIONAL_REGEX)
        if n.mult is not None:
            mre = decimal_multiple_regex(n.mult, limits.max_multiple_of_states)
            if mre is None:
                raise GrammarLimitExceeded(
                    *_multiple_of_limit(_split_off_ten(Fraction(n.mult).numerator)[0], limits),
                    f"multipleOf {n.mult} at {where}: the divisibility regex would be too large",
                )
            conj.append(mre)
    negs = []
    if n.excluded:
        if not (n.integer or n.mult is not None):
            # Every spelling of a value must be excluded; without exponents there are
            # few (1, 1.0, 1.00, ...), so plain decimals only.
            conj.append(_PLAIN_NUMBER_REGEX)
        for x in n.excluded:
            negs.append("~(?:" + _value_spellings(x) + ")")
    for m in n.not_mult:
        if integral:
            step = Fraction(m).numerator  # an integer is a multiple of p/q when it is one of p
            mre = multiple_of_regex(step, limits.max_multiple_of_states)
        else:
            step = _split_off_ten(Fraction(m).numerator)[0]
            mre = decimal_multiple_regex(m, limits.max_multiple_of_states)
            if _PLAIN_NUMBER_REGEX not in conj:
                # The multiples' regex spells no exponent: nor may their complement.
                conj.append(_PLAIN_NUMBER_REGEX)
        if mre is None:
            raise GrammarLimitExceeded(
                *_multiple_of_limit(step, limits),
                f"not multipleOf {m} at {where}: the divisibility regex would be too large",
            )
        negs.append("~(?:" + mre + ")")
    if len(conj) == 1 and not negs:
        result = (conj[0] + suffix, False)
    else:
        result = ("(?:" + "&".join(["(?:" + c + ")" for c in conj] + negs) + ")" + suffix, True)
    if len(_num_cache) > 4096:
        _num_cache.clear()
    _num_cache[key] = result
    return result


_ZERO_FRACTION = "(?:\\.0+)?"


def _multiple_of_limit(k: int, limits: Limits) -> tuple[str, int]:
    """The limit that stopped multiple_of_regex(k): the automaton's size or its regex's."""
    if k > limits.max_multiple_of_states:
        return "max_multiple_of_states", limits.max_multiple_of_states
    return "max_regex_chars", DEFAULT_LIMITS.max_regex_chars


def _enum_numbers(values: list[int]) -> str:
    neg = _literal_regex([str(-v) for v in values if v < 0])
    pos = _literal_regex([str(v) for v in values if v >= 0])
    return _alt(([pos] if pos else []) + (["-" + neg] if neg else [])) or "(?:)"


_PLAIN_NUMBER_REGEX = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"


def _value_spellings(x: Decimal) -> str:
    """Every exponent-free JSON spelling of the number x."""
    ip, fp = _dec_parts(abs(x))
    sign = "-?" if x == 0 else ("-" if x < 0 else "")
    return sign + str(ip) + ("(?:\\.0+)?" if not fp else "\\." + fp + "0*")


# Numbers with a non-zero fractional part: plain decimals, and exponent forms whose
# value lies strictly between 0 and 1 in magnitude.
_FRACTIONAL_REGEX = (
    r"-?(?:(?:0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*"
    r"|(?:[1-9](?:\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)[eE]-0*[1-9][0-9]*)"
)


_num_cache: dict[tuple[_Num, bool], tuple[str, bool] | None] = {}
