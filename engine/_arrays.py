"""Growing the engine's tables without the kernel's huge-page cost.

numpy advises the kernel to back arrays of 4 MiB or more with transparent huge pages.
Where THP runs in "madvise" mode (the common default), the kernel then zeroes, and may
first compact, a 2 MiB page at every first touch. A lexer table grown from 8 to 16 MiB
took 34 ms that way on the machine measured (7 ms without the advice), all inside the one
mask that met the growth. Large tables are therefore taken from an anonymous memory map
that asks for ordinary pages; the walk reads few rows of a table at a time, so huge pages
gain it little.
"""

from __future__ import annotations

import mmap

import numpy as np

# numpy advises from 4 MiB; up to about 8 MiB, memory that malloc recycles from an
# earlier grammar's freed table costs less than fresh pages from a map (which fault
# at first touch: 2.5 ms for a table growing to 4 MiB, against 1 to 1.5 ms).
LARGE_BYTES = 8 << 20


def _mapped(shape: tuple[int, ...], dtype: np.dtype, nbytes: int, fill) -> np.ndarray:
    region = mmap.mmap(-1, nbytes)
    advise = getattr(region, "madvise", None)
    if advise is not None and hasattr(mmap, "MADV_NOHUGEPAGE"):
        advise(mmap.MADV_NOHUGEPAGE)
    out = np.frombuffer(region, dtype=dtype).reshape(shape)
    if fill != 0:  # the map's pages come zeroed
        out.fill(fill)
    return out


def grown(a: np.ndarray, size: int, fill) -> np.ndarray:
    """`a` (1-D or 2-D) with its first axis grown to `size`, the new entries `fill`.
    Called as tables grow, small ones often: the common case costs one allocation."""
    shape = (size,) + a.shape[1:]
    nbytes = size * (a.shape[1] if a.ndim == 2 else 1) * a.itemsize
    if nbytes < LARGE_BYTES:
        out = np.zeros(shape, dtype=a.dtype) if fill == 0 else np.full(shape, fill, dtype=a.dtype)
    else:
        out = _mapped(shape, a.dtype, nbytes, fill)
    out[: a.shape[0]] = a
    return out


def filled(shape, value, dtype) -> np.ndarray:
    """np.full(shape, value, dtype): a new grammar makes a dozen such tables in its time to
    first mask, and np.full's Python-level wrapper costs twice the allocation and fill."""
    out = np.empty(shape, dtype=dtype)
    out.fill(value)
    return out
