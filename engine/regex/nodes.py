"""The node kinds of an expression, the bounds on expressions, and sets of bytes as
256-bit ints (a byte set is an int whose bit b says whether byte b is in it)."""

from __future__ import annotations

from typing import Iterable

# Node kinds.
NOTHING, EPS, BYTES, CONCAT, OR, AND, NOT, REPEAT, EXCL = range(9)

FULL = (1 << 256) - 1

# The derivative, emptiness and printing code recurses along the expression's
# height; keeping it bounded keeps Python's stack safe whatever a grammar builds.
MAX_HEIGHT = 300
# Parenthesis / `~` nesting accepted by the parser (well inside MAX_HEIGHT).
MAX_NESTING = 64
# The largest repetition count Python's `re` accepts (MAXREPEAT - 1).
MAX_REPEAT_COUNT = 4294967294
# States explored when checking `Y ⊆ X` for prefix_contains; the answer may be
# "unsure" (False), so it gets a smaller budget than the lexer.
SUBSET_STATES = 10_000
# `R & ~W` becomes one exclusion node when W spells at most this many words; a bigger
# finite set (a class repeated, say) stays an intersection, which is only slower.
EXCL_MAX_WORDS = 4096
EXCL_MAX_LENGTH = 1024


def popcount(x: int) -> int:
    return bin(x).count("1")


def bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def range_mask(lo: int, hi: int) -> int:
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


def refine_byte_sets(byte_sets: Iterable[int]) -> list[int]:
    """The partition of all 256 bytes (bitmasks) in which two bytes share a block
    exactly when every one of `byte_sets` holds both or neither."""
    blocks = [FULL]
    for byte_set in byte_sets:
        split = []
        for block in blocks:
            inside = block & byte_set
            if inside and inside != block:
                split.append(inside)
                split.append(block ^ inside)
            else:
                split.append(block)
        blocks = split
    return blocks


def split_class_map(cm: bytes, singles: int) -> bytes:
    """The class map `cm` with each byte of `singles` (a bitmask) in a class of its own.
    A class whose smallest byte left gets the smallest byte that stayed."""
    out = bytearray(cm)
    orphaned = False
    for b in bits(singles):
        out[b] = b
        orphaned = orphaned or cm[b] == b
    if orphaned:
        moved: dict[int, int] = {}
        for x in range(256):
            rep = cm[x]
            if (singles >> rep) & 1 and not (singles >> x) & 1:
                out[x] = moved.setdefault(rep, x)
    return bytes(out)


def class_map(blocks: list[int]) -> bytes:
    """256 bytes mapping each byte to the smallest byte of its block (a partition of
    all bytes, as bitmasks). Every new key set of a schema makes a new partition: mostly
    one wide block (the bytes no key starts with) and a few single bytes, so the map
    starts filled with the wide block's byte and only the others are set one by one."""
    wide = max(blocks, key=int.bit_count)
    cm = bytearray(((wide & -wide).bit_length() - 1,)) * 256
    for block in blocks:
        if block == wide:
            continue
        rep = (block & -block).bit_length() - 1
        while block:
            low = block & -block
            cm[low.bit_length() - 1] = rep
            block ^= low
    return bytes(cm)
