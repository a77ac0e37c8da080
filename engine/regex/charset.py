"""Sets of Unicode code points: the one algebra every regex dialect uses.

A set is a tuple of `(lo, hi)` ranges, sorted, merged (no two touch) and without the
surrogate block, which no UTF-8 text contains. `normalize` makes one out of any ranges;
`complement` and `intersect` keep that form, so sets can be compared with `==`.
The named classes of both dialects (Python's `\\d \\w \\s .` and ECMA-262's), Unicode
general categories, case folding and the split into UTF-8 byte ranges live here too.
"""

from __future__ import annotations

import unicodedata
from typing import Iterable

import numpy as np

from ..limits import GrammarError, check_compile_budget

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
# A class with at most this many non-ASCII code points is case-folded with
# str.lower/upper under the `i` flag; bigger ones only fold ASCII letters.
_FOLD_SMALL = 512

CharSet = tuple  # tuple[tuple[int, int], ...]


def normalize(ranges: Iterable[tuple[int, int]]) -> CharSet:
    """Sorted, merged code point ranges with the surrogate block cut out."""
    items = []
    for lo, hi in ranges:
        if not (0 <= lo <= hi <= MAX_CODE_POINT):
            raise GrammarError(f"invalid code point range {lo:#x}-{hi:#x} (must be within 0..0x10FFFF, lo <= hi)")
        if lo <= SURROGATES[1] and hi >= SURROGATES[0]:
            if lo < SURROGATES[0]:
                items.append((lo, SURROGATES[0] - 1))
            if hi > SURROGATES[1]:
                items.append((SURROGATES[1] + 1, hi))
        else:
            items.append((lo, hi))
    items.sort()
    out: list[tuple[int, int]] = []
    for lo, hi in items:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def complement(s: CharSet) -> CharSet:
    """The characters not in `s` (a normalized set; so is the result). Its gaps are
    already sorted and apart, so only the surrogates need cutting out of them."""
    out: list[tuple[int, int]] = []
    prev = 0
    for lo, hi in s:
        if lo > prev:
            _add_gap(out, prev, lo - 1)
        prev = hi + 1
    if prev <= MAX_CODE_POINT:
        _add_gap(out, prev, MAX_CODE_POINT)
    return tuple(out)


def _add_gap(out: list, lo: int, hi: int) -> None:
    if hi < SURROGATES[0] or lo > SURROGATES[1]:
        out.append((lo, hi))
        return
    if lo < SURROGATES[0]:
        out.append((lo, SURROGATES[0] - 1))
    if hi > SURROGATES[1]:
        out.append((SURROGATES[1] + 1, hi))


def intersect(a: CharSet, b: CharSet) -> CharSet:
    """The characters in both sets (normalized sets; so is the result: a range of either
    set ends where the next character is outside it, so the pieces never touch)."""
    out = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        alo, ahi = a[i]
        blo, bhi = b[j]
        lo = alo if alo > blo else blo
        hi = ahi if ahi < bhi else bhi
        if lo <= hi:
            out.append((lo, hi))
        if ahi < bhi:
            i += 1
        else:
            j += 1
    return tuple(out)


def single(cp: int) -> CharSet:
    return normalize([(cp, cp)])


def case_fold(ranges: CharSet) -> CharSet:
    """Adds the other case of every member: ASCII letters always, other characters
    through str.lower/upper when the set is small (a huge class like `[^a]` is
    already closed under case in practice, and enumerating it would be slow)."""
    out = list(ranges)
    non_ascii = 0
    for lo, hi in ranges:
        for a, b, shift in ((65, 90, 32), (97, 122, -32)):
            low, high = max(lo, a), min(hi, b)
            if low <= high:
                out.append((low + shift, high + shift))
        if hi >= 0x80:
            non_ascii += hi - max(lo, 0x80) + 1
    if non_ascii <= _FOLD_SMALL:
        for lo, hi in ranges:
            for cp in range(max(lo, 0x80), hi + 1):
                ch = chr(cp)
                for v in (ch.lower(), ch.upper()):
                    if len(v) == 1 and v != ch:
                        out.append((ord(v), ord(v)))
    return normalize(out)


# Code point ranges -> UTF-8 byte-range sequences ---------------------------------------


def _utf8_split(lo: int, hi: int, out: list) -> None:
    # lo and hi have encodings of the same length here. Split until, at each
    # continuation position, either the higher positions agree or the piece
    # covers that position's full 0x80-0xBF block: then the piece's encodings
    # are exactly the product of per-position byte ranges.
    while True:
        n = len(chr(lo).encode("utf-8"))
        for i in range(1, n):
            m = (1 << (6 * i)) - 1
            if (lo & ~m) != (hi & ~m):
                if lo & m:
                    _utf8_split(lo, lo | m, out)
                    lo = (lo | m) + 1
                    break
                if (hi & m) != m:
                    _utf8_split(hi & ~m, hi, out)
                    hi = (hi & ~m) - 1
                    break
        else:
            a = chr(lo).encode("utf-8")
            b = chr(hi).encode("utf-8")
            out.append(tuple(zip(a, b, strict=False)))
            return


def utf8_sequences(ranges: Iterable[tuple[int, int]]) -> list[tuple[tuple[int, int], ...]]:
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of `ranges`."""
    out: list = []
    for lo, hi in normalize(ranges):
        for a, b in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODE_POINT)):
            low, high = max(lo, a), min(hi, b)
            if low <= high:
                _utf8_split(low, high, out)
    return out


# Named classes -------------------------------------------------------------------------

ALL = normalize([(0, MAX_CODE_POINT)])
DIGIT = normalize([(0x30, 0x39)])
WORD = normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
# Python's `\s` as midword reads it (ASCII whitespace) and `.` without the `s` flag.
PY_SPACE = normalize([(0x09, 0x0D), (0x20, 0x20)])
PY_DOT = complement(single(0x0A))
# ECMA-262 WhiteSpace and LineTerminator (`\s`), and `.`: anything but a line terminator.
ECMA_SPACE = normalize(
    [
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ]
)
ECMA_DOT = complement(normalize([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))

_CATEGORY_NAMES = {
    "Letter": "L",
    "Cased_Letter": "LC",
    "Uppercase_Letter": "Lu",
    "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt",
    "Modifier_Letter": "Lm",
    "Other_Letter": "Lo",
    "Mark": "M",
    "Combining_Mark": "M",
    "Nonspacing_Mark": "Mn",
    "Spacing_Mark": "Mc",
    "Enclosing_Mark": "Me",
    "Number": "N",
    "Decimal_Number": "Nd",
    "digit": "Nd",
    "Letter_Number": "Nl",
    "Other_Number": "No",
    "Punctuation": "P",
    "punct": "P",
    "Connector_Punctuation": "Pc",
    "Dash_Punctuation": "Pd",
    "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe",
    "Initial_Punctuation": "Pi",
    "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po",
    "Symbol": "S",
    "Math_Symbol": "Sm",
    "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk",
    "Other_Symbol": "So",
    "Separator": "Z",
    "Space_Separator": "Zs",
    "Line_Separator": "Zl",
    "Paragraph_Separator": "Zp",
    "Other": "C",
    "Control": "Cc",
    "cntrl": "Cc",
    "Format": "Cf",
    "Surrogate": "Cs",
    "Private_Use": "Co",
    "Unassigned": "Cn",
}
_CATEGORIES = frozenset(_CATEGORY_NAMES.values()) | {"Lu", "Ll", "Lt", "Lm", "Lo", "Cs"}
_category_cache: dict[str, CharSet] = {}
# Every code point's general category, as runs: (first code point, last, the category's two
# ASCII letters as one little-endian number), made at the first category asked for.
_category_runs: tuple | None = None


def _runs_by_category() -> tuple:
    """The runs of code points of one general category, over all of them, in one pass
    of `unicodedata` (a pass per category asked for, a code point at a time in Python,
    cost as much as this pass for all of them)."""
    global _category_runs
    if _category_runs is None:
        check_compile_budget()
        names = "".join(map(unicodedata.category, map(chr, range(MAX_CODE_POINT + 1))))
        codes = np.frombuffer(names.encode("ascii"), dtype="<u2")
        check_compile_budget()
        starts = np.concatenate(([0], np.flatnonzero(codes[1:] != codes[:-1]) + 1))
        ends = np.concatenate((starts[1:] - 1, [MAX_CODE_POINT]))
        _category_runs = (starts, ends, codes[starts])
    return _category_runs


def category_set(name: str) -> CharSet | None:
    """Code points of a Unicode general category, by short or long name (Python's
    Unicode version), `Any` or `ASCII`; None for any other name."""
    cat = _CATEGORY_NAMES.get(name, name)
    if cat in _category_cache:
        return _category_cache[cat]
    if cat == "Any":
        return ALL
    if cat == "ASCII":
        return normalize([(0, 0x7F)])
    if cat not in _CATEGORIES:
        return None
    starts, ends, codes = _runs_by_category()
    if cat == "LC":
        wanted = [ord("L") | ord(c) << 8 for c in "ult"]
        hit = np.isin(codes, wanted)
    elif len(cat) == 1:
        hit = (codes & 0xFF) == ord(cat)
    else:
        hit = codes == (ord(cat[0]) | ord(cat[1]) << 8)
    result = normalize(zip(starts[hit].tolist(), ends[hit].tolist(), strict=True))
    _category_cache[cat] = result
    return result
